"""`gpuaudit doctor -- CMD`: run a job unchanged, watch it, say why it is slow and what to
change. Also `--attach PID`, and `--trace`/`--profiler-trace` for recordings made earlier."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit import parse
from gpuaudit.cli import common
from gpuaudit.errors import BadInputError


def _profile_steps(text: str) -> int:
    from gpuaudit.diagnose.collect import AUTO

    if str(text).strip().lower() == "auto":
        return AUTO
    return parse.integer(text, "--profile-steps", lo=0, hi=100_000)


DOCTOR_CONTEXT = {"allow_interspersed_args": False, "ignore_unknown_options": True,
                  "help_option_names": ["-h", "--help"]}


def doctor(
    command: Annotated[list[str] | None, typer.Argument(
        metavar="[-- COMMAND ...]", help="The job to run, after --; it runs unchanged (its "
                                         "output and exit status are its own).")] = None,
    attach: Annotated[int | None, common.integer(
        "--attach", metavar="PID", help="Watch a running process (and its children) until it "
                                        "ends or Ctrl-C.", hi=2**31 - 1)] = None,
    interval: Annotated[float, common.duration(
        "--interval", help="Time between samples (500ms, 1s).", lo_s=0.01, hi_s=parse.HOUR)
    ] = "500ms",
    window: Annotated[float, common.duration(
        "--window", help="Diagnose the last part of the job this long (memory stays "
                         "bounded).", lo_s=1, hi_s=parse.WEEK)] = "10m",
    profile_steps: Annotated[int, typer.Option(
        "--profile-steps", metavar="N|auto",
        parser=lambda text: _profile_steps(text),
        help="Record N steady steps with torch.profiler (0: never). auto: a few steps, only "
             "when the job's GPU is mostly idle.")] = "auto",
    no_inject: Annotated[bool, typer.Option(
        "--no-inject", help="Do not load the doctor's bootstrap into the job's Python (no "
                            "steps, batch waits, syncs or compile events found; the GPU, the "
                            "processes and the stacks are still watched).")] = False,
    no_stacks: Annotated[bool, typer.Option(
        "--no-stacks", help="Do not sample the job's Python stacks (py-spy).")] = False,
    gpus: Annotated[Any, common.gpus(help="GPUs to watch: 0,1 [default: all]")] = None,
    trace: Annotated[Path | None, typer.Option(
        "--trace", help="Diagnose a telemetry trace (`gpuaudit monitor --record`) instead.",
        dir_okay=False)] = None,
    profile: Annotated[Path | None, typer.Option(
        "--profiler-trace", "--profile", metavar="FILE",
        help="Diagnose a torch.profiler trace (.json or .json.gz) instead, or as well as "
             "--trace.", dir_okay=False)] = None,
    sm_clock_max: Annotated[int | None, common.integer(
        "--sm-clock-max", help="With --trace: the GPU's maximum SM clock in MHz (for the "
                               "throttling rule).", hi=100_000)] = None,
    save: Annotated[Path | None, typer.Option(
        "--json-file", "--save", metavar="FILE",
        help="Also write the diagnosis as JSON (what --json prints) to this file.",
        dir_okay=False)
                    ] = None,
    save_evidence: Annotated[Path | None, typer.Option(
        "--save-evidence", help="Also save everything watched (GPU samples, processes, steps, "
                                "stacks, profile) to this file; diagnose it again with "
                                "--evidence.", dir_okay=False)] = None,
    evidence: Annotated[Path | None, typer.Option(
        "--evidence", help="Diagnose evidence saved with --save-evidence instead.",
        dir_okay=False)] = None,
    keep_profile: Annotated[Path | None, typer.Option(
        "--keep-profile", help="With --profile-steps: keep the torch.profiler trace in this "
                               "file (.json.gz; diagnose it again with --profiler-trace).",
        dir_okay=False)] = None,
    json_: Annotated[bool, typer.Option(
        "--json", help="The diagnosis as JSON on stdout, after the job's own output.")] = False,
) -> None:
    """Why is this job slow? Runs it unchanged and watches the GPUs (SM and tensor activity,
    memory bandwidth, PCIe/NVLink, clocks), the job's processes and data-loader workers.

    Also its Python stacks (py-spy) and, through a bootstrap on its PYTHONPATH, its steps,
    batch waits, host syncs and torch.compile, with no change to its code.

    Prints the findings with their evidence and the changes ranked by expected gain on
    stderr after the job ends. Exit status: the job's own (2 when it cannot start).

    Example: gpuaudit doctor -- python train.py --epochs 1
    """
    from gpuaudit.cli.common import err
    from gpuaudit.diagnose import doctor as doc
    from gpuaudit.report.doctor_view import doctor_view

    argv = list(command or [])
    chosen = [bool(argv), attach is not None, trace is not None or profile is not None,
              evidence is not None]
    if sum(chosen) != 1:
        raise BadInputError("give exactly one of: -- COMMAND, --attach PID, --trace FILE and/or "
                            "--profiler-trace FILE, --evidence FILE")
    common.writable(save, "--json-file")  # before the job runs, not after
    common.writable(keep_profile, "--keep-profile")
    common.writable(save_evidence, "--save-evidence")
    if save_evidence is not None and not (argv or attach is not None):
        raise BadInputError("--save-evidence needs a command or --attach PID to watch")
    if sm_clock_max is not None and trace is None:
        raise BadInputError("--sm-clock-max goes with --trace")
    if keep_profile is not None and not (argv and profile_steps):
        raise BadInputError("--keep-profile needs a command run with --profile-steps N or auto")
    if gpus is not None and not (argv or attach is not None):
        raise BadInputError("--gpus goes with -- COMMAND or --attach PID (a recording holds "
                            "the GPUs it watched)")
    if gpus is not None:
        from gpuaudit.diagnose.session import check_gpus

        check_gpus(gpus)  # before the job starts
    if attach is not None:
        from gpuaudit.hw.proctree import pid_exists

        if not pid_exists(attach):
            raise BadInputError(f"--attach {attach}: no such process")
    keep = max(2, int(window / interval))
    opts = doc.WatchOptions(interval_s=interval, keep=keep, gpus=gpus,
                            profile_steps=profile_steps, keep_profile=keep_profile,
                            inject=not no_inject, stacks=not no_stacks)
    status = 0
    if argv:
        status, diagnosis = doc.run(argv, opts, save_evidence=save_evidence)
    elif attach is not None:
        stop = threading.Event()
        old = signal.signal(signal.SIGINT, lambda *_: stop.set())
        try:
            err.print(f"watching process {attach} (Ctrl-C to stop and diagnose)", style="dim")
            diagnosis = doc.attach(attach, opts, stop, save_evidence=save_evidence)
        finally:
            signal.signal(signal.SIGINT, old)
    elif evidence is not None:
        diagnosis = doc.from_evidence(evidence)
    else:
        for path in (trace, profile):
            if path is not None and not path.exists():
                raise BadInputError(f"{path}: no such file")
        diagnosis = doc.from_recordings(trace, profile, sm_clock_max)
    doc_json = diagnosis.model_dump(mode="json")
    common.save_json(save, doc_json, "--json-file")
    err.print(doctor_view(diagnosis))
    if json_:
        sys.stdout.write(json.dumps(doc_json, indent=2) + "\n")
        sys.stdout.flush()
    raise typer.Exit(status)
