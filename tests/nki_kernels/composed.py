"""Kernels of the nki.language calls the engines have no one operation for (rounding,
modulo, logic, variance, softmax, RMS norm), for trngen's tests against numpy."""

import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def rounding(x):
    """floor, ceil, trunc and sign of x, and floor into int32."""
    outs = [nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm) for _ in range(4)]
    as_int = nl.ndarray(x.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    t = nl.load(x)
    for out, fn in zip(outs, (nl.floor, nl.ceil, nl.trunc, nl.sign), strict=True):
        nl.store(out, fn(t))
    nl.store(as_int, nl.floor(t, dtype=nl.int32))
    return (*outs, as_int)


@nki.jit
def modulo(x, y):
    """nl.mod and nl.fmod of x by the number y."""
    m = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    f = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(m, nl.mod(t, y))
    nl.store(f, nl.fmod(t, y))
    return m, f


@nki.jit
def logic(a, b):
    """logical and, or, xor (one operation each) and not of a and b, and ~a (int32)."""
    outs = [nl.ndarray(a.shape, dtype=nl.uint8, buffer=nl.shared_hbm) for _ in range(4)]
    inv = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    ta, tb = nl.load(a), nl.load(b)
    nl.store(outs[0], nl.logical_and(ta, tb))
    nl.store(outs[1], nl.logical_or(ta, tb))
    nl.store(outs[2], nl.logical_xor(ta, tb))
    nl.store(outs[3], nl.logical_not(ta))
    nl.store(inv, nl.invert(ta))
    return (*outs, inv)


@nki.jit
def statistics(x, w):
    """var, softmax and rms_norm along the free axis of x [P, F] (w [1, F]), and an
    identity matrix and an expanded tile copied out."""
    v = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.shared_hbm)
    s = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    eye = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.shared_hbm)
    t = nl.load(x)
    nl.store(v, nl.expand_dims(nl.var(t, axis=1), 1))
    nl.store(s, nl.softmax(t, axis=1))
    nl.store(r, nl.rms_norm(t, nl.load(w), axis=1, n=x.shape[1]))
    nl.store(eye, nl.load(nl.shared_identity_matrix(128, dtype=nl.float32)))
    return v, s, r, eye


@nki.jit
def with_numbers(x, i):
    """A bf16 tile times 1.1 and an int8 tile plus 2, their results' types NKI's (the
    numbers weakly typed: float32 and int32), stored as they come."""
    t = nl.multiply(nl.load(x), 1.1)
    u = nl.add(nl.load(i), 2)
    a = nl.ndarray(x.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    b = nl.ndarray(i.shape, dtype=u.dtype, buffer=nl.shared_hbm)
    nl.store(a, t)
    nl.store(b, u)
    return a, b


@nki.jit
def halves(i):
    """An int32 tile divided by the integer 2: a true division, float32."""
    out = nl.ndarray(i.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    q = nl.load(i) / 2
    assert q.dtype == nl.float32
    nl.store(out, q)
    return out
