"""`gpuaudit monitor`: telemetry, exporter, alerts, idle policy; `monitor history`."""

from __future__ import annotations

import json
import shlex
import signal
import sys
import threading
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path
from typing import Annotated, Any

import typer

from gpuaudit import parse
from gpuaudit.cli import common, group
from gpuaudit.cli.common import DbOpt, err, out
from gpuaudit.errors import BadInputError

monitor_app = group.new_app("Watch the GPUs: telemetry, Prometheus exporter, alert rules, "
                             "idle policy.", no_args_is_help=False)

DEFAULT_LISTEN = "127.0.0.1:9835"


def _argv(option: str, text: str) -> tuple[str, ...]:
    try:
        argv = tuple(shlex.split(text))
    except ValueError as exc:
        raise BadInputError(f"{option} {text!r}: {exc}") from None
    if not argv:
        raise BadInputError(f"{option}: empty command")
    return argv


@monitor_app.callback(invoke_without_command=True)
def monitor(
    ctx: typer.Context,
    interval: Annotated[float, common.duration(
        "--interval", help="Time between samples (1s, 500ms, 1m).", lo_s=0.01, hi_s=parse.DAY)
    ] = "1s",
    gpus: Annotated[Any, common.gpus(help="GPUs to watch: 0,1 [default: all]")
                    ] = None,
    once: Annotated[bool, typer.Option("--once", help="Sample once, evaluate the rules, print, "
                                                      "exit (GPM rates need a second "
                                                      "sample: it waits one interval).")
                    ] = False,
    count: Annotated[int | None, common.integer("--count", help="Stop after this many samples.")
                     ] = None,
    replay: Annotated[Path | None, typer.Option(
        help="Feed a recorded telemetry trace through the same path instead of this machine's "
             "GPUs.", dir_okay=False)] = None,
    speed: Annotated[float, common.number(
        "--speed", help="With --replay: 1 = as recorded, 10 = ten times faster, 0 = at once "
                        "(a pause between frames is at most a minute).", hi=1e6)] = "0",
    record: Annotated[Path | None, typer.Option(
        help="Write what was read as a telemetry trace (for --replay) when the monitor stops.",
        dir_okay=False)] = None,
    listen: Annotated[Any, typer.Option(
        "--listen", metavar="HOST:PORT", parser=lambda t: parse.host_port(t, "--listen"),
        help="Prometheus exporter address.")] = DEFAULT_LISTEN,
    export: Annotated[bool, typer.Option("--export/--no-export",
                                         help="Serve the Prometheus exporter.")] = True,
    dcgm_names: Annotated[bool, typer.Option(
        "--dcgm-names", help="Also expose dcgm-exporter's metric names and units, for existing "
                             "dashboards.")] = False,
    pod_resources: Annotated[str | None, typer.Option(
        "--pod-resources", metavar="SOCKET",
        help="On Kubernetes: name the pod holding each GPU (gpuaudit_gpu_pod_info), asked of "
             "the kubelet's pod-resources socket, e.g. "
             "/var/lib/kubelet/pod-resources/kubelet.sock.")] = None,
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
    keep_raw: Annotated[float, common.duration(
        "--keep-raw", help="Keep raw samples this long.", lo_s=60)] = "1d",
    keep_rollups: Annotated[float, common.duration(
        "--keep-rollups", help="Keep 1-minute means this long.", lo_s=60)] = "30d",
    idle_window: Annotated[float, common.duration(
        "--idle-window", help="Idle this long before the warning.", lo_s=1, hi_s=parse.YEAR)
    ] = "10m",
    idle_grace: Annotated[float, common.duration(
        "--idle-grace", help="Then this long before the action (0: at once).", zero_ok=True,
        hi_s=parse.YEAR)] = "5m",
    idle_action: Annotated[str | None, typer.Option(
        help="Command to run when the host stays idle, e.g. 'sudo shutdown -h now'.")] = None,
    enable_actions: Annotated[bool, typer.Option(
        "--enable-actions", help="Really run --idle-action (without it: dry run, logged).")
    ] = False,
    idle_scope: Annotated[str, common.choice(
        "--idle-scope", choices=("host", "gpu"),
        help="host: act when every GPU is idle; gpu: per GPU ({gpu} in the action).")
    ] = "host",
    idle_log: Annotated[Path | None, typer.Option(
        help="Append every idle decision here as a JSON line.", dir_okay=False)] = None,
    price: Annotated[float | None, common.money(
        "--price-per-gpu-hour", "--price-usd-per-gpu-hour",
        help="Price of a GPU-hour in --currency, for the cost of idle time.",
        zero_ok=True, hi=1e6)] = None,
    currency: Annotated[str, common.currency(help="The currency of --price-per-gpu-hour.")
                        ] = "USD",
    json_: Annotated[bool, typer.Option("--json", help="JSON on stdout: with --once the state, "
                                                       "else one line per sample.")] = False,
    db: DbOpt = None,
) -> None:
    """Watch the GPUs: a live view in a terminal, a Prometheus exporter on 127.0.0.1:9835,
    alert rules with notifications, the idle policy, history in the store.

    Stop with Ctrl-C. With --once the exit code is 1 when a critical alert fires.
    """
    if ctx.invoked_subcommand is not None:
        return
    from gpuaudit.report.monitor_view import monitor_view, sample_line
    from gpuaudit.telemetry.idle import IdleConfig
    from gpuaudit.telemetry.monitor import Retention
    from gpuaudit.telemetry.setup import MonitorOptions, open_monitor

    common.refuse_together(ctx, ("once", "count"), ("rules", "no_rules"))
    common.needs(ctx, "speed", on="--replay", present=replay is not None)
    common.needs(ctx, "enable_actions", on="--idle-action", present=idle_action is not None)
    if once:
        count = 2 if replay is None else 1  # live: the first sample only primes GPM
    options = MonitorOptions(
        interval_s=interval, gpus=gpus, replay=replay, speed=speed or None, record=record,
        rules=rules, evaluate_rules=not no_rules, webhooks=tuple(webhook or ()),
        commands=[_argv("--notify-command", c) for c in notify_command or ()],
        idle=IdleConfig(window_s=idle_window, grace_s=idle_grace,
                        action=_argv("--idle-action", idle_action) if idle_action else (),
                        enable_actions=enable_actions, scope=idle_scope,  # type: ignore[arg-type]
                        price_per_gpu_hour=price),
        idle_log=idle_log,
        retention=Retention(raw=timedelta(seconds=keep_raw),
                            rollup=timedelta(seconds=keep_rollups)))
    console = err if json_ or not out.is_terminal else out
    with ExitStack() as stack:
        stack.enter_context(common.logs_to(err))
        store = _history(stack, db, keep=history and not once, replay=replay is not None,
                         db_given=common.given(ctx, "db"), asked=common.given(ctx, "history"),
                         console=console)
        session = stack.enter_context(open_monitor(options, history=store))
        mon = session.monitor
        if export and not once:
            from gpuaudit.telemetry.exporter import serve

            pods = None
            if pod_resources:
                from gpuaudit.telemetry.podresources import PodAttribution

                pods = PodAttribution(pod_resources)
            server = serve(mon.latest, host=listen[0], port=listen[1], dcgm_names=dcgm_names,
                           pods=pods)
            stack.callback(server.close)
            console.print(f"Prometheus exporter on {server.url}", style="dim")

        stop = threading.Event()
        interrupted = _on_ctrl_c(stop, stack)
        ticks = 0
        view = None if json_ or once or not out.is_terminal else _live_view(stack, out)
        for tick in session.ticks(stop, count):
            ticks += 1
            if json_ and not once:
                sys.stdout.write(_state_json(tick.state, mon) + "\n")
                sys.stdout.flush()
            elif view is not None:
                view.update(monitor_view(tick.state, mon.recent_samples(),
                                         price_per_gpu_hour=price, currency=currency),
                            refresh=True)
            elif not once:
                console.print(sample_line(tick.sample), markup=False, highlight=False)
        session.close()
        if session.recorded_to is not None:
            console.print(f"recorded {session.frames} samples to {session.recorded_to}",
                          style="dim")

    state = mon.latest.get()
    if once:
        if json_:
            sys.stdout.write(_state_json(state, mon, indent=2) + "\n")
        else:
            out.print(monitor_view(state, mon.recent_samples(), price_per_gpu_hour=price,
                                   currency=currency))
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


def _on_ctrl_c(stop: threading.Event, stack: ExitStack) -> threading.Event:
    """Ctrl-C (or SIGTERM) ends the loop after the tick in progress: nothing half-saved. The
    previous handlers come back when `stack` closes (the monitor may run inside a caller's
    process)."""
    interrupted = threading.Event()

    def handler(signum: int, frame: object) -> None:
        interrupted.set()
        stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        stack.callback(signal.signal, signum, signal.signal(signum, handler))
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
    gpu: Annotated[int | None, common.integer("--gpu", help="Only this GPU.", lo=0, hi=1023)
                   ] = None,
    since: Annotated[Any, common.time_point(
        "--since", help="From: 1h, 30m, 2d back, or an ISO time.")] = "1h",
    until: Annotated[Any, common.time_point("--until", help="To [default: now].")] = None,
    hostname: Annotated[str | None, typer.Option(help="Only this host.")] = None,
    resolution: Annotated[str, common.choice("--resolution", choices=("auto", "raw", "1m"),
                                             help="Raw samples, 1-minute means, or auto.")
                          ] = "auto",
    json_: common.JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Stored telemetry: raw samples where kept, 1-minute means beyond."""
    from gpuaudit.report.monitor_view import history_table
    from gpuaudit.store import Store

    start, end = since, until
    if end is not None and end < start:
        raise BadInputError("--until is before --since")
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
