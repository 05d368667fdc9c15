"""Programs for the NeuronCore, written once against :class:`~kernels.builder.Builder`.

:data:`KERNELS` lists them with their shape keys, formats, inputs, a float64 numpy reference
and the tolerance of each output format; :func:`run` builds one for a shape, runs it on the
core simulator (with random inputs unless ``timing_only``) and checks nothing itself: the
caller compares ``outputs`` with ``reference``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from hdl.core.isa import TF32_SHIFT
from hdl.core.params import CoreParams
from hdl.numerics.dtypes import ML_DTYPES
from sim.core import Core, Result

from . import mx
from .attention import attention
from .backward import (
    cross_entropy,
    cross_entropy_backward,
    gelu_backward,
    layernorm_backward,
    logits_max,
    rmsnorm_backward,
)
from .builder import Builder, KernelError
from .decode import decode_attention
from .gemm import gemm, gemm_naive, out_dtype
from .kvcache import kv_append, kv_positions, kv_prefill
from .norms import ADAM, adam, grad_accumulate, layernorm, residual_add, rmsnorm, softmax
from .rope import rope
from .sampling import sample
from .swiglu import swiglu, swiglu_backward

__all__ = ["KERNELS", "MX_FORMATS", "Kernel", "KernelError", "Run", "parse_shape", "run",
           "tolerance"]

#: Accepted error of an output, as the largest |out - reference| over the largest
#: |reference|, by the output's format: the output cast's half ulp (2^-8 for bf16's 8-bit
#: significand, 2^-24 for fp32) with room for the fp32 sums before it, and for kernels through
#: the scalar engine's piecewise polynomials 2e-4 (their fits reach about 1e-5).
TOLERANCE = {"fp32": 1e-5, "bf16": 1e-2}
POLYNOMIAL = 2e-4


def _tf32(x: np.ndarray) -> np.ndarray:
    """float32 values of ``x`` rounded to tf32 (nearest, ties to even, on the words; finite
    inputs), as their words hold them: the low 13 bits clear."""
    w = np.asarray(x, np.float32).view(np.uint32).astype(np.int64)
    w = (w + (1 << (TF32_SHIFT - 1)) - 1 + ((w >> TF32_SHIFT) & 1)) >> TF32_SHIFT
    return (w << TF32_SHIFT).astype(np.uint32).view(np.float32)


def tolerance(kernel: Kernel, dtype: str) -> float:
    out = kernel.out_dtype(dtype)
    tol = TOLERANCE[out]
    return max(tol, POLYNOMIAL) if kernel.polynomial else tol


@dataclass(frozen=True)
class Kernel:
    name: str
    summary: str
    dims: tuple[str, ...]
    dtypes: tuple[str, ...]
    build: Callable[..., None]
    #: (shape, dtype) -> {input name: (shape, dtype)}
    inputs: Callable[[dict, str], dict]
    #: ({input name: float64 array}) -> {output name: float64 array}; with
    #: ``shape_reference`` also the shape, for a key the inputs cannot tell (top-k's K)
    reference: Callable[..., dict]
    out_dtype: Callable[[str], str] = lambda d: d
    polynomial: bool = False
    positive: tuple[str, ...] = ()
    #: inputs drawn as class indices ``0 .. C-1`` (stored in their format) for numeric runs
    labels: tuple[str, ...] = ()
    #: inputs the kernel updates in place in HBM (a cache): outputs too, under their names
    updates: tuple[str, ...] = ()
    shape_reference: bool = False
    example: dict = field(default_factory=dict)
    #: the shape key a logical core's physical cores divide, where not the first
    lnc_split: str = ""

    @property
    def split(self) -> str:
        """The shape key a logical core of several physical cores divides among them: the
        first, or :attr:`lnc_split`."""
        return self.lnc_split or self.dims[0]

    def per_core(self, shape: dict, cores: int) -> dict:
        """``shape`` as each of ``cores`` physical cores runs it: :attr:`split` divided among
        them, rounded up."""
        return dict(shape, **{self.split: -(-shape[self.split] // cores)})


def _gelu(x):
    from scipy.special import erf

    return 0.5 * x * (1 + erf(x / np.sqrt(2)))


def _softmax(x):
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _norm(x, g, b=None, eps=1e-6):
    if b is None:
        return x / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps) * g
    xc = x - x.mean(axis=1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + 1e-5) * g + b


def _gelu_backward(i):
    from scipy.special import erf

    x = i["x"]
    return {"dx": i["dy"] * (0.5 * (1 + erf(x / np.sqrt(2)))
                             + x * np.exp(-x * x / 2) / np.sqrt(2 * np.pi))}


def _silu(x):
    return x / (1 + np.exp(-x))


def _swiglu_backward(i):
    g, u, dy = i["gate"], i["up"], i["dy"]
    s = 1 / (1 + np.exp(-g))
    return {"d_up": dy * g * s, "d_gate": dy * u * s * (1 + g * (1 - s))}


def _rmsnorm_backward(i, eps=1e-6):
    x, dy, g = i["x"], i["dy"], i["gamma"]
    rstd = 1 / np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)
    xh, gdy = x * rstd, g * dy
    return {"dx": rstd * (gdy - xh * (gdy * xh).mean(axis=1, keepdims=True)),
            "dgamma": (dy * xh).sum(axis=0, keepdims=True)}


def _layernorm_backward(i, eps=1e-5):
    x, dy, g = i["x"], i["dy"], i["gamma"]
    xc = x - x.mean(axis=1, keepdims=True)
    rstd = 1 / np.sqrt((xc * xc).mean(axis=1, keepdims=True) + eps)
    xh, gdy = xc * rstd, g * dy
    return {"dx": rstd * (gdy - gdy.mean(axis=1, keepdims=True)
                          - xh * (gdy * xh).mean(axis=1, keepdims=True)),
            "dgamma": (dy * xh).sum(axis=0, keepdims=True),
            "dbeta": dy.sum(axis=0, keepdims=True)}


def _onehot(labels, c):
    return (labels == np.arange(c)[None, :]).astype(np.float64)


def _cross_entropy(i):
    x, m, lab = i["x"], i["max"], i["labels"]
    return {"exp": np.exp(x - m),
            "stats": np.hstack([np.exp(x - m).sum(axis=1, keepdims=True),
                                (x * _onehot(lab, x.shape[1])).sum(axis=1, keepdims=True)])}


def _cross_entropy_backward(i):
    e, st = i["exp"], i["stats"]
    return {"dx": e / st[:, :1] - _onehot(i["labels"], e.shape[1]),
            "loss": np.log(st[:, :1]) + i["max"] - st[:, 1:]}


def _adam(i):
    h = ADAM
    m = h["beta1"] * i["m"] + (1 - h["beta1"]) * i["grad"]
    v = h["beta2"] * i["v"] + (1 - h["beta2"]) * i["grad"] ** 2
    mh, vh = m / (1 - h["beta1"] ** h["step"]), v / (1 - h["beta2"] ** h["step"])
    return {"param_out": i["param"] - h["lr"] * mh / (np.sqrt(vh) + h["eps"]),
            "m_out": m, "v_out": v}


def _attention(i, causal=False):
    s_len = i["qT"].shape[1]
    heads = i["v"].shape[0] // s_len
    outs = []
    for h in range(heads):
        d = i["qT"].shape[0] // heads
        q, k = i["qT"][h * d:(h + 1) * d].T, i["kT"][h * d:(h + 1) * d].T
        s = q @ k.T / np.sqrt(d)
        if causal:
            s = np.where(np.triu(np.ones(s.shape, dtype=bool), 1), -np.inf, s)
        outs.append(_softmax(s) @ i["v"][h * s_len:(h + 1) * s_len])
    return {"out": np.vstack(outs)}


def _attention_rows(i, shape, causal=False):
    nb, h, s_len, d = (shape[k] for k in "BHSD")
    q, k, v = (i[n].reshape(nb, s_len, h, d).transpose(0, 2, 1, 3) for n in "qkv")
    s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(d)
    if causal:
        s = np.where(np.triu(np.ones((s_len, s_len), dtype=bool), 1), -np.inf, s)
    e = np.exp(s - s.max(axis=-1, keepdims=True))
    out = e / e.sum(axis=-1, keepdims=True) @ v
    return {"out": out.transpose(0, 2, 1, 3).reshape(nb * s_len, h * d)}


def _rope(i):
    x, cos, sin = i["x"], i["cos"], i["sin"]
    t, d = cos.shape
    x = x.reshape(t, -1, d)
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], axis=-1)
    return {"out": (x * cos[:, None] + rotated * sin[:, None]).reshape(t, -1)}


def _kv_append(i):
    nb, s, d = i["k_new"].shape[0], i["k_cache"].shape[1], i["v_cache"].shape[1]
    kvh = i["k_new"].shape[1] // d
    k = i["k_cache"].reshape(nb, kvh, d, s).copy()
    v = i["v_cache"].reshape(nb, kvh, s, d).copy()
    for b, pos in enumerate(kv_positions(nb, s)):
        k[b, :, :, pos] = i["k_new"][b].reshape(kvh, d)
        v[b, :, pos, :] = i["v_new"][b].reshape(kvh, d)
    return {"k_cache": k.reshape(-1, s), "v_cache": v.reshape(-1, d)}


def _kv(s, d):
    b, h, dd, n = s["B"], s["KVH"], s["D"], s["S"]
    return {"k_new": ((b, h * dd), d), "v_new": ((b, h * dd), d),
            "k_cache": ((b * h * dd, n), d), "v_cache": ((b * h * n, dd), d)}


def _kv_prefill(i):
    s, d = i["k_cache"].shape[1], i["v_cache"].shape[1]
    nb, kvh = i["k_new"].shape[0] // s, i["k_new"].shape[1] // d
    k = i["k_new"].reshape(nb, s, kvh, d).transpose(0, 2, 3, 1)
    v = i["v_new"].reshape(nb, s, kvh, d).transpose(0, 2, 1, 3)
    return {"k_cache": k.reshape(-1, s), "v_cache": v.reshape(-1, d)}


def _kv_prompt(s, d):
    b, h, dd, n = s["B"], s["KVH"], s["D"], s["S"]
    return {"k_new": ((b * n, h * dd), d), "v_new": ((b * n, h * dd), d),
            "k_cache": ((b * h * dd, n), d), "v_cache": ((b * h * n, dd), d)}


def _decode_attention(i):
    q, k, v = i["q"], i["k_cache"], i["v_cache"]
    d, s = v.shape[1], k.shape[1]
    pairs = k.shape[0] // d
    g = q.shape[0] // pairs  # query heads per KV head, the pairs in the queries' order
    out = np.empty_like(q)
    for pair in range(pairs):
        kt, vv = k[pair * d:(pair + 1) * d], v[pair * s:(pair + 1) * s]
        rows = slice(pair * g, (pair + 1) * g)
        out[rows] = _softmax(q[rows] @ kt / np.sqrt(d)) @ vv
    return {"out": out}


def _sample(i, shape):
    x = i["logits"]
    order = np.argsort(-x, axis=1, kind="stable")[:, :shape["K"]]
    return {"values": np.take_along_axis(x, order, axis=1), "indices": order.astype(np.float64)}


def _heads(s, d):
    return {"qT": ((s["B"] * s["D"], s["S"]), d), "kT": ((s["B"] * s["D"], s["S"]), d),
            "v": ((s["B"] * s["S"], s["D"]), d)}


def _token_rows(s, d):
    return {n: ((s["B"] * s["S"], s["H"] * s["D"]), d) for n in ("q", "k", "v")}


def _mkn(s, d):
    return {"lhsT": ((s["K"], s["M"]), d), "rhs": ((s["K"], s["N"]), d)}


def _rc(*names, dtype=None):
    return lambda s, d: {n: ((s["R"], s["C"]), dtype or d) for n in names}


_MATMUL_FORMATS = ("bf16", "fp8_e4m3", "fp8_e5m2", "fp16", "tf32", "fp32")
#: The block-scaled formats, where the array has them (inputs quantized by :mod:`kernels.mx`).
MX_FORMATS = tuple(mx.ELEMENTS)
KERNELS: dict[str, Kernel] = {k.name: k for k in (
    Kernel("gemm", "out[M,N] = lhsT[K,M].T @ rhs[K,N]; SBUF-blocked, DMA overlapped",
           ("M", "K", "N"), _MATMUL_FORMATS + MX_FORMATS, gemm, _mkn,
           lambda i: {"out": i["lhsT"].T @ i["rhs"]}, out_dtype,
           example={"M": 4096, "K": 8192, "N": 8192}),
    Kernel("gemm_rows", "out[M,N] = lhs[M,K] @ rhs[K,N]: the GEMM with lhs as stored, "
           "turned into lhsT on chip by the tensor engine", ("M", "K", "N"), _MATMUL_FORMATS,
           lambda b, m, k, n, d: gemm(b, m, k, n, d, lhs_rows=True),
           lambda s, d: {"lhs": ((s["M"], s["K"]), d), "rhs": ((s["K"], s["N"]), d)},
           lambda i: {"out": i["lhs"] @ i["rhs"]}, out_dtype,
           example={"M": 8, "K": 4096, "N": 12288},
           # the cores take the weights' columns: each streams half of them for every row
           # (M, the rows, is a decode step's batch, too few to divide)
           lnc_split="N"),
    Kernel("gemm_rows_bias_gelu", "out = gelu(lhs @ rhs + bias[N]) with lhs as stored: the "
           "vector engine adds the bias row in PSUM, the scalar engine's gelu empties it",
           ("M", "K", "N"), _MATMUL_FORMATS,
           lambda b, m, k, n, d: gemm(b, m, k, n, d, func="gelu", lhs_rows=True),
           lambda s, d: {"lhs": ((s["M"], s["K"]), d), "rhs": ((s["K"], s["N"]), d),
                         "bias": ((1, s["N"]), "fp32")},
           lambda i: {"out": _gelu(i["lhs"] @ i["rhs"] + i["bias"])}, out_dtype,
           polynomial=True, example={"M": 128, "K": 768, "N": 3072}, lnc_split="N"),
    Kernel("gemm_naive", "the same GEMM tile by tile: no blocking, no overlap",
           ("M", "K", "N"), _MATMUL_FORMATS, gemm_naive, _mkn,
           lambda i: {"out": i["lhsT"].T @ i["rhs"]}, out_dtype,
           example={"M": 512, "K": 1024, "N": 1024}),
    Kernel("gemm_bias_gelu", "out = gelu(lhsT.T @ rhs + bias[M]), fused: the scalar engine "
           "empties PSUM", ("M", "K", "N"), _MATMUL_FORMATS,
           lambda b, m, k, n, d: gemm(b, m, k, n, d, func="gelu"),
           lambda s, d: {**_mkn(s, d), "bias": ((s["M"], 1), "fp32")},
           lambda i: {"out": _gelu(i["lhsT"].T @ i["rhs"] + i["bias"])}, out_dtype,
           polynomial=True, example={"M": 4096, "K": 4096, "N": 4096}),
    Kernel("softmax", "row softmax: max-reduce, exp(x - max) with running sum, reciprocal, "
           "scale", ("R", "C"), ("fp32", "bf16"), softmax, _rc("x"),
           lambda i: {"out": _softmax(i["x"])}, polynomial=True,
           example={"R": 4096, "C": 4096}),
    Kernel("rmsnorm", "x / sqrt(mean(x^2) + 1e-6) * gamma per row", ("R", "C"),
           ("fp32", "bf16"), rmsnorm,
           lambda s, d: {**_rc("x")(s, d), "gamma": ((1, s["C"]), "fp32")},
           lambda i: {"out": _norm(i["x"], i["gamma"])}, polynomial=True,
           example={"R": 4096, "C": 4096}),
    Kernel("layernorm", "(x - mean) / sqrt(var + 1e-5) * gamma + beta per row", ("R", "C"),
           ("fp32", "bf16"), layernorm,
           lambda s, d: {**_rc("x")(s, d), "gamma": ((1, s["C"]), "fp32"),
                         "beta": ((1, s["C"]), "fp32")},
           lambda i: {"out": _norm(i["x"], i["gamma"], i["beta"])}, polynomial=True,
           example={"R": 4096, "C": 4096}),
    Kernel("attention", "B heads, flash style: softmax(q k^T / sqrt(D)) v over key blocks, "
           "online max and sum", ("B", "S", "D"), ("bf16", "fp32"), attention, _heads,
           _attention, polynomial=True, example={"B": 1, "S": 8192, "D": 128}),
    Kernel("attention_causal", "the same with a causal mask: key blocks after a query tile "
           "skipped, the diagonal blocks masked", ("B", "S", "D"), ("bf16", "fp32"),
           lambda b, nb, s, d, dt: attention(b, nb, s, d, dt, causal=True), _heads,
           lambda i: _attention(i, causal=True), polynomial=True,
           example={"B": 1, "S": 4096, "D": 128}),
    Kernel("attention_rows", "the same over B sequences of H heads, token-major as the "
           "projections write them (q, k, v, out [B*S, H*D]), each tile turned on chip; S at "
           "most one key block; a logical core's cores split the heads",
           ("H", "B", "S", "D"), ("bf16", "fp32"),
           lambda b, h, nb, s, d, dt: attention(b, nb, s, d, dt, heads=h), _token_rows,
           _attention_rows, polynomial=True, shape_reference=True,
           example={"H": 12, "B": 1, "S": 128, "D": 64}),
    Kernel("attention_rows_causal", "token-major attention with the causal mask",
           ("H", "B", "S", "D"), ("bf16", "fp32"),
           lambda b, h, nb, s, d, dt: attention(b, nb, s, d, dt, causal=True, heads=h),
           _token_rows, lambda i, shape: _attention_rows(i, shape, causal=True),
           polynomial=True, shape_reference=True, example={"H": 8, "B": 1, "S": 512, "D": 128}),
    Kernel("rmsnorm_backward", "dx of RMSNorm: rstd * (gamma dy - x_hat mean(gamma dy x_hat)), "
           "and dgamma = sum of dy x_hat over rows", ("R", "C"), ("fp32", "bf16"),
           rmsnorm_backward,
           lambda s, d: {**_rc("x", "dy")(s, d), "gamma": ((1, s["C"]), "fp32")},
           _rmsnorm_backward, polynomial=True, example={"R": 4096, "C": 4096}),
    Kernel("layernorm_backward", "dx of LayerNorm, dgamma = sum of dy x_hat and dbeta = sum "
           "of dy over rows", ("R", "C"), ("fp32", "bf16"), layernorm_backward,
           lambda s, d: {**_rc("x", "dy")(s, d), "gamma": ((1, s["C"]), "fp32")},
           _layernorm_backward, polynomial=True, example={"R": 4096, "C": 4096}),
    Kernel("logits_max", "max[R] = row max of x (the loss's first pass)", ("R", "C"),
           ("bf16", "fp32"), logits_max, _rc("x"),
           lambda i: {"max": i["x"].max(axis=1, keepdims=True)},
           out_dtype=lambda d: "fp32", example={"R": 4096, "C": 4000}),
    Kernel("cross_entropy", "exp = exp(x - max), stats = (row sum of exp, x[label]) (the "
           "loss's second pass)", ("R", "C"), ("bf16", "fp32"), cross_entropy,
           lambda s, d: {"x": ((s["R"], s["C"]), d), "labels": ((s["R"], 1), "fp32"),
                         "max": ((s["R"], 1), "fp32")},
           _cross_entropy, polynomial=True, labels=("labels",),
           example={"R": 4096, "C": 4000}),
    Kernel("cross_entropy_backward", "loss = log S + max - T, dx = exp / S - onehot(label) "
           "(the loss's last pass)", ("R", "C"), ("bf16", "fp32"), cross_entropy_backward,
           lambda s, d: {"exp": ((s["R"], s["C"]), d), "labels": ((s["R"], 1), "fp32"),
                         "stats": ((s["R"], 2), "fp32"), "max": ((s["R"], 1), "fp32")},
           _cross_entropy_backward, polynomial=True, labels=("labels",),
           positive=("exp", "stats"), example={"R": 4096, "C": 4000}),
    Kernel("residual_add", "out = x + y", ("R", "C"), ("fp32", "bf16"), residual_add,
           _rc("x", "y"), lambda i: {"out": i["x"] + i["y"]},
           example={"R": 4096, "C": 4096}),
    Kernel("gelu_backward", "dx = dy gelu'(x) = dy (Phi(x) + x phi(x)) (the plain FFN's "
           "activation)", ("R", "C"), ("bf16", "fp32"), gelu_backward, _rc("x", "dy"),
           _gelu_backward, polynomial=True, example={"R": 4096, "C": 4096}),
    Kernel("grad_accumulate", "acc_out = acc + grad: a micro-batch's gradient added to the "
           "fp32 accumulator", ("R", "C"), ("bf16", "fp32"), grad_accumulate,
           lambda s, d: {"acc": ((s["R"], s["C"]), "fp32"), "grad": ((s["R"], s["C"]), d)},
           lambda i: {"acc_out": i["acc"] + i["grad"]}, out_dtype=lambda d: "fp32",
           example={"R": 4096, "C": 4096}),
    Kernel("swiglu", "out = silu(gate) * up (the gated FFN's activation)", ("R", "C"),
           ("bf16", "fp32"), swiglu, _rc("gate", "up"),
           lambda i: {"out": _silu(i["gate"]) * i["up"]}, polynomial=True,
           example={"R": 4096, "C": 11008}),
    Kernel("swiglu_backward", "d_up = dy silu(gate), d_gate = dy up s (1 + gate (1 - s)), "
           "s = sigmoid(gate)", ("R", "C"), ("bf16", "fp32"), swiglu_backward,
           _rc("gate", "up", "dy"), _swiglu_backward, polynomial=True,
           example={"R": 4096, "C": 11008}),
    Kernel("rope", "out = x cos + rotate_half(x) sin per head (the Llama/HF convention), "
           "tables at each token's position", ("T", "H", "D"), ("bf16", "fp32"), rope,
           lambda s, d: {"x": ((s["T"], s["H"] * s["D"]), d),
                         "cos": ((s["T"], s["D"]), "fp32"), "sin": ((s["T"], s["D"]), "fp32")},
           _rope, example={"T": 4096, "H": 32, "D": 128}),
    Kernel("kv_append", "the new token's K and V written into the HBM cache in place at each "
           "sequence's position (DMA only)", ("B", "KVH", "D", "S"), ("bf16", "fp32"),
           kv_append, _kv, _kv_append, updates=("k_cache", "v_cache"),
           example={"B": 64, "KVH": 8, "D": 128, "S": 4096}),
    Kernel("kv_prefill", "a whole prompt's K and V written into positions 0 .. S-1 of the "
           "HBM cache: keys transposed on chip, stored as long runs", ("B", "KVH", "D", "S"),
           ("bf16", "fp32"), kv_prefill, _kv_prompt, _kv_prefill,
           updates=("k_cache", "v_cache"), example={"B": 1, "KVH": 8, "D": 128, "S": 4096}),
    Kernel("decode_attention", "one query per head over the KV cache in HBM, flash-decoding: "
           "chunks with online max and sum; G = H / KVH query heads share a KV head",
           ("B", "H", "KVH", "S", "D"), ("bf16", "fp32"), decode_attention,
           lambda s, d: {"q": ((s["B"] * s["H"], s["D"]), d),
                         **{n: t for n, t in _kv(s, d).items() if n.endswith("cache")}},
           _decode_attention, polynomial=True,
           example={"B": 8, "H": 32, "KVH": 8, "S": 4096, "D": 128}),
    Kernel("sample", "the top K logits of each row, values and indices (K = 1: greedy "
           "argmax), by rounds of max and mask over vocabulary tiles", ("B", "V", "K"),
           ("bf16", "fp32"), sample, lambda s, d: {"logits": ((s["B"], s["V"]), d)},
           _sample, out_dtype=lambda d: "fp32", shape_reference=True,
           example={"B": 8, "V": 128256, "K": 1}),
    Kernel("adam", "one Adam step on fp32 param, m, v from grad", ("R", "C"), ("fp32",), adam,
           _rc("param", "grad", "m", "v"), _adam, polynomial=True, positive=("v",),
           example={"R": 4096, "C": 4096}),
)}


def parse_shape(text: str, kernel: Kernel) -> dict[str, int]:
    """``"M=4096,K=8192,N=8192"`` -> ``{"M": 4096, ...}``, every key of the kernel once."""
    shape = {}
    for item in filter(None, text.replace(" ", "").split(",")):
        m = re.fullmatch(r"([A-Za-z]+)=([0-9]+)", item)
        if not m:
            raise KernelError(f"--shape must be KEY=INT,... with keys "
                              f"{', '.join(kernel.dims)}, found {item!r}")
        key, value = m.group(1).upper(), int(m.group(2))
        if key not in kernel.dims:
            raise KernelError(f"{kernel.name} takes shape keys {', '.join(kernel.dims)}, "
                              f"found {key!r}")
        if key in shape:
            raise KernelError(f"shape key {key} given twice")
        if value < 1:
            raise KernelError(f"shape {key} must be at least 1, found {value}")
        shape[key] = value
    missing = [k for k in kernel.dims if k not in shape]
    if missing:
        raise KernelError(f"{kernel.name} needs shape keys {', '.join(kernel.dims)}; "
                          f"missing {', '.join(missing)}")
    return shape


@dataclass
class Run:
    kernel: Kernel
    shape: dict
    dtype: str
    result: Result
    instructions: int
    inputs: dict = field(default_factory=dict)
    outputs: dict = field(default_factory=dict)

    def reference(self) -> dict:
        inputs = {k: v.astype(np.float64) for k, v in self.inputs.items()}
        if self.kernel.shape_reference:
            return self.kernel.reference(inputs, self.shape)
        return self.kernel.reference(inputs)


def build(params: CoreParams, kernel: Kernel, shape: dict, dtype: str) -> Builder:
    if dtype not in kernel.dtypes:
        raise KernelError(f"{kernel.name} takes dtype {', '.join(kernel.dtypes)}, "
                          f"not {dtype!r}")
    b = Builder(params)
    kernel.build(b, *(shape[k] for k in kernel.dims), dtype)
    return b


def run(params: CoreParams, kernel: Kernel, shape: dict, dtype: str, *,
        timing_only: bool = False, trace: bool = False, seed: int = 0) -> Run:
    """Build ``kernel`` for ``shape`` and run it; numeric runs draw random inputs. An input
    in an MX format is quantized (:func:`kernels.mx.quantize`) into its HBM tensor and the
    ``<name>_scale`` beside it, and ``inputs`` holds its dequantized values."""
    b = build(params, kernel, shape, dtype)
    program = b.program
    core = Core(params)
    if timing_only:
        return Run(kernel, shape, dtype, core.run(program, timing_only=True, trace=trace),
                   len(program))
    rng = np.random.default_rng(seed)
    hbm = np.zeros(program.hbm_bytes, dtype=np.uint8)
    inputs, stored = {}, set()

    def put(name, x):
        t = program.tensors[name]
        hbm[t.offset: t.offset + t.nbytes] = np.ascontiguousarray(x).view(np.uint8).reshape(-1)
        stored.add(name)

    for name, (shp, dt) in kernel.inputs(shape, dtype).items():
        x = rng.standard_normal(shp)
        if name in kernel.positive:
            x = np.abs(x)
        if name in kernel.labels:
            x = rng.integers(0, shape["C"], shp)
        if dt in MX_FORMATS:
            codes, scales = mx.quantize(x, dt)
            put(name, mx.pack(codes, dt))
            put(f"{name}_scale", scales)
            inputs[name] = mx.dequantize(codes, scales, dt)
            continue
        x = _tf32(x) if dt == "tf32" else x.astype(ML_DTYPES[dt])
        inputs[name] = x
        put(name, x)
    result = core.run(program, trace=trace, hbm=hbm, seed=seed)
    outputs = {}
    for name, t in program.tensors.items():
        if name in stored and name not in kernel.updates:
            continue
        raw = hbm[t.offset: t.offset + t.nbytes]
        outputs[name] = raw.view(ML_DTYPES[t.dtype]).reshape(t.shape).astype(np.float64)
    return Run(kernel, shape, dtype, result, len(program), inputs, outputs)
