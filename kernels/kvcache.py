"""The KV cache in HBM and its append, the first step of a decode layer's attention.

Layout, shared with :func:`kernels.decode.decode_attention`: for ``B`` sequences of ``KVH`` KV
heads of size ``D`` and a cache of ``S`` positions, ``k_cache[B * KVH * D, S]`` holds each
(sequence, KV head)'s keys transposed (``D`` rows of ``S`` positions: the tensor engine's
stationary tiles as they stand) and ``v_cache[B * KVH * S, D]`` its values position by
position. The new token's ``k_new[B, KVH * D]`` and ``v_new[B, KVH * D]`` are the K and V
projections' rows, one per sequence.
"""

from __future__ import annotations

from hdl.core.isa import AP, DmaCopy

from .builder import Builder, KernelError, itemsize

__all__ = ["kv_append", "kv_positions"]


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
