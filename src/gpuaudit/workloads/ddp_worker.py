"""One rank of a DDP training run, started the way torchrun starts it: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR and MASTER_PORT in the environment, `env://` rendezvous. The same
module runs on many nodes under torchrun:

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 \\
        -m gpuaudit.workloads.ddp_worker '{"model": "gpt-124m", "mode": "bf16+compile"}'

Rank 0 prints one `GPUAUDIT_DDP {json}` line per result: the step times (the slowest rank's,
step by step) for each gradient-accumulation setting, then `{"event": "done"}`.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from typing import Any

MARKER = "GPUAUDIT_DDP"
DEFAULTS: dict[str, Any] = {"batch_size": None, "seq_len": None, "steps": 20,
                            "warmup_steps": 3, "min_warmup_s": 1.0, "accum": [1],
                            "backend": None, "cuda_indices": None,
                            "compile_backend": "inductor", "compile_mode": None}


def emit(event: dict[str, Any]) -> None:
    sys.stdout.write(f"{MARKER} {json.dumps(event)}\n")
    sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    warnings.filterwarnings("ignore")  # keeps stderr's last line for a real error
    cfg = {**DEFAULTS, **json.loads((argv or sys.argv)[1])}
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from gpuaudit.workloads.precision import float32_matmuls, parse_mode
    from gpuaudit.workloads.timing import step_times_s
    from gpuaudit.workloads.trainer import Trainer

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend = cfg["backend"] or ("nccl" if torch.cuda.is_available() else "gloo")
    cuda = backend == "nccl"
    if cuda:
        index = cfg["cuda_indices"][local] if cfg["cuda_indices"] else local
        device = torch.device("cuda", index)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    try:  # device_id binds the GPU and sets NCCL up now (torch ≥ 2.3)
        dist.init_process_group(backend, init_method="env://",
                                **({"device_id": device} if cuda else {}))
    except TypeError:
        dist.init_process_group(backend, init_method="env://")

    def wrap(net: Any) -> Any:
        return DistributedDataParallel(net, device_ids=[device] if cuda else None,
                                       gradient_as_bucket_view=True)

    mode = parse_mode(cfg["mode"])
    with float32_matmuls(torch, tf32=mode.precision != "fp32"):
        trainer = Trainer(cfg["model"], mode, device, batch_size=cfg["batch_size"],
                          seq_len=cfg["seq_len"], compile_backend=cfg["compile_backend"],
                          compile_mode=cfg["compile_mode"], wrap=wrap if world > 1 else None)
        w = trainer.workload
        for accum in cfg["accum"]:
            if rank == 0:
                emit({"event": "start", "accum": accum})
            warm_s, warm_n = trainer.warm_up(int(cfg["warmup_steps"]),
                                             float(cfg["min_warmup_s"]), accum)
            dist.barrier()
            times = step_times_s(torch, device, lambda a=accum: trainer.step(a),
                                 int(cfg["steps"]))
            slowest = torch.tensor(times, dtype=torch.float64, device=device)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            peak = int(torch.cuda.max_memory_allocated(device)) if cuda else None
            if rank == 0:
                emit({"event": "result", "accum": accum, "times_s": slowest.tolist(),
                      "warmup_s": warm_s, "warmup_steps": warm_n, "batch": w.batch_size,
                      "tokens_per_sample": w.tokens_per_sample, "world": world,
                      "backend": backend, "peak_memory_bytes": peak,
                      "train_flops_per_sample": w.train_flops_per_sample})
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        emit({"event": "done"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
