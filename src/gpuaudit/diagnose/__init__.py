"""Diagnosis of a job (`gpuaudit doctor`): why it is slow, with the evidence, and what to change.

The rules are pure functions over records (`Signals`: GPU telemetry summarised per GPU, the
process tree, step times, a profiler trace's summary), so they are tested on CPU with real
recordings. `engine.diagnose` runs them; `session` watches a live job to gather the evidence.
"""

from .engine import build_signals, diagnose, make_diagnosis
from .evidence import Signals

__all__ = ["Signals", "build_signals", "diagnose", "make_diagnosis"]
