#!/usr/bin/env python3
"""Known GPU workload for scripts/gpu-check, on cuda:0, in phases.

Each phase loads one part of the GPU, so that the gpuviz metrics of that phase
must show a known signature:

  idle      nothing runs (the CUDA context exists)
  matmul    bf16 8192x8192 matmuls back to back: compute (tensor core) bound
  d2d_copy  copies of a 2 GiB tensor on the device: HBM bandwidth bound
  h2d_copy  copies of 1 GiB from pinned host memory: PCIe bound

Standard output is the report gpucheck reads, one JSON object a line: first
{"gpu_uuid": "GPU-..."} (when PyTorch knows it), then, as each phase ends,
{"phase": ..., "start_unix_nano": ..., "end_unix_nano": ...}. The clock is
time.time_ns(), the wall clock the collector stamps its data points with.
Buffers are allocated before a phase starts and the GPU is synchronised at
both of its edges, so the reported times bound the load exactly.
"""

import argparse
import json
import sys
import time

import torch

GIB = 1 << 30


def report(obj):
    print(json.dumps(obj), flush=True)


def gpu_uuid(device):
    """The GPU's UUID as NVML spells it (GPU-...), or None if unknown."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    uuid = str(uuid)
    # NVML prefixes GPU UUIDs (and MIG ones, which are left as they are).
    if not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    return uuid


def run_phase(name, seconds, device, step=None, batch=1):
    """Calls step() in batches until the phase has lasted `seconds` (sleeps
    when there is no step).

    Synchronising after every batch keeps the queue of launched work short,
    so the phase ends when its time is up rather than when a long queue has
    drained; a batch is sized to a fraction of a second.
    """
    torch.cuda.synchronize(device)
    start = time.time_ns()
    if step is None:
        time.sleep(seconds)
    else:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for _ in range(batch):
                step()
            torch.cuda.synchronize(device)
    end = time.time_ns()
    report({"phase": name, "start_unix_nano": start, "end_unix_nano": end})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phase-seconds", type=float, default=20.0,
                        help="length of each phase in seconds (default 20)")
    args = parser.parse_args()

    if not torch.cuda.is_available():
        sys.exit("gpu-workload: PyTorch sees no CUDA GPU")
    device = torch.device("cuda:0")
    uuid = gpu_uuid(device)
    if uuid is not None:
        report({"gpu_uuid": uuid})

    # Warm up: CUDA context and cuBLAS handle exist before idle starts, so
    # that idle measures an idle GPU and matmul does not start with setup.
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)
    torch.matmul(a, b, out=c)
    torch.cuda.synchronize(device)

    run_phase("idle", args.phase_seconds, device)

    # ~1.1 TFLOP a matmul: a batch of 20 takes tens of milliseconds.
    run_phase("matmul", args.phase_seconds, device,
              lambda: torch.matmul(a, b, out=c), batch=20)
    del a, b, c

    # 2 GiB, far beyond L2: every copy reads and writes HBM.
    src = torch.empty(2 * GIB, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    run_phase("d2d_copy", args.phase_seconds, device,
              lambda: dst.copy_(src), batch=20)
    del src, dst

    # Pinned host memory, so the copy engine reads it over PCIe directly.
    host = torch.empty(GIB, dtype=torch.uint8, pin_memory=True)
    dev = torch.empty(GIB, dtype=torch.uint8, device=device)
    run_phase("h2d_copy", args.phase_seconds, device,
              lambda: dev.copy_(host, non_blocking=True), batch=4)


if __name__ == "__main__":
    main()
