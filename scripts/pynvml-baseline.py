#!/usr/bin/env python3
"""The hand-written pynvml polling loop users start from, for
scripts/hardware-report's CPU comparison with the gpuviz receiver.

Every interval, for every GPU: utilisation (GPU and memory controller),
memory (used, total), temperature, power, enforced power limit and PCIe
throughput (TX and RX), kept in a dict per GPU as a real exporter would
before sending. It sends nothing: the comparison measures reading the GPUs,
and leaving the export out only flatters this loop.

Runs until SIGTERM or SIGINT, then prints one JSON line to standard error:
{"polls": N, "errors": E, "mean_loop_ms": M}. Exit status 2 when pynvml
(pip package nvidia-ml-py) is missing or NVML does not start.
"""

import argparse
import json
import signal
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interval", type=float, default=1.0, help="seconds between polls (default 1)")
    args = parser.parse_args()
    try:
        import pynvml
    except ImportError:
        print("pynvml-baseline: pynvml is not installed (pip package nvidia-ml-py)", file=sys.stderr)
        return 2
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        print("pynvml-baseline: nvmlInit failed: %s" % exc, file=sys.stderr)
        return 2
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]

    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    signal.signal(signal.SIGINT, lambda *_: stopping.append(1))

    calls = [
        ("utilization", lambda h: pynvml.nvmlDeviceGetUtilizationRates(h)),
        ("memory", lambda h: pynvml.nvmlDeviceGetMemoryInfo(h)),
        ("temperature", lambda h: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
        ("power_mw", lambda h: pynvml.nvmlDeviceGetPowerUsage(h)),
        ("power_limit_mw", lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h)),
        ("pcie_tx_kbps", lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)),
        ("pcie_rx_kbps", lambda h: pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES)),
    ]
    latest = [{} for _ in handles]
    polls = errors = 0
    busy = 0.0
    next_at = time.monotonic()
    while not stopping:
        t = time.monotonic()
        for i, h in enumerate(handles):
            sample = {"time": time.time()}
            for name, call in calls:
                try:
                    v = call(h)
                except pynvml.NVMLError:
                    errors += 1
                    continue
                if name == "utilization":
                    sample["gpu_util"], sample["mem_util"] = v.gpu, v.memory
                elif name == "memory":
                    sample["mem_used"], sample["mem_total"] = v.used, v.total
                else:
                    sample[name] = v
            latest[i] = sample
        polls += 1
        busy += time.monotonic() - t
        next_at += args.interval
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # after a signal the loop stops when this sleep ends
        else:
            next_at = time.monotonic()
    pynvml.nvmlShutdown()
    print(json.dumps({"polls": polls, "errors": errors, "mean_loop_ms": busy / max(polls, 1) * 1e3}), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
