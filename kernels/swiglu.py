"""The gated FFN's activation: ``out = silu(gate) * up`` element by element on ``[R, C]``
(rows on partitions in tiles of 128): silu on the scalar engine, the product on the vector
engine, loads on two DMA queues and the store on a third, double-buffered."""

from __future__ import annotations

from hdl.core.isa import Activation, DmaCopy, TensorTensor
from hdl.vector.ops import VectorOp

from .builder import Builder
from .norms import _load, _Rows, _rows

__all__ = ["swiglu"]


def swiglu(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    tiles = _rows(b, r, c, dtype)
    gate, up = b.hbm("gate", (r, c), dtype), b.hbm("up", (r, c), dtype)
    out = b.hbm("out", (r, c), dtype)
    w = _Rows(b, c, dtype, ("gate", "up", "out"), 1)
    silu = b.function("silu")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        ga, ua, oa = (w.tile(w.io[n][h], rows, dtype) for n in ("gate", "up", "out"))
        b.wait("dma0", w.free[h])
        _load(b, "dma0", gate, r0, rows, ga)
        b.wait("dma2", w.free[h])
        _load(b, "dma2", up, r0, rows, ua)
        b.wait("scalar", b.signal("dma0"))
        s = w.tile(w.work[h][0], rows)
        b.emit("scalar", Activation(dst=s, src=ga, func=silu))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"))
        b.emit("vector", TensorTensor(dst=oa, a=s, b=ua, op=VectorOp.MULTIPLY))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=out.ap((r0, r0 + rows)), src=oa))
        w.free[h] = b.signal("dma1")
