#!/usr/bin/env python3
"""PyTorch's side of bench/remote_bench.cpp: torch.distributed.rpc on TensorPipe, 2 processes over loopback,
1 thread each (PyTorch 1.13, Debian's python3-torch).

Cases (rank 0 drives, rank 1 hosts):
  rtt         RemoteModule(nn.Linear(16, 16)).forward(x), x of 4 x 16, waited for (no autograd context)
  train step  a two-stage MLP 784-1024-1024-10 (ReLU), batch 256: stage 1 (784-1024, ReLU) local on rank 0,
              stage 2 (1024-1024, ReLU, 1024-10) a RemoteModule on rank 1; in a dist_autograd context:
              cross_entropy(stage2(stage1(x)), y), dist_autograd.backward, DistributedOptimizer(SGD) step
Prints the medians and the lines "torch_remote_rtt_us <us>" and "torch_remote_step_ms <ms>" that
scripts/remote_bench.sh reads.

    /usr/bin/python3 bench/remote_torch.py [--quick]
"""
import argparse
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
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.nn.api.remote_module import RemoteModule
from torch.distributed.optim import DistributedOptimizer


def stage2():
    return nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(rank, port, quick):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, init_method=f"tcp://127.0.0.1:{port}")
    rpc.init_rpc(f"worker{rank}", rank=rank, world_size=2, rpc_backend_options=opts)
    if rank == 0:
        samples = 3 if quick else 7
        # round trip
        lin = RemoteModule("worker1/cpu", nn.Linear, args=(16, 16))
        x = torch.randn(4, 16)
        for _ in range(50):
            lin.forward(x)
        reps = 100 if quick else 400
        meds = []
        for _ in range(samples):
            us = []
            for _ in range(reps):
                t0 = time.perf_counter()
                lin.forward(x)
                us.append((time.perf_counter() - t0) * 1e6)
            meds.append(statistics.median(us))
        rtt = statistics.median(meds)
        print(f"rtt RemoteModule(Linear(16,16)).forward, batch 4: {rtt:.1f} us (median of {samples} medians)")

        # two-stage train step
        torch.manual_seed(1234)
        s1 = nn.Sequential(nn.Linear(784, 1024), nn.ReLU())
        s2 = RemoteModule("worker1/cpu", stage2)
        params = [rpc.RRef(p) for p in s1.parameters()] + s2.remote_parameters()
        opt = DistributedOptimizer(torch.optim.SGD, params, lr=0.01)
        x = torch.randn(256, 784)
        y = torch.randint(0, 10, (256,))

        def step():
            with dist_autograd.context() as cid:
                loss = F.cross_entropy(s2(s1(x)), y)
                dist_autograd.backward(cid, [loss])
                opt.step(cid)

        for _ in range(3):
            step()
        steps = 5 if quick else 20
        times = []
        for _ in range(samples):
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            times.append((time.perf_counter() - t0) * 1e3 / steps)
        ms = statistics.median(times)
        print(f"train step, two-stage MLP 784-1024-1024-10, batch 256, stage 2 on rank 1: {ms:.2f} ms")
        print(f"torch_remote_rtt_us {rtt:.2f}")
        print(f"torch_remote_step_ms {ms:.3f}")
    rpc.shutdown()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    port = free_port()
    mp.spawn(run, args=(port, a.quick), nprocs=2, join=True)


if __name__ == "__main__":
    main()
