#!/usr/bin/env python3
"""How NVML's power and energy readings move on a real GPU, against a load
with known edges (docs/hardware.md, "Power and energy readings").

A child process loads cuda:0 in bursts: bf16 8192x8192 matmuls for --on
seconds, then nothing for --off seconds, each edge synchronised and stamped
with time.time_ns(). Meanwhile this process, which imports no CUDA library,
reads through pynvml

  - field 186 (NVML_FI_DEV_POWER_INSTANT) every --period seconds,
  - field 83 (NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION) every --energy-every-th
    read, with the driver's timestamp and latency of each,
  - the driver's TOTAL_POWER_SAMPLES buffer (nvmlDeviceGetSamples) once a
    second,

and writes one JSON object to --out: the edges, the reads and the samples,
all in Unix nanoseconds (the buffer's and the fields' timestamps are the
driver's, in µs, kept as read). What the readings say about when the energy
counter updates and how finely power is sampled is worked out offline from
that file; this script only records.

Needs PyTorch with CUDA and pynvml (pip package nvidia-ml-py).
"""

import argparse
import json
import subprocess
import sys
import time

FI_ENERGY = 83
FI_POWER_INSTANT = 186

LOAD = r"""
import sys, time, json, torch
on, off, seconds = float(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
d = torch.device("cuda:0")
a = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=d, dtype=torch.bfloat16)
for _ in range(3):
    a @ b
torch.cuda.synchronize(d)
print(json.dumps({"ready": time.time_ns()}), flush=True)
end = time.monotonic() + seconds
while time.monotonic() < end:
    torch.cuda.synchronize(d)
    t0 = time.time_ns()
    stop = time.monotonic() + on
    while time.monotonic() < stop:
        for _ in range(4):
            a @ b
        torch.cuda.synchronize(d)
    t1 = time.time_ns()
    print(json.dumps({"on": t0, "off": t1}), flush=True)
    time.sleep(off)
"""


def field_value(fv):
    # 83 is an unsigned long long (mJ), 186 an unsigned int (mW).
    return fv.value.ullVal if fv.valueType == 3 else fv.value.uiVal


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--on", type=float, default=0.2)
    ap.add_argument("--off", type=float, default=0.3)
    ap.add_argument("--period", type=float, default=0.005)
    ap.add_argument("--energy-every-th", type=int, default=4)
    args = ap.parse_args()

    import pynvml

    pynvml.nvmlInit()
    dev = pynvml.nvmlDeviceGetHandleByIndex(0)
    load = subprocess.Popen([sys.executable, "-c", LOAD, str(args.on), str(args.off), str(args.seconds)],
                            stdout=subprocess.PIPE, text=True)
    ready = json.loads(load.stdout.readline())["ready"]
    reads, samples = [], []
    last_sample = 0
    next_drain = time.monotonic() + 1
    i = 0
    while load.poll() is None:
        ids = [FI_POWER_INSTANT] + ([FI_ENERGY] if i % args.energy_every_th == 0 else [])
        t0 = time.time_ns()
        fvs = pynvml.nvmlDeviceGetFieldValues(dev, ids)
        t1 = time.time_ns()
        for fv in fvs:
            if fv.nvmlReturn == 0:
                reads.append({"field": fv.fieldId, "before": t0, "after": t1, "driver_us": fv.timestamp,
                              "latency_us": fv.latencyUsec, "value": field_value(fv)})
        if time.monotonic() >= next_drain:
            next_drain += 1
            try:
                _, got = pynvml.nvmlDeviceGetSamples(dev, pynvml.NVML_TOTAL_POWER_SAMPLES, last_sample)
            except pynvml.NVMLError:
                got = []
            for s in got:
                samples.append({"driver_us": s.timeStamp, "mw": s.sampleValue.uiVal})
                last_sample = max(last_sample, s.timeStamp)
        i += 1
        time.sleep(args.period)
    edges = [json.loads(line) for line in load.stdout if line.strip()]
    with open(args.out, "w") as f:
        json.dump({"ready": ready, "edges": edges, "reads": reads, "power_samples": samples,
                   "name": pynvml.nvmlDeviceGetName(dev)}, f)
    print("power-probe: %d edges, %d field reads, %d buffer samples -> %s"
          % (len(edges), len(reads), len(samples), args.out))


if __name__ == "__main__":
    main()
