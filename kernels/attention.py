"""Attention heads in flash style: ``out = softmax(q k^T / sqrt(D)) v`` for ``S`` queries
and keys of width ``D`` (at most 128) per head, ``B`` heads (or sequences x heads) in one
kernel, keys in blocks so that no ``S x S`` matrix exists.

Inputs as the tensor engine wants them, head after head: ``qT[B * D, S]``, ``kT[B * D, S]``
(transposed) and ``v[B * S, D]``; ``out[B * S, D]``.
Per query tile of 128 rows and key block of 512: scores ``q k^T`` into PSUM (tensor), the block's
row max and the running max (vector), ``p = exp(s / sqrt(D) - max)`` with its row sum and the
correction ``exp(max_old - max_new)`` (scalar), ``p`` transposed through the array (tensor)
and copied to SBUF in bf16 (vector), ``p v`` (tensor), then ``l = l * corr + rowsum`` and
``o = o * corr + p v`` (vector); at the end ``out = o / l``. The next block's scores are issued
before this block's transposes, into the other PSUM buffer, and key/value blocks are
double-buffered on four DMA queues.
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
    Transpose,
)
from hdl.vector.ops import Reduce, VectorOp

from .builder import Builder, KernelError, itemsize

__all__ = ["KEY_BLOCK", "attention"]

#: Keys per block: one PSUM bank of fp32 scores.
KEY_BLOCK = 512


def attention(b: Builder, nb: int, s: int, d: int, dtype: str = "bf16", *,
              causal: bool = False) -> None:
    """``nb`` heads one after another in one kernel (the pipeline runs on from one head's
    last key block into the next head's first); with ``causal``, query ``i`` sees keys
    ``0 .. i`` only: key blocks wholly after a query tile are skipped, and a block that
    straddles its diagonal has an additive mask (0 or -1e30, built once per distinct offset
    by GpSimd's iota and the vector engine) added to its scores by the vector engine before
    the max and the exp."""
    p = b.params
    for name, v in (("B", nb), ("S", s), ("D", d)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if d > min(p.rows, p.partitions):
        raise KernelError(f"D must be at most {min(p.rows, p.partitions)}, not {d}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    es = itemsize(dtype)
    tq = min(p.cols, p.partitions)
    chunk = min(p.rows, p.cols)  # keys per transpose and per p v pass
    q_t, k_t = b.hbm("qT", (nb * d, s), dtype), b.hbm("kT", (nb * d, s), dtype)
    v = b.hbm("v", (nb * s, d), dtype)
    out = b.hbm("out", (nb * s, d), dtype)
    scale = 1.0 / math.sqrt(d)
    exp = b.function("exp")
    recip = b.function("reciprocal")
    blocks = all_blocks = [(o, min(KEY_BLOCK, s - o)) for o in range(0, s, KEY_BLOCK)]
    q_sb = b.sbuf(tq * es, "q tile")
    k_sb = [b.sbuf(KEY_BLOCK * es, "k block") for _ in range(2)]
    v_sb = [b.sbuf(KEY_BLOCK // chunk * d * es, "v block") for _ in range(2)]
    p_sb = [b.sbuf(KEY_BLOCK * es, "p") for _ in range(2)]
    pt_sb = b.sbuf(KEY_BLOCK // chunk * tq * es, "p transposed")
    o_acc = b.sbuf(d * 4, "o accumulator")
    o_out = b.sbuf(d * es, "o out")
    cols = {n: b.sbuf(4, n) for n in ("m", "m_new", "neg", "diff", "corr", "rowsum", "l",
                                      "bmax", "inv")}
    s_ps = b.psum_banks(2, "scores")
    pt_ps = b.psum_banks(1, "p transposed")[0]
    o_ps = b.psum_banks(1, "p v")[0]

    def col(n, rows):
        return b.column(cols[n], rows)

    masks: dict[int, int] = {}
    m_sb = [b.sbuf(KEY_BLOCK * 4, "masked scores") for _ in range(2)] if causal else []
    if causal:
        for q0 in range(0, s, tq):
            for k0, kb in blocks:
                if q0 < k0 + kb - 1 and k0 <= q0 + min(tq, s - q0) - 1 \
                        and k0 - q0 not in masks:
                    # mask[i, j] = -1e30 where key k0 + j follows query q0 + i, else 0
                    base = masks[k0 - q0] = b.sbuf(KEY_BLOCK * 4, "causal mask")
                    t = b.tile("sbuf", "fp32", base, tq, ((KEY_BLOCK, 1),))
                    b.emit("gpsimd", Iota(dst=t, base=k0 - q0, pstep=-1, step=1))
                    b.wait("vector", b.signal("gpsimd"))
                    b.emit("vector", TensorScalar(dst=t, src=t, op0=VectorOp.GREATER, imm0=0.0,
                                                  op1=VectorOp.MULTIPLY, imm1=-1e30))

    kv_free = [None, None]
    s_free = [None, None]
    out_free = None
    block_no = 0
    def load(j: int, first: int, loaded: list, blocks: list, head: int) -> None:
        """Keys and values of block ``j``: one DMA each (the values' whole chunks in one
        strided transfer), on two queues of their own so that their latencies overlap."""
        k0, kb = blocks[j]
        h = (first + j) % 2
        qk, qv = f"dma{1 + 2 * h}", f"dma{2 + 2 * h}"
        b.wait(qk, kv_free[h])
        b.emit(qk, DmaCopy(dst=b.tile("sbuf", dtype, k_sb[h], d, ((kb, 1),)),
                           src=k_t.ap((head * d, head * d + d), (k0, k0 + kb))))
        k0 += head * s  # the head's rows of v
        b.wait(qv, kv_free[h])
        whole = kb // chunk
        if whole:
            b.emit(qv, DmaCopy(
                dst=b.tile("sbuf", dtype, v_sb[h], chunk, ((whole, d), (d, 1))),
                src=b.tile("hbm", dtype, v.offset + k0 * d * es, chunk,
                           ((whole, chunk * d), (d, 1)), pstride=d * es)))
        if kb % chunk:
            c0 = whole * chunk
            b.emit(qv, DmaCopy(dst=b.tile("sbuf", dtype, v_sb[h] + whole * d * es, kb - c0,
                                          ((d, 1),)), src=v.ap((k0 + c0, k0 + kb))))
        loaded.append((b.signal(qk), b.signal(qv)))

    def scores(j: int, first: int, loaded: list, qp: int, blocks: list):
        kb = blocks[j][1]
        h = (first + j) % 2
        b.wait("tensor", *loaded[j], s_free[h])
        b.emit("tensor", LoadStationary(src=b.tile("sbuf", dtype, q_sb, d, ((qp, 1),))))
        b.emit("tensor", MultiplyMoving(dst=b.tile("psum", "fp32", s_ps[h], qp, ((kb, 1),)),
                                        src=b.tile("sbuf", dtype, k_sb[h], d, ((kb, 1),))))
        return b.signal("tensor")

    for head, q0 in ((hd, q0) for hd in range(nb) for q0 in range(0, s, tq)):
        qp = min(tq, s - q0)
        blocks = [(k0, kb) for k0, kb in all_blocks if not causal or k0 <= q0 + qp - 1]
        b.wait("dma0", out_free)
        b.emit("dma0", DmaCopy(dst=b.tile("sbuf", dtype, q_sb, d, ((qp, 1),)),
                               src=q_t.ap((head * d, head * d + d), (q0, q0 + qp))))
        q_ready = b.signal("dma0")
        b.wait("vector", out_free)
        b.emit("vector", Memset(dst=col("m", qp), value=-1e30))
        b.emit("vector", Memset(dst=col("l", qp), value=0.0))
        b.emit("vector", Memset(dst=b.tile("sbuf", "fp32", o_acc, qp, ((d, 1),)), value=0.0))
        b.wait("tensor", q_ready)
        loaded = []

        load(0, block_no, loaded, blocks, head)
        pending = scores(0, block_no, loaded, qp, blocks)
        for j, (k0, kb) in enumerate(blocks):
            h = (block_no + j) % 2
            s_tile = b.tile("psum", "fp32", s_ps[h], qp, ((kb, 1),))
            b.wait("vector", pending)
            if causal and q0 < k0 + kb - 1:
                masked = b.tile("sbuf", "fp32", m_sb[h], qp, ((kb, 1),))
                b.emit("vector", TensorTensor(dst=masked, a=s_tile, op=VectorOp.ADD,
                                              b=b.tile("sbuf", "fp32", masks[k0 - q0], qp,
                                                       ((kb, 1),))))
                s_tile = masked
            b.emit("vector", TensorReduce(dst=col("bmax", qp), src=s_tile, reduce=Reduce.MAX))
            b.emit("vector", TensorScalar(dst=col("bmax", qp), src=col("bmax", qp),
                                          op0=VectorOp.MULTIPLY, imm0=scale))
            b.emit("vector", TensorTensor(dst=col("m_new", qp), a=col("m", qp),
                                          b=col("bmax", qp), op=VectorOp.MAX))
            b.emit("vector", TensorScalar(dst=col("neg", qp), src=col("m_new", qp),
                                          op0=VectorOp.MULTIPLY, imm0=-1.0))
            b.emit("vector", TensorTensor(dst=col("diff", qp), a=col("m", qp),
                                          b=col("m_new", qp), op=VectorOp.SUBTRACT))
            b.wait("scalar", b.signal("vector"))
            p_tile = b.tile("sbuf", dtype, p_sb[h], qp, ((kb, 1),))
            b.emit("scalar", Activation(dst=p_tile, src=s_tile, func=exp, scale=scale,
                                        bias=col("neg", qp), reduce_dst=col("rowsum", qp)))
            b.emit("scalar", Activation(dst=col("corr", qp), src=col("diff", qp), func=exp))
            s_free[h] = exped = b.signal("scalar")
            if j + 1 < len(blocks):
                load(j + 1, block_no, loaded, blocks, head)
                pending = scores(j + 1, block_no, loaded, qp, blocks)
            b.wait("tensor", exped)
            parts = [(c, c0, min(chunk, kb - c0)) for c, c0 in enumerate(range(0, kb, chunk))]
            for c, c0, rows in parts:
                b.emit("tensor", Transpose(
                    dst=b.tile("psum", dtype, pt_ps + c * tq * 4, rows, ((qp, 1),)),
                    src=b.tile("sbuf", dtype, p_sb[h] + c0 * es, qp, ((rows, 1),))))
            b.wait("vector", b.signal("tensor"))
            for c, _, rows in parts:
                b.emit("vector", TensorCopy(
                    dst=b.tile("sbuf", dtype, pt_sb + c * tq * es, rows, ((qp, 1),)),
                    src=b.tile("psum", dtype, pt_ps + c * tq * 4, rows, ((qp, 1),))))
            b.wait("tensor", b.signal("vector"))
            o_tile = b.tile("psum", "fp32", o_ps, qp, ((d, 1),))
            for c, _, rows in parts:
                b.emit("tensor", LoadStationary(src=b.tile("sbuf", dtype, pt_sb + c * tq * es,
                                                           rows, ((qp, 1),))))
                b.emit("tensor", MultiplyMoving(dst=o_tile, accumulate=c > 0, src=b.tile(
                    "sbuf", dtype, v_sb[h] + c * d * es, rows, ((d, 1),))))
            kv_free[h] = b.signal("tensor")
            b.wait("vector", kv_free[h])
            acc = b.tile("sbuf", "fp32", o_acc, qp, ((d, 1),))
            b.emit("vector", TensorScalar(dst=col("l", qp), src=col("l", qp),
                                          op0=VectorOp.MULTIPLY, operand0=col("corr", qp),
                                          op1=VectorOp.ADD, operand1=col("rowsum", qp)))
            b.emit("vector", TensorScalar(dst=acc, src=acc, op0=VectorOp.MULTIPLY,
                                          operand0=col("corr", qp)))
            b.emit("vector", TensorTensor(dst=acc, a=acc, b=o_tile, op=VectorOp.ADD))
            b.emit("vector", TensorCopy(dst=col("m", qp), src=col("m_new", qp)))
            b.wait("tensor", b.signal("vector"))  # o_tile is free again
        block_no += len(blocks)
        b.wait("scalar", b.signal("vector"))
        b.emit("scalar", Activation(dst=col("inv", qp), src=col("l", qp), func=recip))
        b.wait("vector", b.signal("scalar"))
        b.emit("vector", TensorScalar(dst=b.tile("sbuf", dtype, o_out, qp, ((d, 1),)),
                                      src=b.tile("sbuf", "fp32", o_acc, qp, ((d, 1),)),
                                      op0=VectorOp.MULTIPLY, operand0=col("inv", qp)))
        b.wait("dma5", b.signal("vector"))
        b.emit("dma5", DmaCopy(dst=out.ap((head * s + q0, head * s + q0 + qp)),
                               src=b.tile("sbuf", dtype, o_out, qp, ((d, 1),))))
        out_free = b.signal("dma5")
