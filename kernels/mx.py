"""Block-scaled MX tensors on the host: quantized as the OCP MX specification v1.0 does, stored
as the core's quad types and scales (:data:`hdl.core.isa.MX_DTYPES`).

A logical ``K x F`` matrix (``K`` the contraction axis) is stored in HBM as two tensors:

* the data, ``K / 4 x F`` elements of the quad type: element ``[r, f]`` holds the codes of
  rows ``4r .. 4r + 3`` (code ``i`` in byte ``i``, or nibble ``i`` for fp4), so that a run of
  ``P`` quad rows DMAed into ``P`` partitions is an MX tile as LoadStationary and
  MultiplyMoving read it, contraction index ``4p + i``;
* the scales, ``K / 32 x F`` uint8 E8M0 codes, row ``b`` for rows ``32b .. 32b + 31``: one
  block of 32 is 8 quad rows, the group of 8 partitions that shares a scale in SBUF. NKI's
  offline MX weights are kept the same way, the scales contiguous in HBM and spread over the
  quadrants on the way into SBUF [NKI-MX].
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hdl.core.isa import DTYPES, MX_DTYPES, MX_QUAD
from hdl.numerics.dtypes import MX_ELEMENT_DTYPES
from hdl.numerics.formats import E8M0_BIAS, MX_FORMATS

__all__ = ["ELEMENTS", "MX_BLOCK", "dequantize", "pack", "quad_type", "quantize"]

#: The ml_dtypes type of each MX format's elements.
ELEMENTS = MX_ELEMENT_DTYPES
#: Contraction elements per scale.
MX_BLOCK = MX_FORMATS["mxfp8"].block


def quad_type(fmt: str) -> str:
    """The instruction set's quad type of MX format ``fmt``."""
    return {f: t for t, f in MX_DTYPES.items()}[fmt]


def quantize(x: np.ndarray, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """``(codes, scales)`` of the ``K x F`` float array ``x`` (``K`` a multiple of 32) in MX
    format ``fmt``: per block of 32 rows and column, the shared exponent
    ``floor(log2(amax)) - emax`` of the element format (``-127`` for an all-zero block), the
    elements ``x / 2**shared`` clamped to the largest finite element and rounded to nearest
    even (OCP MX v1.0, section 6.3). ``codes`` (K x F, uint8) and ``scales`` (K / 32 x F,
    uint8 E8M0)."""
    f = MX_FORMATS[fmt]
    x = np.asarray(x, dtype=np.float64)
    k = x.shape[0]
    if k % MX_BLOCK:
        raise ValueError(f"K must be a multiple of {MX_BLOCK}, not {k}")
    blocks = x.reshape(k // MX_BLOCK, MX_BLOCK, -1)
    shared = f.shared_exponents(np.abs(blocks).max(axis=1))
    scaled = np.clip(blocks / np.ldexp(1.0, shared)[:, None, :], -f.max_finite, f.max_finite)
    codes = scaled.reshape(k, -1).astype(ELEMENTS[fmt]).view(np.uint8)
    return codes & np.uint8((1 << f.bits) - 1), (shared + E8M0_BIAS).astype(np.uint8)


def dequantize(codes: np.ndarray, scales: np.ndarray, fmt: str) -> np.ndarray:
    """The float64 values of MX ``codes`` (K x F) and their ``scales`` (K / 32 x F), from
    ml_dtypes' element and ``float8_e8m0fnu`` types."""
    values = np.asarray(codes, np.uint8).view(ELEMENTS[fmt]).astype(np.float64)
    scale = np.asarray(scales, np.uint8).view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    return values * np.repeat(scale, MX_BLOCK, axis=0)[:values.shape[0]]


def pack(codes: np.ndarray, fmt: str) -> np.ndarray:
    """The ``K / 4 x F`` quad words of MX ``codes`` (K x F), rows ``4r + i`` in code ``i``."""
    dtype = quad_type(fmt)
    bits = 8 * DTYPES[dtype][1] // MX_QUAD
    quad = np.asarray(codes, np.uint32).reshape(-1, MX_QUAD, codes.shape[1])
    words = sum(quad[:, i] << np.uint32(bits * i) for i in range(MX_QUAD))
    return words.astype(np.uint32 if DTYPES[dtype][1] == 4 else np.uint16)
