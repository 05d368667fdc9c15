"""Matrix multiplication kernels: ``out[M, N] = lhsT[K, M].T @ rhs[K, N]`` (optionally
``func(... + bias[M])``), ``lhsT`` stored transposed as the tensor engine's stationary wants it.

:func:`gemm` is blocked for SBUF reuse and overlaps every transfer with compute: an M-block of
``lhsT`` stays in SBUF (double-buffered across blocks) while ``rhs`` streams through a ring of
K-chunks on several DMA queues; each N-tile accumulates in half of the PSUM banks while the
vector and scalar engines empty the other half and DMA queues store the results.
:func:`gemm_naive` is the same arithmetic tile by tile with nothing overlapped or reused.
"""

from __future__ import annotations

from hdl.core.isa import Activation, DmaCopy, LoadStationary, MultiplyMoving, TensorCopy

from .builder import Builder, KernelError, itemsize

__all__ = ["gemm", "gemm_naive", "out_dtype"]

_RING = 4
_CHUNK_BYTES = 4096  # per partition of one rhs DMA: the DMA guide's 2-4 KiB or more
_B_QUEUES = ("dma1", "dma2", "dma3", "dma4")
_OUT_QUEUES = ("dma5", "dma6")


def out_dtype(dtype: str) -> str:
    """Output type of a matmul on ``dtype`` inputs: fp32 stays fp32, the rest bf16."""
    return "fp32" if dtype == "fp32" else "bf16"


def _tiles(size: int, tile: int) -> list[tuple[int, int]]:
    return [(o, min(tile, size - o)) for o in range(0, size, tile)]


def _check(b: Builder, m: int, k: int, n: int, dtype: str) -> None:
    for name, v in (("M", m), ("K", k), ("N", n)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if dtype not in b.params.formats:
        raise KernelError(f"dtype must be one of {', '.join(b.params.formats)} on "
                          f"{b.params.name}, not {dtype!r}")


def gemm(b: Builder, m: int, k: int, n: int, dtype: str = "bf16", *,
         func: str | None = None) -> None:
    """The blocked, overlapped GEMM; with ``func``, ``out = func(lhsT.T @ rhs + bias)``,
    ``bias`` one fp32 per row of ``out``, applied by the scalar engine as it empties PSUM."""
    _check(b, m, k, n, dtype)
    p = b.params
    es, odt = itemsize(dtype), out_dtype(dtype)
    oes = itemsize(odt)
    tk, tm = min(p.rows, p.partitions), p.cols
    tn = min(p.moving_max, p.psum_bank_bytes // 4)
    lhs_t = b.hbm("lhsT", (k, m), dtype)
    rhs = b.hbm("rhs", (k, n), dtype)
    bias = b.hbm("bias", (m, 1), "fp32") if func else None
    out = b.hbm("out", (m, n), odt)
    k_tiles = _tiles(k, tk)
    n_tiles = _tiles(n, tn)
    group = max(1, min(len(k_tiles), _CHUNK_BYTES // (tn * es)))
    chunks = []  # (first k-tile index, tiles): full tiles grouped, a partial tile alone
    i = 0
    while i < len(k_tiles):
        g = 1
        while g < group and i + g < len(k_tiles) and k_tiles[i + g][1] == tk \
                and k_tiles[i][1] == tk:
            g += 1
        chunks.append((i, g))
        i += g
    # M-block: half the PSUM banks (the other half is being emptied), as SBUF allows
    per_block = max(1, min(p.psum_banks // 2, -(-m // tm)))
    ring = _RING * group * tn * es
    while True:
        bm = per_block * tm
        a_bytes = len(k_tiles) * bm * es
        blocks = _tiles(m, bm)
        stage = 2 * per_block * tn * oes
        fixed = ring + stage + (per_block * 4 if func else 0)
        buffers = 2 if len(blocks) > 1 and 2 * a_bytes + fixed <= p.sbuf_bytes else 1
        if buffers * a_bytes + fixed <= p.sbuf_bytes or per_block == 1:
            break
        per_block -= 1
    a_base = [b.sbuf(a_bytes, "lhsT block") for _ in range(buffers)]
    ring_base = b.sbuf(ring, "rhs ring")
    stage_base = b.sbuf(stage, "output staging")
    bias_base = b.sbuf(per_block * 4, "bias") if func else 0
    banks = b.psum_banks(2 * per_block, "accumulators")
    act = b.function(func) if func else 0

    a_free = [None] * buffers
    slot_free = [None] * _RING
    bank_free: list[list] = [[], []]
    stage_free = [None, None]
    slot = tile_no = out_no = 0
    for bi, (m0, bmp) in enumerate(blocks):
        buf = bi % buffers
        b.wait("dma0", a_free[buf])
        for c0, g in chunks:
            kp = k_tiles[c0][1]
            src = b.tile("hbm", dtype, lhs_t.offset + (k_tiles[c0][0] * m + m0) * es, kp,
                         ((g, tk * m), (bmp, 1)), pstride=m * es)
            dst = b.tile("sbuf", dtype, a_base[buf] + c0 * bm * es, kp, ((g, bm), (bmp, 1)))
            b.emit("dma0", DmaCopy(dst=dst, src=src))
        if func:
            for mt, (mo, mp) in enumerate(_tiles(bmp, tm)):
                src = bias.ap((m0 + mo, m0 + mo + mp))
                b.emit("dma0", DmaCopy(dst=b.column(bias_base + mt * 4, mp), src=src))
        a_ready = b.signal("dma0")
        b.wait("tensor", a_ready)
        m_tiles = _tiles(bmp, tm)
        for n0, tnp in n_tiles:
            half = tile_no % 2
            b.wait("tensor", *bank_free[half])
            for c0, g in chunks:
                kp = k_tiles[c0][1]
                s = slot % _RING
                q = _B_QUEUES[slot % len(_B_QUEUES)]
                b.wait(q, slot_free[s])
                src = b.tile("hbm", dtype, rhs.offset + (k_tiles[c0][0] * n + n0) * es, kp,
                             ((g, tk * n), (tnp, 1)), pstride=n * es)
                base = ring_base + s * group * tn * es
                b.emit(q, DmaCopy(dst=b.tile("sbuf", dtype, base, kp, ((g, tn), (tnp, 1))),
                                  src=src))
                b.wait("tensor", b.signal(q))
                for gi in range(g):
                    kt = c0 + gi
                    for mt, (mo, mp) in enumerate(m_tiles):
                        b.emit("tensor", LoadStationary(src=b.tile(
                            "sbuf", dtype, a_base[buf] + (kt * bm + mo) * es, kp, ((mp, 1),))))
                        b.emit("tensor", MultiplyMoving(
                            dst=b.tile("psum", "fp32", banks[half * per_block + mt], mp,
                                       ((tnp, 1),)),
                            src=b.tile("sbuf", dtype, base + gi * tn * es, kp, ((tnp, 1),)),
                            accumulate=kt > 0))
                slot_free[s] = b.signal("tensor")
                slot += 1
            done = slot_free[(slot - 1) % _RING]
            engines = []
            for mt, (_, mp) in enumerate(m_tiles):
                eng = "scalar" if func or mt % 2 else "vector"
                if eng not in engines:
                    engines.append(eng)
                    b.wait(eng, done, stage_free[half])
                psum = b.tile("psum", "fp32", banks[half * per_block + mt], mp, ((tnp, 1),))
                st = b.tile("sbuf", odt, stage_base + (half * per_block + mt) * tn * oes, mp,
                            ((tnp, 1),))
                if func:
                    b.emit(eng, Activation(dst=st, src=psum, func=act,
                                           bias=b.column(bias_base + mt * 4, mp)))
                else:
                    b.emit(eng, TensorCopy(dst=st, src=psum))
            bank_free[half] = [b.signal(e) for e in engines]
            q = _OUT_QUEUES[out_no % len(_OUT_QUEUES)]
            out_no += 1
            b.wait(q, *bank_free[half])
            for mt, (mo, mp) in enumerate(m_tiles):
                st = b.tile("sbuf", odt, stage_base + (half * per_block + mt) * tn * oes, mp,
                            ((tnp, 1),))
                b.emit(q, DmaCopy(dst=out.ap((m0 + mo, m0 + mo + mp), (n0, n0 + tnp)), src=st))
            stage_free[half] = b.signal(q)
            tile_no += 1
        a_free[buf] = slot_free[(slot - 1) % _RING]


def gemm_naive(b: Builder, m: int, k: int, n: int, dtype: str = "bf16") -> None:
    """One output tile at a time, each operand tile fetched when needed and waited for, one
    buffer of each, one queue: nothing reused, nothing overlapped."""
    _check(b, m, k, n, dtype)
    p = b.params
    es, odt = itemsize(dtype), out_dtype(dtype)
    tk, tm = min(p.rows, p.partitions), p.cols
    tn = min(p.moving_max, p.psum_bank_bytes // 4)
    lhs_t = b.hbm("lhsT", (k, m), dtype)
    rhs = b.hbm("rhs", (k, n), dtype)
    out = b.hbm("out", (m, n), odt)
    a_base = b.sbuf(tm * es, "lhsT tile")
    b_base = b.sbuf(tn * es, "rhs tile")
    o_base = b.sbuf(tn * itemsize(odt), "output tile")
    bank = b.psum_banks(1, "accumulator")[0]
    free = None
    for m0, mp in _tiles(m, tm):
        for n0, tnp in _tiles(n, tn):
            for kt, (k0, kp) in enumerate(_tiles(k, tk)):
                b.wait("dma0", free)
                b.emit("dma0", DmaCopy(dst=b.tile("sbuf", dtype, a_base, kp, ((mp, 1),)),
                                       src=lhs_t.ap((k0, k0 + kp), (m0, m0 + mp))))
                b.emit("dma0", DmaCopy(dst=b.tile("sbuf", dtype, b_base, kp, ((tnp, 1),)),
                                       src=rhs.ap((k0, k0 + kp), (n0, n0 + tnp))))
                b.wait("tensor", b.signal("dma0"))
                b.emit("tensor", LoadStationary(src=b.tile("sbuf", dtype, a_base, kp,
                                                           ((mp, 1),))))
                b.emit("tensor", MultiplyMoving(
                    dst=b.tile("psum", "fp32", bank, mp, ((tnp, 1),)),
                    src=b.tile("sbuf", dtype, b_base, kp, ((tnp, 1),)), accumulate=kt > 0))
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
