"""The same matmul as matmul_v1.py in NKI 0.2: destinations first, nisa.dma_copy."""

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def matmul(lhsT, rhs):
    k, m = lhsT.shape
    _, n = rhs.shape
    out = nl.ndarray((m, n), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // 128):
        for j in nl.affine_range(n // 512):
            acc = nl.ndarray((128, 512), nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(k // 128):
                a = nl.ndarray((128, 128), lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((128, 512), rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[kk * 128:(kk + 1) * 128, i * 128:(i + 1) * 128])
                nisa.dma_copy(dst=b, src=rhs[kk * 128:(kk + 1) * 128, j * 512:(j + 1) * 512])
                nisa.nc_matmul(acc, a, b)
            res = nl.ndarray((128, 512), out.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(res, acc)
            nisa.dma_copy(dst=out[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512], src=res)
    return out
