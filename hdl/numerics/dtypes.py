"""The numpy dtypes of the formats that numpy or ``ml_dtypes`` implements, by format name.

Each dtype holds exactly the values of its :mod:`hdl.numerics.formats` format (same encoding,
same NaN and infinity rules), so a cast to it rounds as the contract's round-to-nearest-even.
Formats without one (tf32, cfp8_*, the MX formats) have no entry; an MX format's elements
have theirs in :data:`MX_ELEMENT_DTYPES`.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

__all__ = ["ML_DTYPES", "MX_ELEMENT_DTYPES"]

ML_DTYPES = {
    "fp8_e4m3": ml_dtypes.float8_e4m3,
    "fp8_e4m3fn": ml_dtypes.float8_e4m3fn,
    "fp8_e5m2": ml_dtypes.float8_e5m2,
    "bf16": ml_dtypes.bfloat16,
    "fp16": np.float16,
    "fp32": np.float32,
}

#: The ml_dtypes type of each MX format's elements (:data:`hdl.numerics.formats.MX_FORMATS`).
MX_ELEMENT_DTYPES = {
    "mxfp8": ml_dtypes.float8_e4m3fn,
    "mxfp8_e5m2": ml_dtypes.float8_e5m2,
    "mxfp4": ml_dtypes.float4_e2m1fn,
}
