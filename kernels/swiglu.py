"""The gated FFN's activation: ``out = silu(gate) * up`` element by element on ``[R, C]``
(rows on partitions in tiles of 128): silu on the scalar engine, the product on the vector
engine, loads on two DMA queues and the store on a third, double-buffered.

Its backward, :func:`swiglu_backward`, from ``gate``, ``up`` and ``dy``:
``d_up = dy * silu(gate)``, ``d_gate = dy * up * s * (1 + gate * (1 - s))``,
``s = sigmoid(gate)``."""

from __future__ import annotations

from hdl.core.isa import Activation, DmaCopy, TensorScalar, TensorTensor
from hdl.vector.ops import VectorOp

from .builder import Builder
from .norms import RowBuffers, load_rows, row_tiles

__all__ = ["swiglu", "swiglu_backward"]


def swiglu(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    tiles = row_tiles(b, r, c, dtype)
    gate, up = b.hbm("gate", (r, c), dtype), b.hbm("up", (r, c), dtype)
    out = b.hbm("out", (r, c), dtype)
    w = RowBuffers(b, c, dtype, ("gate", "up", "out"), 1)
    silu = b.function("silu")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        ga, ua, oa = (w.tile(w.io[n][h], rows, dtype) for n in ("gate", "up", "out"))
        b.wait("dma0", w.free[h])
        load_rows(b, "dma0", gate, r0, rows, ga)
        b.wait("dma2", w.free[h])
        load_rows(b, "dma2", up, r0, rows, ua)
        b.wait("scalar", b.signal("dma0"))
        s = w.tile(w.work[h][0], rows)
        b.emit("scalar", Activation(dst=s, src=ga, func=silu))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"))
        b.emit("vector", TensorTensor(dst=oa, a=s, b=ua, op=VectorOp.MULTIPLY))
        b.wait("dma1", b.signal("vector"))
        b.emit("dma1", DmaCopy(dst=out.ap((r0, r0 + rows)), src=oa))
        w.free[h] = b.signal("dma1")


def swiglu_backward(b: Builder, r: int, c: int, dtype: str = "bf16") -> None:
    tiles = row_tiles(b, r, c, dtype)
    names = ("gate", "up", "dy")
    t_in = {n: b.hbm(n, (r, c), dtype) for n in names}
    t_out = {n: b.hbm(n, (r, c), dtype) for n in ("d_gate", "d_up")}
    w = RowBuffers(b, c, dtype, names + ("d_gate", "d_up"), 2)
    silu, sigmoid = b.function("silu"), b.function("sigmoid")
    for i, (r0, rows) in enumerate(tiles):
        h = i % 2
        a = {n: w.tile(w.io[n][h], rows, dtype) for n in w.io}
        for j, n in enumerate(names):
            q = ("dma0", "dma2", "dma3")[j]
            b.wait(q, w.free[h])
            load_rows(b, q, t_in[n], r0, rows, a[n])
        b.wait("scalar", b.signal("dma0"))
        sg, si = w.tile(w.work[h][0], rows), w.tile(w.work[h][1], rows)
        b.emit("scalar", Activation(dst=sg, src=a["gate"], func=sigmoid))
        b.emit("scalar", Activation(dst=si, src=a["gate"], func=silu))
        b.wait("vector", b.signal("scalar"), b.signal("dma2"), b.signal("dma3"))
        b.emit("vector", TensorTensor(dst=a["d_up"], a=a["dy"], b=si, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorScalar(dst=si, src=sg, op0=VectorOp.MULTIPLY, imm0=-1.0,
                                      op1=VectorOp.ADD, imm1=1.0))
        b.emit("vector", TensorTensor(dst=si, a=si, b=a["gate"], op=VectorOp.MULTIPLY))
        b.emit("vector", TensorScalar(dst=si, src=si, op0=VectorOp.ADD, imm0=1.0))
        b.emit("vector", TensorTensor(dst=si, a=si, b=sg, op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=si, a=si, b=a["up"], op=VectorOp.MULTIPLY))
        b.emit("vector", TensorTensor(dst=a["d_gate"], a=si, b=a["dy"], op=VectorOp.MULTIPLY))
        b.wait("dma1", b.signal("vector"))
        for n in ("d_gate", "d_up"):
            b.emit("dma1", DmaCopy(dst=t_out[n].ap((r0, r0 + rows)), src=a[n]))
        w.free[h] = b.signal("dma1")
