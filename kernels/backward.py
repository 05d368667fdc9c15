"""Kernels of a training step's backward pass and loss, row-wise on ``[R, C]`` (rows on
partitions in tiles of 128, columns on the free axis), double-buffered like :mod:`.norms`.

- :func:`rmsnorm_backward`: ``dx`` of ``y = x * rstd * gamma``,
  ``rstd = 1 / sqrt(mean(x^2) + eps)``:
  ``dx = rstd * (gamma * dy - x_hat * mean(gamma * dy * x_hat))``, ``x_hat = x * rstd``.
  (``dgamma``, a sum over rows, is left to the caller.)
- :func:`cross_entropy`: the loss against a target distribution ``y`` per row and its
  gradient in one pass: ``loss = sum(y) * logsumexp(x) - sum(x * y)``,
  ``dx = softmax(x) * sum(y) - y`` (for a one-hot ``y``, ``-log softmax(x)[label]`` and
  ``softmax(x) - y``).
"""

from __future__ import annotations

from hdl.core.isa import Activation, DmaCopy, Memset, TensorReduce, TensorScalar, TensorTensor
from hdl.vector.ops import Reduce, VectorOp

from .builder import Builder
from .norms import _broadcast, _load, _Rows, _rows

__all__ = ["cross_entropy", "rmsnorm_backward"]


def rmsnorm_backward(b: Builder, r: int, c: int, dtype: str = "fp32",
                     eps: float = 1e-6) -> None:
    tiles = _rows(b, r, c, dtype)
    x, dy = b.hbm("x", (r, c), dtype), b.hbm("dy", (r, c), dtype)
    gamma = b.hbm("gamma", (1, c), "fp32")
    dx = b.hbm("dx", (r, c), dtype)
    w = _Rows(b, c, dtype, ("x", "dy", "dx"), 2)
    p = b.params.partitions
    g_base = b.sbuf(c * 4, "gamma")
    eps_col = b.column(b.sbuf(4, "eps"), p)
    rsqrt = b.function("rsqrt")
    _broadcast(b, "dma3", gamma, p, b.tile("sbuf", "fp32", g_base, p, ((c, 1),)))
    b.emit("gpsimd", Memset(dst=eps_col, value=eps))
    consts = [b.signal("dma3"), b.signal("gpsimd")]
    b.wait("vector", *consts)
    b.wait("scalar", *consts)
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa, da, oa = (w.tile(w.io[n][h], rows, dtype) for n in ("x", "dy", "dx"))
        b.wait("dma0", w.free[h])
        _load(b, "dma0", x, r0, rows, xa)
        b.wait("dma2", w.free[h])
        _load(b, "dma2", dy, r0, rows, da)
        b.wait("vector", b.signal("dma0"))
        s2, rstd, s, ms = (w.col(h, j, rows) for j in range(4))
        b.emit("vector", TensorReduce(dst=s2, src=xa, op=VectorOp.SQUARE, reduce=Reduce.SUM))
        b.wait("scalar", b.signal("vector"))
        b.emit("scalar", Activation(dst=rstd, src=s2, func=rsqrt, scale=1 / c,
                                    bias=b.column(eps_col.offset, rows)))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"))
        xh, gdy = w.tile(w.work[h][0], rows), w.tile(w.work[h][1], rows)
        g = b.tile("sbuf", "fp32", g_base, rows, ((c, 1),))
        b.emit("vector", TensorScalar(dst=xh, src=xa, op0=VectorOp.MULTIPLY, operand0=rstd))
        b.emit("vector", TensorTensor(dst=gdy, a=da, b=g, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=oa, a=gdy, b=xh, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorReduce(dst=s, src=oa, reduce=Reduce.SUM))
        b.emit("vector", TensorScalar(dst=ms, src=s, op0=VectorOp.MULTIPLY, imm0=-1 / c))
        b.emit("vector", TensorScalar(dst=xh, src=xh, op0=VectorOp.MULTIPLY, operand0=ms))
        b.emit("vector", TensorTensor(dst=xh, a=xh, b=gdy, op=VectorOp.ADD))
        b.emit("vector", TensorScalar(dst=oa, src=xh, op0=VectorOp.MULTIPLY, operand0=rstd))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=dx.ap((r0, r0 + rows)), src=oa))
        w.free[h] = b.signal("dma1")


def cross_entropy(b: Builder, r: int, c: int, dtype: str = "fp32") -> None:
    tiles = _rows(b, r, c, dtype)
    x, y = b.hbm("x", (r, c), dtype), b.hbm("y", (r, c), "fp32")
    dx = b.hbm("dx", (r, c), dtype)
    loss = b.hbm("loss", (r, 1), "fp32")
    w = _Rows(b, c, dtype, ("x", "dx"), 2)
    y_io = [b.sbuf(c * 4, "y") for _ in range(2)]
    exp, log, recip = b.function("exp"), b.function("log"), b.function("reciprocal")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa, oa = w.tile(w.io["x"][h], rows, dtype), w.tile(w.io["dx"][h], rows, dtype)
        ya = w.tile(y_io[h], rows)
        b.wait("dma0", w.free[h])
        _load(b, "dma0", x, r0, rows, xa)
        b.wait("dma2", w.free[h])
        _load(b, "dma2", y, r0, rows, ya)
        b.wait("vector", b.signal("dma0"))
        mx, neg, total, inv, lse, sy, sxy, out = (w.col(h, j, rows) for j in range(8))
        b.emit("vector", TensorReduce(dst=mx, src=xa, reduce=Reduce.MAX))
        b.emit("vector", TensorScalar(dst=neg, src=mx, op0=VectorOp.MULTIPLY, imm0=-1.0))
        b.wait("scalar", b.signal("vector"))
        e = w.tile(w.work[h][0], rows)
        b.emit("scalar", Activation(dst=e, src=xa, func=exp, bias=neg, reduce_dst=total))
        b.emit("scalar", Activation(dst=inv, src=total, func=recip))
        b.emit("scalar", Activation(dst=lse, src=total, func=log))
        done = b.signal("scalar")
        b.wait("vector", b.signal("dma2"))
        xy = w.tile(w.work[h][1], rows)
        b.emit("vector", TensorReduce(dst=sy, src=ya, reduce=Reduce.SUM))
        b.emit("vector", TensorTensor(dst=xy, a=xa, b=ya, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorReduce(dst=sxy, src=xy, reduce=Reduce.SUM))
        b.wait("vector", done)
        b.emit("vector", TensorScalar(dst=e, src=e, op0=VectorOp.MULTIPLY, operand0=inv,
                                      op1=VectorOp.MULTIPLY, operand1=sy))
        b.emit("vector", TensorTensor(dst=oa, a=e, b=ya, op=VectorOp.SUBTRACT))
        b.emit("vector", TensorTensor(dst=lse, a=lse, b=mx, op=VectorOp.ADD))
        b.emit("vector", TensorTensor(dst=lse, a=lse, b=sy, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=out, a=lse, b=sxy, op=VectorOp.SUBTRACT))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=dx.ap((r0, r0 + rows)), src=oa))
        b.emit("dma1", DmaCopy(dst=loss.ap((r0, r0 + rows)), src=out))
        w.free[h] = b.signal("dma1")
