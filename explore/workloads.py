"""Workloads: a transformer training step broken into GEMMs and collectives, or a GEMM list.

A GEMM is written as the tensor engine sees it: ``dst[M, N] = stationary[K, M].T @ moving[K, N]``
with the contraction ``K`` on the partition axis. A linear layer ``Y = X W`` over ``T`` tokens
is ``M = out features, K = in features, N = T`` (the weights are stationary, tokens move).
The backward pass of every forward GEMM is two GEMMs of the same FLOP count (``2x`` forward):
the input gradient ``(M = K, K = M, N = N)`` and the weight gradient ``(M = K, K = N, N = M)``.

Parallelism (Megatron-style): a rank is one logical NeuronCore. Tensor parallelism splits the
columns of QKV and FFN-up (and the LM head) and the rows of the attention output and FFN-down
by ``tensor``, and the attention heads; it costs two all-reduces of the layer's activations
per layer forward and two backward. Data parallelism splits the tokens by ``data`` and costs
one all-reduce of the gradients per step. Which dimension of each GEMM a split divides is
carried as flags, so the model can shard the same workload for any rank count at once.

A workload file holds one top-level key ``workload`` with ``kind: transformer`` or
``kind: gemms``; bundled ones live in ``explore/workloads/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

import numpy as np
from pydantic import Field, model_validator
from pydantic_core import PydanticCustomError

from specs.errors import SpecError, nearest

from .specio import Strict, load_model

if TYPE_CHECKING:
    from .infer_sweep import Serving

WORKLOAD_ROOT = Path(__file__).resolve().parent / "workloads"
PosInt = Annotated[int, Field(gt=0)]
#: Bytes per element and the tensor-engine rate key of each input format.
DTYPES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
DIMS = ("m", "k", "n", "count")


class Parallel(Strict):
    """How a training step is split over ranks (logical NeuronCores)."""

    tensor: PosInt = Field(1, description="Tensor-parallel degree in ranks; the data-parallel "
                                          "degree is the rank count divided by it.")
    pipeline: PosInt = Field(1, description="Pipeline-parallel degree (stages), for `gen step`.")
    micro_batch: PosInt = Field(1, description="Sequences per micro-batch, for `gen step`.")
    sequence_parallel: bool = Field(True, description="Norms, residuals and dropout split "
                                                      "over the tensor-parallel ranks.")
    recompute: Literal["none", "selective", "full"] = Field(
        "none", description="Activation recomputation in the backward pass.")


class Transformer(Strict):
    """A dense decoder (or encoder) stack trained with Adam in mixed precision."""

    kind: Literal["transformer"]
    name: str = Field(description="Short name.")
    title: str = Field("", description="What it is.")
    layers: PosInt = Field(description="Transformer layers.")
    hidden: PosInt = Field(description="Hidden size.")
    heads: PosInt = Field(description="Attention heads.")
    kv_heads: PosInt | None = Field(None, description="Key/value heads (grouped-query "
                                                      "attention); default: heads.")
    ffn: PosInt = Field(description="FFN inner size.")
    gated_ffn: bool = Field(True, description="Gated FFN (SwiGLU: three matrices, not two).")
    norm: Literal["rmsnorm", "layernorm"] = Field("rmsnorm", description="Normalisation.")
    vocab: int = Field(0, ge=0, description="Vocabulary size (0: no embedding or LM head).")
    tied_embeddings: bool = Field(False, description="LM head shares the embedding matrix.")
    seq: PosInt = Field(description="Sequence length in tokens.")
    batch: PosInt = Field(description="Global batch in sequences per training step.")
    params: float = Field(gt=0, description="Published parameter count; checked against the "
                                            "count derived from the dimensions.")
    params_tolerance: float = Field(0.02, gt=0, lt=1, description="Relative difference of the "
                                                                  "published count accepted.")
    causal: bool = Field(False, description="Count only the lower triangle of attention.")
    activation: Literal["silu", "gelu", "relu"] | None = Field(
        None, description="The FFN's activation (default: silu for a gated FFN, gelu for a "
                          "plain one).")
    positions: Literal["rope", "learned"] = Field(
        "rope", description="Position encoding: rotary (applied to q and k in every layer) or "
                            "a learned table added to the embedding.")
    max_context: PosInt | None = Field(None, description="Longest context the model takes "
                                                         "(max_position_embeddings).")
    source: str = Field("", description="Published configuration the figures come from.")
    dtype: Literal[tuple(DTYPES)] = Field(  # type: ignore[valid-type]
        "bf16", description="Input format of the GEMMs.")
    grad_bytes: PosInt = Field(2, description="Bytes per gradient element all-reduced.")
    weight_bytes: PosInt = Field(2, description="Bytes per weight held on the device.")
    optimizer_bytes: int = Field(12, ge=0, description="Optimizer bytes per parameter (FP32 "
                                                       "master weights and two Adam moments).")
    shard_optimizer: bool = Field(True, description="Optimizer state sharded over the "
                                                    "data-parallel ranks (ZeRO-1).")
    overlap_gradients: bool = Field(True, description="Gradient all-reduce overlaps the "
                                                      "backward pass.")
    parallel: Parallel = Field(default_factory=Parallel, description="Default split.")

    @property
    def act(self) -> str:
        """The FFN's activation."""
        return self.activation or ("silu" if self.gated_ffn else "gelu")

    @model_validator(mode="after")
    def _shape(self):
        if self.hidden % self.heads:
            raise PydanticCustomError("sweep", "expected hidden ({h}) to be a multiple of heads "
                                               "({n})", {"h": self.hidden, "n": self.heads})
        if self.heads % (self.kv_heads or self.heads):
            raise PydanticCustomError("sweep", "expected heads ({n}) to be a multiple of "
                                               "kv_heads ({k})",
                                      {"n": self.heads, "k": self.kv_heads})
        return self


class Gemm(Strict):
    name: str = Field(description="What the GEMM computes.")
    m: PosInt = Field(description="Stationary free size (output rows).")
    k: PosInt = Field(description="Contraction size.")
    n: PosInt = Field(description="Moving free size (output columns, usually tokens).")
    count: PosInt = Field(1, description="How many times it runs per step.")


class GemmList(Strict):
    """A plain list of GEMM shapes run on every rank (replicated, no communication)."""

    kind: Literal["gemms"]
    name: str = Field(description="Short name.")
    title: str = Field("", description="What it is.")
    dtype: Literal[tuple(DTYPES)] = Field(  # type: ignore[valid-type]
        "bf16", description="Input format of the GEMMs.")
    tokens: PosInt = Field(description="Tokens (or samples) one pass of the list processes.")
    gemms: list[Gemm] = Field(min_length=1, description="The GEMMs of one pass.")


KINDS = {"transformer": Transformer, "gemms": GemmList}


def _kind(data: dict, pos) -> type[Strict]:
    kind = data.get("kind")
    if kind not in KINDS:
        found = "none" if kind is None else repr(kind)
        raise SpecError(f"expected a workload kind, found {found}",
                        location=pos.of(("workload", "kind") if kind is not None
                                        else ("workload",)),
                        path="workload.kind", nearest=nearest(str(kind), KINDS),
                        choices=list(KINDS))
    return KINDS[kind]


@dataclass(frozen=True)
class Gemms:
    """GEMMs as arrays of length G, with which dimension each split divides."""

    names: tuple[str, ...]
    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    count: np.ndarray
    tp: np.ndarray          # (G, 4) bool: tensor parallelism divides m, k, n, count
    dp: np.ndarray          # (G, 4) bool: data parallelism divides m, k, n, count
    backward: np.ndarray    # (G,) bool

    def flops(self) -> float:
        """Total FLOPs of the unsplit GEMMs (2 per multiply-accumulate)."""
        return float(np.sum(2.0 * self.m * self.k * self.n * self.count))

    def split(self, tp: int, dp: int) -> Gemms:
        """The per-rank shapes for one split (ceil of each divided dimension, count as is)."""
        out = []
        for j, dim in enumerate(DIMS):
            v = getattr(self, dim) / np.where(self.tp[:, j], tp, 1) / np.where(self.dp[:, j], dp, 1)
            out.append(v if dim == "count" else np.ceil(v))
        return Gemms(self.names, *out, self.tp, self.dp, self.backward)


@dataclass(frozen=True)
class Workload:
    """A workload compiled to what the analytic model evaluates.

    Per step: the GEMMs (unsplit, with split flags); ``tp_allreduces`` all-reduces of
    ``tp_bytes`` bytes (unsplit; divided by the data-parallel degree) among tensor-parallel
    ranks; one all-reduce of ``dp_bytes`` (divided by the tensor-parallel degree) among
    data-parallel ranks. ``replicated`` workloads run whole on every rank.
    """

    name: str
    dtype: str
    tensor: int
    gemms: Gemms
    tokens: float
    tp_allreduces: float
    tp_bytes: float
    dp_bytes: float
    overlap_gradients: bool
    replicated: bool
    state_bytes_tp: float       # held per rank, divided by tp
    state_bytes_tpdp: float     # held per rank, divided by tp * dp
    #: the transformer it was compiled from (for the lowered step), None for a GEMM list
    spec: Transformer | None = None
    #: the serving configuration of the inference metrics (:mod:`explore.infer_sweep`)
    serving: Serving | None = None

    @property
    def elem_bytes(self) -> int:
        return DTYPES[self.dtype]

    def flops(self) -> float:
        return self.gemms.flops()


def _flags(*dims: str) -> list[bool]:
    return [d in dims for d in DIMS]


def _with_backward(rows: list) -> list:
    """Append the two backward GEMMs of each forward one (flags follow their dimensions)."""
    out = list(rows)
    for name, m, k, n, c, tp, dp in rows:
        def perm(f, order):
            return [f[order[0]], f[order[1]], f[order[2]], f[3]]
        # input gradient: (M=K, K=M, N=N); weight gradient: (M=K, K=N, N=M)
        out.append((f"{name}.dgrad", k, m, n, c, perm(tp, (1, 0, 2)), perm(dp, (1, 0, 2)), True))
        out.append((f"{name}.wgrad", k, n, m, c, perm(tp, (1, 2, 0)), perm(dp, (1, 2, 0)), True))
    return [r if len(r) == 8 else (*r, False) for r in out]


def transformer_params(t: Transformer) -> float:
    """Parameter count derived from the dimensions (weights and norms, embeddings)."""
    head = t.hidden // t.heads
    kv = (t.kv_heads or t.heads) * head
    attn = t.hidden * (t.hidden + 2 * kv) + t.hidden * t.hidden
    ffn = (3 if t.gated_ffn else 2) * t.hidden * t.ffn
    per_layer = attn + ffn + 2 * t.hidden
    embed = t.vocab * t.hidden * (1 if t.tied_embeddings else 2)
    return float(t.layers * per_layer + embed + t.hidden)


def compile_transformer(t: Transformer, tensor: int | None = None) -> Workload:
    """The GEMMs and collectives of one training step of ``t``."""
    tokens = t.batch * t.seq
    head = t.hidden // t.heads
    kv = (t.kv_heads or t.heads) * head
    ffn_up = (2 if t.gated_ffn else 1) * t.ffn
    pairs = t.batch * t.heads * t.layers
    attn_frac = 0.5 if t.causal else 1.0
    L = t.layers
    fwd = [
        ("qkv", t.hidden + 2 * kv, t.hidden, tokens, L, _flags("m"), _flags("n")),
        ("attn.scores", t.seq, head, t.seq, pairs * attn_frac, _flags("count"),
         _flags("count")),
        ("attn.values", head, t.seq, t.seq, pairs * attn_frac, _flags("count"),
         _flags("count")),
        ("attn.out", t.hidden, t.hidden, tokens, L, _flags("k"), _flags("n")),
        ("ffn.up", ffn_up, t.hidden, tokens, L, _flags("m"), _flags("n")),
        ("ffn.down", t.hidden, t.ffn, tokens, L, _flags("k"), _flags("n")),
    ]
    if t.vocab:
        fwd.append(("lm_head", t.vocab, t.hidden, tokens, 1, _flags("m"), _flags("n")))
    gemms = _gemms(_with_backward(fwd))
    p = transformer_params(t)
    tp = t.parallel.tensor if tensor is None else tensor
    return Workload(
        name=t.name, dtype=t.dtype, tensor=tp, gemms=gemms, tokens=float(tokens),
        tp_allreduces=4.0 * L, tp_bytes=float(tokens * t.hidden * DTYPES[t.dtype]),
        dp_bytes=p * t.grad_bytes, overlap_gradients=t.overlap_gradients, replicated=False,
        state_bytes_tp=p * (t.weight_bytes + t.grad_bytes
                            + (0 if t.shard_optimizer else t.optimizer_bytes)),
        state_bytes_tpdp=p * t.optimizer_bytes if t.shard_optimizer else 0.0, spec=t)


def compile_gemms(g: GemmList) -> Workload:
    rows = [(x.name, x.m, x.k, x.n, x.count, _flags(), _flags(), False) for x in g.gemms]
    gemms = _gemms(rows)
    weights = float(sum(x.m * x.k for x in g.gemms)) * DTYPES[g.dtype]
    return Workload(name=g.name, dtype=g.dtype, tensor=1, gemms=gemms, tokens=float(g.tokens),
                    tp_allreduces=0.0, tp_bytes=0.0, dp_bytes=0.0, overlap_gradients=False,
                    replicated=True, state_bytes_tp=weights, state_bytes_tpdp=0.0)


def _gemms(rows: list) -> Gemms:
    return Gemms(
        names=tuple(r[0] for r in rows),
        m=np.array([r[1] for r in rows], float), k=np.array([r[2] for r in rows], float),
        n=np.array([r[3] for r in rows], float), count=np.array([r[4] for r in rows], float),
        tp=np.array([r[5] for r in rows], bool).reshape(len(rows), 4),
        dp=np.array([r[6] for r in rows], bool).reshape(len(rows), 4),
        backward=np.array([r[7] for r in rows], bool))


def bundled() -> list[str]:
    """Names of the bundled workloads."""
    return sorted(p.stem for p in WORKLOAD_ROOT.glob("*.yaml"))


def find(name: str | Path, near: Path | None = None) -> Path:
    """Path of a workload given as a path (absolute or beside ``near``) or a bundled name."""
    p = Path(name)
    for cand in ([p] if p.is_absolute() else
                 [*([near / p] if near else []), p, WORKLOAD_ROOT / f"{p.name}.yaml"]):
        if cand.suffix in (".yaml", ".yml") and cand.is_file():
            return cand
        if cand.with_suffix(".yaml").is_file() and not cand.suffix:
            return cand.with_suffix(".yaml")
    raise SpecError(f"expected a workload file or a bundled workload name, found {str(name)!r}",
                    nearest=nearest(p.stem, bundled()), choices=bundled())


def load_spec(name: str | Path, near: Path | None = None) -> Transformer | GemmList:
    """Load and validate a workload file; check its published parameter count."""
    file = find(name, near)
    spec, _, pos = load_model(file, "workload", _kind)
    if isinstance(spec, Transformer):
        derived = transformer_params(spec)
        if abs(derived - spec.params) > spec.params_tolerance * spec.params:
            raise SpecError(
                f"expected params within {spec.params_tolerance:.0%} of {derived:.4g} (derived "
                f"from the dimensions), found {spec.params:.4g}",
                location=pos.of(("workload", "params")), path="workload.params")
    return spec


def load(name: str | Path, near: Path | None = None, tensor: int | None = None) -> Workload:
    """The compiled workload of a file or bundled name (``tensor`` overrides its split)."""
    spec = load_spec(name, near)
    if isinstance(spec, GemmList):
        return compile_gemms(spec)
    return compile_transformer(spec, tensor)
