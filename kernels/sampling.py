"""The sampling step of decode: the top ``K`` logits of each of ``B`` rows over a vocabulary of
``V`` (``K = 1``: greedy argmax), their values and their indices.

Shape keys ``B`` (rows on partitions, tiles of 128), ``V`` and ``K``. ``logits[B, V]`` in
the kernel's format; ``values[B, K]`` and ``indices[B, K]`` in fp32 (the values exactly as
the logits hold them, the indices as whole numbers, exact below 2^24), in order of
descending value, equal values by ascending index (as numpy's stable sort orders them).

The ISA has a maximum reduction but no arg-max or top-k instruction, so each pick is a
maximum and a mask: per vocabulary tile of up to 4,096 columns, ``K`` rounds of the row
maximum (a reduce), the lowest index holding it (``x == max`` times a descending iota, whose
maximum is the lowest such index: a compare, a multiply, a reduce) and, between rounds, that
one element set to -3e38 (a compare of the iota and an add); the tiles' picks are the
candidates of a last ``K`` rounds of the same kind. About eight passes over the tile per
round, so meant for small ``K``.
"""

from __future__ import annotations

from hdl.core.isa import DmaCopy, Iota, TensorCopy, TensorReduce, TensorScalar, TensorTensor
from hdl.vector.ops import Reduce, VectorOp

from .builder import Builder, KernelError, itemsize

__all__ = ["VOCAB_TILE", "sample"]

#: Vocabulary columns per tile: its double-buffered load and three fp32 work tiles stay
#: within any generation's SBUF.
VOCAB_TILE = 4096
#: The value a picked element is masked to (below any finite logit of bf16 or fp32 data).
_MASKED = -3e38


def sample(b: Builder, nb: int, v: int, k: int, dtype: str = "bf16") -> None:
    """Rows in tiles of 128, the vocabulary in tiles of :data:`VOCAB_TILE` loaded on two DMA
    queues by turns, the rounds on the vector engine; the descending iota is built once
    (GpSimd)."""
    for name, val in (("B", nb), ("V", v), ("K", k)):
        if not isinstance(val, int) or val < 1:
            raise KernelError(f"{name} must be a positive integer, not {val!r}")
    if k > v:
        raise KernelError(f"K must be at most V={v} (the picks are distinct indices), not {k}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    p = b.params.partitions
    es = itemsize(dtype)
    w_max = min(v, VOCAB_TILE)
    vtiles = [(v0, min(w_max, v - v0)) for v0 in range(0, v, w_max)]
    picks = [min(k, w) for _, w in vtiles]
    nc = sum(picks)
    if nc > 64 * 1024:
        raise KernelError(f"K x vocabulary tiles must be at most 65536 candidates, not {nc}")
    logits = b.hbm("logits", (nb, v), dtype)
    values, indices = b.hbm("values", (nb, k), "fp32"), b.hbm("indices", (nb, k), "fp32")
    x_sb = [b.sbuf(w_max * es, "logits tile") for _ in range(2)]
    xf = b.sbuf(w_max * 4, "masked logits")
    work = b.sbuf(max(w_max, nc) * 4, "work")
    rev = b.sbuf(w_max * 4, "descending iota")
    cand = {n: b.sbuf(nc * 4, n) for n in ("cand values", "cand rev")}
    outs = {n: b.sbuf(k * 4, n) for n in ("values", "indices")}
    cols = {n: b.sbuf(4, n) for n in ("max", "r")}
    # rev[i] = w_max - i: the highest among the maxima is the lowest index
    b.emit("gpsimd", Iota(dst=b.tile("sbuf", "fp32", rev, p, ((w_max, 1),)), base=w_max,
                          step=-1))
    b.wait("vector", b.signal("gpsimd"))

    def rounds(rows, x, rv, n, picks, take):
        """``picks`` rounds over ``x`` (``n`` columns, ``rv`` its descending indices);
        ``take(i, mx, r)`` stores round ``i``'s maximum and its ``rv``; between rounds the
        pick is masked in ``x``."""
        mx, r = b.column(cols["max"], rows), b.column(cols["r"], rows)
        wk = b.tile("sbuf", "fp32", work, rows, ((n, 1),))
        for i in range(picks):
            b.emit("vector", TensorReduce(dst=mx, src=x, reduce=Reduce.MAX))
            b.emit("vector", TensorScalar(dst=wk, src=x, op0=VectorOp.IS_EQUAL, operand0=mx))
            b.emit("vector", TensorTensor(dst=wk, a=wk, b=rv, op=VectorOp.MULTIPLY))
            b.emit("vector", TensorReduce(dst=r, src=wk, reduce=Reduce.MAX))
            take(i, mx, r)
            if i + 1 < picks:
                b.emit("vector", TensorScalar(dst=wk, src=rv, op0=VectorOp.IS_EQUAL,
                                              operand0=r, op1=VectorOp.MULTIPLY, imm1=_MASKED))
                b.emit("vector", TensorTensor(dst=x, a=x, b=wk, op=VectorOp.ADD))

    read = [None, None]
    sent = None
    n = 0
    for r0 in range(0, nb, p):
        rows = min(p, nb - r0)
        cv, cr = (b.tile("sbuf", "fp32", cand[c], rows, ((nc, 1),))
                  for c in ("cand values", "cand rev"))
        c0 = 0
        for (v0, w), kp in zip(vtiles, picks, strict=True):
            h = n % 2
            q = f"dma{h}"
            xt = b.tile("sbuf", dtype, x_sb[h], rows, ((w, 1),))
            b.wait(q, read[h])
            b.emit(q, DmaCopy(dst=xt, src=logits.ap((r0, r0 + rows), (v0, v0 + w))))
            b.wait("vector", b.signal(q))
            x = xt
            if kp > 1:  # a working copy to mask
                x = b.tile("sbuf", "fp32", xf, rows, ((w, 1),))
                b.emit("vector", TensorCopy(dst=x, src=xt))
            rv = b.tile("sbuf", "fp32", rev, rows, ((w, 1),))

            def take(i, mx, r, c0=c0, v0=v0, rows=rows):
                # the candidate's descending index over the whole vocabulary: V - index
                b.emit("vector", TensorCopy(dst=b.column(cand["cand values"] + (c0 + i) * 4,
                                                         rows), src=mx))
                b.emit("vector", TensorScalar(dst=b.column(cand["cand rev"] + (c0 + i) * 4,
                                                           rows), src=r, op0=VectorOp.ADD,
                                              imm0=float(v - v0 - w_max)))

            rounds(rows, x, rv, w, kp, take)
            read[h] = b.signal("vector")
            c0 += kp
            n += 1
        ov, oi = (b.tile("sbuf", "fp32", outs[c], rows, ((k, 1),)) for c in ("values", "indices"))
        b.wait("vector", sent)

        def final(i, mx, r, rows=rows):
            b.emit("vector", TensorCopy(dst=b.column(outs["values"] + i * 4, rows), src=mx))
            b.emit("vector", TensorScalar(dst=b.column(outs["indices"] + i * 4, rows), src=r,
                                          op0=VectorOp.MULTIPLY, imm0=-1.0, op1=VectorOp.ADD,
                                          imm1=float(v)))

        rounds(rows, cv, cr, nc, k, final)
        b.wait("dma2", b.signal("vector"))
        b.emit("dma2", DmaCopy(dst=values.ap((r0, r0 + rows)), src=ov))
        b.emit("dma2", DmaCopy(dst=indices.ap((r0, r0 + rows)), src=oi))
        sent = b.signal("dma2")
