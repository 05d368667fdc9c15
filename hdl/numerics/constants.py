"""The numerics contract's binary32 constants, as bit patterns (Python ints).

The RTL uses them as they are; the golden models take them as ``np.uint32`` scalars so that
numpy arithmetic on bit patterns stays in ``uint32``. Every NaN an engine writes is
:data:`CANONICAL_NAN32`. The activation engine's range reductions (:mod:`hdl.vector.functions`)
use the fp32 roundings (to nearest even) of the constants below them.
"""

from __future__ import annotations

import math
import struct

__all__ = ["CANONICAL_NAN32", "HALF_PI32", "INF32", "LN2_32", "LOG2E32", "MAGIC32",
           "NEG_INF32", "ONE32", "SIGN32", "SQRT2_MANT", "T_MAX32", "TWO64_32", "TWO_OVER_PI32",
           "f32_bits"]


def f32_bits(v: float) -> int:
    """The fp32 bit pattern of ``v`` (rounded to nearest even; ``v`` within fp32's range)."""
    return struct.unpack("<I", struct.pack("<f", v))[0]


CANONICAL_NAN32 = 0x7FC0_0000
SIGN32 = 0x8000_0000
ONE32 = 0x3F80_0000
INF32 = 0x7F80_0000
NEG_INF32 = 0xFF80_0000
MAGIC32 = 0x4B40_0000  # 1.5 * 2**23: adding it rounds |t| < 2**22 to an integer
LOG2E32 = f32_bits(1.0 / math.log(2.0))
LN2_32 = f32_bits(math.log(2.0))
T_MAX32 = f32_bits(192.0)
TWO64_32 = f32_bits(2.0**64)
SQRT2_MANT = 0x3504F3  # mantissa of fp32 sqrt(2) (rounded down): m >= it halves m for log
TWO_OVER_PI32 = f32_bits(2.0 / math.pi)
HALF_PI32 = f32_bits(math.pi / 2.0)
