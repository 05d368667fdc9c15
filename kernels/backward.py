"""Kernels of a training step's backward pass and loss, row-wise on ``[R, C]`` (rows on
partitions in tiles of 128, columns on the free axis), double-buffered like :mod:`.norms`.

- :func:`rmsnorm_backward`: ``dx`` of ``y = x * rstd * gamma``,
  ``rstd = 1 / sqrt(mean(x^2) + eps)``:
  ``dx = rstd * (gamma * dy - x_hat * mean(gamma * dy * x_hat))``, ``x_hat = x * rstd``,
  and the weight gradient ``dgamma = sum over rows of dy * x_hat``: accumulated per row tile
  in SBUF by the vector engine, then summed over the partitions by the tensor engine (a
  matmul by a column of ones).
- :func:`layernorm_backward`: the same for ``y = (x - mean) * rstd * gamma + beta``:
  ``dx = rstd * (gamma dy - mean(gamma dy) - x_hat * mean(gamma dy x_hat))``,
  ``dgamma`` as above and ``dbeta = sum over rows of dy``.
- :func:`gelu_backward`: ``dx = dy * gelu'(x)`` of the plain FFN's activation.
- the vocabulary-parallel cross-entropy loss over a rank's ``C`` columns of the logits (as
  Megatron-LM splits it), three passes with an all-reduce between each: :func:`logits_max`
  (row max; all-reduce max), :func:`cross_entropy` (``exp(x - max)``, its row sum and the
  target's logit; all-reduce sum), :func:`cross_entropy_backward` (``loss = log S + max -
  x[label]``, ``dx = exp / S - onehot(label)``). Labels are class indices local to the
  rank's columns, as fp32 (exact below 2^24); the one-hot comes from GpSimd's iota.
"""

from __future__ import annotations

import math

from hdl.core.isa import (
    Activation,
    DmaCopy,
    Iota,
    LoadStationary,
    Memset,
    MultiplyMoving,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
)
from hdl.vector.ops import Reduce, VectorOp

from .builder import Builder, psum_columns
from .norms import RowBuffers, broadcast_row, load_rows, row_tiles

__all__ = ["cross_entropy", "cross_entropy_backward", "gelu_backward", "layernorm_backward",
           "logits_max", "rmsnorm_backward"]


def _partition_sum(b: Builder, acc: int, c: int, out, queue: str) -> None:
    """``out[0, :] = sum over the partitions of acc[:, :c]`` (fp32 in SBUF): a matmul by a
    column of ones per PSUM bank's width (the tensor engine sums over its contraction, the
    partition axis), emptied by the vector engine and stored by ``queue``. On a core with
    more partitions than the array has rows (the simulation scale), the partitions past the
    rows are first folded onto the first ones: ``queue`` copies each further block of rows
    partitions to partition 0 (DMA starts at any partition, the engines at multiples of 32)
    and the vector engine adds it in."""
    p = b.params.partitions
    k = min(p, b.params.rows)
    width = psum_columns(b.params)
    if p > k:
        fold = b.sbuf(c * 4, "partition fold")
        for j0 in range(k, p, k):
            n = min(k, p - j0)
            b.wait(queue, b.signal("vector"))   # the sums, and the fold buffer free
            part = b.tile("sbuf", "fp32", fold, n, ((c, 1),))
            b.emit(queue, DmaCopy(dst=part, src=b.tile("sbuf", "fp32", acc, n, ((c, 1),),
                                                        partition=j0)))
            b.wait("vector", b.signal(queue))
            head = b.tile("sbuf", "fp32", acc, n, ((c, 1),))
            b.emit("vector", TensorTensor(dst=head, a=head, b=part, op=VectorOp.ADD))
    ones = b.sbuf(4, "ones")
    rows = [b.sbuf(width * 4, "partition sum") for _ in range(2)]
    banks = b.psum_banks(2, "partition sum")
    b.emit("gpsimd", Memset(dst=b.column(ones, k), value=1.0))
    b.wait("tensor", b.signal("gpsimd"), b.signal("vector"))
    b.emit("tensor", LoadStationary(src=b.tile("sbuf", "fp32", ones, k, ((1, 1),))))
    free = [None, None]
    for i, c0 in enumerate(range(0, c, width)):
        n, h = min(width, c - c0), i % 2
        psum = b.tile("psum", "fp32", banks[h], 1, ((n, 1),))
        row = b.tile("sbuf", "fp32", rows[h], 1, ((n, 1),))
        b.wait("tensor", free[h])
        b.emit("tensor", MultiplyMoving(dst=psum, src=b.tile("sbuf", "fp32", acc + c0 * 4, k,
                                                             ((n, 1),))))
        b.wait("vector", b.signal("tensor"))
        b.emit("vector", TensorCopy(dst=row, src=psum))
        b.wait(queue, b.signal("vector"))
        b.emit(queue, DmaCopy(dst=out.ap((0, 1), (c0, c0 + n)), src=row))
        free[h] = b.signal(queue)


def _norm_backward(b: Builder, r: int, c: int, dtype: str, centre: bool, eps: float) -> None:
    tiles = row_tiles(b, r, c, dtype)
    p = b.params.partitions
    x, dy = b.hbm("x", (r, c), dtype), b.hbm("dy", (r, c), dtype)
    gamma = b.hbm("gamma", (1, c), "fp32")
    dx = b.hbm("dx", (r, c), dtype)
    dgamma = b.hbm("dgamma", (1, c), "fp32")
    dbeta = b.hbm("dbeta", (1, c), "fp32") if centre else None
    w = RowBuffers(b, c, dtype, ("x", "dy", "dx"), 2)
    g_base = b.sbuf(c * 4, "gamma")
    acc_g = b.sbuf(c * 4, "dgamma accumulator")
    acc_b = b.sbuf(c * 4, "dbeta accumulator") if centre else 0
    eps_col = b.column(b.sbuf(4, "eps"), p)
    rsqrt = b.function("rsqrt")
    broadcast_row(b, "dma3", gamma, p, b.tile("sbuf", "fp32", g_base, p, ((c, 1),)))
    b.emit("gpsimd", Memset(dst=eps_col, value=eps))
    for acc in (acc_g, acc_b) if centre else (acc_g,):
        b.emit("gpsimd", Memset(dst=b.tile("sbuf", "fp32", acc, p, ((c, 1),)), value=0.0))
    consts = [b.signal("dma3"), b.signal("gpsimd")]
    b.wait("vector", *consts)
    b.wait("scalar", *consts)
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa, da, oa = (w.tile(w.io[n][h], rows, dtype) for n in ("x", "dy", "dx"))
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", x, r0, rows, xa)
        b.wait("dma2", w.free[h])
        load_rows(b, "dma2", dy, r0, rows, da)
        b.wait("vector", b.signal("dma0"))
        s2, rstd, s, ms, s1, mean, sg, mg = (w.col(h, j, rows) for j in range(8))
        xh, t = (w.tile(w.work[h][j], rows) for j in range(2))
        xc = xa
        if centre:
            b.emit("vector", TensorReduce(dst=s1, src=xa, reduce=Reduce.SUM))
            b.emit("vector", TensorScalar(dst=mean, src=s1, op0=VectorOp.MULTIPLY, imm0=1 / c))
            xc = xh
            b.emit("vector", TensorScalar(dst=xc, src=xa, op0=VectorOp.SUBTRACT,
                                          operand0=mean))
        b.emit("vector", TensorReduce(dst=s2, src=xc, op=VectorOp.SQUARE, reduce=Reduce.SUM))
        b.wait("scalar", b.signal("vector"))
        b.emit("scalar", Activation(dst=rstd, src=s2, func=rsqrt, scale=1 / c,
                                    bias=b.column(eps_col.offset, rows)))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"))
        g = b.tile("sbuf", "fp32", g_base, rows, ((c, 1),))
        b.emit("vector", TensorScalar(dst=xh, src=xc, op0=VectorOp.MULTIPLY, operand0=rstd))
        # the weight gradients: dgamma += dy * x_hat, dbeta += dy (summed over rows at the
        # end); then gamma * dy * x_hat in place for the row mean
        ag = b.tile("sbuf", "fp32", acc_g, rows, ((c, 1),))
        b.emit("vector", TensorTensor(dst=t, a=da, b=xh, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=ag, a=ag, b=t, op=VectorOp.ADD))
        if centre:
            ab = b.tile("sbuf", "fp32", acc_b, rows, ((c, 1),))
            b.emit("vector", TensorTensor(dst=ab, a=ab, b=da, op=VectorOp.ADD))
        b.emit("vector", TensorTensor(dst=t, a=t, b=g, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorReduce(dst=s, src=t, reduce=Reduce.SUM))
        b.emit("vector", TensorScalar(dst=ms, src=s, op0=VectorOp.MULTIPLY, imm0=-1 / c))
        gdy = t
        b.emit("vector", TensorTensor(dst=gdy, a=da, b=g, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorScalar(dst=xh, src=xh, op0=VectorOp.MULTIPLY, operand0=ms))
        b.emit("vector", TensorTensor(dst=xh, a=xh, b=gdy, op=VectorOp.ADD))
        if centre:
            b.emit("vector", TensorReduce(dst=sg, src=gdy, reduce=Reduce.SUM))
            b.emit("vector", TensorScalar(dst=mg, src=sg, op0=VectorOp.MULTIPLY, imm0=-1 / c))
            b.emit("vector", TensorScalar(dst=oa, src=xh, op0=VectorOp.ADD, operand0=mg,
                                          op1=VectorOp.MULTIPLY, operand1=rstd))
        else:
            b.emit("vector", TensorScalar(dst=oa, src=xh, op0=VectorOp.MULTIPLY,
                                          operand0=rstd))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=dx.ap((r0, r0 + rows)), src=oa))
        w.free[h] = b.signal("dma1")
    _partition_sum(b, acc_g, c, dgamma, "dma3")
    if centre:
        _partition_sum(b, acc_b, c, dbeta, "dma3")


def rmsnorm_backward(b: Builder, r: int, c: int, dtype: str = "fp32",
                     eps: float = 1e-6) -> None:
    """``dx`` of RMSNorm and the weight gradient ``dgamma``."""
    _norm_backward(b, r, c, dtype, False, eps)


def layernorm_backward(b: Builder, r: int, c: int, dtype: str = "fp32",
                       eps: float = 1e-5) -> None:
    """``dx`` of LayerNorm and the weight gradients ``dgamma`` and ``dbeta``."""
    _norm_backward(b, r, c, dtype, True, eps)


def gelu_backward(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    """``dx = dy * gelu'(x)``, ``gelu'(x) = Phi(x) + x phi(x)``, from the pre-activation
    ``x`` the forward kept. The element-wise work is split between the engines by their
    cost: the scalar engine (one input) squares, ``phi = exp(-x^2 / 2 - log sqrt(2 pi))``,
    ``erf(x / sqrt 2)`` and ``Phi = erf / 2 + 1 / 2``; the vector engine (two inputs, twice
    the cycles) ``x phi``, the sum and the product with ``dy``."""
    tiles = row_tiles(b, r, c, dtype)
    x, dy = b.hbm("x", (r, c), dtype), b.hbm("dy", (r, c), dtype)
    dx = b.hbm("dx", (r, c), dtype)
    w = RowBuffers(b, c, dtype, ("x", "dy", "dx"), 2)
    p = b.params.partitions
    erf, exp = b.function("erf"), b.function("exp")
    square, identity = b.function("square"), b.function("identity")
    consts = {"log": -0.5 * math.log(2 * math.pi), "half": 0.5}
    col = {k: b.column(b.sbuf(4, k), p) for k in consts}
    for k, v in consts.items():
        b.emit("gpsimd", Memset(dst=col[k], value=v))
    b.wait("scalar", b.signal("gpsimd"))
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa, da, oa = (w.tile(w.io[n][h], rows, dtype) for n in ("x", "dy", "dx"))
        cdf, pdf = w.tile(w.work[h][0], rows), w.tile(w.work[h][1], rows)
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", x, r0, rows, xa)
        b.wait("dma2", w.free[h])
        load_rows(b, "dma2", dy, r0, rows, da)
        b.wait("scalar", b.signal("dma0"))
        b.emit("scalar", Activation(dst=pdf, src=xa, func=square))
        b.emit("scalar", Activation(dst=pdf, src=pdf, func=exp, scale=-0.5,
                                    bias=b.column(col["log"].offset, rows)))
        b.emit("scalar", Activation(dst=cdf, src=xa, func=erf, scale=2 ** -0.5))
        b.emit("scalar", Activation(dst=cdf, src=cdf, func=identity, scale=0.5,
                                    bias=b.column(col["half"].offset, rows)))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"))
        b.emit("vector", TensorTensor(dst=pdf, a=pdf, b=xa, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=cdf, a=cdf, b=pdf, op=VectorOp.ADD))
        b.emit("vector", TensorTensor(dst=oa, a=cdf, b=da, op=VectorOp.MULTIPLY))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=dx.ap((r0, r0 + rows)), src=oa))
        w.free[h] = b.signal("dma1")


def _labels(b: Builder, c: int):
    """The column indices ``0 .. C-1`` in every partition (fp32, from GpSimd's iota): a row's
    one-hot target is ``iota == label``."""
    p = b.params.partitions
    base = b.sbuf(c * 4, "column indices")
    b.emit("gpsimd", Iota(dst=b.tile("sbuf", "fp32", base, p, ((c, 1),)), base=0, pstep=0,
                          step=1))
    return base


def logits_max(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    """``max[r] = max over the row of x``: the first pass of a vocabulary-parallel loss,
    whose result is all-reduced (max) over the ranks that share the vocabulary."""
    tiles = row_tiles(b, r, c, dtype)
    x, mx = b.hbm("x", (r, c), dtype), b.hbm("max", (r, 1), "fp32")
    w = RowBuffers(b, c, dtype, ("x",), 0)
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa = w.tile(w.io["x"][h], rows, dtype)
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", x, r0, rows, xa)
        b.wait("vector", b.signal("dma0"))
        b.emit("vector", TensorReduce(dst=w.col(h, 0, rows), src=xa, reduce=Reduce.MAX))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=mx.ap((r0, r0 + rows)), src=w.col(h, 0, rows)))
        w.free[h] = b.signal("dma1")


def cross_entropy(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    """The second pass, given the all-reduced row ``max``: ``exp = exp(x - max)`` (kept for
    the backward) with its row sum, and the target's logit ``x[label]`` (0 where the label
    lies outside these ``C`` columns): ``stats = (sum, target)``, all-reduced (sum) next."""
    tiles = row_tiles(b, r, c, dtype)
    x, lab = b.hbm("x", (r, c), dtype), b.hbm("labels", (r, 1), "fp32")
    mx = b.hbm("max", (r, 1), "fp32")
    e_out, stats = b.hbm("exp", (r, c), dtype), b.hbm("stats", (r, 2), "fp32")
    w = RowBuffers(b, c, dtype, ("x", "exp"), 1)
    iota = _labels(b, c)
    b.wait("vector", b.signal("gpsimd"))
    exp = b.function("exp")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        xa, ea = w.tile(w.io["x"][h], rows, dtype), w.tile(w.io["exp"][h], rows, dtype)
        label, m, neg, total, tgt = (w.col(h, j, rows) for j in range(5))
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", x, r0, rows, xa)
        b.wait("dma2", w.free[h])
        load_rows(b, "dma2", lab, r0, rows, label)
        load_rows(b, "dma2", mx, r0, rows, m)
        b.wait("vector", b.signal("dma2"))
        b.emit("vector", TensorScalar(dst=neg, src=m, op0=VectorOp.MULTIPLY, imm0=-1.0))
        b.wait("scalar", b.signal("vector"), b.signal("dma0"))
        b.emit("scalar", Activation(dst=ea, src=xa, func=exp, bias=neg, reduce_dst=total))
        b.wait("vector", b.signal("dma0"))
        oh = w.tile(w.work[h][0], rows)
        b.emit("vector", TensorScalar(dst=oh, src=b.tile("sbuf", "fp32", iota, rows,
                                                         ((c, 1),)),
                                      op0=VectorOp.IS_EQUAL, operand0=label))
        b.emit("vector", TensorTensor(dst=oh, a=oh, b=xa, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorReduce(dst=tgt, src=oh, reduce=Reduce.SUM))
        b.wait("dma1", b.signal("vector"), b.signal("scalar"))
        b.emit("dma1", DmaCopy(dst=e_out.ap((r0, r0 + rows)), src=ea))
        b.emit("dma1", DmaCopy(dst=stats.ap((r0, r0 + rows), (0, 1)), src=total))
        b.emit("dma1", DmaCopy(dst=stats.ap((r0, r0 + rows), (1, 2)), src=tgt))
        w.free[h] = b.signal("dma1")


def cross_entropy_backward(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    """The last pass, given the all-reduced ``stats = (S, T)`` and ``max``:
    ``loss = log S + max - T`` and ``dx = exp / S - onehot(label)``."""
    tiles = row_tiles(b, r, c, dtype)
    e_in, lab = b.hbm("exp", (r, c), dtype), b.hbm("labels", (r, 1), "fp32")
    st, mx = b.hbm("stats", (r, 2), "fp32"), b.hbm("max", (r, 1), "fp32")
    dx, loss = b.hbm("dx", (r, c), dtype), b.hbm("loss", (r, 1), "fp32")
    w = RowBuffers(b, c, dtype, ("exp", "dx"), 2)
    pair = [b.sbuf(8, "stats") for _ in range(2)]
    iota = _labels(b, c)
    b.wait("vector", b.signal("gpsimd"))
    log, recip = b.function("log"), b.function("reciprocal")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        ea, oa = w.tile(w.io["exp"][h], rows, dtype), w.tile(w.io["dx"][h], rows, dtype)
        label, m, inv, lse, out = (w.col(h, j, rows) for j in range(5))
        total, tgt = b.column(pair[h], rows), b.column(pair[h] + 4, rows)
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", e_in, r0, rows, ea)
        b.wait("dma2", w.free[h])
        load_rows(b, "dma2", st, r0, rows, b.tile("sbuf", "fp32", pair[h], rows, ((2, 1),)))
        load_rows(b, "dma2", lab, r0, rows, label)
        load_rows(b, "dma2", mx, r0, rows, m)
        stats_in = b.signal("dma2")
        b.wait("scalar", stats_in)
        b.emit("scalar", Activation(dst=inv, src=total, func=recip))
        b.emit("scalar", Activation(dst=lse, src=total, func=log))
        b.wait("vector", stats_in, b.signal("scalar"), b.signal("dma0"))
        oh, t = w.tile(w.work[h][0], rows), w.tile(w.work[h][1], rows)
        b.emit("vector", TensorScalar(dst=oh, src=b.tile("sbuf", "fp32", iota, rows,
                                                         ((c, 1),)),
                                      op0=VectorOp.IS_EQUAL, operand0=label))
        b.emit("vector", TensorScalar(dst=t, src=ea, op0=VectorOp.MULTIPLY, operand0=inv))
        b.emit("vector", TensorTensor(dst=oa, a=t, b=oh, op=VectorOp.SUBTRACT))
        b.emit("vector", TensorScalar(dst=out, src=lse, op0=VectorOp.ADD, operand0=m,
                                      op1=VectorOp.SUBTRACT, operand1=tgt))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=dx.ap((r0, r0 + rows)), src=oa))
        b.emit("dma1", DmaCopy(dst=loss.ap((r0, r0 + rows)), src=out))
        w.free[h] = b.signal("dma1")
