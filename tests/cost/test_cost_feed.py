"""Can the host feed it? The input need read from bench train's data loading, bench host's JPEG
decode and a doctor diagnosis, and each offer's vCPUs and memory per GPU checked against it,
every figure against a hand computation written here."""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timezone

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import recommend as cli
from gpuaudit.cost.recommend import BenchmarkedTask, TrainTask, recommend
from gpuaudit.cost.recommend.feed import need_from_diagnosis, need_from_run
from gpuaudit.errors import BadInputError
from gpuaudit.model import Gpu, Host, Machine, Measurement, Run
from gpuaudit.model.cost import Offer

NOW = datetime(2025, 6, 1, tzinfo=timezone.utc)
A100_NAME = "NVIDIA A100-SXM4-80GB"
WORKER_BATCH_GIB = 2 * 64 * 3 * 224 * 224 * 4 / 2**30  # two batches of 64 float32 crops


def offer(gpu: str, count: int, od: float, vcpus: int | None, ram: float | None,
          itype: str) -> Offer:
    return Offer(provider="p", instance_type=itype, gpu_model=gpu, gpu_count=count,
                 on_demand_price_per_hour=od, vcpus=vcpus, ram_gib=ram, source="test",
                 price_date=date(2025, 6, 1))


def run_with(measurements, run_id="feed1") -> Run:
    gpus = (Gpu(index=0, name=A100_NAME, pci_device_id=0x20B2),)
    machine = Machine(captured_at=NOW, host=Host(hostname="box", python_version="3.11"),
                      gpus=gpus)
    return Run(id=run_id, kind="bench", started_at=NOW, tool_version="t", machine=machine,
               measurements=tuple(measurements))


THROUGHPUT = Measurement(suite="train", name="resnet50/bf16+cl/throughput", unit="samples/s",
                         value=2000.0, gpu_index=0,
                         params={"model": "resnet50", "precision": "bf16"})
LOADER = Measurement(suite="train", name="data/jpeg/best", unit="samples/s", value=1000.0,
                     gpu_index=0, params={"workers": 8, "cpu_cores": 16, "crop": 224,
                                          "batch": 64, "train_rate": 2000.0,
                                          "keeps_up": False, "workers_needed": 16})


def test_bench_train_data_loading_gives_cpu_seconds_per_sample_and_the_rate():
    need = need_from_run(run_with([THROUGHPUT, LOADER]))
    # 8 workers made 1,000 images/s: 8 ms of CPU per image; 2,000 images/s per GPU to feed.
    assert need.loader_vcpus_per_gpu == pytest.approx(2000 * 8 / 1000)
    assert need.trainer_vcpus_per_gpu == 1.0
    assert need.worker_gib == pytest.approx(0.5 + WORKER_BATCH_GIB)
    assert (need.gpu_model, need.samples_per_s_per_gpu) == ("a100-sxm4-80gb", 2000.0)
    assert "8 CPU-ms per sample" in need.basis[0]


def test_bench_host_decode_with_the_runs_training_rate():
    decode = Measurement(suite="host", name="jpeg_pillow_all", unit="images/s", value=3000.0,
                         params={"library": "pillow", "cores": "all", "threads": 32,
                                 "jpeg_bytes": 55_000})
    need = need_from_run(run_with([THROUGHPUT, decode]))
    # 3,000 images/s of 55 KB on 32 CPUs; ImageNet's 110 KB take twice as long to decode.
    per_cpu = 3000 * 55_000 / 110_000 / 32
    assert need.loader_vcpus_per_gpu == pytest.approx(2000 / per_cpu)
    with pytest.raises(BadInputError, match="no training rate to feed"):
        need_from_run(run_with([decode]))
    # ... unless the task's own rate is in samples/s: then its GPU is the reference.
    need = need_from_run(run_with([decode]), (1500.0, "h100-sxm"))
    assert need.loader_vcpus_per_gpu == pytest.approx(1500 / per_cpu)
    assert need.gpu_model == "h100-sxm"
    with pytest.raises(BadInputError, match="no input figures"):
        need_from_run(run_with([THROUGHPUT]))


def diagnosis(share=0.4, workers=4, cpu=95.0, code="input-bound"):
    return {"kind": "doctor", "gpus": [0, 1], "findings": [
        {"code": code, "title": "Input pipeline bound", "severity": "WARN", "share": share,
         "confidence": "high", "message": "…", "evidence": [
             {"name": "loader_workers", "value": workers, "unit": "", "source": "psutil"},
             {"name": "worker_cpu", "value": cpu, "unit": "% of a core", "source": "psutil"}]}]}


def test_a_doctor_diagnosis_sizes_the_need_from_its_waiting_gpus():
    need = need_from_diagnosis(diagnosis(), "d.json")
    # 4 workers at 95 % of a core on 2 GPUs delivered 60 % of what the GPUs could take.
    assert need.loader_vcpus_per_gpu == pytest.approx(4 * 0.95 / 2 / 0.6)
    assert need.gpu_model is None
    with pytest.raises(BadInputError, match="not by its CPUs"):
        need_from_diagnosis(diagnosis(cpu=40.0), "d.json")
    with pytest.raises(BadInputError, match="found no input-bound job"):
        need_from_diagnosis(diagnosis(code="launch-bound"), "d.json")


@pytest.mark.parametrize("name", ["lightning_slow_augment", "loader_pil_main_process"])
def test_real_diagnoses_of_input_bound_jobs(name):
    """Jobs recorded on an H200 (`doctor --save-evidence`, tests/fixtures/doctor/zoo-h200),
    diagnosed again: the need from their input-bound finding, computed here from its
    evidence."""
    from gpuaudit.diagnose import doctor, recording
    from tests.conftest import FIXTURES

    ev = recording.load(FIXTURES / "doctor" / "zoo-h200" / f"{name}.json.gz")
    doc = doctor.diagnose(ev).model_dump(mode="json")
    (found,) = [f for f in doc["findings"] if f["code"] == "input-bound"]
    figures = {o["name"]: o["value"] for o in found["evidence"]}
    workers = figures["loader_workers"]
    cpu = figures["worker_cpu"] * workers if workers else figures["trainer_cpu"]
    need = need_from_diagnosis(doc, name)
    assert need.loader_vcpus_per_gpu == pytest.approx(cpu / 100 / (1 - found["share"]))
    # Two workers at a full core each (or the trainer at 3 cores) fed a GPU that waited 96 %
    # or more of the time: no instance sells that many vCPUs per GPU, and the basis says so.
    assert need.loader_vcpus_per_gpu > 24
    assert "decode on the GPU" in need.basis[-1]
    (r,) = recommend(TASK, [WIDE], feed=need).ranked
    assert r.feed.verdict == "short" and r.feed.gpu_wait_share > 0.5


TASK = BenchmarkedTask(run_id="feed1", gpu_model="a100-sxm4-80gb", gpus=1, rate_per_gpu=2000.0,
                       unit="samples/s", metric="train/resnet50/bf16+cl/throughput", hours=10.0,
                       scale_by="bf16")
THIN = offer("a100-sxm4-80gb", 8, 20.0, 96, 1152, "thin")  # 12 vCPUs per GPU
WIDE = offer("a100-sxm4-80gb", 8, 25.0, 192, 1152, "wide")  # 24 vCPUs per GPU
LEAN = offer("a100-sxm4-80gb", 8, 26.0, 192, 64, "lean")  # 24 vCPUs, 8 GiB per GPU
H100 = offer("h100-sxm", 8, 60.0, 192, 2048, "h100")  # 24 vCPUs per GPU
BARE = offer("a100-sxm4-80gb", 8, 27.0, None, None, "bare")


def by_type(result):
    return {r.offer.instance_type: r for r in result.ranked}


def test_offers_short_of_vcpus_or_memory_are_marked_with_the_reason():
    need = need_from_run(run_with([THROUGHPUT, LOADER]))
    result = recommend(TASK, [THIN, WIDE, LEAN, H100, BARE], feed=need)
    r = by_type(result)
    assert len(r) == 5  # marked, not excluded
    worker = 0.5 + WORKER_BATCH_GIB
    # A100 × 8 over NVLink: 95 % of the measured rate per GPU: 15.2 loader vCPUs + 1.
    loader = 16 * 0.95
    thin = r["thin"].feed
    assert thin.verdict == "short" and thin.vcpus_per_gpu == 12
    assert thin.vcpus_needed_per_gpu == pytest.approx(1 + loader)
    assert thin.gpu_wait_share == pytest.approx(1 - 11 / loader)
    assert f"would wait about {1 - 11 / loader:.0%} of the time" in thin.reason
    assert thin.reason in r["thin"].reasons
    wide = r["wide"].feed
    assert wide.verdict == "feeds" and wide.ram_gib_needed_per_gpu == pytest.approx(
        math.ceil(loader) * worker)
    lean = r["lean"].feed
    assert lean.verdict == "short" and lean.gpu_wait_share == 0.0
    assert "8 GiB of memory per GPU, less than the" in lean.reason
    # An H100 runs it 989.5/312 times as fast (bf16 peak ratio): it must be fed that much more.
    h100 = r["h100"].feed
    fast = 16 * 989.5 / 312 * 0.95
    assert h100.vcpus_needed_per_gpu == pytest.approx(1 + fast)
    assert h100.verdict == "short" and h100.gpu_wait_share == pytest.approx(1 - 23 / fast)
    assert r["bare"].feed.verdict == "unknown"
    assert result.feed == need
    assert any("3 of the 5 shown cannot feed their GPUs (marked)" in n for n in result.notes)


def test_a_flop_task_scales_the_need_by_its_rate_on_each_gpu():
    need = need_from_run(run_with([THROUGHPUT, LOADER]))
    task = TrainTask(params=1e8, tokens=1e9, layers=12, hidden=768)
    r = by_type(recommend(task, [WIDE, H100], feed=need))
    assert r["wide"].feed.vcpus_needed_per_gpu == pytest.approx(1 + 16 * 0.95)
    assert r["h100"].feed.vcpus_needed_per_gpu == pytest.approx(1 + 16 * 989.5 / 312 * 0.95)


# --- CLI -------------------------------------------------------------------------------------


def invoke(*args):
    return CliRunner().invoke(cli.recommend_app, list(args))


@pytest.fixture
def offers(monkeypatch):
    monkeypatch.setattr(cli, "load_offers", lambda path: [THIN, WIDE])


def test_cli_run_checks_its_own_data_loading(offers, tmp_path):
    from gpuaudit.store import Store

    db = f"sqlite:///{tmp_path / 's.db'}"
    with Store(db) as store:
        store.save(run_with([THROUGHPUT, LOADER]))
    res = invoke("--run", "feed1", "--metric", "train/resnet50/bf16+cl/throughput", "--hours", "10",
                 "--db", db, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["feed"]["loader_vcpus_per_gpu"] == pytest.approx(16.0)
    marks = {r["offer"]["instance_type"]: r["feed"]["verdict"] for r in doc["ranked"]}
    assert marks == {"thin": "short", "wide": "feeds"}
    res = invoke("--run", "feed1", "--metric", "train/resnet50/bf16+cl/throughput", "--hours", "10",
                 "--db", db)
    assert res.exit_code == 0, res.output
    assert "feed" in res.stdout and "SHORT: waits 28%" in res.stdout


def test_cli_feed_from_a_diagnosis_file(offers, tmp_path):
    path = tmp_path / "d.json"
    path.write_text(json.dumps(diagnosis(share=0.5, workers=12)))  # 11.4 vCPUs per GPU
    res = invoke("train", "--params", "100M", "--tokens", "1B", "--feed", str(path), "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    marks = {r["offer"]["instance_type"]: r["feed"]["verdict"] for r in doc["ranked"]}
    assert marks == {"thin": "short", "wide": "feeds"}  # 12.4 needed: 12 is short


@pytest.mark.parametrize(("args", "message"), [
    (("--feed", "{x}/garbage.json"), "not valid JSON"),
    (("--feed", "{x}/none.json"), "cannot read"),
    (("--feed", "{x}/cpu40.json"), "not by its CPUs"),
    (("--feed", "nope", "--db", "{x}/s.db"), "no store at"),
])
def test_cli_bad_feed_is_one_line_exit_2(offers, tmp_path, args, message):
    (tmp_path / "garbage.json").write_text("[")
    (tmp_path / "cpu40.json").write_text(json.dumps(diagnosis(cpu=40.0)))
    res = invoke("train", "--params", "100M", "--tokens", "1B",
                 *(a.format(x=tmp_path) for a in args))
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], lines


def test_serve_takes_no_feed():
    with pytest.raises(BadInputError, match="not serve"):
        from gpuaudit.cost.recommend import ServeTask

        recommend(ServeTask(params=7e9, qps=1, latency_ms=50), [WIDE],
                  feed=need_from_run(run_with([THROUGHPUT, LOADER])))
