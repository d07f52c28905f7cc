"""The peer of data-parallel.sh's torchrun-style section: torch.distributed's
own Gloo all-reduces of the 17.0M GPT's gradients (101 tensors, 64.8 MiB),
one at a time as the executable averages them, then as one buffer. Needs
PyTorch (not CI's):

    torchrun --standalone --nproc-per-node 2 bench/torch_gloo_allreduce.py
"""
import os, time, torch, torch.distributed as dist
torch.set_num_threads(1)
dist.init_process_group("gloo")
n = 17_000_000 // 101
ts = [torch.ones(n) for _ in range(101)]
for rep in range(4):
    dist.barrier(); t0 = time.perf_counter()
    for t in ts: dist.all_reduce(t)
    dt = time.perf_counter() - t0
    if dist.get_rank() == 0: print(f"torch gloo: 101 all-reduces, {101*n*4/2**20:.1f} MiB: {dt*1e3:.1f} ms")
big = torch.ones(101*n)
for rep in range(3):
    dist.barrier(); t0 = time.perf_counter(); dist.all_reduce(big); dt = time.perf_counter() - t0
    if dist.get_rank() == 0: print(f"torch gloo: one all-reduce of {101*n*4/2**20:.1f} MiB: {dt*1e3:.1f} ms")
dist.destroy_process_group()
