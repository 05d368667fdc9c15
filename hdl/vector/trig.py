"""Constants of the scalar engine's exact argument reduction for sin and cos.

For ``|x| >= 0.5`` (unbiased exponent ``e >= E_MIN``) the engine computes ``|x| * 2/pi``
modulo 4 in fixed point, exactly enough for every fp32 input (Payne and Hanek's method):
``|x| = M * 2**(e - 23)`` with the 24-bit integer ``M``, and ``W(e)`` (:func:`window`) the
:data:`WINDOW_BITS` bits of ``2/pi`` that can reach the quadrant and the first
:data:`FRACTION_BITS` bits of the fraction. The integer product ``M * W(e)`` holds
``|x| * 2/pi`` modulo 4 with :data:`FRACTION_BITS` fraction bits, its error below
``2**(24 - FRACTION_BITS)``. Over all fp32 inputs from 0.5 up, ``|x| * 2/pi`` comes no nearer
to an integer than about ``2**-29.9`` (at ``x = 16367173 * 2**72``), so the fraction keeps at
least 26 correct bits after its leading one: enough for every bit of its fp32 value.

The bits of ``2/pi`` come from ``pi`` computed in integer arithmetic (Machin's formula), so
they are exact and need no table typed in by hand.
"""

from __future__ import annotations

import functools
import math

#: Fraction bits of the fixed-point reduced argument.
FRACTION_BITS = 80
#: Bits of the window of 2/pi: two quadrant bits above the fraction.
WINDOW_BITS = FRACTION_BITS + 2
#: Smallest unbiased exponent of ``|x|`` reduced exactly; below it (``|x| < 0.5 < pi/4``) the
#: quadrant is 0 and the fraction is ``mul32(|x|, 2/pi)``.
E_MIN = -1
E_MAX = 127
#: Position (below the binary point) of the last bit of 2/pi that :data:`TWO_OVER_PI_BITS`
#: keeps: the last one the window at ``E_MAX`` reads.
LAST_BIT = E_MAX - 23 + FRACTION_BITS


def _arctan_inv(n: int, one: int) -> int:
    """``arctan(1/n) * one`` (truncated series; ``one`` a large power of two)."""
    total = term = one // n
    n2, k, sign = n * n, 1, -1
    while term:
        term //= n2
        k += 2
        total += sign * (term // k)
        sign = -sign
    return total


@functools.cache
def two_over_pi_bits(bits: int) -> int:
    """``floor(2/pi * 2**bits)``, exact (pi by Machin's formula with 64 guard bits)."""
    guard = bits + 64
    one = 1 << guard
    pi = 16 * _arctan_inv(5, one) - 4 * _arctan_inv(239, one)  # error: a few units of 2**-guard
    value = (2 << (2 * guard)) // pi  # 2/pi * 2**guard
    out = value >> (guard - bits)
    if not math.isclose(out / 2.0**bits, 2 / math.pi, rel_tol=1e-15):
        raise AssertionError("2/pi bits do not match math.pi")
    return out


#: ``floor(2/pi * 2**LAST_BIT)``: the bits of 2/pi down to :data:`LAST_BIT`.
TWO_OVER_PI_BITS = two_over_pi_bits(LAST_BIT)


def window(e: int) -> int:
    """The :data:`WINDOW_BITS` bits of 2/pi that multiply the mantissa of ``|x|`` with the
    unbiased exponent ``e`` (``E_MIN <= e <= E_MAX``): ``floor(2/pi * 2**(e - 23 +
    FRACTION_BITS)) mod 2**WINDOW_BITS``."""
    return (TWO_OVER_PI_BITS >> (E_MAX - e)) & ((1 << WINDOW_BITS) - 1)
