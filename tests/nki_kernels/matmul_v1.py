"""out = lhsT.T @ rhs in NKI 0.1: K tiled by 128 into one PSUM tile per output tile."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def matmul(lhsT, rhs):
    k, m = lhsT.shape
    _, n = rhs.shape
    out = nl.ndarray((m, n), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(m // 128):
        for j in nl.affine_range(n // 512):
            acc = nl.zeros((128, 512), nl.float32, buffer=nl.psum)
            for kk in nl.affine_range(k // 128):
                a = nl.load(lhsT[kk * 128:(kk + 1) * 128, i * 128:(i + 1) * 128])
                b = nl.load(rhs[kk * 128:(kk + 1) * 128, j * 512:(j + 1) * 512])
                acc += nl.matmul(a, b, transpose_x=True)
            nl.store(out[i * 128:(i + 1) * 128, j * 512:(j + 1) * 512],
                     value=nl.copy(acc, dtype=out.dtype))
    return out


@nki.jit
def matmul_plain(x, y):
    """out = x @ y with x [M, K] not transposed: nl.matmul inserts the transpose."""
    out = nl.ndarray((x.shape[0], y.shape[1]), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.load(x)
    b = nl.load(y)
    nl.store(out, nl.copy(nl.matmul(a, b)))
    return out
