"""Serving: requests scheduled by continuous batching onto one replica (:class:`~explore.infer.
Engine`), every step timed by the engine, on the core's discrete-event engine
(:class:`sim.core.events.Agenda`).

**Requests.** ``requests`` prompts whose lengths (tokens in, tokens out) are drawn from two
distributions (:class:`Dist`; the syntax is ``fixed:N``, ``uniform:A-B`` (integers, both
ends included), ``normal:MEAN,STD`` (rounded, at least 1); a bare ``N`` is ``fixed:N``). They
arrive as a Poisson process at ``rate`` requests per second, or at a fixed ``concurrency``:
that many clients, each sending its next request the moment its last one has its last token
(none before the first ``concurrency`` start together at time 0). The draws come from three
streams of one seed (arrival gaps of unit mean, prompt and output lengths), so that every rate
of a sweep serves the same requests and only the gaps are scaled by the rate.

**Scheduler** (continuous batching, as vLLM's default scheduler without chunked prefill): when
the engine is free it takes, in this order,

- a *prefill step* of waiting requests, first come first served, while the running and
  admitted requests stay within ``max_batch``, the padded prompt tokens of the step within
  ``max_prefill_tokens`` (a single prompt longer than that runs alone) and the rank's memory
  holds the weights, the KV cache every admitted request reserves for its whole context
  (prompt and output, padded) and the step's activations (:func:`explore.infer.memory`).
  Reserving the whole context at admission means no request is ever preempted;
- otherwise a *decode step* of every running request, one token each.

The prefill samples each request's first token at its end; a request of ``T`` output tokens
leaves after ``T - 1`` decode steps. While a prefill runs, the running requests wait: the
two kinds of step interleave, never share one.

**Step times** come only from the engine: a prefill of prompts of ``S_1 .. S_b`` tokens is
``Engine.prefill`` of those lengths, each padded to its context bucket; a decode step of ``B``
requests is ``Engine.decode_step(B, L)`` with ``L`` the longest cache of the batch (the new
token's key included), run at its decode bucket (the engine's
:class:`~explore.infer.Compilation`: bucket lists, or multiples of ``--bucket`` tokens). A
compiled graph has static shapes, so a batch is padded to its longest sequence and lengths to
a bucket, as the Neuron runtimes compile their context-encoding and token-generation graphs
per bucket; the padding is paid for, and a request's cache is reserved at its bucket.

**Figures** (:class:`ServeResult`): per request the time to first token (its first token's
time less its arrival) and its inter-token latencies (the gaps between its successive
tokens, pooled over all requests); P50 and P99 of each by numpy's linear interpolation; the
throughput is every output token over the time from the first arrival to the last token.

The event engine is :class:`sim.core.events.Agenda`, the one the core and multi-chip
simulators run on: two processes, the arrivals (0) and the engine (1), each woken at its next
event; an arrival and a step's end at the same time see the arrival first.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import asdict, dataclass, replace

import numpy as np

from sim.core.events import Agenda

from .infer import Compilation, Engine, InferError, memory

__all__ = ["Dist", "ServeResult", "draw", "from_cli", "serve", "simulate"]

_ARRIVALS, _ENGINE = 0, 1
_SYNTAX = "fixed:N, uniform:A-B or normal:MEAN,STD"


@dataclass(frozen=True)
class Dist:
    """A distribution of token counts: ``kind`` (fixed, uniform, normal) and its two figures
    (the value twice; the ends; the mean and standard deviation)."""

    kind: str
    a: float
    b: float

    @classmethod
    def parse(cls, text: str, option: str = "length") -> Dist:
        """``fixed:N``, ``uniform:A-B``, ``normal:MEAN,STD`` or ``N``; a one-line error naming
        ``option`` otherwise."""
        s = str(text).strip()
        m = (re.fullmatch(r"(?:fixed:)?(\d+)", s) or re.fullmatch(r"uniform:(\d+)-(\d+)", s)
             or re.fullmatch(r"normal:(\d+(?:\.\d*)?),(\d+(?:\.\d*)?)", s))
        if m is None:
            raise InferError(f"expected {option} as {_SYNTAX}, found {s!r}")
        kind = "uniform" if s.startswith("uniform") else \
            "normal" if s.startswith("normal") else "fixed"
        a = float(m.group(1))
        b = float(m.group(2)) if kind != "fixed" else a
        if a < 1 or (kind == "uniform" and b < a):
            want = "1 <= A <= B" if kind == "uniform" else "a value of at least 1"
            raise InferError(f"expected {option} with {want}, found {s!r}")
        return cls(kind, a, b)

    def __str__(self) -> str:
        if self.kind == "fixed":
            return f"fixed:{self.a:g}"
        if self.kind == "uniform":
            return f"uniform:{self.a:g}-{self.b:g}"
        return f"normal:{self.a:g},{self.b:g}"

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        """``n`` token counts (integers of at least 1)."""
        if self.kind == "fixed":
            return np.full(n, int(self.a), dtype=np.int64)
        if self.kind == "uniform":
            return rng.integers(int(self.a), int(self.b) + 1, size=n)
        return np.maximum(np.rint(rng.normal(self.a, self.b, size=n)), 1).astype(np.int64)


def draw(requests: int, input_dist: Dist, output_dist: Dist, seed: int):
    """(arrival gaps of unit mean, prompt lengths, output lengths) of ``requests`` requests,
    each from its own stream of ``seed``."""
    gaps, ins, outs = (np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(3))
    return (gaps.exponential(1.0, size=requests), input_dist.draw(ins, requests),
            output_dist.draw(outs, requests))


@dataclass(frozen=True)
class ServeResult:
    """One serving run: the offered load, the figures (seconds, tokens per second) and the
    steps taken."""

    #: ``"rate"`` (requests per second, Poisson) or ``"concurrency"`` (clients)
    mode: str
    load: float
    requests: int
    duration: float
    ttft_p50: float
    ttft_p99: float
    itl_p50: float
    itl_p99: float
    tokens_per_second: float
    requests_per_second: float
    prefill_steps: int
    decode_steps: int
    #: mean number of requests in a decode step
    mean_batch: float

    def row(self) -> dict:
        """The run as a flat mapping (the JSON output)."""
        return {k: (None if isinstance(v, float) and math.isnan(v) else v)
                for k, v in asdict(self).items()}


def simulate(engine: Engine, inputs, outputs, *, arrivals=None, concurrency: int | None = None,
             max_batch: int = 32, max_prefill_tokens: int = 4096,
             load: float | None = None):
    """Serve requests of ``inputs`` prompt and ``outputs`` output tokens, arriving at the
    times ``arrivals`` (non-decreasing seconds) or from ``concurrency`` clients; return
    (:class:`ServeResult`, per-request arrays ``arrival``, ``first``, ``finish`` and the
    pooled inter-token gaps). ``load`` is the figure the result reports as its load (default:
    the concurrency, or the mean arrival rate)."""
    inputs = np.asarray(inputs, dtype=np.int64)
    outputs = np.asarray(outputs, dtype=np.int64)
    n = len(inputs)
    if (arrivals is None) == (concurrency is None):
        raise InferError("expected one of arrival times or a concurrency")
    for name, v in (("max batch", max_batch), ("max prefill tokens", max_prefill_tokens),
                    ("requests", n),
                    ("concurrency", 1 if concurrency is None else concurrency)):
        if v < 1:
            raise InferError(f"expected a {name} of at least 1, found {v}")
    t, s, dtype, compiled = engine.t, engine.split, engine.dtype, engine.compiled
    hbm = engine.base.values["hbm_capacity"] / engine.per_chip
    weights = memory(t, s, 0, 0, 0, dtype)["weights"]
    kv = np.array([memory(t, s, 1, compiled.context(int(i + o)), 0, dtype)["kv_cache"]
                   for i, o in zip(inputs, outputs, strict=True)])

    def need(batch: int, tokens: int, reserved: float) -> float:
        return weights + reserved + memory(t, s, batch, 0, tokens, dtype)["activations"]

    for r in range(n):
        got = need(1, compiled.prompt(int(inputs[r])), kv[r])
        if got > hbm:
            raise InferError(
                f"a request of {inputs[r]} + {outputs[r]} tokens does not fit one rank alone: "
                f"{got / 2**30:.2f} GiB (weights {weights / 2**30:.2f}, KV cache "
                f"{kv[r] / 2**30:.2f} GiB) against {hbm / 2**30:.2f} GiB of HBM")

    arrive = np.full(n, np.nan)
    first, finish, last = np.full(n, np.nan), np.full(n, np.nan), np.zeros(n)
    generated = np.zeros(n, dtype=np.int64)
    gaps: list[float] = []
    waiting: deque[int] = deque()
    running: list[int] = []
    agenda = Agenda(2)
    issued = 0
    if arrivals is not None:
        arrive[:] = np.asarray(arrivals, float)
        agenda.wake(float(arrive[0]), _ARRIVALS)
    else:
        issued = min(concurrency, n)
        arrive[:issued] = 0.0
        waiting.extend(range(issued))
        agenda.wake(0.0, _ENGINE)
    reserved = 0.0
    step: tuple[str, list[int]] | None = None
    busy = False
    prefills = decodes = batch_sum = 0

    def done(r: int, now: float) -> None:
        nonlocal reserved, issued
        finish[r] = now
        reserved -= kv[r]
        if concurrency is not None and issued < n:
            arrive[issued] = now
            waiting.append(issued)
            issued += 1

    def choose() -> tuple[str, list[int], float] | None:
        nonlocal reserved
        batch: list[int] = []
        tokens, held = 0, reserved
        while waiting and len(running) + len(batch) < max_batch:
            r = waiting[0]
            p = compiled.prompt(int(inputs[r]))
            if batch and tokens + p > max_prefill_tokens:
                break
            if need(len(batch) + 1, tokens + p, held + kv[r]) > hbm:
                break
            batch.append(waiting.popleft())
            tokens, held = tokens + p, held + kv[r]
        if batch:
            reserved = held
            lengths = tuple(int(inputs[r]) for r in batch)
            return "prefill", batch, sum(engine.prefill(lengths).values())
        if running:
            context = max(int(inputs[r] + generated[r]) for r in running)
            parts = engine.decode_step(len(running), context)
            return "decode", list(running), sum(parts.values())
        return None

    next_arrival = 0
    while (event := agenda.pop()) is not None:
        now, process, _ = event
        if process == _ARRIVALS:
            while next_arrival < n and arrive[next_arrival] <= now:
                waiting.append(next_arrival)
                next_arrival += 1
            if next_arrival < n:
                agenda.wake(float(arrive[next_arrival]), _ARRIVALS)
            if not busy:
                agenda.wake(now, _ENGINE)
            continue
        if step is not None:
            kind, members = step
            for r in members:
                generated[r] += 1
                if kind == "prefill":
                    first[r] = now
                    if outputs[r] > 1:
                        running.append(r)
                    else:
                        done(r, now)
                else:
                    gaps.append(now - last[r])
                last[r] = now
            if kind == "decode":
                for r in members:
                    if generated[r] == outputs[r]:
                        running.remove(r)
                        done(r, now)
        picked = choose()
        if picked is None:
            step, busy = None, False
            continue
        kind, members, seconds = picked
        if kind == "prefill":
            prefills += 1
        else:
            decodes += 1
            batch_sum += len(members)
        step, busy = (kind, members), True
        agenda.wake(now + seconds, _ENGINE)

    itl = np.asarray(gaps)
    ttft = first - arrive
    span = float(np.nanmax(finish) - np.nanmin(arrive))
    nan2 = (math.nan, math.nan)
    t50, t99 = np.percentile(ttft, [50, 99])
    i50, i99 = np.percentile(itl, [50, 99]) if len(itl) else nan2
    if load is None:
        load = float(concurrency) if concurrency is not None else \
            (n - 1) / (arrive[-1] - arrive[0]) if n > 1 and arrive[-1] > arrive[0] else math.nan
    result = ServeResult(
        mode="concurrency" if concurrency is not None else "rate", load=float(load),
        requests=n, duration=span, ttft_p50=float(t50), ttft_p99=float(t99),
        itl_p50=float(i50), itl_p99=float(i99),
        tokens_per_second=float(outputs.sum()) / span if span > 0 else math.inf,
        requests_per_second=n / span if span > 0 else math.inf,
        prefill_steps=prefills, decode_steps=decodes,
        mean_batch=batch_sum / decodes if decodes else math.nan)
    return result, {"arrival": arrive, "first": first, "finish": finish, "gaps": itl}


def serve(engine: Engine, *, requests: int, input_dist: Dist, output_dist: Dist, seed: int,
          rates=None, concurrency: int | None = None, max_batch: int = 32,
          max_prefill_tokens: int = 4096) -> list[ServeResult]:
    """One :func:`simulate` per rate of ``rates`` (requests per second, Poisson arrivals), or
    one at ``concurrency``, all on the same drawn requests (:func:`draw`)."""
    unit, ins, outs = draw(requests, input_dist, output_dist, seed)
    t = engine.t
    if t.max_context:
        over = np.nonzero(ins + outs > t.max_context)[0]
        if len(over):
            r = over[0]
            raise InferError(f"expected prompt + output of at most the {t.max_context}-token "
                             f"context of {t.name}, found a request of {ins[r]} + {outs[r]} "
                             f"(request {r} of seed {seed})")
    opts = dict(max_batch=max_batch, max_prefill_tokens=max_prefill_tokens)
    if concurrency is not None:
        return [simulate(engine, ins, outs, concurrency=concurrency, **opts)[0]]
    out = []
    for rate in rates:
        if not rate > 0:
            raise InferError(f"expected a rate above 0 requests per second, found {rate:g}")
        arrivals = np.cumsum(unit) / rate
        out.append(simulate(engine, ins, outs, arrivals=arrivals, load=rate, **opts)[0])
    return out


def from_cli(system: str, model_name: str, *, tp: int, rates=None, concurrency: int | None = None,
             requests: int = 1000, input_dist: str = "fixed:128", output_dist: str = "fixed:128",
             max_batch: int = 32, max_prefill_tokens: int = 4096, bucket: int = 128,
             seed: int = 0, dtype: str = "bf16", lnc: int | None = None, times=None,
             compiled: Compilation | None = None):
    """``gen serve``: (model, the replica's :class:`Engine`, one :class:`ServeResult` per rate
    or the one at ``concurrency``), the split and the longest request checked as ``gen infer``
    checks a point (:func:`explore.infer_cli.check`). ``compiled`` (default: lengths in
    multiples of ``bucket`` tokens) is how the replica was compiled; its lists, where given,
    take the place of ``bucket``."""
    from .infer_cli import check, load_model, resolve  # noqa: PLC0415
    from .kerneltimes import KernelTimes  # noqa: PLC0415

    t = load_model(model_name)
    if not t.causal:
        raise InferError(f"expected a decoder to serve, found the encoder {t.name}")
    if (rates is None) == (concurrency is None):
        raise InferError("expected one of --rate or --concurrency")
    ins, outs = Dist.parse(input_dist, "--input"), Dist.parse(output_dist, "--output")
    base, params, lnc, ranks = resolve(system, lnc)
    _, i, o = draw(requests, ins, outs, seed) if requests >= 1 else (None, [1], [1])
    compiled = replace(compiled or Compilation(), granule=bucket)
    check(t, ranks, tp=tp, dp=1, batch=1, input_len=int(max(i)), output_len=int(max(o)),
          dtype=dtype, base=base, compiled=compiled)
    engine = Engine(t, base, times or KernelTimes(params), tp=tp, lnc=lnc, dtype=dtype,
                    compiled=compiled)
    return t, engine, serve(engine, requests=requests, input_dist=ins, output_dist=outs,
                            seed=seed, rates=rates, concurrency=concurrency,
                            max_batch=max_batch, max_prefill_tokens=max_prefill_tokens)
