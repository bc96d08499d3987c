"""Another tenant's program on the same GPU (not part of the job under the doctor): bf16
matrix products in a loop, holding 20 GiB."""
import sys
import time

import torch

hold = torch.empty(20 << 30, dtype=torch.uint8, device="cuda")
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1] if len(sys.argv) > 1 else 60)
while time.time() < end:
    for _ in range(10):
        a = (a @ a).clamp_(-1, 1)
    torch.cuda.synchronize()
    time.sleep(0.02)
