"""The validation harness cannot rot: every entry's steps name files that exist, the CPU
entries run end to end here and write their result, the reports' table makers run on
recorded H200 output, and the published results are what the harness reads back."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from validation.__main__ import main
from validation.capabilities import CAPABILITIES
from validation.harness import Context, load_result, publish

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "validation" / "results"


def contexts(cap, tmp: Path):
    for mode in (None, *cap.modes):
        for dry in (False, True) if cap.dry else (False,):
            yield Context(tmp / "raw", tmp / "work", tmp / "peers", dry, (), mode)


@pytest.mark.parametrize("name", sorted(CAPABILITIES))
def test_every_step_runs_a_file_that_is_there(name, tmp_path):
    cap = CAPABILITIES[name]
    for ctx in contexts(cap, tmp_path):
        steps = cap.steps(ctx)
        assert steps, (name, ctx.mode)
        for step in steps:
            assert step.timeout_s <= 600, "one device call is at most 10 minutes"
            files = [a for a in step.argv if a.endswith((".py", ".sh"))]
            assert files or step.argv[1:3] == ("-m", "gpuaudit"), f"{name}: {step.argv}"
            for f in files:
                assert (ROOT / f).is_file(), f"{name}/{step.name}: {f} is not in the repository"


def test_no_entry_names_a_machine_folder():
    text = "\n".join(p.read_text() for p in (ROOT / "validation").rglob("*")
                     if p.is_file() and p.suffix in (".py", ".sh") and p.name != "launch.sh")
    for folder in (r"\$OUT\b", r"(?<![\w.])\.peers\b", r"(?<![\w.])\.whl\b", "/opt/torch",
                   "/work/", r"(?<![\w.])\.old/"):
        assert not re.search(folder, text), folder


def test_list_names_every_entry(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in CAPABILITIES:
        assert f"\n{name} " in f"\n{out}"


def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["run", "doctor-zoo", "--mode", "nope", "--out", str(tmp_path)]) == 2
    assert "no mode 'nope'" in capsys.readouterr().err
    assert main(["run", "workloads", "--dry", "--out", str(tmp_path)]) == 2
    assert "needs a GPU" in capsys.readouterr().err
    assert main(["show", "telemetry-record"]) == 2
    assert list(tmp_path.iterdir()) == []  # nothing written for a refused run
    with pytest.raises(SystemExit) as e:
        main(["run", "no-such-entry", "--out", str(tmp_path)])
    assert e.value.code == 2


@pytest.mark.parametrize("argv, table_has", [
    (["monitor-cost", "--", "--ticks", "20"], "% of one core at 1 s"),
    (["inspect", "--dry"], "exit code 0"),
    (["predict-mlperf"], "| benchmark"),
    (["predict-zoo", "--mode", "compare"], "**Held-out families, current** ("),
    (["predict", "--mode", "replay", "--",
      "tests/fixtures/predict/h200-1gpu-2026-12-01d-runs.json"],
     "| resnet50 fp32 → bf16 | +1.1 % |"),
])
def test_a_cpu_entry_runs_end_to_end_and_writes_its_result(argv, table_has, tmp_path):
    name = argv[0]
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "validation", "run", *argv[:1], "--out",
                           str(out), *argv[1:]], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = load_result(out / f"{name}.json")
    assert result["capability"] == name and result["ok"] is True
    assert all(s["rc"] == 0 for s in result["steps"]) and result["steps"]
    md = (out / f"{name}.md").read_text()
    assert md == result["table_md"] and md.startswith("Measured ")
    assert table_has in md, md[:2000]
    assert proc.stdout == md  # the table is what the command prints
    with tarfile.open(out / f"{name}-raw.tar.gz") as tar:
        assert any(m.name.startswith(f"{name}-raw/") for m in tar.getmembers())
    # published into a results folder, shown back
    dest = tmp_path / "results"
    assert {p.name for p in publish(out, [name], dest)} == {f"{name}.json", f"{name}.md"}
    assert (dest / f"{name}.md").read_text() == md


def test_a_failing_step_fails_the_run_and_keeps_its_output(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "validation", "run", "monitor-cost", "--out",
                           str(out), "--", "--ticks", "not-a-number"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    result = json.loads((out / "monitor-cost.json").read_text())
    assert result["ok"] is False and result["steps"][0]["rc"] == 2
    assert "invalid int value" in (out / "monitor-cost-raw" / "cost.err").read_text()


def test_the_fidelity_tables_are_made_from_recorded_h200_output():
    run = ROOT / "tests" / "fixtures" / "runs" / "h200-1gpu-bench-quick.json"
    mamf = ROOT / "tests" / "fixtures" / "bench" / "h200-1gpu-mamf-bf16-grep.txt"
    script = ROOT / "validation" / "bench" / "fidelity_report.py"
    env_cmd = [sys.executable, str(script)]
    proc = subprocess.run([*env_cmd, "matmul", str(run), f"bf16:0:{mamf}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "| bf16 |" in proc.stdout and "mamf" in proc.stdout.lower()


@pytest.mark.parametrize("js", sorted(p for p in RESULTS.glob("*.json") if "-raw" not in p.name),
                         ids=lambda p: p.stem)
def test_a_published_result_reads_back(js):
    result = load_result(js)
    assert js.stem in CAPABILITIES and result["capability"] == js.stem
    md = js.with_suffix(".md").read_text()
    assert md == result["table_md"] and md.startswith("Measured ")
    for raw in result.get("raw", []):
        assert (RESULTS / raw).is_file(), raw


def test_the_launcher_is_the_only_place_with_the_machines_conventions():
    launcher = (ROOT / "validation" / "launch.sh").read_text()
    assert "python3 -m validation run" in launcher and "NCCL_NVLS_ENABLE=0" in launcher
    proc = subprocess.run(["bash", "-n", str(ROOT / "validation" / "launch.sh")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    for sh in (ROOT / "validation").rglob("*.sh"):
        proc = subprocess.run(["bash", "-n", str(sh)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{sh}: {proc.stderr}"


def test_the_doctor_zoo_judges_a_stopped_job_on_what_it_ran(tmp_path):
    """A job the zoo stopped at its time limit is judged whatever its exit status (a Ctrl-C
    inside a compiled backward exits 1); a job that failed on its own is an error."""
    from validation.doctor import zoo

    save = tmp_path / "d.json"
    save.write_text(json.dumps({"exit_code": 1, "summary": [], "sources": {}, "notes": [],
                                "findings": [{"code": "compilation", "severity": "WARN",
                                              "share": 0.7, "evidence": []}]}))
    row = {"name": "c", "set": "held-out", "expected": "compilation", "rc": 1}
    assert zoo.judged({**row, "stopped": True}, save)["pass"] is True
    failed = zoo.judged({**row, "stopped": False}, save)
    assert "pass" not in failed and "exit 1" in failed["error"]
    assert "no diagnosis" in zoo.judged({**row, "stopped": True}, tmp_path / "none.json")["error"]
