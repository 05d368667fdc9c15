"""Golden model of the engines' run-time input and output formats (:mod:`hdl.vector.convert`).

A narrow value travels in the low bits of a 32-bit lane word (``uint32``), zero above.
"""

from __future__ import annotations

import numpy as np

from hdl.numerics.cast import roundings
from hdl.numerics.constants import CANONICAL_NAN32
from hdl.numerics.formats import format_by_name
from sim.golden.numerics import cast_bits, widen


def widen_input(words, fmt: str) -> np.ndarray:
    """fp32 bits of the lane words read as ``fmt`` (exact; fp32 words unchanged)."""
    words = np.asarray(words, dtype=np.uint32)
    if fmt == "fp32":
        return words
    f = format_by_name(fmt)
    return widen(words & np.uint32((1 << f.bits) - 1), f).reshape(words.shape)


def check_rounding(rounding: str, rng: str | None) -> None:
    """Refuse a rounding the engine does not have: stochastic rounding needs a generator
    (``rng`` None: the chip's ``rounding.modes`` have none, see :func:`hdl.params.rounding_rng`)."""
    allowed = roundings(rng)
    if rounding not in allowed:
        which = "without a generator (rng None)" if rng is None else f"with generator {rng}"
        raise ValueError(f"rounding must be {' or '.join(map(repr, allowed))} on an engine "
                         f"{which}, not {rounding!r}")


def cast_output(y, fmt: str, rounding: str = "rne", rng: str | None = "xorwow", seed: int = 0,
                beat: int = 0) -> np.ndarray:
    """``(beats, lanes)`` fp32 bits ``y`` cast to ``fmt`` (``uint32`` words, the pattern in
    the low bits). Stochastic rounding reads lane ``l``'s generator (seeded by ``rng`` and
    ``seed``) from its ``beat``-th word on: ``beat`` is the number of output beats the engine
    gave since reset (its generator advances on every one, whatever the format). An engine
    without a generator (``rng`` None) refuses it, whatever the format."""
    check_rounding(rounding, rng)
    y = np.asarray(y, dtype=np.uint32)
    if fmt == "fp32":
        return np.where(np.isnan(y.view(np.float32)), CANONICAL_NAN32, y).astype(np.uint32)
    f = format_by_name(fmt)
    if rounding == "rne":
        return cast_bits(y.view(np.float32), f).astype(np.uint32)
    y2 = y.reshape(len(y), -1)
    out = cast_bits(y2.view(np.float32), f, "stochastic", seed, rng, beat)
    return out.astype(np.uint32).reshape(y.shape)
