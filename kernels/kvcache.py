"""The KV cache in HBM and its append, the first step of a decode layer's attention.

Layout, shared with :func:`kernels.decode.decode_attention`: for ``B`` sequences of ``KVH`` KV
heads of size ``D`` and a cache of ``S`` positions, ``k_cache[B * KVH * D, S]`` holds each
(sequence, KV head)'s keys transposed (``D`` rows of ``S`` positions: the tensor engine's
stationary tiles as they stand) and ``v_cache[B * KVH * S, D]`` its values position by
position. The new token's ``k_new[B, KVH * D]`` and ``v_new[B, KVH * D]`` are the K and V
projections' rows, one per sequence; a prompt's, :func:`kv_prefill`'s, ``[B * S, KVH * D]``.
"""

from __future__ import annotations

from hdl.core.isa import AP, DmaCopy, TensorCopy, Transpose

from .builder import Builder, KernelError, itemsize

__all__ = ["kv_append", "kv_positions", "kv_prefill"]


def kv_positions(nb: int, s: int) -> list[int]:
    """The cache position each of ``nb`` sequences writes its new token at, as a batch of
    sequences of different lengths has them (the programs' addresses are fixed, so the
    kernel is built for its positions): spread evenly over ``0 .. s - 1``, the last
    sequence at ``s - 1`` (a batch of one: the cache's last position)."""
    return [s - 1 - (nb - 1 - i) * (s - 1) // max(nb - 1, 1) for i in range(nb)]


def kv_append(b: Builder, nb: int, kvh: int, d: int, s: int, dtype: str = "bf16") -> None:
    """Write ``k_new`` and ``v_new`` into ``k_cache`` and ``v_cache`` in place at each
    sequence's :func:`kv_positions`: per sequence one HBM-to-HBM DMA of its keys (one column
    of each KV head's ``D x S`` block, ``S`` elements apart) and one of its values (a row per
    KV head), the sequences' transfers spread over every DMA queue of the core so that their
    latencies overlap."""
    for name, v in (("B", nb), ("KVH", kvh), ("D", d), ("S", s)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    if kvh > b.params.partitions:
        raise KernelError(f"KVH must be at most {b.params.partitions}, not {kvh}")
    es = itemsize(dtype)
    k_new, v_new = b.hbm("k_new", (nb, kvh * d), dtype), b.hbm("v_new", (nb, kvh * d), dtype)
    k_cache = b.hbm("k_cache", (nb * kvh * d, s), dtype)
    v_cache = b.hbm("v_cache", (nb * kvh * s, d), dtype)
    queues = b.params.dma_queues
    for i, pos in enumerate(kv_positions(nb, s)):
        src_k = AP("hbm", dtype, 0, kvh, k_new.offset + i * kvh * d * es, ((d, 1),), d * es)
        src_v = AP("hbm", dtype, 0, kvh, v_new.offset + i * kvh * d * es, ((d, 1),), d * es)
        dst_k = AP("hbm", dtype, 0, kvh, k_cache.offset + (i * kvh * d * s + pos) * es,
                   ((d, s),), d * s * es)
        dst_v = AP("hbm", dtype, 0, kvh, v_cache.offset + (i * kvh * s + pos) * d * es,
                   ((d, 1),), s * d * es)
        b.emit(f"dma{2 * i % queues}", DmaCopy(dst=dst_k, src=src_k))
        b.emit(f"dma{(2 * i + 1) % queues}", DmaCopy(dst=dst_v, src=src_v))


def kv_prefill(b: Builder, nb: int, kvh: int, d: int, s: int, dtype: str = "bf16") -> None:
    """Write a whole prompt's keys and values, ``k_new`` and ``v_new`` ``[B * S, KVH * D]``
    (each sequence's ``S`` tokens one after another), into positions ``0 .. S - 1`` of
    ``k_cache`` and ``v_cache``: a block write, where :func:`kv_append` writes one token.

    Keys go through the chip, since the cache holds them transposed: token tiles of up to
    128 rows are loaded whole, each KV head's ``[tokens, D]`` turned ``[D, tokens]`` by the
    tensor engine's transpose into PSUM (four tiles a bank, four banks a set, two sets
    alternating between heads), copied to SBUF by the vector engine and stored ``D`` rows of
    up to 2,048 positions, each a long run of its cache row. Values keep their layout: per
    sequence and KV head one HBM-to-HBM DMA per 128 tokens, one token's ``D`` values a
    partition (a single run where the K and V projections have one KV head)."""
    for name, v in (("B", nb), ("KVH", kvh), ("D", d), ("S", s)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    p = b.params
    tq = min(p.partitions, p.cols)
    if d > tq:
        raise KernelError(f"D must be at most {tq}, not {d}")
    es = itemsize(dtype)
    k_new = b.hbm("k_new", (nb * s, kvh * d), dtype)
    v_new = b.hbm("v_new", (nb * s, kvh * d), dtype)
    k_cache = b.hbm("k_cache", (nb * kvh * d, s), dtype)
    v_cache = b.hbm("v_cache", (nb * kvh * s, d), dtype)
    per_bank = p.psum_bank_bytes // (tq * 4)
    banks = max(1, min(4, p.psum_banks // 2))
    tiles = per_bank * banks  # token tiles of one block
    width = tiles * tq
    psum = [b.psum_banks(banks, "transposed keys") for _ in range(2)]
    k_sb = b.sbuf(tiles * kvh * d * es, "key rows")
    stage = [b.sbuf(width * es, "transposed keys") for _ in range(2)]
    rows_free = psum_free = None
    stage_free = [None, None]
    turn = 0
    for i in range(nb):
        for w0 in range(0, s, width):
            parts = [(c, t0, min(tq, s - t0)) for c, t0 in enumerate(range(w0, min(s, w0 + width),
                                                                          tq))]
            wp = sum(tp for _, _, tp in parts)
            loads = []
            for c, t0, tp in parts:
                q = f"dma{c % 2}"
                b.wait(q, rows_free)
                b.emit(q, DmaCopy(dst=b.tile("sbuf", dtype, k_sb + c * kvh * d * es, tp,
                                             ((kvh * d, 1),)),
                                  src=k_new.ap((i * s + t0, i * s + t0 + tp))))
                if q not in loads:
                    loads.append(q)
            b.wait("tensor", *[b.signal(q) for q in loads])
            for h in range(kvh):
                half = turn % 2
                b.wait("tensor", psum_free if turn > 0 else None)
                for c, _, tp in parts:
                    b.emit("tensor", Transpose(
                        dst=b.tile("psum", dtype, psum[half][c // per_bank]
                                   + c % per_bank * tq * 4, d, ((tp, 1),)),
                        src=b.tile("sbuf", dtype, k_sb + (c * kvh + h) * d * es, tp,
                                   ((d, 1),))))
                b.wait("vector", b.signal("tensor"), stage_free[half])
                for c, _, tp in parts:
                    b.emit("vector", TensorCopy(
                        dst=b.tile("sbuf", dtype, stage[half] + c * tq * es, d, ((tp, 1),)),
                        src=b.tile("psum", dtype, psum[half][c // per_bank]
                                   + c % per_bank * tq * 4, d, ((tp, 1),))))
                psum_free = b.signal("vector")
                q = f"dma{2 + half}"
                b.wait(q, psum_free)
                row = (i * kvh + h) * d
                b.emit(q, DmaCopy(dst=k_cache.ap((row, row + d), (w0, w0 + wp)),
                                  src=b.tile("sbuf", dtype, stage[half], d, ((wp, 1),))))
                stage_free[half] = b.signal(q)
                turn += 1
            rows_free = b.signal("tensor")
    queues = [f"dma{j}" for j in range(4, p.dma_queues)] or ["dma0"]
    n = 0
    for i in range(nb):
        for h in range(kvh):
            for t0 in range(0, s, tq):
                tp = min(tq, s - t0)
                src = AP("hbm", dtype, 0, tp, v_new.offset + ((i * s + t0) * kvh + h) * d * es,
                         ((d, 1),), kvh * d * es)
                dst = AP("hbm", dtype, 0, tp, v_cache.offset + ((i * kvh + h) * s + t0) * d * es,
                         ((d, 1),), d * es)
                b.emit(queues[n % len(queues)], DmaCopy(dst=dst, src=src))
                n += 1
