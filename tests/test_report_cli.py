"""`gpuaudit report` and `gpuaudit compare` as a user runs them: files written, exit codes,
one-line errors for bad input, the store left as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
from pathlib import Path

import pytest

from gpuaudit.store import Store
from tests.reportkit import ONE_GPU, RUNS, TWO_GPU, load, replayed_samples, with_figure
from tests.support.cli import assert_one_line_error, gpuaudit


@pytest.fixture
def stored(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """A SQLite store holding the two real quick runs, and the monitor's samples of a real
    matmul trace during the 1-GPU one."""
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    ids = {}
    with Store(url) as store:
        for name in (ONE_GPU, TWO_GPU):
            run = load(name)
            ids[name] = store.save(run)
        for sample in replayed_samples("h200-1gpu-matmul", load(ONE_GPU).started_at):
            store.save_sample(sample)
    return url, ids


def dump(url: str) -> str:
    """Every row of every table, to show that nothing changed."""
    path = url.removeprefix("sqlite:///")
    conn = sqlite3.connect(path)
    try:
        tables = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table' ORDER BY name")]
        text = ""
        for t in tables:
            text += t + repr(sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"')))) + "\n"
    finally:
        conn.close()
    return hashlib.sha256(text.encode()).hexdigest()


def test_report_writes_html_and_markdown_with_telemetry(stored, tmp_path):
    url, ids = stored
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    proc = gpuaudit("report", ids[ONE_GPU][:6], "--html", str(html), "--md", str(md),
                    "--db", url, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["run"] == ids[ONE_GPU] and doc["files"] == [str(html), str(md)]
    assert doc["telemetry_points"] == 12  # the 12 ticks of the recorded matmul trace
    page = html.read_text()
    assert 'id="telemetry"' in page and 'id="chart-telemetry-power_w"' in page
    assert "tensor_activity_pct" in page
    assert md.read_text().startswith("# gpuaudit report: vm, 1× NVIDIA H200")


def test_report_from_a_file_and_markdown_on_stdout(tmp_path):
    proc = gpuaudit("report", str(RUNS / f"{TWO_GPU}.json"), "--md", "-")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("# gpuaudit report: vm, 2× NVIDIA H200")
    assert "bench.straggler" in proc.stdout


def test_report_with_a_doctor_document(tmp_path):
    from tests.support.reports import diagnosis

    doc = tmp_path / "diag.json"
    doc.write_text(diagnosis().model_dump_json())
    html = tmp_path / "r.html"
    proc = gpuaudit("report", str(RUNS / f"{ONE_GPU}.json"), "--html", str(html), "--doctor",
                    str(doc))
    assert proc.returncode == 0, proc.stderr
    assert 'id="bottlenecks"' in html.read_text()
    doc.write_text('{"kind": "doctor", "schema_version": 1}')
    assert_one_line_error(gpuaudit("report", str(RUNS / f"{ONE_GPU}.json"), "--html",
                                   str(html), "--doctor", str(doc)), "does not match the schema")


def test_report_with_a_price(tmp_path):
    html = tmp_path / "r.html"
    proc = gpuaudit("report", str(RUNS / f"{ONE_GPU}.json"), "--html", str(html),
                    "--price-per-gpu-hour", "3.50")
    assert proc.returncode == 0, proc.stderr
    section = html.read_text().split('id="cost"')[1]
    # 3.50 USD/h over the measured bf16 rate (706.5 TFLOP/s = 0.7065 PFLOP/s).
    bf16 = next(m for m in load(ONE_GPU).measurements if m.name == "bf16")
    assert f"{3.5 / (bf16.value / 1000):.4g}" in section and "measured" in section


@pytest.mark.parametrize("case", ["unknown", "damaged", "newer-schema", "unwritable",
                                  "no-output", "missing-dir"])
def test_bad_input_is_one_line_exit_2_and_the_store_is_unchanged(stored, tmp_path, case):
    url, ids = stored
    out = tmp_path / "r.html"
    path = url.removeprefix("sqlite:///")
    run_id = ids[ONE_GPU]
    if case == "damaged":
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE runs SET document = substr(document, 1, 500) WHERE id = ?",
                         (run_id,))
    elif case == "newer-schema":
        doc = json.loads(load(ONE_GPU).model_dump_json())
        doc["schema_version"] = 99
        with sqlite3.connect(path) as conn:
            conn.execute("UPDATE runs SET document = ? WHERE id = ?", (json.dumps(doc),
                                                                       run_id))
    elif case == "unwritable":
        locked = tmp_path / "locked"
        locked.mkdir()
        locked.chmod(0o500)
        # Root writes into a read-only directory; nobody creates files in /proc.
        out = Path("/proc/gpuaudit-report.html") if os.geteuid() == 0 else locked / "r.html"
    elif case == "missing-dir":
        out = tmp_path / "nowhere" / "r.html"
    before = dump(url)
    args = ["report", "feedbeef0000" if case == "unknown" else run_id, "--db", url]
    if case != "no-output":
        args += ["--html", str(out)]
    proc = gpuaudit(*args)
    # Checked before any work by the grammar's preflight (`--html FILE: ...`); as root, a
    # directory that denies writing only fails at the write, which leaves nothing behind.
    expected = {"unknown": "no run 'feedbeef0000'", "damaged": "is not valid JSON",
                "newer-schema": "schema_version 99",
                "unwritable": "cannot write" if os.geteuid() == 0 else "--html",
                "no-output": "--html FILE", "missing-dir": "does not exist"}[case]
    assert_one_line_error(proc, expected)
    assert not out.exists()
    assert dump(url) == before


def test_unwritable_output_as_root_too(stored, tmp_path):
    """Root may write anywhere; a path through a file never works."""
    url, ids = stored
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = gpuaudit("report", ids[ONE_GPU], "--db", url, "--html", str(blocker / "r.html"))
    assert_one_line_error(proc, "--html", "does not exist")


def test_compare_exit_codes_and_json(tmp_path):
    a = load(ONE_GPU)
    slower = with_figure(a, "memory", "copy", 0.92)
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(a.model_dump_json())
    fb.write_text(slower.model_dump_json())
    proc = gpuaudit("compare", str(fa), str(fb), "--json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["failed"] is True and doc["regressions"][0] == "memory/copy[gpu0][device=cuda]"
    assert doc["threshold_pct"] == 5.0
    assert gpuaudit("compare", str(fa), str(fb), "--threshold", "10%").returncode == 0
    same = gpuaudit("compare", str(fa), str(fa))
    assert same.returncode == 0 and "no regression beyond 5%" in same.stdout
    html = tmp_path / "c.html"
    proc = gpuaudit("compare", str(fa), str(fb), "--html", str(html))
    assert proc.returncode == 1 and "memory/copy" in proc.stdout
    assert "Regression beyond 5%" in html.read_text()


def test_compare_bad_input(stored, tmp_path):
    url, ids = stored
    assert_one_line_error(gpuaudit("compare", ids[ONE_GPU], "nope1234", "--db", url),
                          "no run 'nope1234'")
    assert_one_line_error(gpuaudit("compare", ids[ONE_GPU], ids[TWO_GPU], "--db", url,
                                   "--threshold", "lots"), "--threshold 'lots'")
    assert_one_line_error(gpuaudit("compare", str(tmp_path / "x.json"), ids[TWO_GPU],
                                   "--db", url), "cannot read run file")
    for bad in ("-1%", "nan", "5%%", "2000%"):
        assert_one_line_error(gpuaudit("compare", ids[ONE_GPU], ids[TWO_GPU], "--db", url,
                                       "--threshold", bad), "--threshold")
    assert_one_line_error(gpuaudit("compare", ids[ONE_GPU], ids[TWO_GPU], "--db", url,
                                   "--md", str(tmp_path / "no" / "c.md")),
                          "--md", "does not exist")


def test_a_latency_threshold_beyond_100_percent(tmp_path):
    """A threshold is a share of A: a latency may double, so 150% is a threshold too."""
    a = load(ONE_GPU)
    fa, fb = tmp_path / "a.json", tmp_path / "b.json"
    fa.write_text(a.model_dump_json())
    fb.write_text(with_figure(a, "memory", "copy", 0.92).model_dump_json())
    proc = gpuaudit("compare", str(fa), str(fb), "--threshold", "150%", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["threshold_pct"] == 150.0


@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_mistyped_store_is_an_error_and_creates_nothing(tmp_path, command):
    """Reading commands open the store read-only: a wrong --db path is not a new store."""
    wrong = tmp_path / "typo.db"
    args = ["report", "0123abcd", "--html", str(tmp_path / "r.html")] \
        if command == "report" else ["compare", "0123abcd", "4567cdef"]
    proc = gpuaudit(*args, "--db", str(wrong))
    assert_one_line_error(proc, str(wrong))
    assert not wrong.exists() and not (tmp_path / "r.html").exists()


def test_price_options_go_together_and_are_checked_first(stored, tmp_path):
    url, ids = stored
    html = tmp_path / "r.html"
    base = ["report", ids[ONE_GPU], "--db", url, "--html", str(html)]
    assert_one_line_error(gpuaudit(*base, "--instance", "aws/p5.48xlarge",
                                   "--price-per-gpu-hour", "3"), "not both")
    assert_one_line_error(gpuaudit(*base, "--price-kind", "spot"), "goes with --instance")
    assert_one_line_error(gpuaudit(*base, "--currency", "EUR"),
                          "goes with --price-per-gpu-hour")
    assert_one_line_error(gpuaudit(*base, "--price-per-gpu-hour", "-3"),
                          "--price-per-gpu-hour")
    assert_one_line_error(gpuaudit(*base, "--instance", "nowhere/x1"), "no offer")
    assert not html.exists()
