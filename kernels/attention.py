"""Attention heads in flash style: ``out = softmax(q k^T / sqrt(D)) v`` for ``S`` queries
and keys of width ``D`` (at most 128) per head, ``B`` heads (or sequences x heads) in one
kernel, keys in blocks so that no ``S x S`` matrix exists.

Inputs as the tensor engine wants them, head after head: ``qT[B * D, S]``, ``kT[B * D, S]``
(transposed) and ``v[B * S, D]``; ``out[B * S, D]``. Or token-major, as a projection writes
them (``heads``: ``q``, ``k``, ``v``, ``out`` each ``[B * S, H * D]``), for heads whose keys
fit one block: the query and key tiles are turned on chip.
Per query tile of 128 rows and key block of 512: scores ``q k^T`` into PSUM (tensor), the block's
row max and the running max (vector), ``p = exp(s / sqrt(D) - max)`` with its row sum and the
correction ``exp(max_old - max_new)`` (scalar), ``p`` transposed through the array (tensor)
and copied to SBUF in bf16 (vector), ``p v`` (tensor), then ``l = l * corr + rowsum`` and
``o = o * corr + p v`` (vector); at the end ``out = o / l``. A tile's first block needs no
correction (``l`` is its row sum, ``o`` its ``p v``), and a tile of one block divides its
``p v`` in PSUM directly.

Transfers. Each DMA pays its start-up in its in-order queue [DMA], so the kernel moves its
operands in groups, double-buffered and loaded one group ahead: where a head's keys are one
block (``S`` up to 512), a group is as many whole heads as fill about :data:`DMA_BYTES` a
partition of its largest buffer, and its queries, keys, values and outputs move in one DMA
each (the values' and outputs' whole 128-row tiles in one, a partial last tile in another);
otherwise a group is one query tile, and each tile's key and value blocks stream through
:data:`_BLOCK_BUFFERS` buffers, loaded two steps ahead, on two queues each.

Steps (a query tile and a key block) are software-pipelined across tiles and heads: the next
step's scores (into the other PSUM buffer), max and exp are issued before this step's
transposes, ``p v`` and sums, its per-row columns kept apart from this step's by parity.
"""

from __future__ import annotations

import math

from hdl.core.isa import (
    Activation,
    DmaCopy,
    Iota,
    LoadStationary,
    MultiplyMoving,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    Transpose,
)
from hdl.vector.ops import Reduce, VectorOp

from .builder import DMA_BYTES, Builder, KernelError, itemsize, psum_columns

__all__ = ["attention", "key_block", "query_tile"]

#: Buffers of streamed key and value blocks: the block computed, the next, and one loading.
_BLOCK_BUFFERS = 3


def query_tile(p) -> int:
    """Queries per tile on a core of ``p``: the scores' partitions, at most the array's
    columns (128 on every chip at full scale)."""
    return min(p.cols, p.partitions)


def key_block(p) -> int:
    """Keys per block on a core of ``p``: one PSUM bank of fp32 scores
    (:func:`~kernels.builder.psum_columns`)."""
    return psum_columns(p)


def _axis(count: int, stride: int, dims: tuple) -> tuple:
    """``dims`` behind an axis of ``count`` items ``stride`` elements apart (none for one)."""
    return dims if count == 1 else ((count, stride),) + dims


def attention(b: Builder, nb: int, s: int, d: int, dtype: str = "bf16", *,
              causal: bool = False, heads: int = 0) -> None:
    """``nb`` heads one after another in one kernel; with ``causal``, query ``i`` sees keys
    ``0 .. i`` only: key blocks wholly after a query tile are skipped, and a block that
    straddles its diagonal has an additive mask (0 or -1e30, built once per distinct offset
    by GpSimd's iota and the vector engine) added to its scores by the vector engine before
    the max and the exp.

    With ``heads``, the operands are token-major, as the projections write them: ``nb``
    sequences of ``heads`` heads, ``q``, ``k``, ``v`` and ``out`` each ``[nb * S, heads * D]``
    (a token's heads side by side). A group is heads of one sequence, whose rows move in one
    run a token; the tensor engine turns each query and key tile into the transposed form in
    a PSUM bank of its own (:meth:`~kernels.builder.Builder.transpose`) before the group's
    first scores, heads of 32 or 64 four or two at a time (each pack's heads in partitions
    of their own, where the scores then read them). The keys of a head must fit one block
    (``S`` at most :func:`key_block`)."""
    p = b.params
    for name, v in (("B", nb), ("S", s), ("D", d), ("H", heads or 1)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if d > min(p.rows, p.partitions):
        raise KernelError(f"D must be at most {min(p.rows, p.partitions)}, not {d}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    es = itemsize(dtype)
    tq = query_tile(p)
    chunk = min(p.rows, p.cols)  # keys per transpose and per p v pass
    by_token = heads > 0  # token-major operands
    if by_token:
        hd = heads * d  # a token's row
        q_t, k_t, v, out = (b.hbm(n, (nb * s, hd), dtype) for n in ("q", "k", "v", "out"))
    else:
        q_t, k_t = b.hbm("qT", (nb * d, s), dtype), b.hbm("kT", (nb * d, s), dtype)
        v = b.hbm("v", (nb * s, d), dtype)
        out = b.hbm("out", (nb * s, d), dtype)
    scale = 1.0 / math.sqrt(d)
    exp, recip, identity = (b.function(f) for f in ("exp", "reciprocal", "identity"))
    kbl = key_block(p)
    all_blocks = [(o, min(kbl, s - o)) for o in range(0, s, kbl)]
    whole = len(all_blocks) == 1  # a head's keys in one block: they move with its queries
    kb_max = all_blocks[0][1]
    nc = -(-s // chunk)  # a head's value tiles
    if by_token and not whole:
        raise KernelError(f"token-major attention takes at most {kbl} tokens a sequence "
                          f"(one key block), not {s}: the head-major kernel streams longer")
    # transfer groups: (first head, heads, first query, queries)
    if by_token:  # heads of one sequence whose rows are about DMA_BYTES, in half the SBUF
        per_head = es * (4 * s + 8 * nc * d)  # two of q, k turned; of their rows, v, out
        per = max(1, min(heads, -(-DMA_BYTES // (d * es)), p.sbuf_bytes // 2 // per_head))
        groups = [(seq * heads + h0, min(per, heads - h0), 0, s)
                  for seq in range(nb) for h0 in range(0, heads, per)]
    elif whole:  # each of a group's buffers at most DMA_BYTES a partition (or one head)
        per = max(1, min(nb, DMA_BYTES // (max(s, nc * d, -(-s // tq) * d) * es)))
        groups = [(h0, min(per, nb - h0), 0, s) for h0 in range(0, nb, per)]
    else:
        groups = [(h, 1, q0, min(tq, s - q0)) for h in range(nb) for q0 in range(0, s, tq)]
    g_heads = max(g[1] for g in groups)
    g_tiles = -(-max(g[3] for g in groups) // tq)
    # token-major: the heads a query or key tile turns at once, each into partitions of its
    # own (where D lets their tiles start there): its copy out of PSUM streams one row a
    # partition for all of them
    lanes = min(p.rows, p.partitions)
    pack = lanes // d if by_token and d in (32, 64) and lanes >= 2 * d else 1
    packs = -(-g_heads // pack)
    q_sb = [b.sbuf(packs * max(g[3] for g in groups) * es, "q group") for _ in range(2)]
    o_out = [b.sbuf(g_heads * g_tiles * d * es, "output group") for _ in range(2)]
    if whole:
        k_sb = [b.sbuf(packs * s * es, "k group") for _ in range(2)]
        v_sb = [b.sbuf(g_heads * nc * d * es, "v group") for _ in range(2)]
    else:
        k_sb = [b.sbuf(kbl * es, "k block") for _ in range(_BLOCK_BUFFERS)]
        v_sb = [b.sbuf(kbl // chunk * d * es, "v block") for _ in range(_BLOCK_BUFFERS)]
    if by_token:  # the queries' and keys' rows as loaded, before they are turned
        q_rows = [b.sbuf(g_heads * g_tiles * d * es, "q rows") for _ in range(2)]
        k_rows = [b.sbuf(g_heads * nc * d * es, "k rows") for _ in range(2)]
        turn_ps = b.psum_banks(1, "q and k turned")[0]
    p_sb = [b.sbuf(kb_max * es, "p") for _ in range(2)]
    pt_sb = b.sbuf(-(-kb_max // chunk) * tq * es, "p transposed")
    o_acc = None if whole else b.sbuf(d * 4, "o accumulator")
    # per-partition columns, two of each: a step's (by the step's parity) and a tile's
    # (by the tile's), so that one step's max and exp run while the step before finishes
    cols = {n: [b.sbuf(4, n) for _ in range(2)]
            for n in ("bmax", "m", "neg", "diff", "corr", "rowsum", "l", "inv")}
    s_ps = b.psum_banks(2, "scores")
    pt_ps = b.psum_banks(1, "p transposed")[0]
    o_ps = b.psum_banks(2, "p v")

    def col(n, which, rows):
        return b.column(cols[n][which % 2], rows)

    masks: dict[int, int] = {}
    m_sb = [b.sbuf(kb_max * 4, "masked scores") for _ in range(2)] if causal else []
    if causal:
        for q0 in range(0, s, tq):
            for k0, kb in all_blocks:
                if q0 < k0 + kb - 1 and k0 <= q0 + min(tq, s - q0) - 1 \
                        and k0 - q0 not in masks:
                    # mask[i, j] = -1e30 where key k0 + j follows query q0 + i, else 0
                    base = masks[k0 - q0] = b.sbuf(kb_max * 4, "causal mask")
                    t = b.tile("sbuf", "fp32", base, tq, ((kb_max, 1),))
                    b.emit("gpsimd", Iota(dst=t, base=k0 - q0, pstep=-1, step=1))
                    b.wait("vector", b.signal("gpsimd"))
                    b.emit("vector", TensorScalar(dst=t, src=t, op0=VectorOp.GREATER, imm0=0.0,
                                                  op1=VectorOp.MULTIPLY, imm1=-1e30))

    # query tiles (group, head, first query, queries, key blocks) and steps (tile, block)
    tiles = []
    for gi, (h0, nh, g0, rows) in enumerate(groups):
        for head in range(h0, h0 + nh):
            for q0 in range(g0, g0 + rows, tq):
                qp = min(tq, g0 + rows - q0)
                tiles.append((gi, head, q0, qp, [(k0, kb) for k0, kb in all_blocks
                                                  if not causal or k0 <= q0 + qp - 1]))
    steps = [(t, j) for t, tile in enumerate(tiles) for j in range(len(tile[4]))]
    group_end = {}  # group -> its last step
    for i, (t, _) in enumerate(steps):
        group_end[tiles[t][0]] = i

    q_ready, kv_ready = {}, {}
    q_free = [None, None]  # a group buffer's queries read by its last scores
    kv_free = [None] * len(k_sb)  # keys and values (a group's or a block's) read by p v
    out_free = [None, None]  # a group's outputs stored
    o_free = [None, None]  # p v in PSUM read by the vector engine
    s_free = [None, None]
    rows_ready = {}  # token-major: a group's (queries', keys', values') rows arrived
    rows_free = [None, None]  # a rows buffer read by its group's transposes
    turn_copied = None  # the transposes' bank emptied by the copies before

    def queue(n: int) -> str:
        """The ``n``-th queue after ``dma0`` (the queries'), round the core's queues."""
        return f"dma{1 + n % (p.dma_queues - 1)}"

    def hbm(tensor, offset: int, partitions: int, dims, pstride: int):
        return b.tile("hbm", dtype, tensor.offset + offset * es, partitions, dims,
                      pstride=pstride * es)

    def token_rows(queue: str, tensor, sb: int, gi: int, tile: int, store: bool = False):
        """Group ``gi``'s rows of token-major ``tensor`` in tiles of ``tile`` tokens, and
        ``sb``'s tiles of them (tile after tile, the group's heads side by side), in one
        DMA (a partial last tile in a second): into SBUF, or with ``store`` out of it."""
        (seq, first), nh = divmod(groups[gi][0], heads), groups[gi][1]
        full, rest = divmod(s, tile)
        for t0, n, count in ((0, tile, full), (full * tile, rest, 1 if rest else 0)):
            if count:
                mem = hbm(tensor, (seq * s + t0) * hd + first * d, n,
                          _axis(count, tile * hd, ((nh * d, 1),)), hd)
                on_chip = b.tile("sbuf", dtype, sb + t0 // tile * nh * d * es, n,
                                 _axis(count, nh * d, ((nh * d, 1),)))
                b.emit(queue, DmaCopy(dst=mem, src=on_chip) if store
                       else DmaCopy(dst=on_chip, src=mem))

    def load_group(gi: int) -> None:
        """The group's queries on ``dma0``; with whole heads its keys and values too, each
        in one DMA (the values' partial last tile in a second), on two queues of their
        own per group buffer (and the outputs on two more). Token-major queries and keys
        land as rows, turned by :func:`turn_group`."""
        h0, nh, g0, rows = groups[gi]
        gb = gi % 2
        if by_token:
            qk, qv = queue(2 * gb), queue(2 * gb + 1)
            b.wait("dma0", rows_free[gb])
            token_rows("dma0", q_t, q_rows[gb], gi, tq)
            b.wait(qk, rows_free[gb])
            token_rows(qk, k_t, k_rows[gb], gi, chunk)
            b.wait(qv, kv_free[gb])
            token_rows(qv, v, v_sb[gb], gi, chunk)
            rows_ready[gi] = (b.signal("dma0"), b.signal(qk), b.signal(qv))
            return
        b.wait("dma0", q_free[gb])
        b.emit("dma0", DmaCopy(dst=b.tile("sbuf", dtype, q_sb[gb], d,
                                          _axis(nh, rows, ((rows, 1),))),
                               src=hbm(q_t, h0 * d * s + g0, d,
                                       _axis(nh, d * s, ((rows, 1),)), s)))
        q_ready[gi] = b.signal("dma0")
        if not whole:
            return
        qk, qv = queue(2 * gb), queue(2 * gb + 1)
        b.wait(qk, kv_free[gb])
        b.emit(qk, DmaCopy(dst=b.tile("sbuf", dtype, k_sb[gb], d, _axis(nh, s, ((s, 1),))),
                           src=hbm(k_t, h0 * d * s, d, _axis(nh, d * s, ((s, 1),)), s)))
        b.wait(qv, kv_free[gb])
        full, rest = divmod(s, chunk)
        if full:
            b.emit(qv, DmaCopy(
                dst=b.tile("sbuf", dtype, v_sb[gb], chunk,
                           _axis(nh, nc * d, _axis(full, d, ((d, 1),)))),
                src=hbm(v, h0 * s * d, chunk,
                        _axis(nh, s * d, _axis(full, chunk * d, ((d, 1),))), d)))
        if rest:
            b.emit(qv, DmaCopy(
                dst=b.tile("sbuf", dtype, v_sb[gb] + full * d * es, rest,
                           _axis(nh, nc * d, ((d, 1),))),
                src=hbm(v, (h0 * s + full * chunk) * d, rest, _axis(nh, s * d, ((d, 1),)), d)))
        kv_ready[gi] = (b.signal(qk), b.signal(qv))

    def load_block(i: int) -> None:
        """Keys and values of step ``i``'s block: one DMA each (the values' whole chunks in
        one strided transfer), on two queues of their own per buffer."""
        t, j = steps[i]
        head, (k0, kb) = tiles[t][1], tiles[t][4][j]
        h = i % _BLOCK_BUFFERS
        qk, qv = queue(2 * h), queue(2 * h + 1)
        b.wait(qk, kv_free[h])
        b.emit(qk, DmaCopy(dst=b.tile("sbuf", dtype, k_sb[h], d, ((kb, 1),)),
                           src=k_t.ap((head * d, head * d + d), (k0, k0 + kb))))
        k0 += head * s  # the head's rows of v
        b.wait(qv, kv_free[h])
        full = kb // chunk
        if full:
            b.emit(qv, DmaCopy(dst=b.tile("sbuf", dtype, v_sb[h], chunk, ((full, d), (d, 1))),
                               src=hbm(v, k0 * d, chunk, ((full, chunk * d), (d, 1)), d)))
        if kb % chunk:
            c0 = full * chunk
            b.emit(qv, DmaCopy(dst=b.tile("sbuf", dtype, v_sb[h] + full * d * es, kb - c0,
                                          ((d, 1),)), src=v.ap((k0 + c0, k0 + kb))))
        kv_ready[i] = (b.signal(qk), b.signal(qv))

    def turn_group(gi: int) -> None:
        """Token-major group ``gi``'s query and key tiles, ``pack`` heads' ``[tokens, D]``
        side by side at a time, turned by the tensor engine into ``[D, tokens]`` a head (the
        heads of a pack in partitions of their own) in the group's query and key buffers,
        copied out of PSUM by the scalar engine."""
        nonlocal turn_copied
        nh, gb = groups[gi][1], gi % 2
        q_dma, k_dma, _ = rows_ready[gi]
        ready = []
        for src, dst, tile, arrived, free in ((q_rows, q_sb, tq, q_dma, q_free),
                                              (k_rows, k_sb, chunk, k_dma, kv_free)):
            pieces = [(b.tile("sbuf", dtype, src[gb] + (t * nh + j * pack) * d * es, n,
                              ((w * d, 1),)),
                       b.tile("sbuf", dtype, dst[gb] + (j * s + t0) * es, w * d, ((n, 1),)))
                      for j in range(-(-nh // pack)) for w in [min(pack, nh - j * pack)]
                      for t, t0 in enumerate(range(0, s, tile)) for n in [min(tile, s - t0)]]
            turned, turn_copied, _ = b.transpose(pieces, turn_ps, tile * es, arrived=arrived,
                                                 free=free[gb], copied=turn_copied,
                                                 engine="scalar")
            ready.append(turn_copied)
        rows_free[gb] = turned
        q_ready[gi], kv_ready[gi] = ready[0], (ready[1], rows_ready[gi][2])

    def store_group(gi: int, done) -> None:
        """The group's outputs in one DMA (a partial last tile of each head in a second),
        the groups alternating between two queues."""
        h0, nh, g0, rows = groups[gi]
        gb = gi % 2
        q = queue(2 * _BLOCK_BUFFERS + gb)
        b.wait(q, done)
        if by_token:
            token_rows(q, out, o_out[gb], gi, tq, store=True)
            out_free[gb] = b.signal(q)
            return
        full, rest = divmod(rows, tq)
        per_head = -(-rows // tq) * d
        if full:
            b.emit(q, DmaCopy(
                dst=hbm(out, (h0 * s + g0) * d, tq,
                        _axis(nh, s * d, _axis(full, tq * d, ((d, 1),))), d),
                src=b.tile("sbuf", dtype, o_out[gb], tq,
                           _axis(nh, per_head, _axis(full, d, ((d, 1),))))))
        if rest:
            b.emit(q, DmaCopy(
                dst=hbm(out, (h0 * s + g0 + full * tq) * d, rest, _axis(nh, s * d, ((d, 1),)),
                        d),
                src=b.tile("sbuf", dtype, o_out[gb] + full * d * es, rest,
                           _axis(nh, per_head, ((d, 1),)))))
        out_free[gb] = b.signal(q)

    def scores(i: int):
        t, j = steps[i]
        gi, head, q0, qp, blocks = tiles[t]
        h0, _, g0, rows = groups[gi]
        gb, h = gi % 2, i % 2
        kb = blocks[j][1]
        if by_token and (i == 0 or tiles[steps[i - 1][0]][0] != gi):
            turn_group(gi)
        # the head's pack (column block) and its partitions in it
        at, lane = divmod(head - h0, pack)
        if whole:
            keys = k_sb[gb] + at * s * es
            b.wait("tensor", q_ready[gi], kv_ready[gi][0], s_free[h])
        else:
            keys = k_sb[i % _BLOCK_BUFFERS]
            b.wait("tensor", q_ready[gi], *kv_ready[i], s_free[h])
        b.emit("tensor", LoadStationary(src=b.tile(
            "sbuf", dtype, q_sb[gb] + (at * rows + q0 - g0) * es, d, ((qp, 1),),
            partition=lane * d)))
        b.emit("tensor", MultiplyMoving(dst=b.tile("psum", "fp32", s_ps[h], qp, ((kb, 1),)),
                                        src=b.tile("sbuf", dtype, keys, d, ((kb, 1),),
                                                   partition=lane * d)))
        done = b.signal("tensor")
        if i == group_end[gi]:
            q_free[gb] = done
        return done

    exped = {}

    def front(i: int) -> None:
        """Step ``i``'s scores (tensor), their max (vector) and ``p = exp(...)`` (scalar)."""
        t, j = steps[i]
        _, _, q0, qp, blocks = tiles[t]
        k0, kb = blocks[j]
        first, last = j == 0, j == len(blocks) - 1
        pending = scores(i)
        s_tile = b.tile("psum", "fp32", s_ps[i % 2], qp, ((kb, 1),))
        b.wait("vector", pending)
        if causal and q0 < k0 + kb - 1:
            masked = b.tile("sbuf", "fp32", m_sb[i % 2], qp, ((kb, 1),))
            b.emit("vector", TensorTensor(dst=masked, a=s_tile, op=VectorOp.ADD,
                                          b=b.tile("sbuf", "fp32", masks[k0 - q0], qp,
                                                   ((kb, 1),))))
            s_tile = masked
        bmax = col("bmax", i, qp)
        b.emit("vector", TensorReduce(dst=bmax, src=s_tile, reduce=Reduce.MAX))
        if first:  # the running max starts at this block's; -max on the scalar engine
            if not last:
                b.emit("vector", TensorScalar(dst=col("m", i, qp), src=bmax,
                                              op0=VectorOp.MULTIPLY, imm0=scale))
        else:  # m (this step's) = max(m of the step before, the block's)
            b.emit("vector", TensorScalar(dst=bmax, src=bmax, op0=VectorOp.MULTIPLY,
                                          imm0=scale))
            b.emit("vector", TensorTensor(dst=col("m", i, qp), a=col("m", i - 1, qp),
                                          b=bmax, op=VectorOp.MAX))
            b.emit("vector", TensorScalar(dst=col("neg", i, qp), src=col("m", i, qp),
                                          op0=VectorOp.MULTIPLY, imm0=-1.0))
            b.emit("vector", TensorTensor(dst=col("diff", i, qp), a=col("m", i - 1, qp),
                                          b=col("m", i, qp), op=VectorOp.SUBTRACT))
        b.wait("scalar", b.signal("vector"))
        if first:
            b.emit("scalar", Activation(dst=col("neg", i, qp), src=bmax, func=identity,
                                        scale=-scale))
        p_tile = b.tile("sbuf", dtype, p_sb[i % 2], qp, ((kb, 1),))
        b.emit("scalar", Activation(dst=p_tile, src=s_tile, func=exp, scale=scale,
                                    bias=col("neg", i, qp),
                                    reduce_dst=col("l", t, qp) if first
                                    else col("rowsum", i, qp)))
        if not first:
            b.emit("scalar", Activation(dst=col("corr", i, qp), src=col("diff", i, qp),
                                        func=exp))
        elif last:
            b.emit("scalar", Activation(dst=col("inv", t, qp), src=col("l", t, qp),
                                        func=recip))
        s_free[i % 2] = exped[i] = b.signal("scalar")

    def back(i: int) -> None:
        """Step ``i``'s ``p`` transposed through the array and copied to SBUF, ``p v``, the
        running sums (vector); after a tile's last block ``out = o / l``, after a group's
        last tile its store."""
        t, j = steps[i]
        gi, head, q0, qp, blocks = tiles[t]
        h0, _, g0, rows = groups[gi]
        gb, h = gi % 2, i % 2
        kb = blocks[j][1]
        first, last = j == 0, j == len(blocks) - 1
        b.wait("tensor", exped[i])
        parts = [(c, c0, min(chunk, kb - c0)) for c, c0 in enumerate(range(0, kb, chunk))]
        for c, c0, n in parts:
            b.emit("tensor", Transpose(
                dst=b.tile("psum", dtype, pt_ps + c * tq * 4, n, ((qp, 1),)),
                src=b.tile("sbuf", dtype, p_sb[h] + c0 * es, qp, ((n, 1),))))
        b.wait("vector", b.signal("tensor"))
        for c, _, n in parts:
            b.emit("vector", TensorCopy(
                dst=b.tile("sbuf", dtype, pt_sb + c * tq * es, n, ((qp, 1),)),
                src=b.tile("psum", dtype, pt_ps + c * tq * 4, n, ((qp, 1),))))
        b.wait("tensor", b.signal("vector"), o_free[h])
        o_tile = b.tile("psum", "fp32", o_ps[h], qp, ((d, 1),))
        if whole:
            b.wait("tensor", kv_ready[gi][1])
            # a head's value tiles: after each other, or (token-major) the group's heads
            # side by side in each
            values, v_step = ((v_sb[gb] + (head - h0) * d * es, groups[gi][1] * d * es)
                              if by_token else (v_sb[gb] + (head - h0) * nc * d * es, d * es))
        else:
            values, v_step = v_sb[i % _BLOCK_BUFFERS], d * es
        for c, _, n in parts:
            b.emit("tensor", LoadStationary(src=b.tile("sbuf", dtype, pt_sb + c * tq * es,
                                                       n, ((qp, 1),))))
            b.emit("tensor", MultiplyMoving(dst=o_tile, accumulate=c > 0, src=b.tile(
                "sbuf", dtype, values + c * v_step, n, ((d, 1),))))
        pv = b.signal("tensor")
        if not whole or i == group_end[gi]:
            kv_free[gb if whole else i % _BLOCK_BUFFERS] = pv
        b.wait("vector", pv)
        acc = None if whole else b.tile("sbuf", "fp32", o_acc, qp, ((d, 1),))
        if first and not last:
            b.emit("vector", TensorCopy(dst=acc, src=o_tile))
        elif not first:
            b.emit("vector", TensorScalar(dst=col("l", t, qp), src=col("l", t, qp),
                                          op0=VectorOp.MULTIPLY, operand0=col("corr", i, qp),
                                          op1=VectorOp.ADD, operand1=col("rowsum", i, qp)))
            b.emit("vector", TensorScalar(dst=acc, src=acc, op0=VectorOp.MULTIPLY,
                                          operand0=col("corr", i, qp)))
            b.emit("vector", TensorTensor(dst=acc, a=acc, b=o_tile, op=VectorOp.ADD))
            if last:
                b.wait("scalar", b.signal("vector"))
                b.emit("scalar", Activation(dst=col("inv", t, qp), src=col("l", t, qp),
                                            func=recip))
                b.wait("vector", b.signal("scalar"))
        if last:  # out = o / l into the group's output tile
            if t == 0 or tiles[t - 1][0] != gi:  # the group's first tile
                b.wait("vector", out_free[gb])
            tile_at = ((q0 - g0) // tq * groups[gi][1] + head - h0 if by_token
                       else (head - h0) * -(-rows // tq) + (q0 - g0) // tq)
            b.emit("vector", TensorScalar(
                dst=b.tile("sbuf", dtype, o_out[gb] + tile_at * d * es, qp, ((d, 1),)),
                src=o_tile if first else acc, op0=VectorOp.MULTIPLY,
                operand0=col("inv", t, qp)))
        o_free[h] = b.signal("vector")
        if i == group_end[gi]:
            store_group(gi, o_free[h])

    # software-pipelined: step i + 1's front is issued before step i's back, and a group's
    # operands load while the group before it is computed
    for gi in range(min(2, len(groups))):
        load_group(gi)
    if not whole:
        for i in range(min(_BLOCK_BUFFERS - 1, len(steps))):
            load_block(i)
    front(0)
    for i in range(len(steps)):
        if not whole and i + _BLOCK_BUFFERS - 1 < len(steps):
            load_block(i + _BLOCK_BUFFERS - 1)
        if i + 1 < len(steps):
            front(i + 1)
        back(i)
        gi = tiles[steps[i][0]][0]
        if i == group_end[gi] and gi + 2 < len(groups):
            load_group(gi + 2)
