"""The harness's entries: one per capability, what each runs and where its table comes from.

Each entry's steps are commands run from the repository root (validation.harness runs them);
`ctx.raw` is where their files go, `ctx.args` the options typed after `--`.
"""

from __future__ import annotations

from validation.harness import ROOT, Capability, Context, Step
from validation.predict.zoo import TARGETS_MIN_S


def _py(ctx: Context, script: str, *args: str) -> tuple[str, ...]:
    return (ctx.python, script, *args)


def inspect_steps(ctx: Context) -> list[Step]:
    name = ctx.args[0] if ctx.args else "h200-1gpu"
    return [Step("inspect", ("bash", "validation/fixtures/run.sh", name), timeout_s=300)]


def bench_fidelity_steps(ctx: Context) -> list[Step]:
    mode = ctx.mode or "fidelity"
    if mode == "do-bench":  # ours beside CuPy's copies and torch.mm under do_bench
        suites = ctx.args or ("latency", "matmul", "memory", "transfer", "p2p")
        return [Step("do-bench", _py(ctx, "validation/bench/do_bench.py", str(ctx.work), *suites),
                     stdout="summary.txt", timeout_s=590)]
    return [Step("fidelity", ("bash", "validation/bench/fidelity.sh", mode), timeout_s=595,
                 stdout="fidelity.log")]


def gpm_settle_steps(ctx: Context) -> list[Step]:
    raw = ctx.raw
    return [
        Step("gpm-settle", _py(ctx, "validation/bench/gpm_settle.py"), timeout_s=90,
             stdout="gpm_settle.json"),
        Step("bench-idle", (ctx.python, "-m", "gpuaudit", "bench", "matmul", "memory", "transfer",
                            "--no-save", "--json"), timeout_s=100, stdout="bench_idle.json"),
        Step("contended-check", _py(ctx, "validation/bench/fidelity_report.py", "contended",
                                    str(raw / "bench_idle.json"), "no"),
             stdout="summary.md", timeout_s=60),
    ]


def workloads_steps(ctx: Context) -> list[Step]:
    return [Step("workloads", _py(ctx, "validation/workloads/run.py", str(ctx.raw)),
                 timeout_s=595)]


def doctor_steps(ctx: Context) -> list[Step]:
    parts = list(ctx.args) or ["known", "overhead", "tune"]
    if ctx.dry:
        parts.append("--dry")
    return [Step("doctor", _py(ctx, "validation/doctor/known.py", str(ctx.raw), *parts),
                 timeout_s=595, env=(("CUDA_VISIBLE_DEVICES", "0"),))]


def doctor_zoo_steps(ctx: Context) -> list[Step]:
    gpu0 = (("CUDA_VISIBLE_DEVICES", "0"),)
    if ctx.mode == "tenant":  # the ground truth of the shared-GPU share
        return [Step("tenant-probe", _py(ctx, "validation/doctor/tenant_probe.py", str(ctx.raw),
                                         *ctx.args), timeout_s=300, env=gpu0)]
    steps = [Step("zoo", _py(ctx, "validation/doctor/zoo.py", str(ctx.raw), *ctx.args),
                  timeout_s=595, env=gpu0)]
    if ctx.mode != "zoo":
        steps.append(Step("overhead", _py(ctx, "validation/doctor/known.py", str(ctx.raw),
                                          "overhead"),
                          timeout_s=260, env=(*gpu0, ("GPUAUDIT_DOCTOR_DEADLINE_S", "200"))))
    return steps


def feed_steps(ctx: Context) -> list[Step]:
    if ctx.mode == "compare":  # PATH ROUNDS SIZE: ours and fio pass by pass
        args = ctx.args or (str(ctx.work), "3", "1G")
        return [Step("compare", _py(ctx, "validation/feed/compare.py", *args),
                     stdout="summary.txt", timeout_s=590)]
    if ctx.mode == "read-probe":  # DIR ROUNDS [SIZE]: why sequential reads differ
        args = ctx.args or (str(ctx.work), "5")
        return [Step("read-probe", _py(ctx, "validation/feed/read_probe.py", *args),
                     stdout="summary.txt", timeout_s=590)]
    return [Step("feed", ("bash", "validation/feed/run.sh"), timeout_s=595, stdout="feed.log")]


def monitor_soak_steps(ctx: Context) -> list[Step]:
    args = ctx.args or ("--seconds", "490", "--interval", "100ms")
    return [Step("soak", _py(ctx, "validation/monitor/soak.py", str(ctx.raw), *args),
                 stdout="summary.txt", timeout_s=595)]


def nvml_probe_steps(ctx: Context) -> list[Step]:
    return [Step("nvml", ("bash", "validation/monitor/nvml.sh", ctx.mode or "info"),
                 timeout_s=595, stdout="summary.txt")]


def monitor_cost_steps(ctx: Context) -> list[Step]:
    args = ctx.args or (("--ticks", "60") if ctx.dry else ())
    return [Step("cost", _py(ctx, "validation/monitor/cost.py", *args), stdout="summary.txt",
                 timeout_s=300)]


def cost_speed_steps(ctx: Context) -> list[Step]:
    args = ctx.args or (("--repeat", "1") if ctx.dry else ("--repeat", "15"))
    return [Step("speed", _py(ctx, "validation/cost/speed.py", *args), stdout="summary.md",
                 timeout_s=590)]


def quick_profile_steps(ctx: Context) -> list[Step]:
    return [Step("quick-profile", ("bash", "validation/bench/quick_profile.sh", *ctx.args),
                 timeout_s=590)]


def exporter_steps(ctx: Context) -> list[Step]:
    # a hundred scrapers while the monitor replays the recorded DDP trace widened to 8 GPUs
    # (no GPU needed), then one scraper; on a GPU machine --mode live samples it through NVML
    rounds = "2" if ctx.dry else "10"
    trace = () if ctx.mode == "live" else (
        "--trace", "tests/fixtures/telemetry/real/ddp-2gpu-lm-bf16.json")
    return [
        Step("hundred", _py(ctx, "validation/monitor/exporter.py", "--scrapers", "100",
                            "--rounds", rounds, "--monitor", *trace),
             stdout="summary.txt", timeout_s=120),
        # (a hundred scrapes' p99 is their slowest: a dry run only shows that it works)
        Step("one", _py(ctx, "validation/monitor/exporter.py", "--n",
                        "100" if ctx.dry else "1000"), stdout="one.txt", timeout_s=90,
             optional=ctx.dry),
    ]


def telemetry_record_steps(ctx: Context) -> list[Step]:
    return [Step("record", _py(ctx, "validation/monitor/record_telemetry.py", str(ctx.raw),
                               *ctx.args), timeout_s=595)]


def fleet_steps(ctx: Context) -> list[Step]:
    args = list(ctx.args) or (["--gpus", "2"] if ctx.dry else [])
    return [Step("fleet", _py(ctx, "validation/fleet/local_cluster.py", str(ctx.raw), *args),
                 stdout="summary.txt", timeout_s=595)]


def fleet_scale_steps(ctx: Context) -> list[Step]:
    nodes = ("--nodes", "40", "--gpus", "2", "--spread", "2") if ctx.dry else ()
    db = f"sqlite:///{ctx.work / 'fleet.db'}"
    run = _py(ctx, "validation/fleet/scale_run.py", *nodes, "--db", db, *ctx.args)
    steps = [Step("driver", run,
                  stdout="summary.txt", timeout_s=595)]
    if not ctx.dry:  # the report over a big fleet in PostgreSQL (GPUAUDIT_TEST_PG_URL)
        steps.append(Step("report", _py(ctx, "validation/fleet/scale_report.py"),
                          stdout="report.txt", timeout_s=595, optional=True))
    return steps


def predict_mlperf_steps(ctx: Context) -> list[Step]:
    return [Step("mlperf", _py(ctx, "validation/predict/mlperf.py"), stdout="mlperf.md",
                 timeout_s=120)]


def predict_steps(ctx: Context) -> list[Step]:
    if ctx.mode == "replay":  # recorded runs.json files, predicted again here (CPU)
        # by default the recorded H200 runs; the first one's rates were all marked contended
        # by a GPM reading since corrected (tests/predict/test_predict_replay.py says so)
        runs = ctx.args or (*sorted(str(p.relative_to(ROOT)) for p in
                                    (ROOT / "tests" / "fixtures" / "predict")
                                    .glob("h200-1gpu-*-runs.json")),
                            "--drop-contention-marks", "1")
        return [Step("replay", _py(ctx, "validation/predict/compare.py", *runs),
                     stdout="summary.md", timeout_s=300)]
    return [Step("predict", _py(ctx, "validation/predict/run.py", str(ctx.raw)), timeout_s=595)]


ZOO_RESULTS = "tests/fixtures/predict/zoo-results.json"
ZOO_RESULTS_H100 = "tests/fixtures/predict/zoo-results-h100.json"  # the zoo on an H100
AUTOCAST_PROBE_H100 = "tests/fixtures/predict/zoo/autocast-probe-h100.json"  # its held-work probe


def predict_zoo_steps(ctx: Context) -> list[Step]:
    zoo = "validation/predict/zoo.py"
    if ctx.mode == "compare":  # RECORDING [--also RECORDING2] [--rates RUN]: on recordings
        if not ctx.args:
            return [Step("compare", _py(ctx, zoo, "table", ZOO_RESULTS), stdout="table.md",
                         timeout_s=60)]
        return [Step("compare", _py(ctx, zoo, "compare", *ctx.args), stdout="table.md",
                     timeout_s=300)]
    # record: [BUDGET_S] [--set held_out|development], then the comparison of what it recorded
    budget = ctx.args[0] if ctx.args else "520"
    env = (("PYTHONPATH", "examples/predict"),)
    rec = str(ctx.raw / "zoo")
    tiny = ("--tiny",) if ctx.dry else ()
    # the recorder keeps at least TARGETS_MIN_S past its budget for the last family's targets:
    # a stop any sooner kills them untimed, leaving a family profiled and never measured
    stop_s = min(float(budget) + TARGETS_MIN_S + 40, 590)
    return [
        Step("record", _py(ctx, zoo, "record", rec, "--budget-s", budget, *tiny,
                           *ctx.args[1:]), timeout_s=stop_s, env=env),
        Step("compare", _py(ctx, zoo, "compare", rec), stdout="table.md", timeout_s=120,
             env=env, optional=True),
    ]


def predict_zoo_h100_steps(ctx: Context) -> list[Step]:
    return [Step("compare", _py(ctx, "validation/predict/zoo.py", "table", ZOO_RESULTS_H100),
                 stdout="table.md", timeout_s=60),
            Step("gpu", _py(ctx, "validation/predict/gpu_change.py"), stdout="gpu.md",
                 timeout_s=60),
            Step("probe", _py(ctx, "validation/predict/autocast_probe.py", "--table",
                              AUTOCAST_PROBE_H100), stdout="probe.md", timeout_s=60)]


def predict_users_steps(ctx: Context) -> list[Step]:
    return [Step("users", _py(ctx, "validation/predict/users.py"), stdout="table.md",
                 timeout_s=300)]


def render_science_steps(ctx: Context) -> list[Step]:
    return [Step("render-science", ("bash", "validation/render/science.sh"), timeout_s=540,
                 stdout="run.log")]


CAPABILITIES: dict[str, Capability] = {c.name: c for c in (
    Capability("inspect", "NVML readings recorded as fixtures; the gpu tests beside nvidia-smi",
               "nvidia-smi --query-gpu", "inspect.md", inspect_steps, ("summary.txt",)),
    Capability("bench-fidelity", "the micro benchmarks beside the reference tools",
               "mamf-finder, nccl-tests, CuPy, triton.testing.do_bench", "benchmarks.md",
               bench_fidelity_steps, ("summary.md",),
               modes=("fidelity", "matmul", "collectives", "standard", "full", "do-bench")),
    Capability("gpm-settle", "how long GPM counts our own kernels; no false contention",
               "an idle GPU's GPM reading", "benchmarks.md", gpm_settle_steps, ("summary.md",),
               dry=False),
    Capability("workloads", "bench train|infer: steps, MFU, DDP scaling, serving",
               "published MLPerf / torch.compile figures", "workloads.md", workloads_steps,
               ("summary.txt",), dry=False),
    Capability("doctor", "the doctor's known answers, its watching overhead, tune",
               "the planted bottleneck of each workload", "doctor.md", doctor_steps,
               ("doctor_known_answers.md", "doctor_overhead.md")),
    Capability("doctor-zoo", "the doctor on the zoo (development and held-out cases)",
               "the zoo's expected findings", "doctor.md", doctor_zoo_steps,
               ("zoo_dev.md", "zoo_held-out.md", "doctor_overhead.md"),
               dry=False, modes=("zoo", "all", "tenant")),
    Capability("feed", "storage, network, host and the feed verdict", "fio, iperf3, STREAM",
               "feed.md", feed_steps, ("summary.txt",), modes=("all", "compare", "read-probe")),
    Capability("monitor-soak", "the monitor under 100 ms sampling while jobs come and go",
               "the jobs' own step counts", "monitor-safety.md", monitor_soak_steps,
               ("summary.txt",), dry=False),
    Capability("nvml-probe", "how NVML writes into caller memory; the sampler's guard",
               "guard-area canaries", "monitor-safety.md", nvml_probe_steps, ("summary.txt",),
               dry=False, modes=("info", "fields", "bisect", "fence", "soak")),
    Capability("monitor-cost", "the monitor's CPU per tick for 8 GPUs (replayed trace)",
               "the budget: 1 % of one core at 1 s", "monitor.md", monitor_cost_steps,
               ("summary.txt",), gpu=False),
    Capability("cost-speed", "gpuaudit --help, catalog list and recommend as whole processes",
               "`python3 -c pass`; the targets ≤ 150, 300 and 200 ms", "cost-recommend.md",
               cost_speed_steps, ("summary.md",), gpu=False),
    Capability("quick-profile", "`gpuaudit run` from process start to exit, three times",
               "mamf-finder's bf16 beside the run's matmul; the 45 s target", "benchmarks.md",
               quick_profile_steps, ("summary.txt",), dry=False),
    Capability("exporter", "/metrics under 100 concurrent scrapers while the monitor samples",
               "a thread per connection; the p99 ≤ 100 ms target", "monitor-exporter.md",
               exporter_steps, ("summary.txt",), gpu=False, modes=("replay", "live")),
    Capability("telemetry-record", "real telemetry traces for the tests", "nvidia-smi",
               "development.md", telemetry_record_steps, (), dry=False),
    Capability("fleet", "fleet run and report on a local Ray cluster, one node per GPU",
               "nccl all-reduce across nodes", "fleet.md", fleet_steps, ("summary.txt",)),
    Capability("fleet-scale", "the fleet driver and report at 1,000 simulated nodes",
               "the time and memory budget", "fleet.md", fleet_scale_steps, ("summary.txt",),
               gpu=False),
    Capability("predict-mlperf", "predict's GPU change against NVIDIA's published MLPerf",
               "MLPerf Inference v4.0 H100 results", "predict.md", predict_mlperf_steps,
               ("mlperf.md",), gpu=False),
    Capability("predict", "predict against measurements (precision, batch, GPUs, size); "
               "`replay`: recorded runs predicted again (CPU)", "the measured step",
               "predict.md", predict_steps, ("summary.md",), dry=False, modes=("replay",)),
    Capability("predict-zoo", "predict on the model zoo: `record` on a GPU, `compare` on "
               "recordings (CPU; without any, the recorded zoo's results)",
               "the measured step of each case", "predict.md", predict_zoo_steps,
               ("table.md",), modes=("record", "compare")),
    Capability("predict-zoo-h100", "predict on the model zoo recorded on an H100 (as "
               "`predict-zoo` records), and --gpu between it and the H200 (CPU: the "
               "recorded results)",
               "the measured step of each case", "predict.md", predict_zoo_h100_steps,
               ("table.md", "gpu.md", "probe.md"), gpu=False),
    Capability("predict-users", "predict on models written the way their users write them, "
               "each recorded as a user runs it (CPU: the recorded runs)",
               "each target's own bench train", "predict.md", predict_users_steps,
               ("table.md",), gpu=False),
    Capability("render-science", "bench render and bench science with --with-native, a "
               "reference frame, recommend render|simulate on the run",
               "glmark2, the reference scene's image, CuPy's FFT and SpMV",
               "bench-render-science.md", render_science_steps, ("summary.md",), dry=False),
)}
