"""What the predict tests read: the recorded runs (an H200's and an H100's rates, a CPU op profile)
and a fresh `bench train --op-profile` run on this CPU."""

from __future__ import annotations

from typing import Any

from tests.conftest import FIXTURES, load_fixture
from validation.predict.users import fixture as user_run  # noqa: F401 - a user's recorded run
from validation.predict.users import samples_per_s as train_samples_per_s  # noqa: F401

PREDICT = FIXTURES / "predict"
H200_2GPU = PREDICT / "h200-2gpu-bench-quick.json"
H100_1GPU = PREDICT / "h100-1gpu-bench-quick.json.gz"
CPU_PROFILE = PREDICT / "cpu-gpt-tiny-op-profile.json"


def op_profile_run(model: str, op_profile: bool = True) -> Any:
    """`bench train --op-profile` of a tiny preset in fp32 on this CPU, with the recorded H200
    machine's facts (the run predict reads back)."""
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench
    from gpuaudit.model import Machine

    machine = Machine.model_validate(load_fixture("h200-1gpu")["machine"])
    return run_bench(["train"], machine=machine, profile=Profile.STANDARD,
                     options={"models": [model], "modes": ["fp32"], "steps": 2,
                              "parts": ["modes"], "op_profile": op_profile})


def h200_rates(specs: Any = None) -> Any:
    """The recorded H200 machine's rates (`H200_2GPU`), as `predict` takes them (against the
    shipped catalog unless `specs` is given)."""
    from gpuaudit.model import load_run
    from gpuaudit.predict import machine_rates
    from gpuaudit.specs.catalog import load_catalog

    return machine_rates(load_run(H200_2GPU.read_text()),
                         load_catalog() if specs is None else specs)


def h100_rates(specs: Any) -> Any:
    """The recorded H100 machine's rates (`H100_1GPU`), as `predict` takes them."""
    from gpuaudit.model.schema import read_run
    from gpuaudit.predict import machine_rates

    return machine_rates(read_run(H100_1GPU), specs)


def zoo_run(name: str) -> Any:
    """A zoo family's run as recorded (`tests/fixtures/predict/zoo/NAME.json.gz`)."""
    import gzip

    from gpuaudit.model import load_run

    return load_run(gzip.decompress((PREDICT / "zoo" / f"{name}.json.gz").read_bytes())
                    .decode())


def zoo_plain_run(name: str) -> Any:
    """One of the first zoo runs, kept uncompressed (`tests/fixtures/predict/zoo/NAME-run.json`:
    mlp, cnn, recsys)."""
    from gpuaudit.model import load_run

    return load_run((PREDICT / "zoo" / f"{name}-run.json").read_text())


def zoo_rows(recording: str) -> list[dict[str, Any]]:
    """The zoo's compared cases of one recording (`tests/fixtures/predict/zoo-results.json`,
    its `recording` label: "fifteenth")."""
    import json

    rows = json.loads((PREDICT / "zoo-results.json").read_text())["rows"]
    return [r for r in rows if r.get("recording") == recording]


def user_case(model: str, recorded: str, change: Any, measured_by: str,
              gpu: str = "h100") -> tuple[Any, float]:
    """A user's model recorded in one loan on `gpu` (`MODEL-RECORDED-GPU`, its rates
    `MODEL-rates`): the prediction of `change` and the throughput measured by the target's
    own run (`MODEL-MEASURED_BY`), as `python -m validation run predict-users` takes them."""
    from validation.predict.users import Case, UserModel, predict_case

    return predict_case(UserModel(model, model, model, f"{model}-rates", (), gpu=gpu),
                        Case(f"{recorded} → {measured_by}", recorded, change, measured_by))


def assert_user_case(model: str, case: tuple[str, Any, str, float], within: float,
                     gpu: str = "h100") -> None:
    """A user's case (recorded, change, measured by, predicted samples/s) predicts as the
    method gives it now, within `within` of its measurement and inside its band."""
    import pytest

    recorded, change, measured_by, predicted = case
    p, measured = user_case(model, recorded, change, measured_by, gpu)
    assert p.samples_per_s == pytest.approx(predicted, rel=1e-3)
    assert abs(p.samples_per_s / measured - 1) < within
    assert p.samples_per_s_low <= measured <= p.samples_per_s_high


def kept_h100(label: str, family: str) -> tuple[Any, Any]:
    """A family's run and its recording's rates, from a recording the H100's zoo results keep
    (`tests/fixtures/predict/recordings/zoo-results-h100/LABEL.tar.gz`): (run, MachineRates)."""
    import tarfile

    from gpuaudit.model import load_run
    from gpuaudit.predict import machine_rates
    from gpuaudit.specs.catalog import load_catalog

    with tarfile.open(PREDICT / "recordings" / "zoo-results-h100" / f"{label}.tar.gz") as tar:
        def read(name: str) -> str:
            member = tar.extractfile(f"{label}/zoo/{name}")
            assert member is not None
            return member.read().decode()
        run, rates = load_run(read(f"runs/{family}.json")), load_run(read("rates.json"))
    return run, machine_rates(rates, load_catalog())
