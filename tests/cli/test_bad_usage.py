"""Bad input that is not a file: the user's own code failing (their model, their dataset),
a device torch does not know, options given without the option they belong to, times in the
future, numbers written with other digits, a GPU the machine does not have, a process that
is not there, a cluster address where no Ray answers. Each is one line and exit 2, before
any work, and leaves nothing on disk."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from tests.conftest import cli_env
from tests.support import damage

ROOT = Path(__file__).parents[2]
FIX = ROOT / "tests" / "fixtures"
TRACE = FIX / "telemetry" / "h200-1gpu-idle.json"
OP_RUN = FIX / "predict" / "cpu-gpt-tiny-op-profile.json"
BENCH = FIX / "runs" / "h200-1gpu-bench-quick.json"
runner = CliRunner()


def refused(*args: str, needle: str = "", env: dict[str, str] | None = None) -> str:
    with damage.deadline(120):
        result = runner.invoke(app, list(args), env={"COLUMNS": "100", **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: "), result.stderr
    assert needle in lines[0], lines[0]
    return lines[0]


# -- the user's code -----------------------------------------------------------------------------

DATASETS = {
    "an int": ("def data():\n    return 5\n", "returned int, not a dataset"),
    "None": ("def data():\n    return None\n", "returned NoneType, not a dataset"),
    "an empty one": ("def data():\n    return []\n", "the dataset is empty"),
    "an OSError": ("def data():\n    open('/no/such/folder/train.txt')\n",
                   "data failed: FileNotFoundError"),
    "a broken one": ("import torch\nclass D(torch.utils.data.Dataset):\n"
                     "    def __len__(self):\n        return 10\n"
                     "    def __getitem__(self, i):\n        raise ValueError('bad sample')\n"
                     "def data():\n    return D()\n", "reading its samples failed: "
                                                      "ValueError: bad sample"),
    "SystemExit": ("import sys\ndef data():\n    sys.exit(3)\n", "SystemExit"),
}


@pytest.fixture
def user_code(tmp_path, monkeypatch):
    """A folder on sys.path for the user's modules, and the example model beside them."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "tune"))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("case", list(DATASETS))
def test_a_dataset_function_that_fails_or_returns_no_dataset(case, user_code):
    source, needle = DATASETS[case]
    module = f"userdata_{abs(hash(case)) % 10**8}"
    (user_code / f"{module}.py").write_text(source)
    refused("tune", "--model", "mlp:build", "--device", "cpu", "--start-batch", "8",
            "--max-batch", "8", "--steps", "2", "--compare", "fp32", "--dataset",
            f"{module}:data", "--workers", "0", needle=needle)


def test_a_model_that_fails_in_forward_is_the_users_error(user_code):
    (user_code / "badmodel.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.l = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        raise TypeError('forward takes a dict')\n"
        "def build():\n    return M(), lambda n: (torch.randn(n, 4),)\n")
    refused("tune", "--model", "badmodel:build", "--device", "cpu", "--max-batch", "4",
            "--steps", "2", needle="the model failed at batch 1: TypeError: forward takes")


@pytest.mark.parametrize("device", ["banana", "cuda:x", "npu", "cuda:1:2", ""])
def test_tune_device_is_checked_before_torch(device):
    refused("tune", "--model", "mlp:build", "--device", device, needle="--device")


# -- options that go with another ---------------------------------------------------------------

@pytest.mark.parametrize(("args", "needle"), [
    (("tune", "--model", "mlp:build", "--device", "cpu", "--workers", "0,2"),
     "--workers goes with --dataset"),
    (("recommend", "--workload", "gpt-tiny/bf16", "train", "--params", "7B", "--tokens", "1T"),
     "--workload goes with --run"),
    (("recommend", "--rates", str(BENCH)), "--rates goes with --run"),
    (("recommend", "--tokens", "10B"), "--tokens goes with --run"),
    (("recommend", "--metric", "matmul/bf16", "--hours", "3"), "--metric goes with --run"),
    (("doctor", "--trace", str(TRACE), "--gpus", "0"), "--gpus goes with"),
    (("doctor", "--profile", "x.json", "--sm-clock-max", "1980"),
     "--sm-clock-max goes with --trace"),
    (("cost", "tco", "--capex", "1000", "--power-w", "700", "--host-power-w", "300"),
     "--host-power-w goes with --gpu-model"),
    (("cost", "idle", "--currency", "EUR", "--instance", "aws/p5.48xlarge"),
     "--currency goes with --price-per-gpu-hour"),
])
def test_an_option_without_the_one_it_goes_with_is_refused(args, needle):
    refused(*args, needle=needle)


# -- values the grammar refuses ------------------------------------------------------------------

@pytest.mark.parametrize(("args", "needle"), [
    (("fleet", "report", "--since", "2099-01-01", "--db", "DB"), "in the future"),
    (("monitor", "history", "--since", "2099-01-01T00:00:00Z", "--db", "DB"),
     "in the future"),
    (("cost", "idle", "--since", "2099-01-01", "--price-usd-per-gpu-hour", "2", "--db", "DB"),
     "in the future"),
    (("bench", "host", "--job", "inf:110K", "--no-save"), "--job"),
    (("bench", "host", "--job", "２５００:110K", "--no-save"), "--job"),
    (("bench", "host", "--job", "2500:１１０K", "--no-save"), "--job"),
    (("runs", "--limit", "１０", "--db", "DB"), "--limit"),
    (("monitor", "--replay", str(TRACE), "--gpus", "０"), "--gpus"),
])
def test_values_outside_the_grammar(args, needle, tmp_path):
    db = tmp_path / "none.db"
    refused(*[str(db) if a == "DB" else a for a in args], needle=needle)
    assert not db.exists()


def test_an_output_name_too_long_for_the_file_system(tmp_path):
    refused("report", str(BENCH), "--md", str(tmp_path / ("x" * 300 + ".md")),
            "--no-telemetry", needle="longer than")
    assert list(tmp_path.iterdir()) == []


# -- the machine, processes, clusters ------------------------------------------------------------

def test_doctor_gpus_on_a_machine_without_that_gpu_is_refused_before_the_job(tmp_path):
    marker = tmp_path / "ran"
    line = refused("doctor", "--gpus", "7", "--", sys.executable, "-c",
                   f"open({str(marker)!r}, 'w')", needle="--gpus")
    assert not marker.exists(), "the job ran"
    assert "no GPU" in line


def test_doctor_attach_to_a_missing_process_prints_only_the_error():
    with open("/proc/sys/kernel/pid_max") as f:
        pid = int(f.read()) - 1
    refused("doctor", "--attach", str(pid), needle="no such process")


@pytest.fixture
def silent_and_http_servers():
    """Two ports on 127.0.0.1: one accepts and never answers, one answers as a web server."""
    silent, http = socket.socket(), socket.socket()
    for s in (silent, http):
        s.bind(("127.0.0.1", 0))
        s.listen()
    held: list[socket.socket] = []
    stop = threading.Event()

    def answer() -> None:
        http.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = http.accept()
            except OSError:
                continue
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    def hold() -> None:
        silent.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(silent.accept()[0])
            except OSError:
                continue

    threads = [threading.Thread(target=f, daemon=True) for f in (answer, hold)]
    for t in threads:
        t.start()
    yield silent.getsockname()[1], http.getsockname()[1]
    stop.set()
    for t in threads:
        t.join()
    for s in (silent, http, *held):
        s.close()


def test_fleet_run_where_no_ray_answers_ends_in_one_line_and_creates_no_store(
        tmp_path, silent_and_http_servers):
    pytest.importorskip("ray")
    silent, http = silent_and_http_servers
    db = tmp_path / "new" / "fleet.db"
    for address, needle in (("ray://", "--address"), (f"127.0.0.1:{http}", "gRPC"),
                            (f"ray://127.0.0.1:{http}", "gRPC"),
                            (f"127.0.0.1:{silent}", "no answer within")):
        proc = subprocess.run([sys.executable, "-m", "gpuaudit", "fleet", "run", "--address",
                               address, "--db", str(db)], capture_output=True, text=True,
                              env=cli_env(), timeout=90)
        assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert not db.exists() and not db.parent.exists()


def test_bench_of_a_user_model_that_fails_in_every_mode_is_the_users_error(user_code):
    (user_code / "failing_forward.py").write_text(
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n"
        "        self.l = torch.nn.Linear(4, 4)\n"
        "    def forward(self, x):\n        raise TypeError('forward takes a dict')\n"
        "def build():\n    return M(), lambda n: (torch.randn(n, 4),)\n")
    with damage.deadline(300):
        result = runner.invoke(app, ["bench", "train", "--model", "failing_forward:build",
                                     "--no-save", "--json"], env={"COLUMNS": "100"})
    assert result.exit_code == 2, result.output
    last = [ln for ln in result.stderr.splitlines() if ln.strip()][-1]
    assert last == ("gpuaudit: error: --model failing_forward:build: the model failed in every "
                    "mode (fp32: TypeError: forward takes a dict)")
    doc = json.loads(result.stdout)  # what was measured (nothing) is still printed
    assert doc["measurements"] and all(m["value"] is None for m in doc["measurements"])


@pytest.mark.parametrize("bad", ["rules", "gpus"])
def test_a_refused_monitor_leaves_no_recording(bad, tmp_path):
    record = tmp_path / "rec.json"
    rules = tmp_path / "r.yml"
    rules.write_text("groups: [oops\n")
    args = ["monitor", "--replay", str(TRACE), "--record", str(record), "--no-export",
            "--no-history", "--count", "1"]
    args += ["--rules", str(rules)] if bad == "rules" else ["--gpus", "3"]
    refused(*args, needle="r.yml" if bad == "rules" else "--gpus")
    assert not record.exists()
