"""iota and affine_select in NKI 0.2's form (dst first, access patterns), for trngen's
tests."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def iota_pattern():
    out = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.ndarray((128, 64), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(t, [[-1, 64]], offset=3, channel_multiplier=2)
    nisa.dma_copy(out, t)
    return out


@nki.jit
def causal(x, fill):
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    r = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(t, x)
    nisa.affine_select(r, [[-1, 128]], 1, t, fill, cmp_op=nl.greater_equal)
    nisa.dma_copy(out, r)
    return out
