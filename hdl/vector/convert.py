"""Run-time input and output formats of the vector and scalar engines.

Both engines read their inputs and write their outputs in the format an instruction names,
chosen at run time among the engine's ``formats`` (``"fp32"`` and float formats of
:mod:`hdl.numerics.formats` narrower than fp32). A narrow value travels in the low bits of a
32-bit lane word, zero above.

* Input: the word's low ``bits`` are widened to fp32 exactly (:class:`~hdl.numerics.fpu.Widen`:
  every value kept, NaN canonical); fp32 words pass unchanged.
* Output: the fp32 result is cast to the instruction's format with round-to-nearest-even or
  stochastic rounding (:class:`~hdl.numerics.cast.FormatCastLane`), the lane's generator
  advancing once per output beat whatever the format.

The golden counterparts are :func:`sim.golden.numerics.widen` and
:func:`sim.golden.numerics.cast_bits`.
"""

from __future__ import annotations

from amaranth.hdl import Mux, Signal

from hdl.numerics.formats import FloatFormat, format_by_name
from hdl.numerics.fpu import Widen, WidenParams

__all__ = ["ENGINE_FORMATS", "check_formats", "widen_input"]

#: The formats both engines read and write unless told otherwise: every float type the core
#: simulator computes on (tf32's code in the lane word's low bits, as any narrow value).
ENGINE_FORMATS = ("fp32", "bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "tf32")


def check_formats(formats) -> None:
    """Raise ``ValueError`` unless ``formats`` is a non-empty tuple of distinct names of fp32
    or float formats narrower than fp32."""
    if not isinstance(formats, tuple) or not formats or len(set(formats)) != len(formats):
        raise ValueError(f"formats must be a non-empty tuple of distinct format names, "
                         f"not {formats!r}")
    for name in formats:
        if name == "fp32":
            continue
        try:
            fmt = format_by_name(name)
        except ValueError:
            fmt = None
        if not isinstance(fmt, FloatFormat) or fmt.bits >= 32:
            raise ValueError("formats must name 'fp32' or float formats narrower than fp32, "
                             f"not {name!r}")


def widen_input(m, formats: tuple[str, ...], word, select, prefix: str = "in"):
    """fp32 bits of the 32-bit lane ``word`` read as ``formats[select]`` (combinational);
    the widening units are submodules ``{prefix}_widen_{format}`` of ``m``."""
    out = Signal(32, name=f"{prefix}_widened")
    value = word
    for index, name in enumerate(formats):
        if name == "fp32":
            continue
        fmt = format_by_name(name)
        m.submodules[f"{prefix}_widen_{name}"] = unit = Widen(WidenParams(fmt=fmt))
        m.d.comb += unit.x.eq(word[:fmt.bits])
        value = Mux(select == index, unit.y, value)
    m.d.comb += out.eq(value)
    return out
