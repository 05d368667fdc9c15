"""Matrix multiplication kernels: ``out[M, N] = lhsT[K, M].T @ rhs[K, N]`` (optionally
``func(... + bias[M])``), ``lhsT`` stored transposed as the tensor engine's stationary wants it,
or ``out = lhs[M, K] @ rhs[K, N]`` (optionally ``func(... + bias[N])``) with ``lhs`` as rows.

:func:`gemm` works in steps of an M-block, an N-block and a K-block (:func:`_plan`): blocks
of ``lhsT`` rows about :data:`~kernels.builder.DMA_BYTES` a partition and of ``rhs`` rows half
that, where M and N allow, since a DMA moves each partition's contiguous run as its own
packets [DMA]. Each side's chunk of the step moves in pieces of about ``DMA_BYTES`` a
partition round its queues (whole K-tiles, a partial tile alone), the first K-tiles
multiplying while the rest arrive, double-buffered so that the next step's chunks load while
this one's multiply. Where the whole contraction fits in SBUF beside them it is one K-block,
each M-block's ``lhsT`` loaded once for every N-block and ``rhs`` too (resident, before the
first block) where it fits in place of its buffers; otherwise the sums of each K-block are
kept in an fp32 accumulator in SBUF (copied at the first K-block, added by the vector engine
after) and the last K-block's go to the output. Each pair of an N-tile and up to half the
PSUM banks' M-tiles accumulates in one half of the banks while the other half is emptied
into the output staging (two slots, a step's each) and the staging stores, an M-block's on
one queue, its whole row tiles in one transfer; every row tile's bias loads once, in one
transfer, first on a store queue. The ``lhsT`` chunks go on ``dma0`` and ``dma7`` up where
the core has them, ``rhs`` on ``dma1``-``dma4``, the stores on ``dma5`` and ``dma6``.
A K-block of two or more whole single-row K-tiles is interleaved (``interleaved`` in
:func:`gemm`): partition ``p`` of its K-tile ``kl`` holds row ``k0 + p * tiles + kl`` of both
operands, so that where a block spans whole rows each partition's share is one run.
:func:`gemm_naive` is the same arithmetic tile by tile with nothing overlapped or reused.

With ``lhs_rows`` (the kernels ``gemm_rows`` and ``gemm_rows_bias_gelu``) the first operand
is ``lhs[M, K]`` as stored, a few tokens' activations as rows: each M-block's rows of a
K-block load in one transfer and the tensor engine turns them into the stationary's tiles;
the bias, if any, is one per column of ``out``, added by the vector engine in PSUM before
the scalar engine's function.

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
    TensorTensor,
    mx_scale_partition,
)
from hdl.numerics.formats import MX_FORMATS
from hdl.vector.ops import VectorOp

from .builder import DMA_BYTES, Builder, KernelError, itemsize, psum_columns, sbuf_aligned
from .mx import MX_BLOCK, quad_type
from .norms import broadcast_row

__all__ = ["gemm", "gemm_naive", "out_dtype"]

_B_QUEUES = ("dma1", "dma2", "dma3", "dma4")
_OUT_QUEUES = ("dma5", "dma6")


def _a_queues(b: Builder) -> tuple[str, ...]:
    """Queues of the ``lhsT`` chunks: ``dma0`` and, where the core has them, those past the
    rhs and output queues."""
    first = int(_OUT_QUEUES[-1][3:]) + 1
    return ("dma0",) + tuple(f"dma{i}" for i in range(first, b.params.dma_queues))


def out_dtype(dtype: str) -> str:
    """Output type of a matmul on ``dtype`` inputs: fp32 stays fp32, the rest bf16."""
    return "fp32" if dtype == "fp32" else "bf16"


def _tiles(size: int, tile: int) -> list[tuple[int, int]]:
    return [(o, min(tile, size - o)) for o in range(0, size, tile)]


def _n_width(n: int, bn_t: int, tn: int) -> int:
    """Columns of an N-block of at most ``bn_t`` tiles of ``tn``: ``n`` split evenly into as
    few blocks, so that no block's rows are a short remainder (each rhs row is one DMA
    packet of the block's width)."""
    return -(-n // -(-n // (bn_t * tn)))


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


def _plan(b: Builder, m: int, n: int, kt_all: int, w: int, es: int, oes: int, mx: bool,
          func: str | None, rows: bool) -> tuple[int, int, int]:
    """(M-tiles per M-block, N-tiles per N-block, K-tiles per K-block). Blocks start with
    operand rows of about :data:`DMA_BYTES` (``lhsT``) and half that (``rhs``; as many with
    ``rows``, lhs as rows) where M and N allow, and four steps or more where M allows. The
    whole contraction is one K-block if it fits, double-buffered, with M-blocks narrowed to
    four tiles (and, in an MX format, N-blocks to half their width first: its array takes a
    quarter of the cycles per output element of a K-block, which the vector engine's add of
    each K-block's sums would then bound); else the largest K-block that fits beside the
    fp32 accumulator at the first widths that take one K-tile."""
    p = b.params
    tm, tn = p.cols, psum_columns(p)
    mt_all, nt_all = -(-m // tm), -(-n // tn)
    # rhs rows of half DMA_BYTES beside lhsT's (as many with lhs as rows: few M-tiles)
    bn_t = min(nt_all, max(1, (DMA_BYTES if rows else DMA_BYTES // 2) // (tn * es)))
    # four steps (M-blocks x N-blocks) at least, M-blocks of four tiles or more: the first
    # step's operands are all that load before the multiplies start
    blocks = -(-4 // -(-nt_all // bn_t))
    bm_t = min(max(min(4, mt_all), -(-mt_all // blocks)), max(1, DMA_BYTES // (tm * es)))

    def need(bm_t: int, bn_t: int, bk: int) -> int:
        bm, bn = min(bm_t * tm, m), _n_width(n, bn_t, tn)
        return 2 * (sbuf_aligned(bk * (w * bm * es + (bm if mx else 0)))
                    + sbuf_aligned(bk * (w * bn * es + (bn if mx else 0)))) \
            + _beside(p, m, n, bm_t, bn_t, bk, bk < kt_all, w, es, oes, func, rows)

    widths = [(bm_t, t) for t in range(bn_t, 0, -1)] + \
        [(t, 1) for t in range(bm_t - 1, 0, -1)]
    for wm, wn in widths:
        if wm >= min(4, bm_t) and wn >= (-(-bn_t // 2) if mx else bn_t) and \
                need(wm, wn, kt_all) <= p.sbuf_bytes:
            return wm, wn, kt_all
    for wm, wn in widths:
        for bk in range(kt_all - 1, 0, -1):
            if need(wm, wn, bk) <= p.sbuf_bytes:
                return wm, wn, bk
    raise KernelError(f"one K-tile of the operands needs {need(1, 1, 1)} bytes of SBUF per "
                      f"partition, {p.name} has {p.sbuf_bytes}")


def _beside(p, m: int, n: int, bm_t: int, bn_t: int, bk: int, several: bool, w: int, es: int,
            oes: int, func: str | None, rows: bool) -> int:
    """SBUF per partition besides the operand buffers: the fp32 accumulator (``several``
    K-blocks), an M-block's lhs rows of a K-block (``rows``), two output staging slots and
    the bias (a column per row tile, or with ``rows`` a row of ``n``)."""
    bn = _n_width(n, bn_t, psum_columns(p))
    return (sbuf_aligned(bm_t * bn * 4) if several else 0) \
        + (sbuf_aligned(bm_t * bk * w * min(p.rows, p.partitions) * es) if rows else 0) \
        + 2 * sbuf_aligned(bm_t * bn * oes) + sbuf_aligned(_bias_bytes(p, m, n, func, rows))


def _bias_bytes(p, m: int, n: int, func: str | None, rows: bool) -> int:
    """SBUF per partition of the bias: none without ``func``; a column per row tile of
    ``out``, or with ``rows`` (lhs as rows) a row of the ``n`` columns' biases."""
    return 0 if not func else n * 4 if rows else -(-m // p.cols) * 4


def _pieces(k_tiles, first: int, count: int, full, most: int) -> list[tuple[int, int]]:
    """K-tiles ``first .. first + count`` as DMA pieces (first K-tile, tiles): up to ``most``
    consecutive full tiles in one, any other tile alone."""
    out, i = [], first
    while i < first + count:
        g = 1
        while g < most and i + g < first + count and \
                k_tiles[i][1:] == k_tiles[i + g][1:] == full:
            g += 1
        out.append((i, g))
        i += g
    return out


def gemm(b: Builder, m: int, k: int, n: int, dtype: str = "bf16", *,
         func: str | None = None, lhs_rows: bool = False) -> None:
    """The blocked, overlapped GEMM; with ``func``, ``out = func(lhsT.T @ rhs + bias)``,
    ``bias`` one fp32 per row of ``out``, applied by the scalar engine as it empties PSUM.
    With ``lhs_rows`` the first operand is ``lhs[M, K]`` as stored (rows of the output's
    rows), each M-block's rows of a K-block loaded whole and turned by the tensor engine
    (:class:`~hdl.core.isa.Transpose`, a PSUM bank of its own) into the stationary's
    ``[K, M]`` tiles, which the vector engine copies out of PSUM."""
    _check(b, m, k, n, dtype)
    p = b.params
    mx = dtype in MX_FORMATS
    if mx and lhs_rows:
        raise KernelError(f"an {dtype} GEMM takes lhsT stored as [K, M] with its scales, "
                          f"not lhs as rows")
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
    lhs_t = b.hbm("lhs", (m, kq), et) if lhs_rows else b.hbm("lhsT", (kq, m), et)
    rhs = b.hbm("rhs", (kq, n), et)
    if mx:
        lhs_s = b.hbm("lhsT_scale", (k // MX_BLOCK, m), "uint8")
        rhs_s = b.hbm("rhs_scale", (k // MX_BLOCK, n), "uint8")
    # the bias: one per row of out, or with lhs as rows one per column (a feature's)
    bias = b.hbm("bias", (1, n) if lhs_rows else (m, 1), "fp32") if func else None
    out = b.hbm("out", (m, n), odt)
    k_tiles = _k_tiles(b, kq, et)
    full = (tk, w)
    bm_t, bn_t, bk = _plan(b, m, n, len(k_tiles), w, es, oes, mx, func, lhs_rows)
    bm, bn = min(bm_t * tm, m), _n_width(n, bn_t, tn)
    m_blocks, n_blocks = _tiles(m, bm), _tiles(n, bn)
    k_blocks = _tiles(len(k_tiles), bk)
    several = len(k_blocks) > 1  # sums kept in an fp32 accumulator between K-blocks
    a_bytes = bk * (w * bm * es + (bm if mx else 0))
    b_bytes = bk * (w * bn * es + (bn if mx else 0))
    rows_bytes = bm_t * bk * w * tk * es if lhs_rows else 0  # an M-block's rows of a K-block
    bias_bytes = _bias_bytes(p, m, n, func, lhs_rows)
    rest = _beside(p, m, n, bm_t, bn_t, bk, several, w, es, oes, func, lhs_rows)
    # rhs resident where every M-block would read it again and it fits in place of its
    # buffers; MX GEMMs stream it with its scales
    per_n = len(k_tiles) * w * bn * es
    resident = len(m_blocks) > 1 and not mx and p.sbuf_bytes >= (
        2 * sbuf_aligned(a_bytes) + sbuf_aligned(len(n_blocks) * per_n) + rest)
    rest += sbuf_aligned(len(n_blocks) * per_n) if resident else 2 * sbuf_aligned(b_bytes)
    # as many lhsT chunks in flight as there are lhsT queues (at least two), as SBUF allows,
    # since transfers within a queue run in order, each after its own start-up latency [DMA]
    chunks = len(m_blocks) * (len(n_blocks) * len(k_blocks) if several else 1)
    buffers = max(2, min(chunks, len(_a_queues(b)),
                         (p.sbuf_bytes - rest) // sbuf_aligned(a_bytes)))
    a_base = [b.sbuf(a_bytes, "lhsT block") for _ in range(buffers)]
    b_base = [b.sbuf(len(n_blocks) * per_n, "rhs")] if resident else \
        [b.sbuf(b_bytes, "rhs block") for _ in range(2)]
    acc = b.sbuf(bm_t * bn * 4, "accumulator") if several else None
    stage = [b.sbuf(bm_t * bn * oes, "output staging") for _ in range(2)]
    rows_base = b.sbuf(rows_bytes, "lhs rows") if lhs_rows else None
    # M-tiles accumulating at once, in half the banks (less the transposes' bank)
    per = min((p.psum_banks - (1 if lhs_rows else 0)) // 2, bm_t)
    banks = b.psum_banks(2 * per, "accumulators")
    turned = b.psum_banks(1, "transposes")[0] if lhs_rows else None
    act = b.function(func) if func else 0
    if func and lhs_rows:  # the bias row in every partition of a row tile, in one DMA
        bias_base = b.sbuf(bias_bytes, "bias")
        broadcast_row(b, _OUT_QUEUES[-1], bias, min(tm, m),
                      b.tile("sbuf", "fp32", bias_base, min(tm, m), ((n, 1),)))
        bias_ready = b.signal(_OUT_QUEUES[-1])
    elif func:  # every row tile's bias in one DMA (a partial tile alone), first on a store queue
        bias_base = b.sbuf(bias_bytes, "bias")
        for mt, count, mp in _row_pieces(m, tm):
            b.emit(_OUT_QUEUES[-1], DmaCopy(
                dst=b.tile("sbuf", "fp32", bias_base + mt * 4, mp, ((count, 1),)),
                src=b.tile("hbm", "fp32", bias.offset + mt * tm * 4, mp,
                           _tiled(count, tm, ()), pstride=4)))
        bias_ready = b.signal(_OUT_QUEUES[-1])
    a_queues = _a_queues(b)
    dmas = {"a": 0, "b": 0}  # transfers issued, each on the next of its queues

    def load(side, buf_base, first, count, c0, cols, width, queues, free):
        """The DMAs of K-tiles ``first .. first + count`` of one side's block (its columns
        ``c0 .. c0 + width`` in a buffer ``cols`` wide at ``buf_base``); the event of each
        K-tile's DMA by its index in the block."""
        if side == "a" and lhs_rows:
            return load_rows(buf_base, first, count, c0, width, queues, free)
        hbm, scales, stride = (lhs_t, lhs_s if mx else None, m) if side == "a" else \
            (rhs, rhs_s if mx else None, n)
        ready = {}
        inter = interleaved(first, count)
        # pieces of about DMA_BYTES a partition, round the queues: the first K-tiles multiply
        # while the rest arrive
        for c, g in _pieces(k_tiles, first, count, full, max(1, DMA_BYTES // (w * cols * es))):
            q = queues[dmas[side] % len(queues)]
            dmas[side] += 1
            b.wait(q, free)
            k0, kp, pairs = k_tiles[c]
            local = c - first
            src = b.tile("hbm", et, hbm.offset + ((k_tiles[first][0] + local) * stride + c0)
                         * es, kp, ((g, stride), (width, 1)), pstride=count * stride * es) \
                if inter else \
                b.tile("hbm", et, hbm.offset + (k0 * stride + c0) * es, kp,
                       ((g, w * tk * stride),) + _paired(pairs, kp * stride, ((width, 1),)),
                       pstride=stride * es)
            b.emit(q, DmaCopy(
                dst=b.tile("sbuf", et, buf_base + local * w * cols * es, kp,
                           ((g, w * cols),) + _paired(pairs, cols, ((width, 1),))), src=src))
            if mx:
                _scale_copies(b, [q], scales, k0 // MX_GROUP_PARTITIONS, (c0, c0 + width), kp,
                              buf_base + bk * w * cols * es + local * cols, g, cols)
            ev = b.signal(q)
            ready.update({i: ev for i in range(local, local + g)})
        return ready

    def interleaved(first, count):
        """Whether the K-block of K-tiles ``first .. first + count`` is interleaved: where
        they are two or more whole single-row tiles (no double row, no MX), partition ``p``
        of its K-tile ``kl`` holds row ``k0 + p * count + kl``, so that each partition's
        rows of both operands are consecutive in memory, one run a partition where a block
        spans whole rows [DMA]. The contraction's order is the sum's only."""
        return count > 1 and w == 1 and not mx and \
            all(k_tiles[i][1:] == full for i in range(first, first + count))

    rows_free = None  # the tensor engine's last transpose out of the rows buffer
    copied = None  # the vector engine's last copy out of the transposes' bank

    def load_rows(buf_base, first, count, m0, bmp, queues, free):
        """lhsT's chunk of K-tiles ``first .. first + count`` and M-block ``m0 .. m0 + bmp``
        from ``lhs`` rows: their DMA (an M-tile's rows a partition each, the whole tiles in
        one), the tensor engine's transposes a bank at a time and the vector engine's copies
        into the lhsT buffer; the event of each K-tile's copies by its index in the block."""
        nonlocal rows_free, copied
        k0 = k_tiles[first][0]
        k1 = k_tiles[first + count - 1][0] + k_tiles[first + count - 1][1] * \
            k_tiles[first + count - 1][2]
        cols = k1 - k0
        q = queues[dmas["a"] % len(queues)]
        dmas["a"] += 1
        b.wait(q, rows_free)
        for mt, tiles, mp in _row_pieces(bmp, tm):
            b.emit(q, DmaCopy(
                dst=b.tile("sbuf", et, rows_base + mt * cols * es, mp,
                           _tiled(tiles, cols, ((cols, 1),))),
                src=b.tile("hbm", et, lhs_t.offset + ((m0 + mt * tm) * kq + k0) * es, mp,
                           _tiled(tiles, tm * kq, ((cols, 1),)), pstride=kq * es)))
        arrived = b.signal(q)
        inter = interleaved(first, count)
        turns, local = [], []
        for kl in range(count):
            kp, pairs = k_tiles[first + kl][1:]
            for pair in range(pairs):
                c = k_tiles[first + kl][0] - k0 + pair * kp
                for mt, (mo, mp) in enumerate(_tiles(bmp, tm)):
                    src = b.tile("sbuf", et, rows_base + (mt * cols + kl) * es, mp,
                                 ((kp, count),)) if inter else \
                        b.tile("sbuf", et, rows_base + (mt * cols + c) * es, mp, ((kp, 1),))
                    dst = b.tile("sbuf", et, buf_base + (kl * w * bm + pair * bm + mo) * es,
                                 kp, ((mp, 1),))
                    turns.append((src, dst))
                    local.append(kl)
        done, copied, events = b.transpose(turns, turned, tm * es, arrived=arrived, free=free,
                                           copied=copied)
        ready = dict(zip(local, events, strict=True))
        rows_free = done
        return ready

    # resident rhs: every block before the first lhsT chunk, in order of first use
    rhs_ready = {}
    for ni, (n0, bnp) in enumerate(n_blocks if resident else []):
        for ki, (f, cnt) in enumerate(k_blocks):
            base = b_base[0] + (ni * len(k_tiles) + f) * w * bn * es
            rhs_ready[ni, ki] = load("b", base, f, cnt, n0, bn, bnp, _B_QUEUES, None)

    def empty(group, half, g0, ki, final, no, tnp, stage, stage_free, bias_ready):
        """Empty one bank group of PSUM: into the output staging (a single K-block: a copy on the
        vector and scalar engines in turn, or the scalar engine's activation with ``func``), else
        into the fp32 accumulator (copied at the first K-block, added after), the last K-block's
        sum going to the staging (through the scalar engine's activation with ``func``). The
        events that free the banks, and those after which the staging holds the group."""
        nonlocal acc_free
        engines = []

        def start(eng, *events):
            if eng not in engines:
                engines.append(eng)
                b.wait(eng, last, *events)

        def columns(mp):  # the bias of this bank's columns, a row in each partition
            return b.tile("sbuf", "fp32", bias_base + (n0 + no) * 4, mp, ((tnp, 1),))

        if func and lhs_rows and not several:  # the bias added in PSUM, then the function
            start("vector", bias_ready)
            for mt, (_, mp) in group:
                psum = b.tile("psum", "fp32", banks[half * per + mt - g0], mp, ((tnp, 1),))
                b.emit("vector", TensorTensor(dst=psum, a=psum, b=columns(mp),
                                              op=VectorOp.ADD))
            b.wait("scalar", b.signal("vector"), stage_free)
            for mt, (_, mp) in group:
                b.emit("scalar", Activation(
                    dst=b.tile("sbuf", odt, stage + (mt * bn + no) * oes, mp, ((tnp, 1),)),
                    src=b.tile("psum", "fp32", banks[half * per + mt - g0], mp, ((tnp, 1),)),
                    func=act))
            freed = [b.signal("scalar")]
            return freed, freed if final else []
        for mt, (_, mp) in group:
            psum = b.tile("psum", "fp32", banks[half * per + mt - g0], mp, ((tnp, 1),))
            st = b.tile("sbuf", odt, stage + (mt * bn + no) * oes, mp, ((tnp, 1),))
            if not several:
                eng = "scalar" if func or mt % 2 else "vector"
                start(eng, stage_free, bias_ready)
                if func:
                    b.emit(eng, Activation(dst=st, src=psum, func=act,
                                           bias=b.column(bias_base + (m0 // tm + mt) * 4, mp)))
                else:
                    b.emit(eng, TensorCopy(dst=st, src=psum))
                continue
            a = b.tile("sbuf", "fp32", acc + (mt * bn + no) * 4, mp, ((tnp, 1),))
            start("vector", acc_free if ki == 0 else None, stage_free if final else None,
                  bias_ready if final and lhs_rows else None)
            if ki == 0:
                b.emit("vector", TensorCopy(dst=a, src=psum))
            else:
                b.emit("vector", TensorTensor(dst=st if final and not func else a, a=a, b=psum,
                                              op=VectorOp.ADD))
            if final and func and lhs_rows:
                b.emit("vector", TensorTensor(dst=a, a=a, b=columns(mp), op=VectorOp.ADD))
        freed = [b.signal(e) for e in engines]
        if not (several and final and func):
            return freed, freed if final else []
        b.wait("scalar", *freed, stage_free, bias_ready)
        for mt, (_, mp) in group:
            b.emit("scalar", Activation(
                dst=b.tile("sbuf", odt, stage + (mt * bn + no) * oes, mp, ((tnp, 1),)),
                src=b.tile("sbuf", "fp32", acc + (mt * bn + no) * 4, mp, ((tnp, 1),)),
                func=act, bias=None if lhs_rows else
                b.column(bias_base + (m0 // tm + mt) * 4, mp)))
        acc_free = b.signal("scalar")
        return freed, [acc_free]

    a_free, b_free, stage_free = [None] * buffers, [None, None], [None, None]
    a_held, a_buf, b_buf = None, -1, 1
    bank_free: list[list] = [[], []]
    acc_free = None  # the scalar engine's last read of the accumulator
    group_no = step = 0
    last = None  # the tensor engine's last matmul
    for mi, (m0, bmp) in enumerate(m_blocks):
        m_tiles = _tiles(bmp, tm)
        for ni, (n0, bnp) in enumerate(n_blocks):
            slot = step % 2
            # an M-block's stores on one queue (they share its rows), the blocks alternating
            q = _OUT_QUEUES[mi % len(_OUT_QUEUES)]
            for ki, (f, cnt) in enumerate(k_blocks):
                if a_held != (mi, ki):  # lhsT's chunk, kept over N-blocks where K is whole
                    a_buf = (a_buf + 1) % buffers
                    a_ready = load("a", a_base[a_buf], f, cnt, m0, bm, bmp, a_queues,
                                   a_free[a_buf])
                    a_held = (mi, ki)
                if resident:
                    b_at = b_base[0] + (ni * len(k_tiles) + f) * w * bn * es
                    b_ready = rhs_ready[ni, ki] if mi == 0 else {}
                else:
                    b_buf = 1 - b_buf
                    b_at = b_base[b_buf]
                    b_ready = load("b", b_at, f, cnt, n0, bn, bnp, _B_QUEUES, b_free[b_buf])
                waited = set()
                final = ki == len(k_blocks) - 1
                for g0 in range(0, len(m_tiles), per):
                    group = list(enumerate(m_tiles))[g0:g0 + per]
                    staged = []
                    for no, tnp in _tiles(bnp, tn):
                        half = group_no % 2
                        group_no += 1
                        b.wait("tensor", *bank_free[half])
                        for kl in range(cnt):
                            if kl not in waited:
                                waited.add(kl)
                                b.wait("tensor", a_ready.get(kl), b_ready.get(kl))
                            _, kp, pairs = k_tiles[f + kl]
                            src = b.tile("sbuf", et, b_at + (kl * w * bn + no) * es, kp,
                                         _paired(pairs, bn, ((tnp, 1),)))
                            scale = _scale_tile(b, kp, b_at + bk * w * bn * es + kl * bn + no,
                                                tnp) if mx else None
                            for mt, (mo, mp) in group:
                                b.emit("tensor", LoadStationary(
                                    src=b.tile("sbuf", et, a_base[a_buf]
                                               + (kl * w * bm + mo) * es, kp,
                                               _paired(pairs, bm, ((mp, 1),))),
                                    scale=_scale_tile(b, kp, a_base[a_buf] + bk * w * bm * es
                                                      + kl * bm + mo, mp) if mx else None,
                                    double_row=pairs == 2))
                                b.emit("tensor", MultiplyMoving(
                                    dst=b.tile("psum", "fp32", banks[half * per + mt - g0],
                                               mp, ((tnp, 1),)),
                                    src=src, accumulate=kl > 0, scale=scale,
                                    double_row=pairs == 2))
                        last = b.signal("tensor")
                        bank_free[half], done = empty(
                            group, half, g0, ki, final, no, tnp, stage[slot], stage_free[slot],
                            bias_ready if func and step == 0 else None)
                        staged += done
                    if final:  # the group's rows, stored as soon as they are staged
                        b.wait(q, *staged)
                        rows = sum(mp for _, (_, mp) in group)
                        for mt, count, mp in _row_pieces(rows, tm):
                            mt += g0
                            st = b.tile("sbuf", odt, stage[slot] + mt * bn * oes, mp,
                                        _tiled(count, bn, ((bnp, 1),)))
                            dst = b.tile("hbm", odt, out.offset + ((m0 + mt * tm) * n + n0)
                                         * oes, mp, _tiled(count, tm * n, ((bnp, 1),)),
                                         pstride=n * oes)
                            b.emit(q, DmaCopy(dst=dst, src=st))
                if not resident:
                    b_free[b_buf] = last
                a_free[a_buf] = last
            stage_free[slot] = b.signal(q)
            step += 1


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
