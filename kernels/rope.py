"""Rotary position embedding (RoPE) of a block of queries or keys, in the Llama/Hugging Face
``rotate_half`` convention: ``out = x * cos + rotate_half(x) * sin`` per head, where
``rotate_half(x) = concat(-x[D/2:], x[:D/2])`` along the head size ``D``.

Shape keys ``T`` (tokens: rows on partitions, tiles of 128), ``H`` (heads) and ``D`` (head
size, even). ``x[T, H * D]`` is a projection's output as it leaves the GEMM, token by token,
head after head; ``cos[T, D]`` and ``sin[T, D]`` (fp32) are the tables at each token's own
position (the caller gathers them: a prefill's ``0 .. T - 1``, a decode batch's one position
per sequence), shared by the token's heads; ``out[T, H * D]`` in ``x``'s format.
"""

from __future__ import annotations

from hdl.core.isa import FREE_MAX, DmaCopy, TensorScalar, TensorTensor
from hdl.vector.ops import VectorOp

from .builder import Builder, KernelError, itemsize

__all__ = ["rope"]

#: Elements per partition of one pass (heads of a token tile taken a group at a time): 4,096
#: keep the double-buffered tiles and two fp32 work tiles within any generation's SBUF.
_PASS_ELEMENTS = 4096


def rope(b: Builder, t: int, h: int, d: int, dtype: str = "bf16") -> None:
    """Per token tile and group of heads: ``x`` (one DMA queue) and the tables (another)
    in, the tables' first half negated (vector), then on the vector engine ``x * cos``
    and the halves swapped times ``sin`` (the tables broadcast over the heads by a zero
    stride), summed and cast; ``out`` leaves on a third queue. Loads are double-buffered."""
    for name, v in (("T", t), ("H", h), ("D", d)):
        if not isinstance(v, int) or v < 1:
            raise KernelError(f"{name} must be a positive integer, not {v!r}")
    if d % 2:
        raise KernelError(f"D must be even (rotate_half splits it in halves), not {d}")
    if d > FREE_MAX["sbuf"]:
        raise KernelError(f"D must be at most {FREE_MAX['sbuf']}, not {d}")
    if dtype not in ("bf16", "fp32"):
        raise KernelError(f"dtype must be bf16 or fp32, not {dtype!r}")
    es, half = itemsize(dtype), d // 2
    x, out = b.hbm("x", (t, h * d), dtype), b.hbm("out", (t, h * d), dtype)
    cos, sin = b.hbm("cos", (t, d), "fp32"), b.hbm("sin", (t, d), "fp32")
    group = max(1, min(h, _PASS_ELEMENTS // d))  # heads per pass
    width = group * d
    x_sb = [b.sbuf(width * es, "x") for _ in range(2)]
    o_sb = [b.sbuf(width * es, "out") for _ in range(2)]
    c_sb = [b.sbuf(d * 4, "cos") for _ in range(2)]
    s_sb = [b.sbuf(d * 4, "sin") for _ in range(2)]
    t1, t2 = b.sbuf(width * 4, "x cos"), b.sbuf(width * 4, "rotated x sin")
    p = b.params.partitions
    read = [None, None]  # the vector engine done with x half k (and the tables of tile k)
    sent = [None, None]  # out half k sent to HBM
    tables_read = [None, None]  # the vector engine done with the tables of tile half k
    n = 0
    for r0 in range(0, t, p):
        rows = min(p, t - r0)
        tk = (r0 // p) % 2
        for h0 in range(0, h, group):
            hg = min(group, h - h0)
            k = n % 2

            def view(base, dt, lo=0, size=d, stride=d, heads=hg, rows=rows):
                """The ``size`` elements from ``lo`` of each head of a tile at ``base``,
                heads ``stride`` apart (0: one table row for every head)."""
                return b.tile("sbuf", dt, base + lo * itemsize(dt), rows,
                              ((heads, stride), (size, 1)))

            flat = hg * d
            b.wait("dma0", read[k])
            b.emit("dma0", DmaCopy(dst=b.tile("sbuf", dtype, x_sb[k], rows, ((flat, 1),)),
                                   src=x.ap((r0, r0 + rows), (h0 * d, h0 * d + flat))))
            b.wait("vector", b.signal("dma0"))
            if h0 == 0:  # the token tile's tables, once for all its head groups
                b.wait("dma2", tables_read[tk])
                for src, dst in ((cos, c_sb[tk]), (sin, s_sb[tk])):
                    b.emit("dma2", DmaCopy(dst=b.tile("sbuf", "fp32", dst, rows, ((d, 1),)),
                                           src=src.ap((r0, r0 + rows))))
                b.wait("vector", b.signal("dma2"))
                neg = b.tile("sbuf", "fp32", s_sb[tk], rows, ((half, 1),))
                b.emit("vector", TensorScalar(dst=neg, src=neg, op0=VectorOp.MULTIPLY,
                                              imm0=-1.0))
            b.emit("vector", TensorTensor(dst=view(t1, "fp32"), a=view(x_sb[k], dtype),
                                          b=view(c_sb[tk], "fp32", stride=0),
                                          op=VectorOp.MULTIPLY))
            for lo, other in ((0, half), (half, 0)):  # rotate_half(x) * sin, half by half
                b.emit("vector", TensorTensor(
                    dst=view(t2, "fp32", lo, half),
                    a=view(x_sb[k], dtype, other, half),
                    b=view(s_sb[tk], "fp32", lo, half, stride=0), op=VectorOp.MULTIPLY))
            b.wait("vector", sent[k])
            b.emit("vector", TensorTensor(dst=view(o_sb[k], dtype), a=view(t1, "fp32"),
                                          b=view(t2, "fp32"), op=VectorOp.ADD))
            read[k] = b.signal("vector")
            b.wait("dma1", read[k])
            b.emit("dma1", DmaCopy(dst=out.ap((r0, r0 + rows), (h0 * d, h0 * d + flat)),
                                   src=b.tile("sbuf", dtype, o_sb[k], rows, ((flat, 1),))))
            sent[k] = b.signal("dma1")
            n += 1
        tables_read[tk] = read[(n - 1) % 2]
