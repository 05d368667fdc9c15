"""Inference of a model on a system: prefill and decode lowered to kernels
(:mod:`explore.infer_lowering`), timed by the core simulator (:class:`~explore.kerneltimes.
KernelTimes`, cached), with the tensor-parallel all-reduces of the collectives formula.

**Engine** (:class:`Engine`): one tensor-parallel replica of ``tp`` ranks (logical NeuronCores
of ``lnc`` physical cores) of a system. :meth:`Engine.prefill` times the prefill of a batch of
prompts of given lengths, :meth:`Engine.decode_step` one decode step at batch ``B`` over
caches of ``L`` keys; both are kept per distinct argument, so a serving scheduler may call
them for every step it takes. Each returns its parts in seconds (:data:`PARTS`):

- ``gemm``, ``attention``, ``other``: the sum over the lowered kernels of count x the
  simulated time of one run (layers x one layer's kernels, plus the once-per-pass ones). A
  logical core of ``lnc`` physical cores divides each kernel's split key among them
  (:attr:`kernels.Kernel.split`: its first, a GEMM on rows its weights' columns), as
  ``gen run --lnc`` and ``gen step`` do.
- ``communication``: per layer two all-reduces of the layer's activations (after the
  attention output and after FFN-down), one of the vocabulary-parallel embedding's output, and
  the gather of each rank's sampled candidate (an all-gather: half an all-reduce of its
  bytes, as ``gen step`` counts one), each :func:`explore.model.group_allreduce` over the
  group's ranks (:mod:`sim.system.collectives`' rings over the chips' HBM, the instance
  topology and the server), all on the critical path.
- ``overheads``: what runs between kernels (launches, host work). No document of the project
  gives a figure for it, so it is zero, as the training step's launch gaps are: the part is
  reported so that a sourced figure has its place.

**Compilation** (:class:`Compilation`): how the serving library built the model, as the
published run's command line states it (NxD Inference's flags). ``sequence_parallel``: the
prefill's norms, residual adds and embedding work on each rank's ``ceil(T / tp)`` tokens, the
layer's input gathered before the QKV and FFN-up GEMMs and its outputs reduce-scattered after
the attention-output and FFN-down GEMMs (a ring's all-gather and reduce-scatter are the two
halves of its all-reduce, so the communication is the all-reduces' figure; decode steps
of one token a sequence run as without it). ``context_buckets``: each prompt padded to the
shortest bucket that holds it, the prefill run at that length; ``decode_buckets``: each decode
step's attention and cache at the shortest bucket that holds its context (the cache is
allocated at it). A length past the largest bucket is refused. Without a list, a length is
rounded up to a multiple of ``granule`` (1: every length its own; ``gen serve``'s
``--bucket``).

**Static batching** (:func:`evaluate`): ``B`` prompts of ``input`` tokens, then ``output``
decode steps. TTFT is the prefill (the first token is sampled at its end); TPOT is the decode
step averaged over the growing context, ``input + 1`` to ``input + output`` keys: the step
time at five contexts evenly spaced over that range, averaged by the trapezoid rule (exact
for a step time affine in the context, which is what decode attention's split over the cache
makes it; with decode buckets the step is constant within a bucket, so each bucket's step is
weighted by the contexts it serves); end-to-end latency is ``TTFT + output x TPOT`` and
output tokens per second ``dp x B x output / (TTFT + output x TPOT)``, ``dp`` replicas
serving side by side. An encoder's pass is its prefill: latency and ``dp x B / latency``
inferences per second.

**Memory per rank** (:func:`memory`): the rank's weights (its share of every split matrix;
norms and replicated KV heads whole), the KV cache (``B x context x layers x kv heads per rank
x head size x 2 (k and v) x 2 bytes``, bf16), and the activations of the prefill's busiest
layer (its input, QKV and FFN-up outputs for every prompt token; attention's scores are tiled
by the flash kernel and never held whole) with the logits of the last tokens in fp32; against
the chip's HBM shared by its logical cores.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

from kernels import KERNELS
from kernels.builder import psum_columns
from specs.errors import InputError

from . import model
from .infer_lowering import Split, decode, prefill, split
from .kerneltimes import KernelTimes
from .step_lowering import Call
from .workloads import Transformer

__all__ = ["AS_GIVEN", "PARTS", "Compilation", "Engine", "InferError", "InferResult",
           "KernelRow", "evaluate", "memory"]

#: Parts of a prefill or decode step, in the order they are reported.
PARTS = ("gemm", "attention", "other", "communication", "overheads")
#: Contexts the decode step is timed at over one generation (trapezoid rule).
CONTEXT_SAMPLES = 5
#: Bytes per activation element and KV-cache element (bf16).
ACT_BYTES = 2
#: Bytes per weight element by ``--dtype``.
WEIGHT_BYTES = {"bf16": 2, "fp8": 1}
#: Bytes one rank contributes to the sampling step's gather per sequence: its best logit
#: (fp32) and that logit's index (int32).
CANDIDATE_BYTES = 8


@dataclass(frozen=True)
class Compilation:
    """How the model was compiled for serving (see the module): sequence parallelism in the
    prefill and the bucket lengths of context encoding and of decoding (ascending; none:
    multiples of ``granule``)."""

    sequence_parallel: bool = False
    context_buckets: tuple[int, ...] = ()
    decode_buckets: tuple[int, ...] = ()
    granule: int = 1

    def __post_init__(self):
        if not isinstance(self.granule, int) or self.granule < 1:
            raise InferError(f"expected a bucket of at least 1 token, found {self.granule}")
        for name in ("context_buckets", "decode_buckets"):
            got = getattr(self, name)
            if any(not isinstance(b, int) or isinstance(b, bool) or b < 1 for b in got):
                raise InferError(f"expected --{name.replace('_', '-')} of positive token "
                                 f"counts, found {', '.join(map(str, got))}")
            object.__setattr__(self, name, tuple(sorted(set(got))))

    def _bucket(self, buckets: tuple[int, ...], length: int, what: str, option: str) -> int:
        if not buckets:
            return -(-length // self.granule) * self.granule
        for b in buckets:
            if b >= length:
                return b
        raise InferError(f"expected {what} of at most the largest of {option} "
                         f"({buckets[-1]}), found {length}")

    @classmethod
    def transformers_neuronx(cls, sequence: int) -> Compilation:
        """Transformers NeuronX's buckets by default (from Neuron 2.18) for a model compiled
        for ``sequence`` tokens [TNX-GUIDE]: token generation at the powers of two from 128
        up to the sequence length, the last bucket the sequence length itself; context
        encoding at half of each."""
        decode = [b for b in (128 << i for i in range(32)) if b < sequence] + [sequence]
        return cls(False, tuple(max(1, b // 2) for b in decode), tuple(decode))

    def prompt(self, length: int) -> int:
        """The length a prompt of ``length`` tokens is encoded at."""
        return self._bucket(self.context_buckets, length, "--input", "--context-buckets")

    def context(self, length: int) -> int:
        """The cache length a decode step over ``length`` keys runs at."""
        return self._bucket(self.decode_buckets, length, "--input + --output",
                            "--decode-buckets")


#: No sequence parallelism, every length compiled for: the default.
AS_GIVEN = Compilation()


@dataclass(frozen=True)
class KernelRow:
    """One lowered kernel call of a pass on a rank: its part, what it computes, the kernel,
    its shape on the logical core (before an LNC's cores split its split key), format, runs a
    pass and their seconds."""

    part: str
    what: str
    kernel: str
    shape: dict
    dtype: str
    runs: float
    seconds: float


class InferError(InputError):
    """An inference that cannot be split, run or held as asked (one line: what was expected,
    what was found)."""


@dataclass(frozen=True)
class InferResult:
    """One design point of static batching: times in seconds, bytes per rank."""

    ttft: float
    tpot: float
    latency: float
    #: output tokens per second of the ``dp`` replicas (NaN for an encoder)
    tokens_per_second: float
    #: sequences (prompts, or an encoder's inputs) per second of the ``dp`` replicas
    inferences_per_second: float
    prefill: dict[str, float]
    decode: dict[str, float]
    memory: dict[str, float]
    hbm_per_rank: float
    calls: dict[str, list[Call]] = field(repr=False)


class Engine:
    """One tensor-parallel replica of ``t`` on ``base``: ``tp`` ranks of ``lnc`` cores."""

    def __init__(self, t: Transformer, base: model.Base, times: KernelTimes, *, tp: int,
                 lnc: int, dtype: str = "bf16", compiled: Compilation = AS_GIVEN):
        self.t, self.base, self.times, self.tp, self.lnc, self.dtype = \
            t, base, times, tp, lnc, dtype
        self.compiled = compiled
        self.split: Split = split(t, tp)
        self.columns = psum_columns(times.params)
        self.per_chip = base.values["cores"] / lnc
        self.v = {k: np.full(1, float(x)) for k, x in base.values.items()}
        self.dims_long = (model.longest_dims(self.v["chips"], base)
                          if base.topology == "torus" else None)
        self._prefill: dict[tuple[int, ...], dict[str, float]] = {}
        self._decode: dict[tuple[int, int], dict[str, float]] = {}
        self._allreduce: dict[float, float] = {}
        self.calls: dict[str, list[Call]] = {}

    def allreduce(self, nbytes: float) -> float:
        """Seconds of an all-reduce of ``nbytes`` per rank among the ``tp`` ranks."""
        if self.tp == 1:
            return 0.0
        t = self._allreduce.get(nbytes)
        if t is None:
            t = self._allreduce[nbytes] = float(model.group_allreduce(
                np.full(1, float(nbytes)), np.full(1, float(self.tp)), self.per_chip,
                np.ones(1), self.v, self.base, self.dims_long)[0])
        return t

    def _rows(self, calls: dict[str, list[Call]]) -> list[KernelRow]:
        """Each call of a pass (its layer's, run ``layers`` times, then its once-a-pass
        ones) with its runs and seconds a pass on a rank."""
        rows = []
        for group, per in (("layer", self.t.layers), ("once", 1)):
            for c in calls[group]:
                shape = KERNELS[c.kernel].per_core(dict(c.shape), self.lnc)
                runs = c.count * per
                rows.append(KernelRow(c.part, c.what, c.kernel, dict(c.shape), c.dtype, runs,
                                      self.times(c.kernel, shape, c.dtype) * runs))
        return rows

    def _parts(self, calls: dict[str, list[Call]], tokens: int, sequences: int
               ) -> dict[str, float]:
        t = self.t
        out = dict.fromkeys(PARTS, 0.0)
        for row in self._rows(calls):
            out[row.part] += row.seconds
        act = tokens * t.hidden * ACT_BYTES
        comm = (2 * t.layers + (1 if t.vocab else 0)) * self.allreduce(act)
        if t.causal and t.vocab:
            comm += 0.5 * self.allreduce(sequences * CANDIDATE_BYTES * self.tp)
        out["communication"] = comm
        return out

    def _prompts(self, lengths: tuple[int, ...]) -> tuple[int, ...]:
        """The lengths the prompts are encoded at (their buckets), sorted."""
        return tuple(sorted(self.compiled.prompt(int(x)) for x in lengths))

    def _prefill_calls(self, key: tuple[int, ...]) -> dict[str, list[Call]]:
        return prefill(self.t, self.split, key, self.columns, self.dtype,
                       sequence_parallel=self.compiled.sequence_parallel)

    def prefill(self, lengths: tuple[int, ...]) -> dict[str, float]:
        """Parts of the prefill of prompts of ``lengths`` tokens (one per sequence)."""
        key = self._prompts(lengths)
        got = self._prefill.get(key)
        if got is None:
            calls = self._prefill_calls(key)
            self.calls.setdefault("prefill", calls["layer"] + calls["once"])
            got = self._prefill[key] = self._parts(calls, sum(key), len(key))
        return got

    def decode_step(self, batch: int, context: int) -> dict[str, float]:
        """Parts of one decode step of ``batch`` sequences over ``context`` cached keys (at
        the decode bucket that holds them)."""
        key = (int(batch), self.compiled.context(int(context)))
        got = self._decode.get(key)
        if got is None:
            calls = decode(self.t, self.split, batch, key[1], self.columns, self.dtype)
            self.calls.setdefault("decode", calls["layer"] + calls["once"])
            got = self._decode[key] = self._parts(calls, batch, batch)
        return got

    def tpot(self, batch: int, input_len: int, output_len: int) -> dict[str, float]:
        """The decode step's parts averaged over contexts ``input + 1 .. input + output``."""
        return _over_contexts(input_len, output_len,
                              lambda context: self.decode_step(batch, context),
                              self.compiled.decode_buckets)

    def prefill_kernels(self, lengths: tuple[int, ...]) -> list[KernelRow]:
        """The kernels of :meth:`prefill`, a row each (their parts' sums are its parts)."""
        return self._rows(self._prefill_calls(self._prompts(lengths)))

    def tpot_kernels(self, batch: int, input_len: int, output_len: int) -> list[KernelRow]:
        """The kernels of the decode step, each row's seconds averaged over the contexts as
        :meth:`tpot` averages the parts (its shape at the last context)."""
        steps = {}

        def step(context: int) -> dict[int, float]:
            context = self.compiled.context(context)
            steps[context] = self._rows(decode(self.t, self.split, batch, context,
                                               self.columns, self.dtype))
            return {i: row.seconds for i, row in enumerate(steps[context])}

        mean = _over_contexts(input_len, output_len, step, self.compiled.decode_buckets)
        return [replace(row, seconds=mean[i]) for i, row in enumerate(steps[max(steps)])]


def _over_contexts(input_len: int, output_len: int, step, buckets: tuple[int, ...] = ()
                   ) -> dict:
    """``step(context)`` (a mapping to seconds) averaged over contexts ``input + 1 .. input +
    output``: at :data:`CONTEXT_SAMPLES` evenly spaced, by the trapezoid rule; with
    ``buckets`` (ascending), each bucket's step weighted by the contexts it holds."""
    lo, hi = input_len + 1, input_len + output_len
    if buckets:
        weights: dict[int, int] = {}
        below = lo - 1
        for b in buckets:
            if b >= lo and below < hi:
                weights[b] = min(b, hi) - max(below, lo - 1)
            below = b
        if below < hi:  # past the largest bucket: step() refuses it
            step(hi)
        steps = {b: step(b) for b in weights}
        keys = next(iter(steps.values()))
        return {k: sum(w * steps[b][k] for b, w in weights.items()) / (hi - lo + 1)
                for k in keys}
    n = 1 if hi == lo else CONTEXT_SAMPLES
    points = sorted({round(lo + (hi - lo) * i / max(n - 1, 1)) for i in range(n)})
    steps = [step(c) for c in points]
    if len(points) == 1:
        return dict(steps[0])
    x = np.array(points, float)
    return {k: float(np.trapezoid([s[k] for s in steps], x) / (x[-1] - x[0]))
            for k in steps[0]}


def memory(t: Transformer, s: Split, batch: int, context: int, prompt_tokens: int,
           dtype: str) -> dict[str, float]:
    """Bytes per rank: ``weights``, ``kv_cache`` and ``activations`` (see the module)."""
    h, d = t.hidden, s.head_dim
    per_layer = (h * (s.q_heads + 2 * s.kv_heads) * d + s.q_heads * d * h
                 + (3 if t.gated_ffn else 2) * h * s.ffn + 2 * h)
    embed = s.vocab * h * (1 if t.tied_embeddings or not t.causal else 2)
    positions = (t.max_context or 0) * h if t.positions == "learned" else 0
    weights = (t.layers * per_layer + embed + positions + h) * WEIGHT_BYTES[dtype]
    kv = batch * context * t.layers * s.kv_heads * d * 2 * ACT_BYTES if t.causal else 0.0
    up = (2 if t.gated_ffn else 1) * s.ffn
    act = prompt_tokens * (h + (s.q_heads + 2 * s.kv_heads) * d + up) * ACT_BYTES \
        + batch * s.vocab * 4
    return {"weights": float(weights), "kv_cache": float(kv), "activations": float(act)}


def evaluate(engine: Engine, *, batch: int, input_len: int, output_len: int, dp: int = 1
             ) -> InferResult:
    """Static batching of ``batch`` prompts of ``input_len`` tokens generating ``output_len``
    each, on ``dp`` replicas of ``engine`` (an encoder: one pass, ``output_len`` unused)."""
    t = engine.t
    pre = engine.prefill((input_len,) * batch)
    ttft = sum(pre.values())
    hbm = engine.base.values["hbm_capacity"] / engine.per_chip
    if t.causal:
        dec = engine.tpot(batch, input_len, output_len)
        tpot = sum(dec.values())
        latency = ttft + output_len * tpot
        rate = dp * batch * output_len / latency
        context = input_len + output_len
    else:
        dec, tpot, latency, context = dict.fromkeys(PARTS, 0.0), 0.0, ttft, input_len
        rate = math.nan
    prompt = engine.compiled.prompt(input_len)
    if t.causal:
        context = engine.compiled.context(context)
    mem = memory(t, engine.split, batch, context, batch * prompt, engine.dtype)
    return InferResult(ttft=ttft, tpot=tpot, latency=latency, tokens_per_second=rate,
                       inferences_per_second=dp * batch / latency,
                       prefill=dict(pre), decode=dec, memory=mem, hbm_per_rank=hbm,
                       calls=dict(engine.calls))
