"""Fitting of the scalar (activation) engine's piecewise polynomials.

* :func:`fit_function` / :func:`activation_table` compute the scalar engine's piecewise
  polynomials from each :class:`~hdl.vector.functions.FunctionSpec` (range, segments, degree):
  a weighted least-squares fit in float64 per segment (relative error weighted, over Chebyshev
  nodes of the segment), coefficients rounded to fp32. The table is the ROM content of the RTL
  and the data of the golden model.
* :data:`EXACT_FUNCTIONS` are the exact functions in float64 (numpy / scipy.special), the
  reference of the fit and of the accuracy figures; :func:`accuracy_points` the inputs at which
  the accuracy is measured: every binade of fp32 and every segment of the table.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy import special

from .functions import EXP_TAIL, GELU_SIGMOID, TRIG, FunctionSpec


def _div_x(f, limit):
    def g(x):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(x == 0.0, limit, f(x) / np.where(x == 0.0, 1.0, x))
    return g


_GELU_TANH_2C = 2.0 * np.sqrt(2.0 / np.pi)

# The exact functions (float64), the reference of the fit and of the accuracy figures.
EXACT_FUNCTIONS = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0.0),
    "exp": np.exp,
    "gelu": lambda x: x * special.ndtr(x),
    "silu": lambda x: x * special.expit(x),
    "sigmoid": special.expit,
    "tanh": np.tanh,
    "softplus": lambda x: np.logaddexp(0.0, x),
    "erf": special.erf,
    "reciprocal": lambda x: 1.0 / x,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "sqrt": np.sqrt,
    "log": np.log,
    "square": np.square,
    "abs": np.abs,
    "mish": lambda x: x * np.tanh(np.logaddexp(0.0, x)),
    "gelu_tanh": lambda x: x * special.expit(_GELU_TANH_2C * (x + 0.044715 * x**3)),
    "sin": np.sin,
    "cos": np.cos,
    "arctan": np.arctan,
    "gelu_sigmoid": lambda x: x * special.expit(GELU_SIGMOID * x),
    "silu_dx": lambda x: special.expit(x) * (1.0 + x * special.expit(-x)),
    "gelu_sigmoid_dx": lambda x: special.expit(GELU_SIGMOID * x)
    * (1.0 + GELU_SIGMOID * x * special.expit(-GELU_SIGMOID * x)),
    "gelu_dx": lambda x: special.ndtr(x) + x * np.exp(-0.5 * x * x) / np.sqrt(2.0 * np.pi),
    "erf_dx": lambda x: 2.0 / np.sqrt(np.pi) * np.exp(-x * x),
}

# f(x)/x for the functions fitted with post_mul_x (the limit at 0 filled in).
_OVER_X = {
    "gelu": special.ndtr,
    "silu": special.expit,
    "tanh": _div_x(np.tanh, 1.0),
    "erf": _div_x(special.erf, 2.0 / np.sqrt(np.pi)),
    "mish": lambda x: np.tanh(np.logaddexp(0.0, x)),
    "gelu_tanh": lambda x: special.expit(_GELU_TANH_2C * (x + 0.044715 * x**3)),
    "gelu_sigmoid": lambda x: special.expit(GELU_SIGMOID * x),
}


# The kernels of the reduced sin, cos (sine then cosine kernel, of the quarter-turn fraction
# f) and arctan (arctan(r)/r).
_KERNELS = {
    "sin": (_div_x(lambda f: np.sin(np.pi / 2 * f), np.pi / 2), lambda f: np.cos(np.pi / 2 * f)),
    "arctan": (_div_x(np.arctan, 1.0),),
}
_KERNELS["cos"] = _KERNELS["sin"]


def _targets(spec: FunctionSpec) -> tuple:
    """The functions fitted by ``spec``'s tables, one per block of ``segments`` rows."""
    if spec.name in _KERNELS:
        return _KERNELS[spec.name]
    return (_target(spec),)


def _target(spec: FunctionSpec):
    if spec.name == "exp":
        return np.exp2  # of the reduced argument: exp(x) = 2**k * 2**f
    if spec.post_mul_x:
        if spec.name in _OVER_X:
            return _OVER_X[spec.name]
        return _div_x(EXACT_FUNCTIONS[spec.name], 0.0)
    return EXACT_FUNCTIONS[spec.name]


def _f32(v) -> np.ndarray:
    return np.asarray(v, dtype=np.float64).astype(np.float32)


def segment_bounds(spec: FunctionSpec) -> np.ndarray:
    """``(rows, 3)`` float64 array of each segment's ``[start, end)`` and fp32 centre."""
    if spec.mode == "uniform":
        w = (spec.hi - spec.lo) / spec.segments
        i = np.arange(spec.segments, dtype=np.float64)
        a = spec.lo + i * w
        b = a + w
        c = _f32(spec.lo + (i + 0.5) * w).astype(np.float64)
    else:
        e0 = int(round(np.log2(spec.lo)))
        k = spec.segments
        j, p = np.divmod(np.arange(spec.rows), k)
        base = np.ldexp(1.0, e0 + j)
        a = base * (1.0 + p / k)
        b = base * (1.0 + (p + 1) / k)
        c = (a + b) / 2.0  # exact in fp32: one more mantissa bit than the segment index
    if spec.anchor is not None:
        c = np.where((a == spec.anchor) | (b == spec.anchor), float(spec.anchor), c)
    out = np.stack([a, b, c], axis=1)
    return np.concatenate([out, out]) if spec.name in TRIG else out


def fit_function(spec: FunctionSpec) -> np.ndarray:
    """Coefficients of ``spec``'s segments: ``(rows, degree + 1)`` float32, ``c_0`` first.

    Segment ``i`` approximates ``f(c_i + u)`` (or ``f(c_i + u) / (c_i + u)`` with
    ``post_mul_x``) for ``u`` over the segment, extended by 1 % of its width on either side
    in uniform mode (where fp32 rounding of ``t`` can move a point across a boundary).
    """
    if spec.mode == "exact":
        return np.zeros((0, 1), dtype=np.float32)
    targets = _targets(spec)
    d = spec.degree
    bounds = segment_bounds(spec)
    n_nodes = max(4 * (d + 1), 24)
    s = np.cos(np.pi * (np.arange(n_nodes) + 0.5) / n_nodes)  # Chebyshev nodes in (-1, 1)
    coeffs = np.empty((len(bounds), d + 1), dtype=np.float32)
    margin = 0.01 if spec.mode == "uniform" else 0.0
    for r, (a, b, c) in enumerate(bounds):
        g = targets[r // spec.segments] if len(targets) > 1 else targets[0]
        anchor_value = None if spec.anchor is None else float(g(np.float64(spec.anchor)))
        at_anchor = spec.anchor is not None and spec.anchor in (a, b)
        if at_anchor:
            c = float(spec.anchor)
        m = margin * (b - a)
        ua, ub = a - m - c, b + m - c
        h = max(abs(ua), abs(ub))
        x = c + (ua + ub) / 2 + s * (ub - ua) / 2
        v = (x - c) / h
        y = g(x)
        scale = np.max(np.abs(y))
        wgt = 1.0 / np.maximum(np.abs(y), 1e-12 * scale if scale > 0 else 1.0)
        vander = np.vander(v, d + 1, increasing=True)
        if at_anchor:  # c_0 = f(anchor) exactly; fit the rest
            vander[:, 0] = 0.0
            y = y - anchor_value
        sol, *_ = np.linalg.lstsq(vander * wgt[:, None], y * wgt, rcond=None)
        if at_anchor:
            sol[0] = anchor_value
        coeffs[r] = _f32(sol / h ** np.arange(d + 1))
    return coeffs


@dataclass(frozen=True)
class FunctionTable:
    """One function's ROM rows: fp32 bit patterns of the centres and the coefficients.

    ``shared`` names the earlier function whose rows these are (the ROM holds them once; see
    :func:`activation_table`), or is None when the function holds its own.
    """

    spec: FunctionSpec
    base: int  # first ROM row
    centres: np.ndarray  # (rows,) uint32
    coeffs: np.ndarray  # (rows, degree + 1) uint32, c_0 first
    shared: str | None = None

    @property
    def rows(self) -> int:
        """ROM rows this function adds (0 when it reads another's)."""
        return 0 if self.shared else self.spec.rows


def _fit_key(spec: FunctionSpec):
    """What fixes a table's contents: two functions of one key fit the same rows. sin and
    cos fit the same two kernels (:data:`~hdl.vector.functions.TRIG`); every other function
    fits its own."""
    name = "trig" if spec.name in TRIG else spec.name
    return (name, spec.mode, spec.lo, spec.hi, spec.segments, spec.degree, spec.anchor,
            spec.post_mul_x)


def tail_functions(functions: tuple[FunctionSpec, ...]) -> tuple[FunctionSpec, ...]:
    """``functions`` plus, when one of them takes the ``below="exp"`` rule and none is exp,
    the exp table that rule reads (:data:`~hdl.vector.functions.EXP_TAIL`), last."""
    names = [f.name for f in functions]
    if "exp" not in names and any(f.mode != "exact" and f.below == "exp" for f in functions):
        return (*functions, EXP_TAIL)
    return functions


def exp_index(functions: tuple[FunctionSpec, ...]) -> int | None:
    """Index in :func:`tail_functions` of the exp table (None when nothing reads it)."""
    names = [f.name for f in tail_functions(functions)]
    return names.index("exp") if "exp" in names else None


@functools.lru_cache(maxsize=16)
def activation_table(functions: tuple[FunctionSpec, ...]) -> tuple[FunctionTable, ...]:
    """The ROM layout of a function set: rows of all functions concatenated, in order,
    then the exp table of the ``below="exp"`` rule if the set has no exp of its own (see
    :func:`tail_functions`). A function whose table equals an earlier one's (sin and cos of
    the same range, segments and degree) reads that one's rows instead of adding its own."""
    out = []
    base = 0
    held: dict = {}
    for spec in tail_functions(functions):
        key = _fit_key(spec) if spec.rows else None
        if key in held:
            first = held[key]
            out.append(FunctionTable(spec, first.base, first.centres, first.coeffs,
                                     shared=first.spec.name))
            continue
        c = fit_function(spec).view(np.uint32)
        centres = _f32(segment_bounds(spec)[:, 2]).view(np.uint32) if spec.rows else \
            np.zeros(0, dtype=np.uint32)
        c.setflags(write=False)
        centres.setflags(write=False)
        out.append(FunctionTable(spec, base, centres, c))
        if key is not None:
            held[key] = out[-1]
        base += spec.rows
    return tuple(out)


def rom_words(functions: tuple[FunctionSpec, ...]) -> tuple[int, list[int]]:
    """``(degree, words)``: the ROM as integers, row = centre | c_0 << 32 | ... | c_D << 32(D+1).

    ``degree`` is the largest degree of the set; lower-degree functions get zero leading
    coefficients (an exact no-op in Horner's scheme).
    """
    tables = activation_table(functions)
    degree = max((t.spec.degree for t in tables if t.spec.rows), default=0)
    words = []
    for t in tables:
        for r in range(t.rows):
            word = int(t.centres[r])
            for k in range(t.spec.degree + 1):
                word |= int(t.coeffs[r, k]) << (32 * (k + 1))
            words.append(word)
    return degree, words


def binade_points(rng: np.random.Generator, per_binade: int) -> np.ndarray:
    """fp32 values drawn uniformly from every binade of fp32, both signs: ``per_binade``
    from each of the 254 normal binades and of the 23 subnormal ones (``[2**j, 2**(j+1))``
    times ``2**-149``), plus both zeros and both infinities."""
    field = np.arange(1, 255, dtype=np.uint32)
    mant = rng.integers(0, 1 << 23, (field.size, per_binade), dtype=np.uint32)
    normal = (field[:, None] << 23) | mant
    j = np.arange(23, dtype=np.uint32)[:, None]
    sub = (np.uint32(1) << j) | (rng.integers(0, 1 << 22, (23, per_binade), dtype=np.uint32)
                                 & ((np.uint32(1) << j) - np.uint32(1)))
    mags = np.concatenate([normal.ravel(), sub.ravel(),
                           np.array([0, 0x7F800000], dtype=np.uint32)])
    return np.concatenate([mags, mags | np.uint32(0x80000000)]).view(np.float32)


def accuracy_points(spec: FunctionSpec, per_segment: int = 65, per_binade: int = 64,
                    seed: int = 0) -> np.ndarray:
    """fp32 inputs at which ``spec``'s accuracy is measured: :func:`binade_points` and, for a
    fitted function, a grid over every segment of its table plus each boundary +- 2 ulps (of
    the reduced argument ``m`` for the reduced functions, taken at ``x = m`` and ``x = -m``,
    for exp at ``x = f * ln 2``, for sin and cos at ``x = (f + q) * pi/2`` for a few small and
    large ``q`` and next to every multiple of ``pi/2`` up to ``4096 pi/2``, for arctan at
    ``+-r`` and ``+-1/r``)."""
    x = binade_points(np.random.default_rng(seed), per_binade)
    if spec.mode == "exact":
        return np.unique(x[np.isfinite(x)])
    bounds = segment_bounds(spec)
    grid = bounds[:, :1] + (bounds[:, 1:2] - bounds[:, :1]) * np.linspace(0, 1, per_segment)
    edges = _f32(bounds[:, 0])
    near = [np.nextafter(edges, np.float32(np.inf)), np.nextafter(edges, np.float32(-np.inf))]
    inner = np.concatenate([_f32(grid.ravel()), *near,
                            np.nextafter(near[0], np.float32(np.inf))])
    inner = inner[(inner >= np.float32(spec.lo)) & (inner < np.float32(spec.hi))]
    if spec.name == "exp":
        inner = _f32(inner * np.log(2.0))
    elif spec.name in TRIG:  # f in quarter turns, in the first quadrants and far out
        turns = np.concatenate([np.arange(8.0), 2.0 ** np.arange(4, 120, 7)])
        x_f = (inner[:, None].astype(np.float64) + turns) * (np.pi / 2)
        near = _f32(np.arange(1, 4097) * (np.pi / 2))  # next to the zeros of sin and cos
        inner = np.concatenate([_f32(x_f.ravel()), near, np.nextafter(near, np.float32(0)),
                                np.nextafter(near, np.float32(np.inf))])
        inner = np.concatenate([inner, -inner])
    elif spec.name == "arctan":  # r and 1/r
        inner = inner[inner >= 2.0**-126]
        inner = np.concatenate([inner, _f32(1.0 / inner.astype(np.float64))])
        inner = np.concatenate([inner, -inner])
    elif spec.reduced:
        inner = np.concatenate([inner, -inner])
    x = np.concatenate([x, inner])
    return np.unique(x[np.isfinite(x)])
