"""`gpuaudit monitor`: telemetry, exporter, alerts, idle policy; `monitor history`."""

from __future__ import annotations

import json
import logging
import shlex
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit.errors import BadInputError

monitor_app = typer.Typer(help="Watch the GPUs: telemetry, Prometheus exporter, alert rules, "
                               "idle policy.", no_args_is_help=False,
                          context_settings={"help_option_names": ["-h", "--help"]})

DEFAULT_LISTEN = "127.0.0.1:9835"


def _seconds(option: str, text: str, *, allow_zero: bool = False) -> float:
    from gpuaudit.telemetry.rules import parse_duration

    try:
        value = parse_duration(text)
    except ValueError:
        raise BadInputError(f"{option} {text!r}: expected a duration like 30s, 10m, 1h, 2d"
                            ) from None
    if value < 0 or (value == 0 and not allow_zero):
        raise BadInputError(f"{option} {text!r}: must be more than zero")
    return value


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise BadInputError(f"--listen {text!r}: expected HOST:PORT like {DEFAULT_LISTEN}")
    return host.strip("[]") or "127.0.0.1", int(port)


def _argv(option: str, text: str) -> tuple[str, ...]:
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise BadInputError(f"{option} {text!r}: {exc}") from None
    if not argv:
        raise BadInputError(f"{option}: empty command")
    return argv


class _Logs(logging.Handler):
    """Log records as lines on the given console, above a live view if there is one."""

    def __init__(self, console: Any) -> None:
        super().__init__()
        self.console = console

    def emit(self, record: logging.LogRecord) -> None:
        style = {logging.ERROR: "red", logging.WARNING: "yellow"}.get(record.levelno, "dim")
        self.console.print(f"{record.name.removeprefix('gpuaudit.')}: {record.getMessage()}",
                           style=style, markup=False, highlight=False, soft_wrap=True)


@monitor_app.callback(invoke_without_command=True)
def monitor(
    ctx: typer.Context,
    interval: Annotated[str, typer.Option(help="Time between samples (1s, 500ms, 1m).")] = "1s",
    gpus: Annotated[str | None, typer.Option(help="GPUs to watch: '0,1' [default: all]")
                    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Sample once, evaluate the rules, print, "
                                                      "exit (GPM rates need a second "
                                                      "sample: it waits one interval).")
                    ] = False,
    count: Annotated[int | None, typer.Option(min=1, help="Stop after this many samples.")
                     ] = None,
    replay: Annotated[Path | None, typer.Option(
        help="Feed a recorded telemetry trace through the same path instead of this machine's "
             "GPUs.", dir_okay=False)] = None,
    speed: Annotated[float, typer.Option(
        min=0, help="With --replay: 1 = as recorded, 10 = ten times faster, 0 = at once.")
    ] = 0.0,
    record: Annotated[Path | None, typer.Option(
        help="Write what was read as a telemetry trace (for --replay) when the monitor stops.",
        dir_okay=False)] = None,
    listen: Annotated[str, typer.Option(help="Prometheus exporter address (HOST:PORT).")
                      ] = DEFAULT_LISTEN,
    export: Annotated[bool, typer.Option("--export/--no-export",
                                         help="Serve the Prometheus exporter.")] = True,
    dcgm_names: Annotated[bool, typer.Option(
        "--dcgm-names", help="Also expose dcgm-exporter's metric names and units, for existing "
                             "dashboards.")] = False,
    rules: Annotated[Path | None, typer.Option(
        help="Alert rules in Prometheus rule-file format [default: the shipped alerts.yml].",
        dir_okay=False)] = None,
    no_rules: Annotated[bool, typer.Option("--no-rules", help="Evaluate no alert rules.")
                        ] = False,
    webhook: Annotated[list[str] | None, typer.Option(
        help="POST alerts as JSON (Alertmanager's webhook format) here; repeatable.")] = None,
    notify_command: Annotated[list[str] | None, typer.Option(
        help="Run this command per alert (alert JSON on stdin); repeatable.")] = None,
    history: Annotated[bool, typer.Option(
        "--history/--no-history", help="Keep the samples in the store (with --replay only "
                                       "in an explicit --db, as host replay:NAME).")] = True,
    keep_raw: Annotated[str, typer.Option(help="Keep raw samples this long.")] = "1d",
    keep_rollups: Annotated[str, typer.Option(help="Keep 1-minute means this long.")] = "30d",
    idle_window: Annotated[str, typer.Option(help="Idle this long before the warning.")
                           ] = "10m",
    idle_grace: Annotated[str, typer.Option(help="Then this long before the action.")] = "5m",
    idle_action: Annotated[str | None, typer.Option(
        help="Command to run when the host stays idle, e.g. 'sudo shutdown -h now'.")] = None,
    enable_actions: Annotated[bool, typer.Option(
        "--enable-actions", help="Really run --idle-action (without it: dry run, logged).")
    ] = False,
    idle_scope: Annotated[str, typer.Option(help="host: act when every GPU is idle; gpu: per "
                                                 "GPU ({gpu} in the action).")] = "host",
    idle_log: Annotated[Path | None, typer.Option(
        help="Append every idle decision here as a JSON line.", dir_okay=False)] = None,
    price: Annotated[float | None, typer.Option(
        "--price-usd-per-gpu-hour", min=0, help="Price of a GPU-hour, for the cost of idle "
                                                "time.")] = None,
    json_: Annotated[bool, typer.Option("--json", help="JSON on stdout: with --once the state, "
                                                       "else one line per sample.")] = False,
    db: Annotated[str | None, typer.Option("--db", envvar="GPUAUDIT_DB", show_envvar=True,
                                           help="Store URL (see `gpuaudit run --help`).")
                  ] = None,
) -> None:
    """Watch the GPUs: a live view in a terminal, a Prometheus exporter on 127.0.0.1:9835,
    alert rules with notifications, the idle policy, history in the store.

    Stop with Ctrl-C. With --once the exit code is 1 when a critical alert fires.
    """
    if ctx.invoked_subcommand is not None:
        return
    from gpuaudit.cli.app import _parse_gpus, err, out
    from gpuaudit.hw.telemetry import Sampler
    from gpuaudit.report.monitor_view import monitor_view, sample_line
    from gpuaudit.telemetry.idle import IdleConfig, IdlePolicy
    from gpuaudit.telemetry.monitor import Monitor, Retention

    interval_s = _seconds("--interval", interval)
    gpu_list = _parse_gpus(gpus)
    if once:
        count = 2 if replay is None else 1  # live: the first sample only primes GPM
    retention = Retention(raw=timedelta(seconds=_seconds("--keep-raw", keep_raw)),
                          rollup=timedelta(seconds=_seconds("--keep-rollups", keep_rollups)))
    idle_cfg = IdleConfig(window_s=_seconds("--idle-window", idle_window),
                          grace_s=_seconds("--idle-grace", idle_grace, allow_zero=True),
                          action=_argv("--idle-action", idle_action) if idle_action else (),
                          enable_actions=enable_actions, scope=idle_scope,  # type: ignore[arg-type]
                          price_per_gpu_hour=price)
    host, port = _listen(listen)
    console = err if json_ or not out.is_terminal else out
    handler = _Logs(err)
    logging.getLogger("gpuaudit").addHandler(handler)
    logging.getLogger("gpuaudit").setLevel(logging.INFO)

    with ExitStack() as stack:
        stack.callback(logging.getLogger("gpuaudit").removeHandler, handler)
        source, hostname, times_of = _open_source(stack, replay, record, interval_s, speed)
        sampler = Sampler(source, hostname=hostname, interval_s=interval_s, gpus=gpu_list)
        if record is not None:
            source.end_setup()
        if not sampler.static:
            raise BadInputError("no GPU to watch" + (f" among {gpus}" if gpus else ""))
        evaluator, notifier = _alerting(stack, rules, no_rules, webhook, notify_command)
        store = _history(stack, db, keep=history and not once, replay=replay is not None,
                         db_given=_given(ctx, "db"), asked=_given(ctx, "history"),
                         console=console)
        decisions_log = stack.enter_context(idle_log.open("a")) if idle_log else None

        def on_decision(d: Any) -> None:  # the notifiers log it (as alert GpuIdlePolicy)
            if decisions_log is not None:
                decisions_log.write(d.model_dump_json() + "\n")
                decisions_log.flush()

        mon = Monitor(sampler, evaluator=evaluator, notifier=notifier,
                      idle=IdlePolicy(idle_cfg), history=store, retention=retention,
                      on_decision=on_decision)
        if export and not once:
            from gpuaudit.telemetry.exporter import serve

            server = serve(mon.latest, host=host, port=port, dcgm_names=dcgm_names)
            stack.callback(server.close)
            console.print(f"Prometheus exporter on {server.url}", style="dim")

        stop = threading.Event()
        interrupted = _on_ctrl_c(stop)
        ticks = 0
        view = None if json_ or once or not out.is_terminal else _live_view(stack, out)
        for now in times_of(stop, count):
            tick = mon.tick(now)
            if record is not None:
                source.end_frame(now)
            ticks += 1
            if json_ and not once:
                sys.stdout.write(_state_json(tick.state, mon) + "\n")
                sys.stdout.flush()
            elif view is not None:
                view.update(monitor_view(tick.state, mon.recent_samples(),
                                         price_per_gpu_hour=price), refresh=True)
            elif not once:
                console.print(sample_line(tick.sample), markup=False, highlight=False)
        if record is not None:
            console.print(f"recorded {source.frame_count} samples to {record}", style="dim")

    state = mon.latest.get()
    if once:
        if json_:
            sys.stdout.write(_state_json(state, mon, indent=2) + "\n")
        else:
            out.print(monitor_view(state, mon.recent_samples(), price_per_gpu_hour=price))
        critical = [a for a in state.alerts
                    if a.state == "firing" and a.labels.get("severity") == "critical"]
        raise typer.Exit(1 if critical else 0)
    usage = mon.idle.usage() if mon.idle else None
    summary = f"stopped after {ticks} samples" if interrupted.is_set() else f"{ticks} samples"
    if usage is not None and usage.idle_gpu_hours:
        summary += f"; idle {usage.idle_gpu_hours:.3g} GPU-hours"
        if usage.idle_cost is not None:
            summary += f" (≈ {usage.idle_cost:.3g} {usage.currency})"
    console.print(summary, style="dim")


def _given(ctx: typer.Context, name: str) -> bool:
    """Whether the option was typed (not a default, not an environment variable). By name:
    recent typer carries its own copy of click, whose enum is not click's."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name == "COMMANDLINE"


def _history(stack: ExitStack, db: str | None, *, keep: bool, replay: bool, db_given: bool,
             asked: bool, console: Any) -> Any:
    """The store the samples go to, if any. A replay is not this machine's present: it goes
    only to a store named on the command line (not the default, not GPUAUDIT_DB), under the
    host name replay:NAME, which idle cost and other history sums leave out."""
    from gpuaudit.store import ReplayHistory, Store

    if not keep:
        return None
    if replay and not db_given:
        if asked:
            console.print("replay: samples not kept in the history (give --db to keep them)",
                          style="dim")
        return None
    store = stack.enter_context(Store(db))
    return ReplayHistory(store) if replay else store


def _open_source(stack: ExitStack, replay: Path | None, record: Path | None,
                 interval_s: float, speed: float) -> tuple[Any, str, Any]:
    """The NVML source (live or a trace), the hostname, and the tick times it runs on."""
    from gpuaudit.hw.telemetry import TraceRecorder, TraceReplay
    from gpuaudit.model import utc_now
    from gpuaudit.telemetry.monitor import live_times, replay_times

    if replay is not None:
        trace = TraceReplay.from_file(replay)
        src: Any = trace
        hostname = str(trace.meta.get("hostname") or "replay")

        def times(stop: threading.Event, count: int | None) -> Iterator[Any]:
            return replay_times(trace, stop, count, speed or None)
    else:
        from gpuaudit.errors import GpuauditError
        from gpuaudit.hw import LiveNvml, NvmlUnavailable
        from gpuaudit.hw.host import read_host

        try:
            live = LiveNvml()
        except NvmlUnavailable as exc:
            raise GpuauditError(f"cannot monitor: {exc} (use --replay TRACE to replay a "
                                "recording)") from None
        stack.callback(live.close)
        src = live
        hostname = read_host().hostname

        def times(stop: threading.Event, count: int | None) -> Iterator[Any]:
            return live_times(interval_s, stop, count)
    if record is not None:
        # Opened now, before any sampling: a path that cannot be written fails at once. The
        # trace is streamed, a line per tick (a crash loses at most the tick in progress).
        try:
            stream = stack.enter_context(record.open("w"))
        except OSError as exc:
            raise BadInputError(f"--record {record}: {exc.strerror or exc}") from None
        src = TraceRecorder(src, stream, hostname=hostname, interval_s=interval_s,
                            recorded_at=utc_now().isoformat())
    return src, hostname, times


def _alerting(stack: ExitStack, rules: Path | None, no_rules: bool,
              webhooks: list[str] | None, commands: list[str] | None) -> tuple[Any, Any]:
    from gpuaudit.telemetry.notify import notifiers
    from gpuaudit.telemetry.rules import Evaluator, load_rules, load_shipped_rules

    evaluator = None
    if not no_rules:
        ruleset = load_rules(rules) if rules else load_shipped_rules()
        for problem in ruleset.unknown_metrics():
            logging.getLogger("gpuaudit.rules").warning("%s", problem)
        evaluator = Evaluator(ruleset)
    notifier = notifiers(webhooks=webhooks or (),
                         commands=[_argv("--notify-command", c) for c in commands or ()])
    stack.callback(notifier.close, 10.0)
    return evaluator, notifier


def _on_ctrl_c(stop: threading.Event) -> threading.Event:
    """Ctrl-C (or SIGTERM) ends the loop after the tick in progress: nothing half-saved."""
    interrupted = threading.Event()

    def handler(signum: int, frame: object) -> None:
        interrupted.set()
        stop.set()

    signal.signal(signal.SIGINT, handler)
    signal.signal(signal.SIGTERM, handler)
    return interrupted


def _live_view(stack: ExitStack, console: Any) -> Any:
    from rich.live import Live
    from rich.text import Text

    return stack.enter_context(Live(Text("gpuaudit monitor: starting"), console=console,
                                    auto_refresh=False, redirect_stderr=False))


def _state_json(state: Any, mon: Any, indent: int | None = None) -> str:
    doc = {
        "sample": state.sample.model_dump(mode="json") if state.sample else None,
        "alerts": [a.model_dump(mode="json") for a in state.alerts],
        "idle": {str(i): {"idle": s.idle, "idle_seconds_total": s.idle_seconds_total}
                 for i, s in state.idle.items()},
        "xid_counts": [{"gpu": g, "xid": c, "count": n}
                       for (g, c), n in sorted(state.xids.counts.items())],
    }
    if mon.idle is not None:
        doc["idle_usage"] = mon.idle.usage().model_dump(mode="json")
    return json.dumps(doc, indent=indent)


@monitor_app.command("history")
def history_cmd(
    gpu: Annotated[int | None, typer.Option(min=0, help="Only this GPU.")] = None,
    since: Annotated[str, typer.Option(help="From: 1h, 30m, 2d ago, or an ISO time.")] = "1h",
    until: Annotated[str | None, typer.Option(help="To (default: now).")] = None,
    hostname: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    resolution: Annotated[str, typer.Option(help="auto, raw or 1m.")] = "auto",
    json_: Annotated[bool, typer.Option("--json", help="JSON on stdout.")] = False,
    db: Annotated[str | None, typer.Option("--db", envvar="GPUAUDIT_DB", show_envvar=True,
                                           help="Store URL.")] = None,
) -> None:
    """Stored telemetry: raw samples where kept, 1-minute means beyond."""
    from gpuaudit.cli.app import out
    from gpuaudit.report.monitor_view import history_table
    from gpuaudit.store import Store, parse_time

    if resolution not in ("auto", "raw", "1m"):
        raise BadInputError(f"--resolution {resolution!r}: choose auto, raw or 1m")
    start = parse_time(since)
    end = parse_time(until) if until else None
    with Store(db, read_only=True) as store:  # replays too: shown as host replay:NAME
        points = store.history(gpu=gpu, since=start, until=end, hostname=hostname,
                               resolution=resolution, replays=True)  # type: ignore[arg-type]
    if json_:
        from gpuaudit.model import SCHEMA_VERSION

        doc = {"schema_version": SCHEMA_VERSION, "points": [p.model_dump(mode="json")
                                                            for p in points]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    elif points:
        out.print(history_table(points))
    else:
        out.print("no telemetry stored for that range: `gpuaudit monitor` keeps it")
