"""Decode attention, flash-decoding style: one new query per query head of ``B`` sequences
over the KV cache in HBM, ``out = softmax(q k^T / sqrt(D)) v``, with grouped-query
attention: the ``G = H / KVH`` query heads of a KV head share its keys and values.

Shape keys ``B`` (sequences), ``H`` (query heads), ``KVH`` (KV heads, dividing ``H``),
``S`` (cache positions, all attended) and ``D`` (head size, at most 128). Tensors:
``q[B * H, D]`` (the Q projection's rows, heads of a sequence together),
``k_cache[B * KVH * D, S]`` and ``v_cache[B * KVH * S, D]`` as :mod:`kernels.kvcache` lays
them out, ``out[B * H, D]``.

Each (sequence, KV head) takes its cache in chunks of up to 2,048 positions (the chunk's
scores fill at most one PSUM bank); a chunk's keys and values load on two DMA queues of their
own, double-buffered, while the chunk before is computed. The whole blocks of 128 positions
of a chunk are interleaved: lane ``p`` of block ``c`` holds position ``p * blocks + c``, so
that each lane's values are consecutive rows of the cache, one run of ``blocks x D``
elements (a DMA moves each partition's contiguous run as its own packets [DMA]), and the
block's keys are the cache's columns ``blocks`` apart; a last partial block is plain. The
sum over positions does not depend on their order. The tensor engine's roles:

* ``q k^T``: the keys are the **stationary** (``D x 128`` positions of ``k_cache`` as they
  stand) and the ``G`` queries the **moving** tile (``D x G``, N = G). A decode GEMM has a
  tiny N: a 128-column stationary loads in a quarter of 128 moving columns, so 128 positions
  cost one load and G moving columns, about four times fewer cycles than the query
  stationary with 128 positions moving; and the scores land with positions on the PSUM
  partitions (``128 x G`` per 128 positions), so the softmax's element work runs on all
  128 lanes and ``p`` is already laid out as the next contraction wants it.
* ``p v``: ``p`` is the **stationary** (``128 positions x G``) and the values the
  **moving** tile (``128 x D``), then, with the same stationary, a column of ones (the
  softmax's sums ``sum p``; the values' own tile stays one run a lane), the query heads on
  the partitions of the result (``G x (D + 1)``), where the rescaling by each head's
  correction and the final division are per-partition scalars.

The online softmax per chunk: each lane's maximum over the chunk's blocks (a halving tree of
vector maxima), the lanes' maximum per head through a transpose of that ``128 x G`` tile
(tensor) and a reduce (vector), the running maximum ``m`` and its correction
``exp((m_old - m) / sqrt(D))`` (scalar), ``m`` broadcast to the 128 lanes by a transpose of
a ``G x 128`` tile of it, then ``p = exp((s - m) / sqrt(D))`` (vector and scalar), ``p v``
(tensor) and ``o = o * corr + p v`` (vector); at the end ``out = o / l``, ``l`` the ones
column's sums. Positions of the last block past ``S`` have their scores set to -1e30 first.
"""

from __future__ import annotations

import math

from hdl.core.isa import (
    AP,
    Activation,
    DmaCopy,
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

__all__ = ["CHUNK_BLOCKS", "DEPTH", "decode_attention"]

#: Chunks of keys and values in SBUF at once: the one computed and two loading.
DEPTH = 3
#: Blocks of 128 positions per chunk at most (fewer where ``G`` columns per block would
#: overflow a PSUM bank of 512 fp32 scores).
CHUNK_BLOCKS = 16


def decode_attention(b: Builder, nb: int, h: int, kvh: int, s: int, d: int,
                     dtype: str = "bf16") -> None:
    """The (sequence, KV head) pairs one after another, the pipeline running on from one
    pair's last chunk into the next pair's first."""
    p = b.params
    for name, v in (("B", nb), ("H", h), ("KVH", kvh), ("S", s), ("D", d)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if h % kvh:
        raise KernelError(f"KVH must divide H (query heads share a KV head), not H={h}, "
                          f"KVH={kvh}")
    lanes = min(p.rows, p.cols, p.partitions)
    g = h // kvh
    if g > lanes:
        raise KernelError(f"H / KVH must be at most {lanes} query heads per KV head, not {g}")
    if d > lanes or d + 1 > p.moving_max:
        raise KernelError(f"D must be at most {lanes}, not {d}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    es = itemsize(dtype)
    blocks_max = min(CHUNK_BLOCKS, p.moving_max // g)
    chunk = lanes * blocks_max
    q = b.hbm("q", (nb * h, d), dtype)
    k_cache = b.hbm("k_cache", (nb * kvh * d, s), dtype)
    v_cache = b.hbm("v_cache", (nb * kvh * s, d), dtype)
    out = b.hbm("out", (nb * h, d), dtype)
    scale = 1.0 / math.sqrt(d)
    exp, recip = b.function("exp"), b.function("reciprocal")
    # the outputs' queue: the one after the loads' (dma1 .. dma6), else dma0, which carries
    # only the queries, on a core with fewer queues (the simulation scale)
    out_q = f"dma{2 * DEPTH + 1}" if p.dma_queues > 2 * DEPTH + 1 else "dma0"
    width = blocks_max * g  # score columns of a chunk
    vw = d + 1  # a head's p v and its sum of p, side by side in PSUM
    q_sb = b.sbuf(nb * h * es, "queries")
    k_sb = [b.sbuf(chunk * es, "key chunk") for _ in range(DEPTH)]
    v_sb = [b.sbuf(blocks_max * d * es, "value chunk") for _ in range(DEPTH)]
    ones_v = b.sbuf(es, "ones of the sums")
    p_sb = [b.sbuf(width * es, "p") for _ in range(2)]
    x_sb = [b.sbuf(width * 4, "s - m") for _ in range(2)]
    tree = b.sbuf(-(-blocks_max // 2) * g * 4 or g * 4, "lane maxima")
    ones = b.sbuf(lanes * 4, "ones")
    mrow = b.sbuf(lanes * 4, "m by head")
    acc = [b.sbuf(vw * 4, "o accumulator") for _ in range(2)]
    o_out = [b.sbuf(d * es, "o out") for _ in range(2)]
    # per-head columns: m, m_new and cmax once; diff and corr by chunk, inv by pair parity
    cols = {n: b.sbuf(4, n) for n in ("m", "m_new", "cmax")}
    cols.update({f"{n}{i}": b.sbuf(4, n) for n in ("diff", "corr", "inv") for i in (0, 1)})
    s_ps = b.psum_banks(2, "scores")
    st_ps = b.psum_banks(1, "transposes")[0]
    t_ps, mb_ps = st_ps, st_ps + lanes * 4
    o_ps = b.psum_banks(2, "p v")

    def col(n):
        return b.column(cols[n], g)

    def sb(base, rows, dims, dt="fp32"):
        return b.tile("sbuf", dt, base, rows, dims)

    # the queries as their rows (a lane each, a transfer per 128), transposed to [D, B * H]
    # by the tensor engine a PSUM bank at a time and copied out by the vector engine; the
    # ones of the sums
    per_bank = max(1, p.psum_bank_bytes // (lanes * es))
    q_rows = b.sbuf(min(per_bank, -(-(nb * h) // lanes)) * d * es, "query rows")
    q_ready = turned = None
    for r0 in range(0, nb * h, lanes * per_bank):
        batch = [(r, min(lanes, nb * h - r)) for r in range(r0, min(nb * h, r0 + lanes * per_bank),
                                                            lanes)]
        b.wait("dma0", turned)
        for i, (r, rows) in enumerate(batch):
            b.emit("dma0", DmaCopy(dst=sb(q_rows + i * d * es, rows, ((d, 1),), dtype),
                                   src=q.ap((r, r + rows))))
        turned, q_ready, _ = b.transpose(
            [(sb(q_rows + i * d * es, rows, ((d, 1),), dtype),
              sb(q_sb + r * es, d, ((rows, 1),), dtype)) for i, (r, rows) in enumerate(batch)],
            st_ps, lanes * es, arrived=b.signal("dma0"), copied=q_ready)
    b.emit("vector", Memset(dst=sb(ones_v, lanes, ((1, 1),), dtype), value=1.0))
    b.emit("vector", Memset(dst=sb(ones, g, ((lanes, 1),)), value=1.0))
    ones_ready = b.signal("vector")
    b.wait("tensor", q_ready, ones_ready)

    # every chunk of every pair: (pair, first position, positions)
    work = [(pair, c0, min(chunk, s - c0)) for pair in range(nb * kvh)
            for c0 in range(0, s, chunk)]
    loaded: list = [None] * len(work)
    pv_done: list = []  # per chunk: the tensor engine done with its keys, values and p
    s_free = [None, None]
    o_free = [None, None]
    out_free = [None, None]

    def nblocks(kb):
        return -(-kb // lanes)

    def load(j: int) -> None:
        pair, c0, kb = work[j]
        hb = j % DEPTH
        free = pv_done[j - DEPTH] if j >= DEPTH else None
        qk, qv = f"dma{1 + 2 * hb}", f"dma{2 + 2 * hb}"
        b.wait(qk, free)
        b.emit(qk, DmaCopy(dst=sb(k_sb[hb], d, ((kb, 1),), dtype),
                           src=k_cache.ap((pair * d, pair * d + d), (c0, c0 + kb))))
        b.wait(qv, free)
        row0 = pair * s + c0
        whole, rest = divmod(kb, lanes)
        if whole:  # interleaved: lane p holds positions p * whole .. p * whole + whole - 1
            b.emit(qv, DmaCopy(
                dst=sb(v_sb[hb], lanes, ((whole, d), (d, 1)), dtype),
                src=AP("hbm", dtype, 0, lanes, v_cache.offset + row0 * d * es,
                       ((whole, d), (d, 1)), whole * d * es)))
        if rest:
            r0 = row0 + whole * lanes
            b.emit(qv, DmaCopy(dst=sb(v_sb[hb] + whole * d * es, rest, ((d, 1),), dtype),
                               src=v_cache.ap((r0, r0 + rest))))
        loaded[j] = (b.signal(qk), b.signal(qv))

    def scores(j: int):
        pair, c0, kb = work[j]
        hb, kbuf = j % 2, j % DEPTH
        seq, head = divmod(pair, kvh)
        q_tile = sb(q_sb + (seq * h + head * g) * es, d, ((g, 1),), dtype)
        n = nblocks(kb)
        masked = None
        if kb % lanes:  # positions past S in the last block: scores -1e30
            b.wait("vector", s_free[hb])
            b.emit("vector", Memset(dst=b.tile("psum", "fp32", s_ps[hb] + (n - 1) * g * 4,
                                               lanes, ((g, 1),)), value=-1e30))
            masked = b.signal("vector")
        b.wait("tensor", *loaded[j][:1], s_free[hb], masked)
        whole = kb // lanes
        for c in range(n):
            rows = min(lanes, kb - c * lanes)
            keys = sb(k_sb[kbuf] + c * es, d, ((lanes, whole),), dtype) if c < whole else \
                sb(k_sb[kbuf] + c * lanes * es, d, ((rows, 1),), dtype)
            b.emit("tensor", LoadStationary(src=keys))
            b.emit("tensor", MultiplyMoving(
                dst=b.tile("psum", "fp32", s_ps[hb] + c * g * 4, rows, ((g, 1),)), src=q_tile))
        return b.signal("tensor")

    for j in range(min(DEPTH, len(work))):
        load(j)
    pending = scores(0)
    def finish(j: int) -> None:
        """Chunk ``j``'s ``p v`` into its pair's accumulator; after a pair's last chunk,
        ``out = o / l`` and its rows to HBM."""
        pair, _, _ = work[j]
        hb, pp = j % 2, pair % 2
        acc_t = sb(acc[pp], g, ((vw, 1),))
        b.wait("vector", pv_done[j], exped[j])
        b.emit("vector", TensorScalar(dst=acc_t, src=acc_t, op0=VectorOp.MULTIPLY,
                                      operand0=col(f"corr{hb}")))
        b.emit("vector", TensorTensor(dst=acc_t, a=acc_t, op=VectorOp.ADD,
                                      b=b.tile("psum", "fp32", o_ps[hb], g, ((vw, 1),))))
        o_free[hb] = b.signal("vector")
        if j + 1 < len(work) and work[j + 1][0] == pair:
            return
        seq, head = divmod(pair, kvh)
        b.wait("scalar", o_free[hb])
        b.emit("scalar", Activation(dst=col(f"inv{pp}"), func=recip,
                                    src=b.column(acc[pp] + d * 4, g)))
        b.wait("vector", b.signal("scalar"), out_free[pp])
        o_t = sb(o_out[pp], g, ((d, 1),), dtype)
        b.emit("vector", TensorScalar(dst=o_t, src=sb(acc[pp], g, ((d, 1),)),
                                      op0=VectorOp.MULTIPLY, operand0=col(f"inv{pp}")))
        b.wait(out_q, b.signal("vector"))
        r0 = seq * h + head * g
        b.emit(out_q, DmaCopy(dst=out.ap((r0, r0 + g)), src=o_t))
        out_free[pp] = b.signal(out_q)

    exped: list = []  # per chunk: p written (and its correction)
    for j, (pair, _c0, kb) in enumerate(work):
        hb = j % 2
        n = nblocks(kb)
        s_all = b.tile("psum", "fp32", s_ps[hb], lanes, ((n * g, 1),))
        if j == 0 or work[j - 1][0] != pair:
            b.emit("vector", Memset(dst=col("m"), value=-1e30))
            b.emit("vector", Memset(dst=sb(acc[pair % 2], g, ((vw, 1),)), value=0.0))
        # each lane's maximum over the chunk's blocks: a halving tree (overlaps are harmless)
        b.wait("vector", pending)
        src, count = s_all, n
        if n == 1:
            b.emit("vector", TensorCopy(dst=sb(tree, lanes, ((g, 1),)), src=s_all))
        while count > 1:
            keep = -(-count // 2)
            drop = count - keep
            a_t = AP(src.space, "fp32", 0, lanes, src.offset, ((keep * g, 1),))
            b_t = AP(src.space, "fp32", 0, lanes, src.offset + drop * g * 4, ((keep * g, 1),))
            b.emit("vector", TensorTensor(dst=sb(tree, lanes, ((keep * g, 1),)), a=a_t, b=b_t,
                                          op=VectorOp.MAX))
            src, count = sb(tree, lanes, ((keep * g, 1),)), keep
        tree_done = b.signal("vector")
        if j + 1 < len(work):  # the next chunk's scores first: the array works meanwhile
            nxt = scores(j + 1)
        b.wait("tensor", tree_done)
        b.emit("tensor", Transpose(dst=b.tile("psum", "fp32", t_ps, g, ((lanes, 1),)),
                                   src=sb(tree, lanes, ((g, 1),))))
        b.wait("vector", b.signal("tensor"))
        b.emit("vector", TensorReduce(dst=col("cmax"), reduce=Reduce.MAX,
                                      src=b.tile("psum", "fp32", t_ps, g, ((lanes, 1),))))
        b.emit("vector", TensorTensor(dst=col("m_new"), a=col("m"), b=col("cmax"),
                                      op=VectorOp.MAX))
        b.emit("vector", TensorTensor(dst=col(f"diff{hb}"), a=col("m"), b=col("m_new"),
                                      op=VectorOp.SUBTRACT))
        b.emit("vector", TensorCopy(dst=col("m"), src=col("m_new")))
        b.emit("vector", TensorScalar(dst=sb(mrow, g, ((lanes, 1),)), src=sb(ones, g,
                                      ((lanes, 1),)), op0=VectorOp.MULTIPLY,
                                      operand0=col("m_new")))
        stats = b.signal("vector")
        b.wait("scalar", stats)
        b.emit("scalar", Activation(dst=col(f"corr{hb}"), src=col(f"diff{hb}"), func=exp,
                                    scale=scale))
        b.wait("tensor", stats)
        b.emit("tensor", Transpose(dst=b.tile("psum", "fp32", mb_ps, lanes, ((g, 1),)),
                                   src=sb(mrow, g, ((lanes, 1),))))
        b.wait("vector", b.signal("tensor"))
        x_t = sb(x_sb[hb], lanes, ((n * g, 1),))
        b.emit("vector", TensorTensor(dst=sb(x_sb[hb], lanes, ((n, g), (g, 1))),
                                      a=b.tile("psum", "fp32", s_ps[hb], lanes, ((n, g), (g, 1))),
                                      b=b.tile("psum", "fp32", mb_ps, lanes, ((n, 0), (g, 1))),
                                      op=VectorOp.SUBTRACT))
        s_free[hb] = b.signal("vector")
        b.wait("scalar", s_free[hb], pv_done[j - 2] if j >= 2 else None)
        p_tile = sb(p_sb[hb], lanes, ((n * g, 1),), dtype)
        b.emit("scalar", Activation(dst=p_tile, src=x_t, func=exp, scale=scale))
        exped.append(b.signal("scalar"))
        # p v and the sums of p, the heads on partitions
        b.wait("tensor", exped[j], loaded[j][1], o_free[hb])
        o_values = b.tile("psum", "fp32", o_ps[hb], g, ((d, 1),))
        o_sums = b.tile("psum", "fp32", o_ps[hb] + d * 4, g, ((1, 1),))
        for c in range(n):
            rows = min(lanes, kb - c * lanes)
            b.emit("tensor", LoadStationary(src=sb(p_sb[hb] + c * g * es, rows, ((g, 1),),
                                                   dtype)))
            b.emit("tensor", MultiplyMoving(dst=o_values, accumulate=c > 0, src=sb(
                v_sb[j % DEPTH] + c * d * es, rows, ((d, 1),), dtype)))
            b.emit("tensor", MultiplyMoving(dst=o_sums, accumulate=c > 0,
                                            src=sb(ones_v, rows, ((1, 1),), dtype)))
        pv_done.append(b.signal("tensor"))
        if j + DEPTH < len(work):
            load(j + DEPTH)
        if j + 1 < len(work):
            pending = nxt
        if j:  # the chunk before into its accumulator, behind this chunk's statistics
            finish(j - 1)
    finish(len(work) - 1)
