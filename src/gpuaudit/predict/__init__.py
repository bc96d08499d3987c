"""`gpuaudit predict`: a recorded training step's time and throughput on another precision,
GPU count, model size or GPU model, from its per-operator profile and this machine's
measured rates (docs/predict.md). A capability: functions that return records, no printing.

- `profile`: the step as `bench train --op-profile` recorded it;
- `kernels`: its class times re-read from the kernels' names (cuDNN batch norm, layout
  transforms, attention helpers; a CNN's gemm with its conv);
- `rates`: this machine's measured matmul, memory and all-reduce rates (a bench run);
- `hardware`: roofs of another GPU, SM counts, wave quantization and split-K, Habitat's γ,
  the exponential (SFU) rate;
- `ideal` (and `attention`): a class's ideal time on a GPU, the calibration's reference;
- `state`: the step as the changes go;
- `family`: another size of a reference transformer (meta-device tallies);
- `precision`: another precision, with the layout transforms and batch norm it changes;
- `ddp`: the all-reduce against the backward pass;
- `engine`: the changes and the `Prediction` record;
- `offers`: predicted rates per (GPU model, count) for `recommend --run` (a run with an op profile).
"""

from .engine import Change, predict
from .profile import StepProfile, load_profile, workloads_in
from .rates import MachineRates, machine_rates
from .records import PREDICT_SCHEMA_VERSION, ClassTime, Prediction, Scenario

__all__ = [
    "PREDICT_SCHEMA_VERSION",
    "Change",
    "ClassTime",
    "MachineRates",
    "Prediction",
    "Scenario",
    "StepProfile",
    "load_profile",
    "machine_rates",
    "predict",
    "workloads_in",
]
