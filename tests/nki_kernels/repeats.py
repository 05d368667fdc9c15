"""Kernels that compute a value more than once, for trngen's test that the compiler
computes a repeated instruction once (``Tracer.merge_repeats``)."""

import neuronxcc.nki as nki
import neuronxcc.nki.isa as nisa
import neuronxcc.nki.language as nl


@nki.jit
def invariant_product(x, y, s):
    """``sum_j (x * y) * s[:, j]``, the product ``x * y`` written inside the loop though it
    does not depend on ``j`` (as the Mamba tutorial's v2 computes ``delta * u`` in its state
    loop)."""
    out = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    tx = nl.load(x)
    ty = nl.load(y)
    acc = nl.zeros(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    for j in nl.affine_range(s.shape[1]):
        sj = nl.load(s[:, j])
        xy = nisa.tensor_tensor(tx, ty, op=nl.multiply)
        acc += nl.multiply(xy, sj)
    nl.store(out, acc)
    return out


@nki.jit
def written_between(x):
    """``exp(x)``, then ``exp(2x)`` twice: the tile is doubled in place between the first
    two, so only the third repeats; ``x`` loaded twice, the loads kept."""
    first = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    second = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    third = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    u = nl.load(x)
    nl.store(first, nl.exp(t))
    t[...] = nl.add(t, u)
    nl.store(second, nl.exp(t))
    nl.store(third, nl.exp(t))
    return first, second, third
