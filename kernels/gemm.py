"""Matrix multiplication kernels: ``out[M, N] = lhsT[K, M].T @ rhs[K, N]`` (optionally
``func(... + bias[M])``), ``lhsT`` stored transposed as the tensor engine's stationary wants it.

:func:`gemm` is blocked for SBUF reuse and overlaps every transfer with compute: an M-block of
``lhsT`` stays in SBUF while ``rhs`` streams through a ring of K-chunks on four DMA queues,
or, where the whole of ``rhs`` fits in the ring's place (a small N: decode, short prompts),
stays in SBUF too, loaded once before the first block in DMAs of about
:data:`~kernels.builder.DMA_BYTES` a partition. The ``lhsT`` chunks go round the queues the
rest leave free (``dma0``, and ``dma7`` up where the core has them), with as many blocks in
flight as there are such queues (at least two) as SBUF allows, since transfers within a queue
run in order, each after its own start-up latency [DMA]; the first N-tile of a block starts
on each chunk as it arrives. Each N-tile accumulates in half of the PSUM banks while the
vector and scalar engines empty the other half into one of the staging slots (one per N-tile
of a block as SBUF allows) and a DMA queue stores it, the block's whole row tiles in one
transfer; every row tile's bias loads once, in one transfer, first on a store queue.
:func:`gemm_naive` is the same arithmetic tile by tile with nothing overlapped or reused.

:func:`gemm` also runs the block-scaled MX formats (``mxfp8``, ``mxfp4``, where the array has
them): ``lhsT`` and ``rhs`` are then stored as :mod:`kernels.mx` lays them out, quad rows of
four contraction indices with the scales in ``lhsT_scale`` and ``rhs_scale``, and each K-tile
of ``P`` partitions contracts ``4P`` indices, its scales DMAed quadrant by quadrant into the
first partitions of each (:func:`hdl.core.isa.mx_scale_partition`).

In a double-rate format of the array (fp8 on trn2 and trn3) both kernels contract K-tiles of
twice the PE rows, each one double-row matmul (``double_row`` of
:class:`~hdl.core.isa.LoadStationary`): its ``P`` partitions hold ``P`` rows of the stored
operand as pair 0 and the next ``P`` as pair 1, ``[P, 2, free]`` in SBUF, so the GEMM issues
half the matmuls of a single-row contraction. A last K-tile of up to the rows is a plain tile;
an odd one of more is two.
"""

from __future__ import annotations

from hdl.core.isa import (
    MX_GROUP_PARTITIONS,
    MX_QUAD,
    MX_QUADRANT,
    Activation,
    DmaCopy,
    LoadStationary,
    MultiplyMoving,
    TensorCopy,
    mx_scale_partition,
)
from hdl.numerics.formats import MX_FORMATS

from .builder import DMA_BYTES, Builder, KernelError, itemsize, psum_columns, sbuf_aligned
from .mx import MX_BLOCK, quad_type

__all__ = ["gemm", "gemm_naive", "out_dtype"]

_RING = 4
_B_QUEUES = ("dma1", "dma2", "dma3", "dma4")
_OUT_QUEUES = ("dma5", "dma6")
#: Queues of the MX scales (small DMAs, each paying the DMA latency in its in-order queue),
#: where the core has them; else a scale travels on its data's queue.
_SCALE_QUEUES = tuple(f"dma{i}" for i in range(7, 15))


def _a_queues(b: Builder, mx: bool) -> tuple[str, ...]:
    """Queues of the ``lhsT`` chunks: ``dma0`` and, where the core has them, those past the
    rhs and output queues that the MX scales leave free."""
    first = int(_SCALE_QUEUES[-1][3:]) + 1 if mx else int(_OUT_QUEUES[-1][3:]) + 1
    return ("dma0",) + tuple(f"dma{i}" for i in range(first, b.params.dma_queues))


def out_dtype(dtype: str) -> str:
    """Output type of a matmul on ``dtype`` inputs: fp32 stays fp32, the rest bf16."""
    return "fp32" if dtype == "fp32" else "bf16"


def _tiles(size: int, tile: int) -> list[tuple[int, int]]:
    return [(o, min(tile, size - o)) for o in range(0, size, tile)]


def _k_tiles(b: Builder, k: int, dtype: str) -> list[tuple[int, int, int]]:
    """The K-tiles of a contraction of ``k`` stored rows: (first row, partitions, pairs),
    pairs 2 for a double row (:func:`_pairs`), each tile's contraction its partitions times
    its pairs."""
    p = b.params
    tk = min(p.rows, p.partitions)
    if _pairs(b, dtype) == 1:
        return [(o, n, 1) for o, n in _tiles(k, tk)]
    out = []
    for o, n in _tiles(k, 2 * tk):
        if n <= tk:
            out.append((o, n, 1))
        elif n % 2 == 0:
            out.append((o, n // 2, 2))
        else:
            out += [(o, tk, 1), (o + tk, n - tk, 1)]
    return out


def _row_pieces(rows: int, tile: int) -> list[tuple[int, int, int]]:
    """The row tiles of a block of ``rows`` as DMA pieces (first tile, tiles, partitions):
    the whole tiles in one, a partial last tile alone."""
    full, rest = divmod(rows, tile)
    return ([(0, full, tile)] if full else []) + ([(full, 1, rest)] if rest else [])


def _tiled(count: int, stride: int, dims: tuple) -> tuple:
    """``dims`` behind an axis of ``count`` row tiles ``stride`` apart (none for one tile;
    one element a partition when ``dims`` is empty)."""
    if count == 1:
        return dims or ((1, 1),)
    return ((count, stride),) + dims


def _pairs(b: Builder, dtype: str) -> int:
    """2 where ``dtype`` is a double-rate format of the array (the double row), else 1."""
    p = b.params
    return 2 if dtype in p.formats and p.tensor.is_double(p.array_format(dtype)) else 1


def _paired(pairs: int, stride: int, dims) -> tuple:
    """``dims`` behind the pair axis of a double row (``pairs`` 2), ``stride`` apart."""
    return (((2, stride),) if pairs == 2 else ()) + tuple(dims)


def _check(b: Builder, m: int, k: int, n: int, dtype: str) -> None:
    for name, v in (("M", m), ("K", k), ("N", n)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if dtype not in b.params.formats:
        raise KernelError(f"dtype must be one of {', '.join(b.params.formats)} on "
                          f"{b.params.name}, not {dtype!r}")


def _scale_copies(b: Builder, queues, src, first_row: int, cols: tuple[int, int],
                  kp: int, offset: int, tiles: int = 1, step: int = 0) -> list[str]:
    """DMAs of the scales of ``tiles`` consecutive K-tiles of ``kp`` quad partitions each,
    HBM rows from ``first_row`` (one per group of 8 partitions), columns ``cols``, into the
    SBUF scale tiles at ``offset``, ``step`` bytes apart: one DMA per quadrant, its groups
    into the quadrant's first partitions, quadrant ``i`` on ``queues[i % len(queues)]``.
    Returns the queues used."""
    groups = -(-kp // MX_GROUP_PARTITIONS)
    per = MX_QUADRANT // MX_GROUP_PARTITIONS
    width, row = cols[1] - cols[0], src.shape[1]
    used = []
    for g0 in range(0, groups, per):
        count = min(per, groups - g0)
        queue = queues[(g0 // per) % len(queues)]
        if queue not in used:
            used.append(queue)
        b.emit(queue, DmaCopy(
            dst=b.tile("sbuf", "uint8", offset, count, ((tiles, step), (width, 1)),
                       partition=mx_scale_partition(g0)),
            src=b.tile("hbm", "uint8", src.offset + (first_row + g0) * row + cols[0], count,
                       ((tiles, groups * row), (width, 1)), pstride=row)))
    return used


def _scale_tile(b: Builder, kp: int, offset: int, cols: int):
    """The scale operand of a K-tile of ``kp`` quad partitions: its partitions, or one per
    group of 8 when it has at most 32."""
    parts = kp if kp > MX_QUADRANT else -(-kp // MX_GROUP_PARTITIONS)
    return b.tile("sbuf", "uint8", offset, parts, ((cols, 1),))


def gemm(b: Builder, m: int, k: int, n: int, dtype: str = "bf16", *,
         func: str | None = None) -> None:
    """The blocked, overlapped GEMM; with ``func``, ``out = func(lhsT.T @ rhs + bias)``,
    ``bias`` one fp32 per row of ``out``, applied by the scalar engine as it empties PSUM."""
    _check(b, m, k, n, dtype)
    p = b.params
    mx = dtype in MX_FORMATS
    et = quad_type(dtype) if mx else dtype  # the tiles' element type
    es, odt = itemsize(et), out_dtype(dtype)
    oes = itemsize(odt)
    tk, tm = min(p.rows, p.partitions), p.cols
    tn = psum_columns(p)
    w = _pairs(b, dtype)  # K-tile slots hold w pairs
    if mx and (k % MX_BLOCK or tk % MX_GROUP_PARTITIONS):
        raise KernelError(f"an {dtype} GEMM needs K a multiple of {MX_BLOCK} and K-tiles of "
                          f"a multiple of {MX_GROUP_PARTITIONS} partitions, not K={k} and "
                          f"{tk}")
    kq = k // MX_QUAD if mx else k  # rows of the stored operands
    lhs_t = b.hbm("lhsT", (kq, m), et)
    rhs = b.hbm("rhs", (kq, n), et)
    if mx:
        lhs_s = b.hbm("lhsT_scale", (k // MX_BLOCK, m), "uint8")
        rhs_s = b.hbm("rhs_scale", (k // MX_BLOCK, n), "uint8")
    bias = b.hbm("bias", (m, 1), "fp32") if func else None
    out = b.hbm("out", (m, n), odt)
    k_tiles = _k_tiles(b, kq, et)
    n_tiles = _tiles(n, tn)
    group = max(1, min(len(k_tiles), DMA_BYTES // (w * tn * es)))
    chunks = []  # (first k-tile index, tiles): full tiles grouped, a partial tile alone
    full = (tk, w)
    i = 0
    while i < len(k_tiles):
        g = 1
        while g < group and i + g < len(k_tiles) and k_tiles[i + g][1:] == full \
                and k_tiles[i][1:] == full:
            g += 1
        chunks.append((i, g))
        i += g
    # M-block: half the PSUM banks (the other half is being emptied), as SBUF allows
    per_block = max(1, min(p.psum_banks // 2, -(-m // tm)))
    ring = _RING * group * w * tn * es
    ring_scales = _RING * group * tn if mx else 0
    bias_bytes = -(-m // tm) * 4 if func else 0  # a column per row tile of out
    while True:
        bm = per_block * tm
        a_scales = len(k_tiles) * bm if mx else 0
        a_bytes = len(k_tiles) * w * bm * es + a_scales
        blocks = _tiles(m, bm)
        stage = 2 * per_block * tn * oes
        fixed = ring + ring_scales + stage + bias_bytes
        # as many blocks in flight as there are lhsT queues (at least two), as SBUF allows
        want = min(len(blocks), max(2, len(_a_queues(b, mx))))
        buffers = max(1, min(want, (p.sbuf_bytes - fixed) // sbuf_aligned(a_bytes)))
        if buffers * sbuf_aligned(a_bytes) + fixed <= p.sbuf_bytes or per_block == 1:
            break
        per_block -= 1
    # rhs resident (loaded once for every M-block) where it fits in place of the ring with
    # the same blocks in flight; MX GEMMs stream it with its scales
    tw = n_tiles[0][1]  # columns of an N-tile
    whole_rhs = len(n_tiles) * len(k_tiles) * w * tw * es
    resident = len(blocks) > 1 and not mx and \
        buffers * sbuf_aligned(a_bytes) + fixed - ring + whole_rhs <= p.sbuf_bytes
    # output staging: a slot per N-tile of a block (at least two, the stores of one waiting
    # behind transfers queued before them while the next are filled), as SBUF allows
    slot_bytes = per_block * tw * oes
    spare = p.sbuf_bytes - buffers * sbuf_aligned(a_bytes) - fixed + stage \
        - (whole_rhs - ring if resident else 0)
    stages = max(2, min(len(blocks) * len(n_tiles), spare // sbuf_aligned(slot_bytes)))
    a_base = [b.sbuf(a_bytes, "lhsT block") for _ in range(buffers)]
    a_scale = [base + len(k_tiles) * w * bm * es for base in a_base]  # after the data
    ring_base = b.sbuf(whole_rhs if resident else ring, "rhs")
    ring_scale = b.sbuf(ring_scales, "rhs scales") if mx else 0
    stage_base = [b.sbuf(slot_bytes, "output staging") for _ in range(stages)]
    banks = b.psum_banks(2 * per_block, "accumulators")
    act = b.function(func) if func else 0
    if func:  # every row tile's bias in one DMA (a partial tile alone), first on a store queue
        bias_base = b.sbuf(bias_bytes, "bias")
        for mt, count, mp in _row_pieces(m, tm):
            b.emit(_OUT_QUEUES[-1], DmaCopy(
                dst=b.tile("sbuf", "fp32", bias_base + mt * 4, mp, ((count, 1),)),
                src=b.tile("hbm", "fp32", bias.offset + mt * tm * 4, mp,
                           _tiled(count, tm, ()), pstride=4)))
        bias_ready = b.signal(_OUT_QUEUES[-1])

    a_free = [None] * buffers
    slot_free = [None] * _RING
    bank_free: list[list] = [[], []]
    stage_free = [None] * stages
    slot = tile_no = 0
    a_queues = _a_queues(b, mx)
    a_no = 0  # lhsT chunks issued, each on the next of a_queues
    last = None  # the tensor engine's last matmul

    def multiply(kt, buf, mo, mp, half, mt, src, tnp, scale=None):
        pairs = k_tiles[kt][2]
        kp = k_tiles[kt][1]
        b.emit("tensor", LoadStationary(
            src=b.tile("sbuf", et, a_base[buf] + (kt * w * bm + mo) * es, kp,
                       _paired(pairs, bm, ((mp, 1),))),
            scale=_scale_tile(b, kp, a_scale[buf] + kt * bm + mo, mp) if mx else None,
            double_row=pairs == 2))
        b.emit("tensor", MultiplyMoving(
            dst=b.tile("psum", "fp32", banks[half * per_block + mt], mp, ((tnp, 1),)),
            src=src, accumulate=kt > 0, scale=scale, double_row=pairs == 2))

    # resident: every N-tile of rhs before the first lhsT chunk, full K-tiles in DMAs of
    # about DMA_BYTES a partition (each other tile alone) round the rhs queues; K-tile kt of
    # N-tile ni at slot ni * len(k_tiles) + kt, and rhs_ready[ni][kt] the event of its DMA
    rhs_ready: list[list] = []
    per_piece = max(1, DMA_BYTES // (w * tw * es))
    for ni, (n0, tnp) in enumerate(n_tiles if resident else []):
        pieces, kt = [], 0
        while kt < len(k_tiles):
            count = 1
            while count < per_piece and kt + count < len(k_tiles) \
                    and k_tiles[kt][1:] == k_tiles[kt + count][1:] == full:
                count += 1
            pieces.append((kt, count))
            kt += count
        rhs_ready.append([])
        for kt, count in pieces:
            k0, kp, pairs = k_tiles[kt]
            q = _B_QUEUES[slot % len(_B_QUEUES)]
            slot += 1
            b.emit(q, DmaCopy(
                dst=b.tile("sbuf", et, ring_base + (ni * len(k_tiles) + kt) * w * tw * es, kp,
                           _tiled(count, w * tw, _paired(pairs, tw, ((tnp, 1),)))),
                src=b.tile("hbm", et, rhs.offset + (k0 * n + n0) * es, kp,
                           _tiled(count, w * tk * n, _paired(pairs, kp * n, ((tnp, 1),))),
                           pstride=n * es)))
            rhs_ready[ni] += [b.signal(q)] * count

    for bi, (m0, bmp) in enumerate(blocks):
        buf = bi % buffers
        used = []
        a_ready = {}  # first K-tile of a chunk -> its DMA's event
        for c0, g in chunks:
            q = a_queues[a_no % len(a_queues)]
            a_no += 1
            if q not in used:
                used.append(q)
                b.wait(q, a_free[buf])
            k0, kp, pairs = k_tiles[c0]
            src = b.tile("hbm", et, lhs_t.offset + (k0 * m + m0) * es, kp,
                         ((g, w * tk * m),) + _paired(pairs, kp * m, ((bmp, 1),)),
                         pstride=m * es)
            dst = b.tile("sbuf", et, a_base[buf] + c0 * w * bm * es, kp,
                         ((g, w * bm),) + _paired(pairs, bm, ((bmp, 1),)))
            b.emit(q, DmaCopy(dst=dst, src=src))
            if mx:
                _scale_copies(b, [q], lhs_s, k_tiles[c0][0] // MX_GROUP_PARTITIONS,
                              (m0, m0 + bmp), kp, a_scale[buf] + c0 * bm, g, bm)
            a_ready[c0] = b.signal(q)
        m_tiles = _tiles(bmp, tm)
        for ni, (n0, tnp) in enumerate(n_tiles):
            half = tile_no % 2
            b.wait("tensor", *bank_free[half])
            if resident:
                for kt in range(len(k_tiles)):
                    # the first N-tile waits for each chunk as it comes (the first block for
                    # each rhs piece too)
                    b.wait("tensor", a_ready.get(kt) if ni == 0 else None,
                           rhs_ready[ni][kt] if bi == 0 and (
                               kt == 0 or rhs_ready[ni][kt] != rhs_ready[ni][kt - 1])
                           else None)
                    base = ring_base + (ni * len(k_tiles) + kt) * w * tw * es
                    src = b.tile("sbuf", et, base, k_tiles[kt][1],
                                 _paired(k_tiles[kt][2], tw, ((tnp, 1),)))
                    for mt, (mo, mp) in enumerate(m_tiles):
                        multiply(kt, buf, mo, mp, half, mt, src, tnp)
                last = b.signal("tensor")
            for c0, g in [] if resident else chunks:
                k0, kp, pairs = k_tiles[c0]
                s = slot % _RING
                q = _B_QUEUES[slot % len(_B_QUEUES)]
                b.wait(q, slot_free[s])
                src = b.tile("hbm", et, rhs.offset + (k0 * n + n0) * es, kp,
                             ((g, w * tk * n),) + _paired(pairs, kp * n, ((tnp, 1),)),
                             pstride=n * es)
                base = ring_base + s * group * w * tn * es
                scales = ring_scale + s * group * tn
                b.emit(q, DmaCopy(dst=b.tile("sbuf", et, base, kp, ((g, w * tn),)
                                             + _paired(pairs, tn, ((tnp, 1),))),
                                  src=src))
                b.wait("tensor", b.signal(q), a_ready[c0] if ni == 0 else None)
                if mx:
                    quads = MX_QUADRANT // MX_GROUP_PARTITIONS
                    queues = [_SCALE_QUEUES[(slot * quads + i) % len(_SCALE_QUEUES)]
                              for i in range(quads)] \
                        if p.dma_queues > int(_SCALE_QUEUES[-1][3:]) else [q]
                    for qs in queues:
                        if qs != q:
                            b.wait(qs, slot_free[s])
                    for qs in _scale_copies(b, queues, rhs_s,
                                            k_tiles[c0][0] // MX_GROUP_PARTITIONS,
                                            (n0, n0 + tnp), kp, scales, g, tn):
                        b.wait("tensor", b.signal(qs))
                for gi in range(g):
                    src = b.tile("sbuf", et, base + gi * w * tn * es, kp,
                                 _paired(pairs, tn, ((tnp, 1),)))
                    for mt, (mo, mp) in enumerate(m_tiles):
                        multiply(c0 + gi, buf, mo, mp, half, mt, src, tnp,
                                 _scale_tile(b, kp, scales + gi * tn, tnp) if mx else None)
                slot_free[s] = last = b.signal("tensor")
                slot += 1
            engines = []
            for mt, (_, mp) in enumerate(m_tiles):
                eng = "scalar" if func or mt % 2 else "vector"
                if eng not in engines:
                    engines.append(eng)
                    b.wait(eng, last, stage_free[tile_no % stages])
                    if func and bi == 0 and ni == 0:
                        b.wait(eng, bias_ready)
                psum = b.tile("psum", "fp32", banks[half * per_block + mt], mp, ((tnp, 1),))
                st = b.tile("sbuf", odt, stage_base[tile_no % stages] + mt * tw * oes, mp,
                            ((tnp, 1),))
                if func:
                    b.emit(eng, Activation(dst=st, src=psum, func=act, bias=b.column(
                        bias_base + (m0 // tm + mt) * 4, mp)))
                else:
                    b.emit(eng, TensorCopy(dst=st, src=psum))
            bank_free[half] = [b.signal(e) for e in engines]
            # a block's stores on one queue (they share its rows), the blocks alternating
            q = _OUT_QUEUES[bi % len(_OUT_QUEUES)]
            b.wait(q, *bank_free[half])
            for mt, count, mp in _row_pieces(bmp, tm):
                st = b.tile("sbuf", odt, stage_base[tile_no % stages] + mt * tw * oes, mp,
                            _tiled(count, tw, ((tnp, 1),)))
                dst = b.tile("hbm", odt, out.offset + ((m0 + mt * tm) * n + n0) * oes, mp,
                             _tiled(count, tm * n, ((tnp, 1),)), pstride=n * oes)
                b.emit(q, DmaCopy(dst=dst, src=st))
            stage_free[tile_no % stages] = b.signal(q)
            tile_no += 1
        a_free[buf] = last


def gemm_naive(b: Builder, m: int, k: int, n: int, dtype: str = "bf16") -> None:
    """One output tile at a time, each operand tile fetched when needed and waited for, one
    buffer of each, one queue: nothing reused, nothing overlapped."""
    _check(b, m, k, n, dtype)
    p = b.params
    es, odt = itemsize(dtype), out_dtype(dtype)
    tm = p.cols
    tn = psum_columns(p)
    w = _pairs(b, dtype)
    lhs_t = b.hbm("lhsT", (k, m), dtype)
    rhs = b.hbm("rhs", (k, n), dtype)
    out = b.hbm("out", (m, n), odt)
    a_base = b.sbuf(w * tm * es, "lhsT tile")
    b_base = b.sbuf(w * tn * es, "rhs tile")
    o_base = b.sbuf(tn * itemsize(odt), "output tile")
    bank = b.psum_banks(1, "accumulator")[0]
    free = None
    for m0, mp in _tiles(m, tm):
        for n0, tnp in _tiles(n, tn):
            for kt, (k0, kp, pairs) in enumerate(_k_tiles(b, k, dtype)):
                a_tile = b.tile("sbuf", dtype, a_base, kp, _paired(pairs, mp, ((mp, 1),)))
                b_tile = b.tile("sbuf", dtype, b_base, kp, _paired(pairs, tnp, ((tnp, 1),)))
                b.wait("dma0", free)
                b.emit("dma0", DmaCopy(dst=a_tile, src=b.tile(
                    "hbm", dtype, lhs_t.offset + (k0 * m + m0) * es, kp,
                    _paired(pairs, kp * m, ((mp, 1),)), pstride=m * es)))
                b.emit("dma0", DmaCopy(dst=b_tile, src=b.tile(
                    "hbm", dtype, rhs.offset + (k0 * n + n0) * es, kp,
                    _paired(pairs, kp * n, ((tnp, 1),)), pstride=n * es)))
                b.wait("tensor", b.signal("dma0"))
                b.emit("tensor", LoadStationary(src=a_tile, double_row=pairs == 2))
                b.emit("tensor", MultiplyMoving(
                    dst=b.tile("psum", "fp32", bank, mp, ((tnp, 1),)), src=b_tile,
                    accumulate=kt > 0, double_row=pairs == 2))
                free = b.signal("tensor")
            b.wait("vector", free)
            b.emit("vector", TensorCopy(dst=b.tile("sbuf", odt, o_base, mp, ((tnp, 1),)),
                                        src=b.tile("psum", "fp32", bank, mp, ((tnp, 1),))))
            copied = b.signal("vector")
            b.wait("dma0", copied)
            b.emit("dma0", DmaCopy(dst=out.ap((m0, m0 + mp), (n0, n0 + tnp)),
                                   src=b.tile("sbuf", odt, o_base, mp, ((tnp, 1),))))
            free = b.signal("dma0")
            b.wait("tensor", free)
