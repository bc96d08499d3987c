"""`gpuaudit doctor` as users run it: the job runs unchanged (output, exit status, signals),
bad input is one line and exit 2, recordings are diagnosed offline, `--attach` watches."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuaudit.model import SCHEMA_VERSION
from tests.conftest import cli_env
from tests.support.cli import gpuaudit

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "telemetry" / "real"
ENV = cli_env(COLUMNS="100")


def doctor(*args: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess[str]:
    return gpuaudit("doctor", *args, timeout=timeout, columns=100, **kw)


def test_output_and_exit_status_pass_through():
    code = "import sys; print('to stdout'); print('to stderr', file=sys.stderr); sys.exit(3)"
    proc = doctor("--", sys.executable, "-c", code)
    assert proc.returncode == 3
    assert proc.stdout == "to stdout\n"  # the job's stdout untouched: our report is on stderr
    assert proc.stderr.startswith("to stderr\n")
    assert "exit status 3" in proc.stderr and "the job failed" in proc.stderr


def test_the_job_gets_its_arguments_unchanged_and_a_safe_environment(tmp_path):
    out = tmp_path / "seen.json"
    code = ("import json, os, sys; json.dump({'argv': sys.argv[1:], 'env': {k: os.environ.get(k)"
            " for k in ('NCCL_NVLS_ENABLE', 'TORCH_SYMM_MEM_DISABLE_MULTICAST', "
            "'NVSHMEM_DISABLE_NVLS', 'GPUAUDIT_DOCTOR_DIR')}}, open(sys.argv[1], 'w'))")
    args = [str(out), "--epochs", "1", "a b", "--json", "-h"]
    proc = doctor("--", sys.executable, "-c", code, *args)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    assert seen["argv"] == args  # options after the command are the job's, not ours
    assert seen["env"]["NCCL_NVLS_ENABLE"] == "0"
    assert seen["env"]["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    assert seen["env"]["NVSHMEM_DISABLE_NVLS"] == "1"
    assert seen["env"]["GPUAUDIT_DOCTOR_DIR"]
    assert not Path(seen["env"]["GPUAUDIT_DOCTOR_DIR"]).exists()  # cleaned up


def test_a_command_that_cannot_start_is_one_line_and_exit_2():
    proc = doctor("--", "/no/such/program", "--x")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpuaudit: error: cannot start '/no/such/program': command not found"]
    proc = doctor("--", str(ROOT / "README.md"))
    assert proc.returncode == 2 and "permission denied" in proc.stderr


@pytest.mark.parametrize("args", [[], ["--attach", "1", "--", "true"],
                                  ["--trace", "x.json", "--", "true"]])
def test_exactly_one_thing_to_diagnose(args):
    proc = doctor(*args)
    assert proc.returncode == 2 and "give exactly one of" in proc.stderr


def test_ctrl_c_is_forwarded_to_the_jobs_process_group(tmp_path):
    marker = tmp_path / "got"
    # The job and a child of it (a loader worker, say) both note the signal.
    code = (
        "import os, signal, sys, time\n"
        f"m = {str(marker)!r}\n"
        "pid = os.fork()\n"
        "def on(sig, _): open(m + str(os.getpid()), 'w').write(str(sig)); os._exit(7)\n"
        "signal.signal(signal.SIGINT, on)\n"
        "open(m + '.ready', 'w').close()\n"
        "time.sleep(60)\n")
    proc = subprocess.Popen([sys.executable, "-m", "gpuaudit", "doctor", "--", sys.executable,
                             "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=ENV)
    deadline = time.monotonic() + 60
    while not Path(str(marker) + ".ready").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    got = sorted(p for p in tmp_path.iterdir() if p.name.startswith("got") and p.suffix != ".ready")
    assert len(got) == 2 and all(p.read_text() == str(int(signal.SIGINT)) for p in got)
    assert "signal 2 was passed on to the job" in err


def test_a_job_killed_by_a_signal_exits_128_plus_n():
    proc = doctor("--", sys.executable, "-c", "import os, signal; os.kill(os.getpid(), 9)")
    assert proc.returncode == 128 + 9
    assert "ended by signal 9" in proc.stderr


def test_json_after_the_jobs_output_and_saved_copy(tmp_path):
    save = tmp_path / "d.json"
    proc = doctor("--json", "--save", str(save), "--", sys.executable, "-c", "print('job')")
    assert proc.returncode == 0
    first, rest = proc.stdout.split("\n", 1)
    assert first == "job"
    doc = json.loads(rest)
    assert doc == json.loads(save.read_text())
    assert doc["kind"] == "doctor" and doc["schema_version"] == SCHEMA_VERSION
    assert doc["exit_code"] == 0
    assert doc["command"][1:] == ["-c", "print('job')"]
    assert "process" in doc["sources"]


@pytest.mark.parametrize(("name", "code"), [("loader-starved", "input-bound"),
                                             ("pageable-copies", "copy-bound"),
                                             ("lm-bf16-healthy", None)])
def test_a_recorded_telemetry_trace(name, code):
    proc = doctor("--trace", str(REAL / f"{name}.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert [f["code"] for f in doc["findings"]][:1] == ([code] if code else [])
    assert doc["gpus"] == [0]
    if code is None:
        assert "No bottleneck found" in proc.stderr


def test_the_sm_clock_option_enables_the_throttling_rule():
    proc = doctor("--trace", str(REAL / "h200-1gpu-matmul.json"), "--sm-clock-max", "1980",
                  "--json")
    assert json.loads(proc.stdout)["findings"][0]["code"] == "throttled"


def test_bad_recordings_are_one_line_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{nope")
    for args in (["--trace", str(bad)], ["--profile", str(bad)],
                 ["--trace", str(tmp_path / "missing.json")]):
        proc = doctor(*args)
        assert proc.returncode == 2, args
        assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_attach_watches_until_the_process_ends():
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2.5)"])
    try:
        t0 = time.monotonic()
        proc = doctor("--attach", str(job.pid), "--json", "--interval", "200ms")
        assert proc.returncode == 0, proc.stderr
        assert time.monotonic() - t0 >= 1.5
        doc = json.loads(proc.stdout)
        assert doc["pid"] == job.pid and doc["exit_code"] is None
        assert any("attached" in n for n in doc["notes"])
    finally:
        job.kill()
        job.wait()


def test_attach_to_no_process():
    proc = doctor("--attach", "999999")
    assert proc.returncode == 2 and "no such process" in proc.stderr


def test_on_a_terminal_the_job_reads_the_keyboard_and_gets_ctrl_c():
    """Under a pseudo-terminal: the job is the foreground process group, so it can read
    stdin and the terminal's Ctrl-C reaches it; the doctor survives to report."""
    import pty
    import select

    code = ("import sys, time; print('ready', flush=True); line = sys.stdin.readline(); "
            "print('read:' + line.strip(), flush=True); time.sleep(60)")
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.environ.update(ENV)
        os.execvp(sys.executable, [sys.executable, "-m", "gpuaudit", "doctor", "--",
                                   sys.executable, "-c", code])
    buf = b""

    def until(text: bytes, seconds: float = 60) -> bool:
        nonlocal buf
        end = time.monotonic() + seconds
        while text not in buf and time.monotonic() < end:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    buf += os.read(fd, 4096)
                except OSError:
                    break
        return text in buf

    try:
        assert until(b"ready")
        os.write(fd, b"typed\n")
        assert until(b"read:typed")
        os.write(fd, b"\x03")  # Ctrl-C on the terminal
        _pid, status = os.waitpid(pid, 0)
        until(b"the job was ended by signal 2", 10)
    finally:
        with __import__("contextlib").suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, 9)
            os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 130
    assert b"the job was ended by signal 2" in buf


def test_keep_profile_needs_a_profiled_command(tmp_path):
    proc = doctor("--keep-profile", str(tmp_path / "t.json.gz"), "--profile-steps", "0", "--",
                  sys.executable, "-c", "pass")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpuaudit: error: --keep-profile needs a command run with --profile-steps N or auto"]
    assert not (tmp_path / "t.json.gz").exists()
