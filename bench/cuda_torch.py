"""PyTorch's side of bench/cuda_bench.cpp: the same cases and timing on the same GPU.

Prints `RESULT <case> = <value>` lines that cuda_bench reads (run by `cuda_bench --torch`)."""
import sys
import time

import torch


def seconds_per_call(f, reps):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    s = []
    for _ in range(7):
        t0 = time.perf_counter()
        for _ in range(reps):
            f()
        torch.cuda.synchronize()
        s.append((time.perf_counter() - t0) / reps)
    return sorted(s)[len(s) // 2]


def main():
    quick = "--quick" in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = False  # float32 products in float32, as troupe
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda", 0)
    n = 2048 if quick else 4096
    for dt, dn in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        a = torch.randn(n, n, device=dev).to(dt)
        b = torch.randn(n, n, device=dev).to(dt)
        t = seconds_per_call(lambda: torch.matmul(a, b), 10)
        print(f"RESULT matmul {n} {dn} = {2.0 * n ** 3 / t / 1e12}")
    m = (1 << 24) if quick else (1 << 26)
    mb = m * 4.0
    x = torch.randn(m, device=dev)
    y = torch.randn(m, device=dev)
    print(f"RESULT add 64M f32 = {3 * mb / seconds_per_call(lambda: torch.add(x, y), 20) / 1e9}")
    print(f"RESULT sum 64M f32 = {mb / seconds_per_call(lambda: torch.sum(x), 20) / 1e9}")
    s = torch.randn(4096, 4096, device=dev)
    print(f"RESULT softmax 4096x4096 f32 = {2 * 4096.0 * 4096 * 4 / seconds_per_call(lambda: torch.softmax(s, 1), 20) / 1e9}")
    p = torch.randn(1024, device=dev)
    q = torch.randn(1024, device=dev)
    print(f"RESULT add 1K f32 = {seconds_per_call(lambda: torch.add(p, q), 2000) * 1e6}")
    net = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-4)
    bx = torch.randn(2048, 1024, device=dev)
    by = torch.randn(2048, 1024, device=dev)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(net(bx), by)
        loss.backward()
        opt.step()

    print(f"RESULT MLP step b2048 1024-4096-1024 Adam = {seconds_per_call(step, 10) * 1e3}")
    cx = torch.randn(32, 64, 56, 56, device=dev, requires_grad=True)
    cw = (torch.randn(64, 64, 3, 3, device=dev) * 0.05).requires_grad_(True)

    def conv():
        cx.grad = None
        cw.grad = None
        torch.nn.functional.conv2d(cx, cw, None, 1, 1).sum().backward()

    print(f"RESULT conv2d 3x3 64->64 N32 56x56 fwd+bwd = {seconds_per_call(conv, 5) * 1e3}")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}", flush=True)


if __name__ == "__main__":
    main()
