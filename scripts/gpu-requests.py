#!/usr/bin/env python3
"""Inference-like requests for scripts/gpu-check's join check, on cuda:0.

Each request is sent to the collector as one vLLM-style `llm_request` span
(OTLP/HTTP JSON, standard library only) whose gen_ai.latency.* attributes
hold the request's real, measured phase boundaries, so the gpuviz processor
derives exactly these phases:

  time_in_queue          start -> prefill start
  time_in_model_prefill  prefill start -> first token
  time_in_model_decode   first token -> end
  (time_to_first_token and e2e are set too; the processor only checks them)

Requests, one after the other:

  synthetic    queue (GPU idle), a prefill of bf16 8192x8192 matmul bursts
               (compute-bound), a decode of copies of a 2 GiB tensor, far
               beyond L2 (HBM-bound); the GPU is synchronised at each edge.
  hf_generate  batches of sequences of mixed prompt lengths through Hugging
               Face transformers' generate on a Llama decoder built from a
               config with random weights (no download, no tokenizer: random
               token ids). The first token is timed with a streamer: generate
               calls streamer.put(prompt ids) once, then put(next tokens)
               after each step with the tokens already copied to the host
               (.cpu(), which waits for the GPU), so the first put of a 1-D
               tensor marks the end of prefill for the whole batch. Every
               sequence of a batch shares the batch's window.

Independently of gpuviz, a separate process reads the GPU's power with
pynvml: it drains the driver's power sample buffer (nvmlDeviceGetSamples,
TOTAL_POWER_SAMPLES: a mean over each ~20 ms on an H200) every 0.5 s, and
polls instant power (field NVML_FI_DEV_POWER_INSTANT, 186; else
nvmlDeviceGetPowerUsage, a 1 s average on recent GPUs, which lags) every
~10 ms. Each request's reference energy is the buffer's power integrated
over its window (each sample covering the time since the one before), or
the polled power's (trapezoids) where the driver keeps no buffer, every
moment's energy split equally between the requests running then. The
buffer is preferred because on an H200 field 186 holds one ~20 ms reading
for 100 ms: a poll misses or repeats short bursts (a 40 ms prefill spike),
which put the polled reference 2-6% under the energy counter on 1-1.5 s
requests, while the buffer's integral follows the counter within 1% a
second (docs/hardware.md). The counter is read at the poller's start and
end, and the buffer's integral over that stretch is reported against it
(counter_ratio), so every run checks the reference it uses. A process, not
a thread: generate's Python loop holds the GIL and would stretch a thread's
polling period.

Standard output is the report gpucheck reads, one JSON object a line:
{"gpu_uuid": ...}; {"skipped": {"part", "reason"}} for a part that could not
run (transformers or pynvml missing); after the last request
{"power_reference": {...}} and one {"request": {...}} per request. Exit
status 2 when the script cannot run at all (no PyTorch or no CUDA GPU).

`--self-test` checks the energy integration without a GPU or PyTorch.
"""

import argparse
import bisect
import json
import multiprocessing
import secrets
import sys
import time
import traceback
import urllib.error
import urllib.request

GIB = 1 << 30
FI_DEV_POWER_INSTANT = 186
FI_DEV_TOTAL_ENERGY_CONSUMPTION = 83  # mJ
BUFFER_DRAIN_S = 0.5
# pynvml's field value union members by NVML value type.
VALUE_MEMBERS = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def report(obj):
    print(json.dumps(obj), flush=True)


def log(msg):
    print("gpu-requests: " + msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------- reference


def _decode_field(fv):
    member = VALUE_MEMBERS.get(int(fv.valueType), "ullVal")
    return float(getattr(fv.value, member))


def _device_by_uuid(pynvml, uuid):
    try:
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)
    except (TypeError, AttributeError):  # bindings that want bytes
        return pynvml.nvmlDeviceGetHandleByUUID(uuid.encode())


def _poll_power(uuid, period_s, stop, conn):
    """Child process: polls power until stop is set, then sends the samples.

    Sends {"ready": source} or {"error": why} first, then at the end
    {"source": ..., "samples": [(unix_ns, watts), ...], "buffer": [...],
    "counter": [(unix_ns, joules), ...]}: the polled power, the driver's
    power samples (unix_ns at the end of the stretch each describes; empty
    where the driver keeps none) and the energy counter at the start and end
    (empty where it cannot be read).
    """
    try:
        import pynvml
        pynvml.nvmlInit()
        dev = _device_by_uuid(pynvml, uuid)

        def instant():
            fv = pynvml.nvmlDeviceGetFieldValues(dev, [FI_DEV_POWER_INSTANT])[0]
            if fv.nvmlReturn != pynvml.NVML_SUCCESS:
                raise RuntimeError("field 186 returned %d" % fv.nvmlReturn)
            return _decode_field(fv) / 1000.0  # mW

        def average():
            return pynvml.nvmlDeviceGetPowerUsage(dev) / 1000.0  # mW

        read, source = average, "nvmlDeviceGetPowerUsage (1 s average)"
        try:
            if instant() > 0:
                read, source = instant, "nvmlDeviceGetFieldValues(NVML_FI_DEV_POWER_INSTANT)"
        except Exception:  # not supported by this GPU or driver: the fallback
            pass
        read()
    except Exception as exc:
        conn.send({"error": "%s: %s" % (type(exc).__name__, exc)})
        return

    def energy():
        try:
            fv = pynvml.nvmlDeviceGetFieldValues(dev, [FI_DEV_TOTAL_ENERGY_CONSUMPTION])[0]
            if fv.nvmlReturn == pynvml.NVML_SUCCESS:
                return [(time.time_ns(), _decode_field(fv) / 1000.0)]
        except Exception:
            pass
        return []

    last_us = 0

    def drain():
        nonlocal last_us
        try:
            _, got = pynvml.nvmlDeviceGetSamples(dev, pynvml.NVML_TOTAL_POWER_SAMPLES, last_us)
        except Exception:  # no buffer on this GPU or driver
            return []
        out = []
        for x in got:
            if x.timeStamp > last_us:
                out.append((x.timeStamp * 1000, x.sampleValue.uiVal / 1000.0))
        if out:
            last_us = max(last_us, max(t for t, _ in out) // 1000)
        return out

    drain()  # what the buffer held before the run
    conn.send({"ready": source})
    samples, buffer, counter = [], [], []
    next_at = time.monotonic()
    next_drain = next_at + BUFFER_DRAIN_S
    while not stop.is_set():
        a = time.time_ns()
        w = read()
        b = time.time_ns()
        samples.append(((a + b) // 2, w))
        if time.monotonic() >= next_drain:
            buffer += drain()
            next_drain += BUFFER_DRAIN_S
            if not counter and buffer:
                counter = energy()  # inside what the buffer covers from here on
        next_at += period_s
        delay = next_at - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        else:
            next_at = time.monotonic()  # fell behind: do not burst to catch up
    if counter:
        counter += energy()
        time.sleep(0.1)  # the buffer's next samples cover the read
    buffer += drain()
    conn.send({"source": source, "samples": samples, "buffer": sorted(buffer), "counter": counter})
    pynvml.nvmlShutdown()


class PowerPoller:
    """The power polling process. start() returns None or why it cannot run."""

    def __init__(self, uuid, period_s):
        ctx = multiprocessing.get_context("spawn")  # never fork a CUDA process
        self.conn, child = ctx.Pipe(duplex=False)
        self.stop_event = ctx.Event()
        self.proc = ctx.Process(target=_poll_power, args=(uuid, period_s, self.stop_event, child), daemon=True)
        self.source = None

    def start(self):
        self.proc.start()
        if not self.conn.poll(60):
            return "the power poller did not start within 60 s"
        msg = self.conn.recv()
        if "error" in msg:
            return "the power poller failed: " + msg["error"]
        self.source = msg["ready"]
        return None

    def stop(self):
        """Stops polling; returns what the poller sent at the end, its
        samples in time order."""
        self.stop_event.set()
        if not self.conn.poll(60):
            self.proc.kill()
            raise RuntimeError("the power poller did not hand back its samples")
        msg = self.conn.recv()
        self.proc.join(10)
        msg["samples"] = sorted(msg["samples"])
        return msg


def power_at(times, watts, t):
    """Power at t, linear between samples; None outside the samples."""
    if not times or t < times[0] or t > times[-1]:
        return None
    i = bisect.bisect_left(times, t)
    if times[i] == t:
        return watts[i]
    t0, t1, w0, w1 = times[i - 1], times[i], watts[i - 1], watts[i]
    return w0 + (w1 - w0) * (t - t0) / (t1 - t0)


def as_steps(buffer):
    """The driver's power samples as points reference_energies integrates:
    each sample is the mean power over the stretch since the one before, so
    it is held from just after that one to its own time (1 ns ramps join the
    stretches). The first sample's stretch is unknown and left out."""
    points = []
    for (t0, _), (t1, w) in zip(buffer, buffer[1:]):
        points += [(t0 + 1, w), (t1, w)]
    return points


def reference_energies(samples, windows):
    """Per window (start_ns, end_ns): (shared J, whole J, longest gap s), or
    None for a window the samples do not cover.

    Power is linear between samples, so cutting time at every sample and
    every window edge gives segments over which a trapezoid is exact; each
    segment's energy goes to the windows covering it, in equal parts (the
    processor's rule: shares in proportion to overlap).
    """
    times = [t for t, _ in samples]
    watts = [w for _, w in samples]
    out = []
    covered = []
    for s, e in windows:
        ok = bool(times) and times[0] <= s and e <= times[-1]
        covered.append(ok)
    cuts = set()
    for (s, e), ok in zip(windows, covered):
        if ok:
            cuts.update((s, e))
            lo, hi = bisect.bisect_left(times, s), bisect.bisect_right(times, e)
            cuts.update(times[lo:hi])
    cuts = sorted(cuts)
    shared = [0.0] * len(windows)
    whole = [0.0] * len(windows)
    for a, b in zip(cuts, cuts[1:]):
        inside = [i for i, (s, e) in enumerate(windows) if covered[i] and s <= a and b <= e]
        if not inside:
            continue
        joules = (power_at(times, watts, a) + power_at(times, watts, b)) / 2 * (b - a) / 1e9
        for i in inside:
            shared[i] += joules / len(inside)
            whole[i] += joules
    for i, (s, e) in enumerate(windows):
        if not covered[i]:
            out.append(None)
            continue
        lo, hi = bisect.bisect_left(times, s), bisect.bisect_right(times, e)
        pts = [s] + times[lo:hi] + [e]
        gap = max(b - a for a, b in zip(pts, pts[1:])) / 1e9
        out.append((shared[i], whole[i], gap))
    return out


def self_test():
    """The integration on made-up power; no GPU needed."""
    s = int(1e9)
    flat = [(t * s // 100, 100.0) for t in range(0, 201)]  # 100 W over 2 s
    got = reference_energies(flat, [(0, s), (s // 2, 3 * s // 2), (3 * s, 4 * s)])
    assert abs(got[0][0] - 75) < 1e-9 and abs(got[0][1] - 100) < 1e-9, got
    assert abs(got[1][0] - 75) < 1e-9 and abs(got[1][1] - 100) < 1e-9, got
    assert got[2] is None, got
    # A ramp 0..200 W over 2 s sampled every 0.5 s: exact for linear power;
    # the window's edges fall between samples.
    ramp = [(t * s // 2, 100.0 * t / 2) for t in range(0, 5)]  # 100 W per s
    got = reference_energies(ramp, [(s // 4, 7 * s // 4)])
    # P(t) = 100 t W; integral from 0.25 to 1.75 s = 50 (1.75^2 - 0.25^2) = 150 J.
    assert abs(got[0][0] - 150) < 1e-9, got
    assert abs(got[0][2] - 0.5) < 1e-9, got
    # A batch of four sharing one window: a quarter each.
    got = reference_energies(flat, [(0, s)] * 4)
    assert all(abs(g[0] - 25) < 1e-9 and abs(g[1] - 100) < 1e-9 for g in got), got
    # The driver's samples are steps: 200 W over (1 s, 2 s], 300 W over (2 s, 3 s].
    steps = as_steps([(s, 100.0), (2 * s, 200.0), (3 * s, 300.0)])
    got = reference_energies(steps, [(3 * s // 2, 5 * s // 2), (s // 2, s)])
    assert abs(got[0][1] - 250) < 1e-6, got
    assert got[1] is None, got
    span = otlp_span("ab" * 16, "cd" * 8, 10, 20, {"b": True, "i": 3, "f": 0.0, "s": "x"})
    kinds = [list(a["value"])[0] for a in span["attributes"]]
    assert kinds == ["boolValue", "intValue", "doubleValue", "stringValue"], kinds
    print("gpu-requests self-test: ok")


# ---------------------------------------------------------------- spans


def otlp_value(v):
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    return {"stringValue": str(v)}


def otlp_span(trace_id, span_id, start, end, attrs):
    return {
        "traceId": trace_id,
        "spanId": span_id,
        "name": "llm_request",
        "kind": 2,  # SERVER, as vLLM sends it
        "startTimeUnixNano": str(start),
        "endTimeUnixNano": str(end),
        "attributes": [{"key": k, "value": otlp_value(v)} for k, v in attrs.items()],
    }


class Request:
    def __init__(self, rid, kind, model, batch=1):
        self.id, self.kind, self.model, self.batch = rid, kind, model, batch
        self.trace_id, self.span_id = secrets.token_hex(16), secrets.token_hex(8)
        self.start = self.prefill_start = self.first_token = self.end = 0
        self.prompt_tokens = self.output_tokens = 0

    def span(self, uuid):
        s = lambda a, b: (b - a) / 1e9  # noqa: E731 - seconds between two ns stamps
        return otlp_span(self.trace_id, self.span_id, self.start, self.end, {
            "gen_ai.latency.time_in_queue": s(self.start, self.prefill_start),
            "gen_ai.latency.time_in_model_prefill": s(self.prefill_start, self.first_token),
            "gen_ai.latency.time_in_model_decode": s(self.first_token, self.end),
            "gen_ai.latency.time_to_first_token": s(self.start, self.first_token),
            "gen_ai.latency.e2e": s(self.start, self.end),
            "gen_ai.usage.prompt_tokens": int(self.prompt_tokens),
            "gen_ai.usage.completion_tokens": int(self.output_tokens),
            "gen_ai.request.model": self.model,
            # The processor matches the span to this GPU by its UUID.
            "hw.id": uuid,
            "gpucheck.request.id": self.id,
        })

    def record(self):
        return {"id": self.id, "kind": self.kind, "trace_id": self.trace_id, "span_id": self.span_id,
                "start_unix_nano": self.start, "prefill_start_unix_nano": self.prefill_start,
                "first_token_unix_nano": self.first_token, "end_unix_nano": self.end,
                "prompt_tokens": self.prompt_tokens, "output_tokens": self.output_tokens, "batch": self.batch}


def send_spans(endpoint, uuid, reqs):
    """One OTLP/HTTP JSON export of the requests' spans (a batch together, so
    the processor releases them together). Raises on failure."""
    body = json.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "gpu-check-workload"}}]},
        "scopeSpans": [{"scope": {"name": "gpucheck"}, "spans": [r.span(uuid) for r in reqs]}],
    }]}).encode()
    url = endpoint.rstrip("/") + "/v1/traces"
    last = None
    for attempt in range(3):
        try:
            req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=10) as resp:
                resp.read()
                return
        except (urllib.error.URLError, OSError) as exc:
            last = exc
            time.sleep(1 + attempt)
    raise RuntimeError("sending spans to %s failed: %s" % (url, last))


# ---------------------------------------------------------------- workloads


def gpu_uuid(torch, device):
    """The GPU's UUID as NVML spells it (GPU-...), or None if unknown."""
    uuid = getattr(torch.cuda.get_device_properties(device), "uuid", None)
    if uuid is None:
        return None
    uuid = str(uuid)
    if not uuid.startswith(("GPU-", "MIG-")):
        uuid = "GPU-" + uuid
    return uuid


def busy_for(torch, device, seconds, step, batch, duty=1.0):
    """Runs step() in batches for `seconds`, synchronising after each batch so
    the phase ends when its time is up; with duty < 1, sleeps after each batch
    so that it runs that share of the time."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        t = time.monotonic()
        for _ in range(batch):
            step()
        torch.cuda.synchronize(device)
        if duty < 1:
            time.sleep(min((time.monotonic() - t) * (1 - duty) / duty, max(deadline - time.monotonic(), 0)))


def synthetic_requests(torch, device, args, uuid):
    a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=device)
    c = torch.empty_like(a)
    src = torch.empty(2 * GIB, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    torch.matmul(a, b, out=c)
    dst.copy_(src)
    torch.cuda.synchronize(device)
    done = []
    for i in range(args.synthetic):
        r = Request("synthetic-%d" % i, "synthetic", "gpucheck-synthetic")
        r.start = time.time_ns()
        time.sleep(args.queue_seconds)  # queued: the GPU idles
        torch.cuda.synchronize(device)
        r.prefill_start = time.time_ns()
        busy_for(torch, device, args.prefill_seconds, lambda: torch.matmul(a, b, out=c), 10, args.prefill_duty)
        r.first_token = time.time_ns()
        busy_for(torch, device, args.decode_seconds, lambda: dst.copy_(src), 10)
        r.end = time.time_ns()
        # The tokens a 70B-class model would have handled in the same GPU
        # time on one Hopper GPU: its prefill at about 4,096 tokens a second
        # (140 GFLOP a token, bf16 GEMMs near their power-capped rate), its
        # decode a token per 30 ms (the weights read once a step). The
        # processor shares energy by token cost and learns how that cost
        # shows in tensor and DRAM activity; counts that say nothing about
        # the work (1 and 1 here before) mislead it once it has learned
        # (docs/hardware.md, "2026-12-04 — NVIDIA H200", the join).
        r.prompt_tokens = round((r.first_token - r.prefill_start) / 1e9 * 4096)
        r.output_tokens = max(1, round((r.end - r.first_token) / 1e9 / 0.03))
        send_spans(args.otlp_endpoint, uuid, [r])
        log("%s: prefill %.2f s, decode %.2f s" % (r.id, (r.first_token - r.prefill_start) / 1e9, (r.end - r.first_token) / 1e9))
        done.append(r)
        time.sleep(args.gap_seconds)
    del a, b, c, src, dst
    torch.cuda.empty_cache()
    return done


class FirstToken:
    """A generate streamer that only notes when the first new token arrived."""

    def __init__(self, torch, device):
        self.torch, self.device, self.first = torch, device, None

    def put(self, value):
        # The prompt comes as (batch, length), each step's tokens as (batch,).
        if self.first is None and value.dim() == 1:
            self.torch.cuda.synchronize(self.device)
            self.first = time.time_ns()

    def end(self):
        pass


def generate_requests(torch, device, args, uuid):
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig

    vocab, pad = 32000, 0
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=args.hf_hidden, intermediate_size=4 * args.hf_hidden,
                      num_hidden_layers=args.hf_layers, num_attention_heads=args.hf_hidden // 64,
                      num_key_value_heads=args.hf_hidden // 64, max_position_embeddings=8192,
                      pad_token_id=pad, bos_token_id=1, eos_token_id=2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg).to(device=device, dtype=torch.bfloat16).eval()
    params = sum(p.numel() for p in model.parameters())
    name = "gpucheck-random-llama-%dM" % round(params / 1e6)
    log("generate: %s (transformers %s), %d layers, hidden %d" % (name, transformers.__version__, args.hf_layers, args.hf_hidden))
    try:
        from transformers.generation.streamers import BaseStreamer
        streamer_class = type("FirstTokenStreamer", (FirstToken, BaseStreamer), {})
    except ImportError:
        streamer_class = FirstToken

    lengths = [int(n) for n in args.hf_prompt_lengths.split(",")]

    def batch_inputs(k):
        # Rotate the lengths so each batch mixes them differently; left
        # padding, as decoder-only batched generation needs.
        ls = [lengths[(k + i) % len(lengths)] for i in range(args.hf_batch_size)]
        width = max(ls)
        ids = torch.randint(3, vocab, (len(ls), width), device=device)
        mask = torch.ones_like(ids)
        for i, n in enumerate(ls):
            ids[i, : width - n] = pad
            mask[i, : width - n] = 0
        return ls, ids, mask

    def run(ids, mask, new):
        streamer = streamer_class(torch, device)
        torch.cuda.synchronize(device)
        start = time.time_ns()
        with torch.inference_mode():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, pad_token_id=pad, streamer=streamer)
        torch.cuda.synchronize(device)
        end = time.time_ns()
        if streamer.first is None:
            raise RuntimeError("generate never handed the streamer a token: cannot time the first token")
        return start, streamer.first, end, out.shape[1] - ids.shape[1]

    # Warm up (kernels, allocator), then time decode steps to size the runs.
    _, ids, mask = batch_inputs(0)
    run(ids, mask, 4)
    start, first, end, made = run(ids, mask, 64)
    per_step = (end - first) / 1e9 / max(made - 1, 1)
    new = int(min(max(args.hf_decode_seconds / per_step, 32), 8192 - max(lengths) - 1))
    log("generate: %.2f ms a decode step: %d new tokens a batch" % (per_step * 1e3, new))

    done = []
    for k in range(args.hf_batches):
        ls, ids, mask = batch_inputs(k)
        start, first, end, made = run(ids, mask, new)
        batch = []
        for i, n in enumerate(ls):
            r = Request("generate-%d-%d" % (k, i), "hf_generate", name, batch=len(ls))
            r.start = r.prefill_start = start  # no queue: the batch starts at once
            r.first_token, r.end = first, end
            r.prompt_tokens, r.output_tokens = n, int(made)
            batch.append(r)
        send_spans(args.otlp_endpoint, uuid, batch)
        log("generate batch %d: prompts %s, prefill %.3f s, decode %.2f s" % (k, ls, (first - start) / 1e9, (end - first) / 1e9))
        done.extend(batch)
        time.sleep(args.gap_seconds)
    del model
    torch.cuda.empty_cache()
    return done


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--otlp-endpoint", help="the collector's OTLP/HTTP receiver, http://127.0.0.1:PORT")
    parser.add_argument("--synthetic", type=int, default=4, help="synthetic requests (default 4)")
    parser.add_argument("--queue-seconds", type=float, default=0.5)
    parser.add_argument("--prefill-seconds", type=float, default=2.0)
    parser.add_argument("--decode-seconds", type=float, default=4.0)
    parser.add_argument("--prefill-duty", type=float, default=1.0,
                        help="share of the prefill the matmuls run (below 1 to stay under a power cap)")
    parser.add_argument("--gap-seconds", type=float, default=1.0, help="idle time after each request or batch")
    parser.add_argument("--hf-batches", type=int, default=3)
    parser.add_argument("--hf-batch-size", type=int, default=4)
    parser.add_argument("--hf-prompt-lengths", default="256,2048,512,1024")
    parser.add_argument("--hf-decode-seconds", type=float, default=5.0, help="target decode time of a batch")
    parser.add_argument("--hf-layers", type=int, default=16)
    parser.add_argument("--hf-hidden", type=int, default=1024, help="hidden size (16 layers of 1024: ~335M parameters)")
    parser.add_argument("--power-period", type=float, default=0.01, help="power polling period in s (default 0.01)")
    parser.add_argument("--self-test", action="store_true", help="test the energy integration (no GPU) and exit")
    args = parser.parse_args()
    if args.self_test:
        self_test()
        return 0
    if not args.otlp_endpoint:
        parser.error("--otlp-endpoint is required")
    if not 0 < args.prefill_duty <= 1:
        parser.error("--prefill-duty must be in (0, 1]")

    try:
        import torch
    except ImportError:
        log("needs PyTorch: import torch failed (install PyTorch with CUDA for %s)" % sys.executable)
        return 2
    if not torch.cuda.is_available():
        log("PyTorch sees no CUDA GPU")
        return 2
    device = torch.device("cuda:0")
    uuid = gpu_uuid(torch, device)
    if uuid is None:
        log("PyTorch does not report the GPU's UUID: the spans cannot name their GPU")
        return 2
    report({"gpu_uuid": uuid})

    poller = None
    try:
        import pynvml  # noqa: F401 - only checked here; the poller imports it
    except ImportError:
        report({"skipped": {"part": "reference_energy",
                            "reason": "pynvml is not installed (pip package nvidia-ml-py): no reference energy"}})
    else:
        poller = PowerPoller(uuid, args.power_period)
        why = poller.start()
        if why is not None:
            report({"skipped": {"part": "reference_energy", "reason": why}})
            poller = None
        else:
            log("power reference: " + poller.source)

    reqs = synthetic_requests(torch, device, args, uuid)
    if args.hf_batches > 0:
        try:
            import transformers  # noqa: F401
        except ImportError:
            report({"skipped": {"part": "hf_generate",
                                "reason": "transformers is not installed: no generate requests"}})
        else:
            try:
                reqs += generate_requests(torch, device, args, uuid)
            except Exception as exc:  # an API change in transformers, out of memory, ...
                # The synthetic requests are still worth analysing: this part
                # is reported as not run, with the reason, and the traceback
                # goes to standard error.
                traceback.print_exc()
                report({"skipped": {"part": "hf_generate", "reason": "failed: %s: %s" % (type(exc).__name__, exc)}})
                torch.cuda.empty_cache()

    records = [r.record() for r in reqs]
    for rec in records:
        rec["reference_energy_j"] = None
    if poller is not None:
        got = poller.stop()
        windows = [(r.prefill_start, r.end) for r in reqs]
        instant = reference_energies(got["samples"], windows)
        buffer = as_steps(got["buffer"])
        # The driver's buffer where it covers every request, else the polls.
        use_buffer = bool(buffer) and None not in reference_energies(buffer, windows)
        if use_buffer:
            points, source = buffer, "nvmlDeviceGetSamples(NVML_TOTAL_POWER_SAMPLES)"
            times = [t for t, _ in got["buffer"]]
        else:
            points, source = got["samples"], got["source"]
            times = [t for t, _ in points]
        periods = sorted((b - a) / 1e9 for a, b in zip(times, times[1:]))
        power = {"source": source, "samples": len(times),
                 "median_period_s": periods[len(periods) // 2] if periods else 0,
                 "max_period_s": periods[-1] if periods else 0}
        counter = got["counter"]
        if use_buffer and len(counter) == 2 and counter[1][1] > counter[0][1]:
            whole = reference_energies(buffer, [(counter[0][0], counter[1][0])])[0]
            if whole is not None:
                power["counter_ratio"] = whole[1] / (counter[1][1] - counter[0][1])
        report({"power_reference": power})
        # From prefill on: a queued request runs nothing, and the processor
        # gives its queue no energy; the queue's energy is reported apart.
        refs = reference_energies(points, windows)
        queues = reference_energies(points, [(r.start, r.prefill_start) for r in reqs])
        for rec, ref, queue, inst in zip(records, refs, queues, instant):
            if ref is None:
                log("%s: the power samples do not cover its window: no reference" % rec["id"])
                continue
            rec["reference_energy_j"], rec["reference_window_energy_j"] = ref[0], ref[1]
            if queue is not None:
                rec["reference_queue_energy_j"] = queue[1]
            if use_buffer and inst is not None:
                rec["reference_instant_energy_j"] = inst[0]
            if ref[2] > 0.2:
                log("%s: power samples up to %.0f ms apart in its window" % (rec["id"], ref[2] * 1e3))
    for rec in records:
        report({"request": rec})
    return 0


if __name__ == "__main__":
    sys.exit(main())
