#!/usr/bin/env python3
"""PyTorch's side of bench/ddp_bench.cpp: DistributedDataParallel on gloo, 2 processes, 1 thread each.

Step: opt.zero_grad(); loss = cross_entropy (or mse) of an MLP 784-1024-1024-10 (ReLU) on this rank's
128 rows; loss.backward(); SGD step (lr 0.01). Cases, each with its own model (seed 1234) and optimizer:
  local        no communication (each rank trains alone): the compute floor
  DDP          torch.nn.parallel.DistributedDataParallel with its defaults (bucket_cap_mb 25, first
               bucket 1 MiB), gloo all_reduce
Timing as ddp_bench: samples of `steps` steps per case, cases interleaved in rotating order, a barrier
before each sample, the slowest rank's time (all_reduce MAX) / steps; medians printed by rank 0, and
the line "torch_ddp_ms_per_step <ms>" that scripts/ddp_bench.sh reads.

    /usr/bin/python3 bench/ddp_torch.py [--quick] [--samples N] [--ranks 2] [--loss ce|mse] [--profile]
"""
import argparse
import math
import os
import socket
import statistics
import time

# One thread per rank, as troupe's side: torch.set_num_threads(1) below leaves Debian's OpenBLAS (pthreads)
# its own pool of one thread per core, so until 2026-11-28 every GEMM here ran on both cores (the remote
# train step took 102-116 ms so against 154 ms on one thread). Set before torch loads OpenBLAS.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

BATCH, IN, HIDDEN, OUT = 128, 784, 1024, 10


def make_mlp():
    torch.manual_seed(1234)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, OUT))


def max_over_ranks(v):
    t = torch.tensor([v], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return t.item()


def worker(rank, size, port, args):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)

    torch.manual_seed(100 + rank)
    x = torch.randn(BATCH, IN)
    yc = torch.randint(0, OUT, (BATCH,))
    yd = torch.randn(BATCH, OUT)

    def loss_of(out):
        return F.mse_loss(out, yd) if args.loss == "mse" else F.cross_entropy(out, yc)

    cases = []
    for name, wrap in (("local step (no communication)", False), ("DDP (defaults, gloo)", True)):
        inner = make_mlp()
        model = nn.parallel.DistributedDataParallel(inner) if wrap else inner
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        cases.append({"name": name, "model": model, "opt": opt, "ms": []})

    def step(c):
        c["opt"].zero_grad()
        loss = loss_of(c["model"](x))
        loss.backward()
        c["opt"].step()
        loss.item()

    slowest = 0.0
    for c in cases:
        step(c)
        t0 = time.perf_counter()
        for _ in range(2):
            step(c)
        slowest = max(slowest, max_over_ranks((time.perf_counter() - t0) * 1000 / 2))
    steps = max(1, math.ceil((60.0 if args.quick else 250.0) / slowest))
    samples = args.samples or (3 if args.quick else 9)
    for s in range(samples):
        for k in range(len(cases)):
            c = cases[(k + s) % len(cases)]
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(steps):
                step(c)
            c["ms"].append(max_over_ranks((time.perf_counter() - t0) * 1000 / steps))

    if rank == 0:
        print(f"ddp_torch: torch {torch.__version__}, {size} ranks (gloo), {torch.get_num_threads()} thread per rank, "
              f"MLP {IN}-{HIDDEN}-{HIDDEN}-{OUT}, batch {BATCH} per rank, "
              f"{'mse' if args.loss == 'mse' else 'cross-entropy'} loss, SGD; load average "
              f"{' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        print(f"{samples} samples x {steps} steps per case; ms per step = median over samples of the slowest rank's mean")
        local = statistics.median(cases[0]["ms"])
        for c in cases:
            m = statistics.median(c["ms"])
            print(f"  {c['name']:<48} {m:9.2f} ms/step  (min {min(c['ms']):.2f}, max {max(c['ms']):.2f})  "
                  f"comm overhead over local {m - local:+6.2f} ms")
        print(f"torch_ddp_ms_per_step {statistics.median(cases[1]['ms']):.3f}")
        print(f"torch_local_ms_per_step {local:.3f}")
    if args.profile:
        profile_step(rank, cases, x, loss_of, steps * samples)
    dist.barrier()
    dist.destroy_process_group()


def profile_step(rank, cases, x, loss_of, steps):
    """--profile: ddp_bench --profile's table (median over steps of the slowest rank's ms per phase)."""
    names = ["zero_grad", "forward + loss", "backward", "optimizer step", "whole step"]
    med = []
    for c in cases:
        ms = [[] for _ in names]
        for _ in range(steps):
            dist.barrier()
            t = [time.perf_counter()]
            c["opt"].zero_grad()
            t.append(time.perf_counter())
            loss = loss_of(c["model"](x))
            t.append(time.perf_counter())
            loss.backward()
            t.append(time.perf_counter())
            c["opt"].step()
            t.append(time.perf_counter())
            loss.item()
            d = [(t[k + 1] - t[k]) * 1000 for k in range(4)] + [(t[4] - t[0]) * 1000]
            for k in range(5):
                ms[k].append(max_over_ranks(d[k]))
        med.append([statistics.median(v) for v in ms])
    numel = sum(p.numel() for p in cases[0]["model"].parameters())
    flat = torch.zeros(numel)
    ar = []
    for _ in range(max(steps, 5)):
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(flat)
        ar.append(max_over_ranks((time.perf_counter() - t0) * 1000))
    if rank == 0:
        print(f"\nstep profile (--profile; {steps} steps each, median of the slowest rank's ms per phase)")
        print(f"  {'phase':<16} {'local':>10} {'DDP':>10} {'DDP-local':>10}")
        for k, n in enumerate(names):
            print(f"  {n:<16} {med[0][k]:10.2f} {med[1][k]:10.2f} {med[1][k] - med[0][k]:+10.2f}")
        print(f"  all_reduce of all gradients alone ({numel * 4 / 1e6:.2f} MB): {statistics.median(ar):.2f} ms "
              f"(median of {len(ar)})")


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="few short samples")
    p.add_argument("--samples", type=int, default=0, help="samples per case (default 9, --quick 3)")
    p.add_argument("--ranks", type=int, default=2, help="processes (default 2)")
    p.add_argument("--loss", choices=["ce", "mse"], default="ce")
    p.add_argument("--profile", action="store_true", help="time zero_grad, forward, backward and step apart")
    args = p.parse_args()
    mp.spawn(worker, args=(args.ranks, free_port(), args), nprocs=args.ranks, join=True)


if __name__ == "__main__":
    main()
