"""The programs of the NeuronCore co-simulation (:mod:`sim.tb.core`), built with the kernel
builder for a core at simulation scale: the hand-written ones of :data:`PROGRAMS` (and, on a
core whose array has MX formats, :data:`MX_PROGRAMS`), each an engine's or a feature's, one of
which must deadlock, and small shapes of the library's kernels; the seeded random program
(:data:`RANDOM`); every kernel of :data:`kernels.KERNELS` at :func:`kernel_shape`. Beside
them, :func:`random_inputs`, the seeded HBM the RTL and the simulator both start from, and
the throughput benchmark's program (:func:`throughput_program`).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hdl.core import isa
from hdl.core.isa import (
    TF32_SHIFT,
    Activation,
    AffineSelect,
    DmaCompute,
    DmaCopy,
    Dropout,
    FindIndex8,
    Iota,
    LoadStationary,
    MatchReplace8,
    Max8,
    Memset,
    MultiplyMoving,
    NonzeroWithCount,
    Random,
    RangeSelect,
    SemWait,
    SequenceBounds,
    StreamShuffle,
    TensorCopy,
    TensorCopyDynamic,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.core.params import CoreParams
from hdl.numerics.dtypes import ML_DTYPES
from hdl.vector.convert import ENGINE_FORMATS
from hdl.vector.ops import Reduce, VectorOp
from kernels import KERNELS
from kernels.builder import Builder, KernelError
from sim.core.program import Program
from sim.tb.core_random import random_program

__all__ = ["MX_PROGRAMS", "PROGRAMS", "RANDOM", "build_program", "kernel_shape", "must_deadlock",
           "program_names", "random_inputs", "throughput_program"]


def _tile(b: Builder, offset: int, n: int, dtype: str = "fp32", space: str = "sbuf",
          dims=None) -> object:
    p = b.params.partitions
    return b.tile(space, dtype, offset, p, dims or ((n, 1),))


def _vector_add(b: Builder) -> None:
    """Two DMA queues load x and y, the vector engine adds them, a queue stores the sum:
    semaphores across three streams."""
    p, n = b.params.partitions, 16
    x, y, z = (b.hbm(name, (p, n), "fp32") for name in "xyz")
    sx, sy, sz = (b.sbuf(4 * n, name) for name in ("x", "y", "z"))
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    ex = b.signal("dma0")
    b.emit("dma1", DmaCopy(dst=_tile(b, sy, n), src=y.ap((0, p))))
    ey = b.signal("dma1")
    b.wait("vector", ex, ey)
    b.emit("vector", TensorTensor(dst=_tile(b, sz, n), a=_tile(b, sx, n), b=_tile(b, sy, n),
                                  op=VectorOp.ADD))
    ez = b.signal("vector")
    b.wait("dma0", ez)
    b.emit("dma0", DmaCopy(dst=z.ap((0, p)), src=_tile(b, sz, n)))


def _vector_ops(b: Builder) -> None:
    """bf16 input, a per-partition scalar, reductions, a memset, a strided copy and a round
    trip through PSUM, then the results out over both queues."""
    p, n = b.params.partitions, 16
    x = b.hbm("x", (p, n), "bf16")
    s = b.hbm("s", (p, 1), "fp32")
    out = b.hbm("out", (p, n), "fp32")
    red = b.hbm("red", (p, 2), "fp32")
    sx = b.sbuf(2 * n, "x")
    ss = b.sbuf(4, "s")
    t1, t2, t3 = (b.sbuf(4 * n, name) for name in ("t1", "t2", "t3"))
    sr = b.sbuf(8, "red")
    bank = b.psum_banks(1, "psum")[0]
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n, "bf16"), src=x.ap((0, p))))
    b.emit("dma1", DmaCopy(dst=b.column(ss, p), src=s.ap((0, p))))
    e0, e1 = b.signal("dma0"), b.signal("dma1")
    b.wait("vector", e0, e1)
    v = "vector"
    b.emit(v, TensorScalar(dst=_tile(b, t1, n), src=_tile(b, sx, n, "bf16"),
                           op0=VectorOp.MULTIPLY, operand0=b.column(ss, p)))
    b.emit(v, TensorScalar(dst=_tile(b, t2, n), src=_tile(b, t1, n), op0=VectorOp.ADD,
                           imm0=0.75))
    b.emit(v, TensorReduce(dst=b.column(sr, p), src=_tile(b, t2, n), reduce=Reduce.MAX))
    b.emit(v, TensorReduce(dst=b.column(sr + 4, p), src=_tile(b, t1, n), reduce=Reduce.SUM,
                           op=VectorOp.SQUARE))
    b.emit(v, Memset(dst=_tile(b, bank, n, space="psum"), value=-2.5))
    # a 4 x 4 transpose within each partition, into PSUM
    b.emit(v, TensorCopy(dst=_tile(b, bank, n, space="psum"),
                         src=_tile(b, t2, n, dims=((4, 1), (4, 4)))))
    b.emit(v, TensorTensor(dst=_tile(b, t3, n), a=_tile(b, t1, n),
                           b=_tile(b, bank, n, space="psum"), op=VectorOp.MAX))
    done = b.signal(v)
    b.wait("dma0", done)
    b.emit("dma0", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t3, n)))
    b.wait("dma1", done)
    b.emit("dma1", DmaCopy(dst=red.ap((0, p)), src=_tile(b, sr, 2)))


def _vector_casts(b: Builder) -> None:
    """Results cast to bf16, fp16 and fp8 at byte offsets inside words, a narrow memset."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "bf16")
    out16 = b.hbm("out16", (p, n), "bf16")
    out8 = b.hbm("out8", (p, n), "fp8_e4m3")
    sx, s1, s2, s3 = (b.sbuf(4 * n + 4, name) for name in ("x", "t1", "t2", "t3"))
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n, "bf16"), src=x.ap((0, p))))
    b.wait("vector", b.signal("dma0"))
    v = "vector"
    b.emit(v, TensorScalar(dst=_tile(b, s1 + 2, n, "bf16"), src=_tile(b, sx, n, "bf16"),
                           op0=VectorOp.MULTIPLY, imm0=1.0 / 3.0))
    b.emit(v, TensorCopy(dst=_tile(b, s2 + 1, n, "fp8_e4m3"), src=_tile(b, s1 + 2, n, "bf16")))
    b.emit(v, Memset(dst=_tile(b, s3, n, "fp16"), value=0.1))
    b.emit(v, TensorTensor(dst=_tile(b, s3 + 2 * n, n // 2, "fp16", dims=((n // 2, 1),)),
                           a=_tile(b, s1 + 2, n // 2, "bf16", dims=((n // 2, 2),)),
                           b=_tile(b, s1 + 4, n // 2, "bf16", dims=((n // 2, 2),)),
                           op=VectorOp.SUBTRACT))
    done = b.signal(v)
    b.wait("dma1", done)
    b.emit("dma1", DmaCopy(dst=out16.ap((0, p)), src=_tile(b, s1 + 2, n, "bf16")))
    b.wait("dma2", done)
    b.emit("dma2", DmaCopy(dst=out8.ap((0, p)), src=_tile(b, s2 + 1, n, "fp8_e4m3")))


def _activations(b: Builder) -> None:
    """The scalar engine: a bias column and a running sum, a PSUM source, a bf16 result at
    a byte offset inside words, a tile of fewer partitions than the lanes' turns cover,
    functions of every kind of range reduction, and sums into bf16 (at a byte offset) and
    fp16."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "bf16")
    s = b.hbm("s", (p, 1), "fp32")
    out = b.hbm("out", (p, n), "fp32")
    sx, ss = b.sbuf(2 * n, "x"), b.sbuf(4, "s")
    t1, t2, t3 = (b.sbuf(4 * n + 4, name) for name in ("t1", "t2", "t3"))
    sr = b.sbuf(8, "sums")
    bank = b.psum_banks(1, "psum")[0]
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n, "bf16"), src=x.ap((0, p))))
    b.emit("dma1", DmaCopy(dst=b.column(ss, p), src=s.ap((0, p))))
    b.wait("scalar", b.signal("dma0"), b.signal("dma1"))
    sc, fn = "scalar", b.function
    b.emit(sc, Activation(dst=_tile(b, t1, n), src=_tile(b, sx, n, "bf16"), func=fn("exp"),
                          scale=-0.75, bias=b.column(ss, p), reduce_dst=b.column(sr, p)))
    b.emit(sc, Activation(dst=_tile(b, bank, n, space="psum"), src=_tile(b, t1, n),
                          func=fn("log")))
    b.emit(sc, Activation(dst=_tile(b, t2 + 2, n, "bf16"), src=_tile(b, bank, n, space="psum"),
                          func=fn("gelu"), scale=3.0))
    b.emit(sc, Activation(dst=b.tile("sbuf", "fp32", t3, 6, ((n // 2, 2),)),
                          src=b.tile("sbuf", "bf16", t2 + 2, 6, ((n // 2, 2),)),
                          func=fn("sin"), scale=40.0, reduce_dst=b.column(sr + 4, 6)))
    b.emit(sc, Activation(dst=_tile(b, t3 + 4, n // 2, dims=((n // 2, 2),)),
                          src=_tile(b, t1, n // 2, dims=((n // 2, 2),)), func=fn("rsqrt"),
                          bias=b.column(ss, p)))
    narrow = b.sbuf(8, "narrow sums")
    for dtype, at in (("bf16", narrow + 2), ("fp16", narrow + 4)):
        b.emit(sc, Activation(dst=_tile(b, t2, n), src=_tile(b, sx, n, "bf16"),
                              func=fn("exp"), scale=0.5,
                              reduce_dst=b.tile("sbuf", dtype, at, p, ((1, 1),))))
    done = b.signal(sc)
    b.wait("dma2", done)
    b.emit("dma2", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t3, n)))


def _scalar_ops(b: Builder) -> None:
    """The scalar engine's element-wise instructions between activations: TensorScalar with
    a per-partition operand and with an immediate, TensorCopy casts, a strided copy out of
    PSUM, a tile of fewer partitions than the lanes' turns cover."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "bf16")
    s = b.hbm("s", (p, 1), "fp32")
    out = b.hbm("out", (p, n), "fp32")
    out8 = b.hbm("out8", (p, n), "fp8_e4m3")
    sx, ss = b.sbuf(2 * n, "x"), b.sbuf(4, "s")
    t1, t2, t3, t4 = (b.sbuf(4 * n + 4, name) for name in ("t1", "t2", "t3", "t4"))
    bank = b.psum_banks(1, "psum")[0]
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n, "bf16"), src=x.ap((0, p))))
    b.emit("dma1", DmaCopy(dst=b.column(ss, p), src=s.ap((0, p))))
    b.wait("scalar", b.signal("dma0"), b.signal("dma1"))
    sc = "scalar"
    b.emit(sc, TensorScalar(dst=_tile(b, t1, n), src=_tile(b, sx, n, "bf16"),
                            op0=VectorOp.MULTIPLY, operand0=b.column(ss, p)))
    b.emit(sc, Activation(dst=_tile(b, bank, n, space="psum"), src=_tile(b, t1, n),
                          func=b.function("exp"), scale=0.5))
    b.emit(sc, TensorScalar(dst=_tile(b, t2 + 2, n, "bf16"), src=_tile(b, bank, n, space="psum"),
                            op0=VectorOp.SUBTRACT, imm0=1.0 / 3.0))
    b.emit(sc, TensorCopy(dst=_tile(b, t3 + 1, n // 2, "fp8_e4m3", dims=((n // 2, 1),)),
                          src=_tile(b, bank, n // 2, space="psum", dims=((n // 2, 2),))))
    b.emit(sc, TensorScalar(dst=b.tile("sbuf", "fp32", t4, 6, ((n, 1),)),
                            src=b.tile("sbuf", "bf16", t2 + 2, 6, ((n, 1),)),
                            op0=VectorOp.MAX, operand0=b.column(ss, 6)))
    b.emit(sc, TensorCopy(dst=_tile(b, t1, n), src=_tile(b, t2 + 2, n, "bf16")))
    done = b.signal(sc)
    b.wait("dma2", done)
    b.emit("dma2", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t1, n)))
    b.wait("dma1", done)
    b.emit("dma1", DmaCopy(dst=out8.ap((0, p)), src=_tile(b, t3 + 1, n // 2 * 2, "fp8_e4m3")))


def _gpsimd(b: Builder) -> None:
    """The GpSimd engine: Iota into fp32, bf16 at a byte offset inside words (values past
    2**24, rounded twice) and a strided fp16 tile of six partitions, then its element-wise
    operations and a memset on them."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "bf16")
    out = b.hbm("out", (p, n), "fp32")
    sx = b.sbuf(2 * n, "x")
    t1, t2, t3, t4, t5 = (b.sbuf(4 * n + 4, name) for name in ("t1", "t2", "t3", "t4", "t5"))
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n, "bf16"), src=x.ap((0, p))))
    g = "gpsimd"
    b.emit(g, Iota(dst=_tile(b, t1, n), base=-7, pstep=5, step=3))
    b.emit(g, Iota(dst=_tile(b, t2 + 2, n, "bf16"), base=-2**31, pstep=2**31 - 1,
                   step=2**24 + 3))
    b.emit(g, Iota(dst=b.tile("sbuf", "fp16", t3, 6, ((n // 2, 2),)), base=100, pstep=-40,
                   step=-1))
    b.wait(g, b.signal("dma0"))
    b.emit(g, TensorScalar(dst=_tile(b, t4, n), src=_tile(b, sx, n, "bf16"),
                           op0=VectorOp.MULTIPLY, imm0=0.25))
    b.emit(g, TensorTensor(dst=_tile(b, t5, n), a=_tile(b, t4, n), b=_tile(b, t1, n),
                           op=VectorOp.ADD))
    b.emit(g, TensorCopy(dst=_tile(b, t4 + 2, n, "bf16"), src=_tile(b, t5, n)))
    b.emit(g, Memset(dst=b.tile("sbuf", "fp16", t3 + 2, 6, ((n // 2, 2),)), value=-0.3))
    b.wait("dma1", b.signal(g))
    b.emit("dma1", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t5, n)))


def _affine_selects(b: Builder) -> None:
    """AffineSelect on GpSimd, each comparison with 0 of ``base + p pstep + i step``: a causal
    mask and its mirror, equality, a stripe (step 0), a negative pstep, a strided tile of six
    partitions; fp32 kept as it is (a NaN canonical), into bf16 at a byte offset and fp16;
    fills of -inf, 0 and finite numbers (cast to the destination's type)."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "fp32")
    sx = b.sbuf(4 * n, "x")
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    g = "gpsimd"
    b.wait(g, b.signal("dma0"))
    b.emit(g, Memset(dst=b.tile("sbuf", "fp32", sx + 8, 1, ((1, 1),)), value=float("nan")))
    cases = ((VectorOp.GREATER_EQUAL, 0, 1, -1, float("-inf"), "fp32", 0),
             (VectorOp.LESS, 3, -1, 1, 2.5, "fp32", 0),
             (VectorOp.IS_EQUAL, -5, 1, -1, 0.0, "bf16", 2),
             (VectorOp.NOT_EQUAL, 2, 1, 0, -3.25, "fp16", 0),
             (VectorOp.LESS_EQUAL, 4, -2, 1, 1e38, "bf16", 0),
             (VectorOp.GREATER, -3, 1, 2, 7.0, "fp32", 0))
    for k, (op, base, pstep, step, fill, dtype, shift) in enumerate(cases):
        at = b.sbuf(4 * n + 4, f"o{k}") + shift
        src, dst = _tile(b, sx, n), _tile(b, at, n, dtype)
        if k == len(cases) - 1:  # every other element of six partitions
            src = b.tile("sbuf", "fp32", sx, 6, ((n // 2, 2),))
            dst = b.tile("sbuf", dtype, at, 6, ((n // 2, 2),))
        b.emit(g, AffineSelect(dst=dst, base=base, pstep=pstep, step=step, src=src, op=op,
                               fill=fill))


def _nonzeros(b: Builder) -> None:
    """NonzeroWithCount on GpSimd (the first partition of each core's 16): fp32 with zeros
    (a memset over columns 3 .. 8), -0.0 and a NaN, an offset of -5 and a padding beyond
    fp32's integers; int32, every element zero, then every one not; a strided source. dst
    memset first, so that the partitions it keeps are seen kept."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "fp32")
    xi = b.hbm("xi", (p, n), "int32")
    sx, si = b.sbuf(4 * n, "x"), b.sbuf(4 * n, "xi")
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    b.emit("dma0", DmaCopy(dst=_tile(b, si, n, "int32"), src=xi.ap((0, p))))
    g = "gpsimd"
    b.wait(g, b.signal("dma0"))
    b.emit(g, Memset(dst=b.tile("sbuf", "fp32", sx + 12, p, ((6, 1),)), value=0.0))
    b.emit(g, Memset(dst=b.tile("sbuf", "fp32", sx, 1, ((1, 1),)), value=-0.0))
    b.emit(g, Memset(dst=b.tile("sbuf", "fp32", sx + 40, 1, ((1, 1),)), value=float("nan")))
    cases = ((_tile(b, sx, n), -5, 1 << 30), (_tile(b, si, n, "int32"), 0, -1),
             (b.tile("sbuf", "fp32", sx, p, ((n // 2, 2),)), 7, 0))
    for k, (src, offset, padding) in enumerate(cases):
        at = b.sbuf(4 * (src.free + 1), f"nz{k}")
        dst = _tile(b, at, src.free + 1, "int32")
        b.emit(g, Memset(dst=dst, value=3.0))
        b.emit(g, NonzeroWithCount(dst=dst, src=src, offset=offset, padding=padding))
    # the int32 source all zeros, then none
    zero = b.sbuf(4 * (n + 1), "nz_zero")
    b.emit(g, Memset(dst=_tile(b, si, n, "int32"), value=0.0))
    b.emit(g, NonzeroWithCount(dst=_tile(b, zero, n + 1, "int32"),
                               src=_tile(b, si, n, "int32"), offset=1, padding=-9))
    b.emit(g, Memset(dst=_tile(b, si, n, "int32"), value=-4.0))
    b.emit(g, NonzeroWithCount(dst=_tile(b, zero, n + 1, "int32"),
                               src=_tile(b, si, n, "int32"), offset=1, padding=-9))


def _dynamic_copies(b: Builder) -> None:
    """TensorCopyDynamic on the vector, GpSimd and scalar engines: each source moved along its
    partitions' row at run time by the integer in SBUF (an int32 from a memset, a uint32 from
    an Iota) times its stride: forward, backward, and a strided source; into fp32 and bf16."""
    p, w, n = b.params.partitions, 48, 8
    x = b.hbm("x", (p, w), "fp32")
    out = b.hbm("out", (p, n + n // 2), "fp32")
    out16 = b.hbm("out16", (p, n + n // 2), "bf16")
    sx, so = b.sbuf(4 * w, "x"), b.sbuf(8, "offsets")
    t, t16 = b.sbuf(4 * (n + n // 2), "out"), b.sbuf(2 * (n + n // 2), "out16")
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, w), src=x.ap((0, p))))
    loaded = b.signal("dma0")
    at3 = b.tile("sbuf", "int32", so, 1, ((1, 1),))
    at2 = b.tile("sbuf", "uint32", so + 4, 1, ((1, 1),))
    b.emit("vector", Memset(dst=at3, value=3.0))
    b.wait("vector", loaded)
    # elements 0 .. 7 moved 3 x 8: x[:, 24:32]
    b.emit("vector", TensorCopyDynamic(dst=_tile(b, t, n), src=_tile(b, sx, n), offset=at3,
                                       stride=8, count=5))
    # elements 0, 2, 4, 6 moved 3 x 5: x[:, 15:23:2]
    b.emit("vector", TensorCopyDynamic(dst=_tile(b, t + 4 * n, n // 2),
                                       src=_tile(b, sx, n // 2, dims=((n // 2, 2),)),
                                       offset=at3, stride=5, count=6))
    b.emit("gpsimd", Iota(dst=at2, base=2, pstep=0, step=0))
    b.wait("gpsimd", loaded)
    # elements 40 .. 47 moved 2 x -16: x[:, 8:16], into bf16
    b.emit("gpsimd", TensorCopyDynamic(dst=_tile(b, t16, n, "bf16"),
                                       src=_tile(b, sx + 4 * 40, n), offset=at2, stride=-16,
                                       count=3))
    # on the scalar engine: elements 1 .. 4 moved 2 x 9, x[:, 19:23], into bf16
    b.wait("scalar", loaded, b.signal("gpsimd"))
    b.emit("scalar", TensorCopyDynamic(dst=_tile(b, t16 + 2 * n, n // 2, "bf16"),
                                       src=_tile(b, sx + 4, n // 2), offset=at2, stride=9,
                                       count=5))
    b.wait("dma1", b.signal("vector"), b.signal("scalar"))
    b.emit("dma1", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t, n + n // 2)))
    b.emit("dma1", DmaCopy(dst=out16.ap((0, p)), src=_tile(b, t16, n + n // 2, "bf16")))


def _shuffles(b: Builder) -> None:
    """StreamShuffle on the vector engine: partitions moved within the quadrant, their bits as
    they are, kept partitions untouched (a memset before): fp32; bf16 from a strided source
    into a byte offset; int8; eight source partitions into sixteen."""
    p, n = b.params.partitions, 6
    keep = isa.SHUFFLE_KEEP
    perm = [(5 * j + 3) % p for j in range(p)]
    x = b.hbm("x", (p, n), "fp32")
    h = b.hbm("h", (p, 2 * n), "bf16")
    i8 = b.hbm("i8", (p, 8), "int8")
    out = b.hbm("out", (p, 2 * n), "fp32")
    out16 = b.hbm("out16", (p, n + 1), "bf16")
    out8 = b.hbm("out8", (p, 8), "int8")
    sx, sh, s8 = b.sbuf(4 * n, "x"), b.sbuf(4 * n, "h"), b.sbuf(8, "i8")
    t, t16, t8 = b.sbuf(8 * n, "out"), b.sbuf(2 * n + 2, "out16"), b.sbuf(8, "out8")
    for q, (dst, src) in enumerate(((_tile(b, sx, n), x), (_tile(b, sh, 2 * n, "bf16"), h),
                                    (_tile(b, s8, 8, "int8"), i8))):
        b.emit(f"dma{q}", DmaCopy(dst=dst, src=src.ap((0, p))))
    loaded = [b.signal(f"dma{q}") for q in range(3)]
    v = "vector"
    for tile_ in (_tile(b, t, 2 * n), _tile(b, t16, n + 1, "bf16"), _tile(b, t8, 8, "int8")):
        b.emit(v, Memset(dst=tile_, value=-2.0))
    b.wait(v, *loaded)
    entries = perm[:p] + [keep] * (isa.SHUFFLE_LANES - p)
    b.emit(v, StreamShuffle(dst=_tile(b, t, n), src=_tile(b, sx, n),
                            shuffle=tuple(keep if j % 5 == 2 else m
                                          for j, m in enumerate(entries))))
    # eight partitions into sixteen: the rest kept
    b.emit(v, StreamShuffle(dst=_tile(b, t + 4 * n, n), src=b.tile("sbuf", "fp32", sx, 8,
                                                                     ((n, 1),)),
                            shuffle=tuple((7 - j) if j < 8 else (j % 8 if j < 12 else keep)
                                          for j in range(isa.SHUFFLE_LANES))))
    b.emit(v, StreamShuffle(dst=_tile(b, t16 + 2, n, "bf16"),
                            src=_tile(b, sh + 2, n, "bf16", dims=((n, 2),)),
                            shuffle=tuple(entries)))
    b.emit(v, StreamShuffle(dst=_tile(b, t8 + 1, 5, "int8"), src=_tile(b, s8, 5, "int8"),
                            shuffle=tuple(reversed(entries[:p])) + tuple(entries[p:])))
    done = b.signal(v)
    for q, (dst, src) in enumerate(((out, _tile(b, t, 2 * n)),
                                    (out16, _tile(b, t16, n + 1, "bf16")),
                                    (out8, _tile(b, t8, 8, "int8")))):
        b.wait(f"dma{q}", done)
        b.emit(f"dma{q}", DmaCopy(dst=dst.ap((0, p)), src=src))


def _range_selects(b: Builder) -> None:
    """RangeSelect on the vector engine: each element kept where its place (``start`` + its
    index) holds against the partition's bounds (GpSimd's iotas, and values loaded), else
    the fill; fp32 with a negative start, bf16 strided, every comparison."""
    p, n = b.params.partitions, 20
    x = b.hbm("x", (p, n), "fp32")
    h = b.hbm("h", (p, 2 * n), "bf16")
    bounds = b.hbm("bounds", (p, 2), "fp32")
    out = b.hbm("out", (p, 2 * n), "fp32")
    out16 = b.hbm("out16", (p, 2 * n), "bf16")
    sx, sh, sb = b.sbuf(4 * n, "x"), b.sbuf(4 * n, "h"), b.sbuf(16, "bounds")
    t, t16 = b.sbuf(8 * n, "out"), b.sbuf(4 * n, "out16")
    for q, (dst, src) in enumerate(((_tile(b, sx, n), x), (_tile(b, sh, 2 * n, "bf16"), h),
                                    (_tile(b, sb, 2), bounds))):
        b.emit(f"dma{q}", DmaCopy(dst=dst, src=src.ap((0, p))))
    g, v = "gpsimd", "vector"
    lo, hi = b.column(sb + 8, p), b.column(sb + 12, p)
    b.emit(g, Iota(dst=lo, base=-3, pstep=1, step=0))  # partition q: -3 + q .. 10 - q / 2
    b.emit(g, Iota(dst=hi, base=10, pstep=-1, step=0))
    b.emit(g, TensorScalar(dst=hi, src=hi, op0=VectorOp.MULTIPLY, imm0=0.5))
    b.wait(v, b.signal(g), *(b.signal(f"dma{q}") for q in range(3)))
    ops = (VectorOp.IS_EQUAL, VectorOp.LESS, VectorOp.LESS_EQUAL, VectorOp.GREATER,
           VectorOp.GREATER_EQUAL)
    b.emit(v, RangeSelect(dst=_tile(b, t, n), src=_tile(b, sx, n), bound0=lo, bound1=hi,
                          op0=VectorOp.GREATER_EQUAL, op1=VectorOp.LESS, start=-4,
                          fill=-1e30))
    b.emit(v, RangeSelect(dst=_tile(b, t + 4 * n, n), src=_tile(b, sx, n),
                          bound0=b.column(sb, p), bound1=b.column(sb + 4, p),
                          op0=VectorOp.GREATER, op1=VectorOp.LESS_EQUAL, start=-1, fill=7.5))
    for k, (op0, op1) in enumerate(zip(ops, ops[2:] + ops[:2], strict=True)):
        b.emit(v, RangeSelect(dst=_tile(b, t16 + 8 * k, 4, "bf16"),
                              src=_tile(b, sh + 8 * k, 4, "bf16", dims=((4, 2),)),
                              bound0=lo, bound1=hi, op0=op0, op1=op1, start=2 * k - 6,
                              fill=0.1 * k - 0.3))
    done = b.signal(v)
    for q, (dst, src) in enumerate(((out, _tile(b, t, 2 * n)),
                                    (out16, _tile(b, t16, 2 * n, "bf16")))):
        b.wait(f"dma{q}", done)
        b.emit(f"dma{q}", DmaCopy(dst=dst.ap((0, p)), src=src))


def _rows_and_zeros(b: Builder, n: int) -> tuple[int, int, int]:
    """The SBUF offsets of ``n`` fp32 elements a partition loaded from HBM ``x``, ``n`` bf16
    from ``h``, and ``x * 0`` (zeros of both signs) by the vector engine, which waits for
    the loads."""
    p = b.params.partitions
    x, h = b.hbm("x", (p, n), "fp32"), b.hbm("h", (p, n), "bf16")
    sx, sh, zeros = b.sbuf(4 * n, "x"), b.sbuf(2 * n, "h"), b.sbuf(4 * n, "zeros")
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    b.emit("dma1", DmaCopy(dst=_tile(b, sh, n, "bf16"), src=h.ap((0, p))))
    b.wait("vector", b.signal("dma0"), b.signal("dma1"))
    b.emit("vector", TensorScalar(dst=_tile(b, zeros, n), src=_tile(b, sx, n),
                                  op0=VectorOp.MULTIPLY, imm0=0.0))
    return sx, sh, zeros


def _infinities_and_nans(b: Builder, sx: int, n: int, inf: int, keep: int) -> None:
    """Into ``inf`` (SBUF, ``n`` fp32 a partition), by the vector engine, ``x * 1e38 *
    1e38`` (an infinity of x's sign but for the tiniest x) times ``x > 0.5`` (1 or 0,
    through ``keep``) of the ``x`` at ``sx``: infinities where x > 0.5, NaNs (inf * 0)
    elsewhere."""
    v = "vector"
    b.emit(v, TensorScalar(dst=_tile(b, inf, n), src=_tile(b, sx, n), op0=VectorOp.MULTIPLY,
                           imm0=1e38, op1=VectorOp.MULTIPLY, imm1=1e38))
    b.emit(v, TensorScalar(dst=_tile(b, keep, n), src=_tile(b, sx, n), op0=VectorOp.GREATER,
                           imm0=0.5))
    b.emit(v, TensorTensor(dst=_tile(b, inf, n), a=_tile(b, inf, n), b=_tile(b, keep, n),
                           op=VectorOp.MULTIPLY))


def _top8s(b: Builder) -> None:
    """Max8 on the vector engine: fp32, a strided source into bf16, a bf16 source, zeros of
    both signs (ties kept in order) and a row of infinities and NaNs (x * 1e38 * 1e38, times
    x > 0.5: NaN where it is not)."""
    p, n, v = b.params.partitions, 24, "vector"
    sx, sh, zeros = _rows_and_zeros(b, n)
    out = b.hbm("out", (p, 32), "fp32")
    out16 = b.hbm("out16", (p, 16), "bf16")
    inf, keep = (b.sbuf(4 * n, name) for name in ("inf", "keep"))
    t, t16 = b.sbuf(4 * 32, "out"), b.sbuf(2 * 16, "out16")
    _infinities_and_nans(b, sx, n, inf, keep)
    for k, src in enumerate((_tile(b, sx, n), _tile(b, zeros, n), _tile(b, inf, n),
                             _tile(b, sh, n, "bf16"))):
        b.emit(v, Max8(dst=_tile(b, t + 32 * k, 8), src=src))
    b.emit(v, Max8(dst=_tile(b, t16, 8, "bf16"), src=_tile(b, sx, n // 2, dims=((n // 2, 2),))))
    b.emit(v, Max8(dst=_tile(b, t16 + 16, 8, "bf16"), src=_tile(b, sh + 2, n - 1, "bf16")))
    done = b.signal(v)
    for q, (dst, src) in enumerate(((out, _tile(b, t, 32)), (out16, _tile(b, t16, 16, "bf16")))):
        b.wait(f"dma{q}", done)
        b.emit(f"dma{q}", DmaCopy(dst=dst.ap((0, p)), src=src))


def _matches(b: Builder) -> None:
    """FindIndex8 and MatchReplace8 on the vector engine: the 8 largest of a row (Max8)
    found and replaced; zeros of both signs, where every value is 0 (MatchReplace8's values
    each take the next zero, or with an imm of 0 all the first); bf16 data; values that are
    not there (FindIndex8's 2**32 - 1, MatchReplace8's 0); a replacement without indices."""
    p, n, v = b.params.partitions, 24, "vector"
    sx, sh, zeros = _rows_and_zeros(b, n)
    out = b.hbm("out", (p, 4 * n), "fp32")
    out16 = b.hbm("out16", (p, n), "bf16")
    where = b.hbm("where", (p, 48), "uint32")
    tops = b.sbuf(4 * 24, "tops")
    t, t16, ti = b.sbuf(16 * n, "out"), b.sbuf(2 * n, "out16"), b.sbuf(4 * 48, "where")
    top, top16, absent = (_tile(b, tops + 32 * k, 8) for k in range(3))
    b.emit(v, Max8(dst=top, src=_tile(b, sx, n)))
    b.emit(v, Max8(dst=top16, src=_tile(b, sh, n, "bf16")))
    b.emit(v, TensorScalar(dst=absent, src=top, op0=VectorOp.ADD, imm0=1000.0))
    idx = [_tile(b, ti + 32 * k, 8, "uint32") for k in range(6)]
    b.emit(v, FindIndex8(dst=idx[0], data=_tile(b, sx, n), vals=top))
    b.emit(v, FindIndex8(dst=idx[1], data=_tile(b, zeros, n), vals=_tile(b, zeros + 8, 8)))
    b.emit(v, FindIndex8(dst=idx[2], data=_tile(b, sx, n), vals=absent))
    b.emit(v, MatchReplace8(dst=_tile(b, t, n), data=_tile(b, sx, n), vals=top, imm=-1e9,
                            dst_idx=idx[3]))
    b.emit(v, MatchReplace8(dst=_tile(b, t + 4 * n, n), data=_tile(b, zeros, n),
                            vals=_tile(b, zeros, 8), imm=5.0, dst_idx=idx[4]))
    b.emit(v, MatchReplace8(dst=_tile(b, t + 8 * n, n), data=_tile(b, zeros, n),
                            vals=_tile(b, zeros, 8), imm=0.0))
    b.emit(v, MatchReplace8(dst=_tile(b, t + 12 * n, n), data=_tile(b, sx, n), vals=absent,
                            imm=3.0, dst_idx=idx[5]))
    b.emit(v, MatchReplace8(dst=_tile(b, t16, n, "bf16"), data=_tile(b, sh, n, "bf16"),
                            vals=top16, imm=-2.5))
    done = b.signal(v)
    for q, (dst, src) in enumerate(((out, _tile(b, t, 4 * n)),
                                    (out16, _tile(b, t16, n, "bf16")),
                                    (where, _tile(b, ti, 48, "uint32")))):
        b.wait(f"dma{q}", done)
        b.emit(f"dma{q}", DmaCopy(dst=dst.ap((0, p)), src=src))


def _sequence_bounds(b: Builder) -> None:
    """SequenceBounds on GpSimd, one partition: segment ids of 0 (padding) and 1 (x > 0),
    of 0, 1 and 2 (plus x > 0.5), strided, and of one run of int32 3s; bounds into fp32 and
    int32."""
    n = 24
    x = b.hbm("x", (1, 2 * n), "fp32")
    out = b.hbm("out", (1, 6 * n), "fp32")
    out32 = b.hbm("out32", (1, 2 * n), "int32")
    sx, ids, more = b.sbuf(8 * n, "x"), b.sbuf(8 * n, "ids"), b.sbuf(8 * n, "more")
    three, t, t32 = b.sbuf(4 * n, "three"), b.sbuf(24 * n, "out"), b.sbuf(8 * n, "out32")

    def row(at, k, dtype="fp32", step=1):
        return b.tile("sbuf", dtype, at, 1, ((k, step),))

    g = "gpsimd"
    b.emit("dma0", DmaCopy(dst=row(sx, 2 * n), src=x.ap((0, 1))))
    b.wait(g, b.signal("dma0"))
    b.emit(g, TensorScalar(dst=row(ids, 2 * n), src=row(sx, 2 * n), op0=VectorOp.GREATER,
                           imm0=0.0))
    b.emit(g, TensorScalar(dst=row(more, 2 * n), src=row(sx, 2 * n), op0=VectorOp.GREATER,
                           imm0=0.5))
    b.emit(g, TensorTensor(dst=row(more, 2 * n), a=row(more, 2 * n), b=row(ids, 2 * n),
                           op=VectorOp.ADD))
    b.emit(g, Iota(dst=row(three, n, "int32"), base=3, pstep=0, step=0))
    b.emit(g, SequenceBounds(dst=row(t, 2 * n), src=row(ids, n)))
    b.emit(g, SequenceBounds(dst=row(t + 8 * n, 2 * n), src=row(more, n, step=2)))
    b.emit(g, SequenceBounds(dst=row(t + 16 * n, 2 * n), src=row(three, n, "int32")))
    b.emit(g, SequenceBounds(dst=row(t32, 2 * n, "int32"), src=row(more + 4, n)))
    done = b.signal(g)
    for q, (dst, src) in enumerate(((out, row(t, 6 * n)), (out32, row(t32, 2 * n, "int32")))):
        b.wait(f"dma{q}", done)
        b.emit(f"dma{q}", DmaCopy(dst=dst.ap((0, 1)), src=src))


def _indirect_dmas(b: Builder) -> None:
    """Indirect DMA: rows of an HBM table gathered into SBUF by an int32 index (GpSimd's
    Iota: 1 + 3 p), scattered back into another table's rows by it, and gathered by a uint32
    index with rows out of the table skipped (-2 + 5 p over 64 rows; their partitions keep
    a memset's value); adding copies, SBUF into SBUF and every partition into one HBM row
    (fp32), HBM into SBUF at a byte offset inside words (bf16) and SBUF into HBM (fp16),
    each sum rounded to its type."""
    p, n, rows = b.params.partitions, 12, 64
    table = b.hbm("table", (rows, n), "fp32")
    out = b.hbm("out", (rows, n), "fp32")
    got = b.hbm("got", (p, 2 * n), "fp32")
    summed = b.hbm("summed", (p, n), "fp32")
    idx, skipped, twice = b.sbuf(4, "idx"), b.sbuf(4, "skipped"), b.sbuf(4, "one_row")
    t = b.sbuf(8 * n, "rows")
    g = "gpsimd"
    b.emit(g, Iota(dst=b.tile("sbuf", "int32", idx, p, ((1, 1),)), base=1, pstep=3, step=0))
    b.emit(g, Iota(dst=b.tile("sbuf", "int32", skipped, p, ((1, 1),)), base=-2, pstep=5,
                   step=0))
    b.emit(g, Memset(dst=_tile(b, t + 4 * n, n), value=-7.0))
    ready = b.signal(g)
    table_rows = table.ap((0, p))
    b.wait("dma0", ready)
    b.emit("dma0", DmaCopy(dst=_tile(b, t, n), src=table_rows, rows=rows,
                           index=b.tile("sbuf", "int32", idx, p, ((1, 1),))))
    b.emit("dma0", DmaCopy(dst=_tile(b, t + 4 * n, n), src=table_rows, rows=rows, skip=True,
                           index=b.tile("sbuf", "uint32", skipped, p, ((1, 1),))))
    loaded = b.signal("dma0")
    b.wait("dma1", loaded)
    b.emit("dma1", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t, n), rows=rows, index_dst=True,
                           index=b.tile("sbuf", "int32", idx, p, ((1, 1),))))
    b.emit("dma1", DmaCopy(dst=got.ap((0, p)), src=_tile(b, t, 2 * n)))
    # adding copies: the gathered rows added into SBUF, and into one row of the output
    # table named by every partition, which adds them all in turn
    b.emit(g, Iota(dst=b.tile("sbuf", "int32", twice, p, ((1, 1),)), base=5, pstep=0, step=0))
    b.wait("dma2", loaded, b.signal("dma1"), b.signal(g))
    b.emit("dma2", DmaCopy(dst=_tile(b, t + 4 * n, n), src=_tile(b, t, n), add=True))
    b.emit("dma2", DmaCopy(dst=out.ap((0, p)), src=_tile(b, t, n), rows=rows, index_dst=True,
                           add=True, index=b.tile("sbuf", "int32", twice, p, ((1, 1),))))
    b.emit("dma2", DmaCopy(dst=summed.ap((0, p)), src=_tile(b, t + 4 * n, n)))
    (ha, hb), (fa, fb) = ((b.hbm(f"{k}a", (p, n), dt), b.hbm(f"{k}b", (p, n), dt))
                          for k, dt in (("h", "bf16"), ("f", "fp16")))
    sh, sf = b.sbuf(2 * n + 4, "h"), b.sbuf(2 * n, "f")
    halves = _tile(b, sh + 2, n, "bf16")
    b.emit("dma3", DmaCopy(dst=halves, src=ha.ap((0, p))))
    b.emit("dma3", DmaCopy(dst=_tile(b, sf, n, "fp16"), src=fb.ap((0, p))))
    b.emit("dma3", DmaCopy(dst=halves, src=hb.ap((0, p)), add=True))
    b.emit("dma3", DmaCopy(dst=fa.ap((0, p)), src=_tile(b, sf, n, "fp16"), add=True))


def _dmas_at_one_index(b: Builder) -> None:
    """DMAs moved by one index read at run time (``index_stride``, NKI's ``scalar_offset``),
    the index at a partition of its tile other than the first (GpSimd's Iota: 2 + 5 p):
    a table's rows 17 on gathered into SBUF (a row's stride), written back into another
    table's columns 7 on (an element's stride, every partition moved alike), added there
    (bf16 at a byte offset inside words), and an index out of range skipped (its tile keeps
    a memset's value)."""
    p, n = b.params.partitions, 12
    rows = p + 48
    table = b.hbm("table", (rows, n), "fp32")
    out = b.hbm("out", (p, 2 * n), "fp32")
    halves = b.hbm("halves", (p, 2 * n), "bf16")
    idx, t = b.sbuf(4, "idx"), b.sbuf(10 * n + 4, "rows")
    g = "gpsimd"
    b.emit(g, Iota(dst=b.tile("sbuf", "int32", idx, p, ((1, 1),)), base=2, pstep=5, step=0))
    b.emit(g, Memset(dst=_tile(b, t + 4 * n, n), value=-7.0))
    ready = b.signal(g)

    def at(part, dtype="int32"):  # the index at partition ``part`` of the Iota's tile
        return b.tile("sbuf", dtype, idx, 1, ((1, 1),), partition=part)

    b.wait("dma0", ready)
    b.emit("dma0", DmaCopy(dst=_tile(b, t, n), src=table.ap((0, p)), index=at(3),
                           rows=rows - p + 1, index_stride=n * 4))
    b.emit("dma0", DmaCopy(dst=_tile(b, t + 4 * n, n), src=table.ap((0, p)), skip=True,
                           index=at(12, "uint32"), rows=rows - p + 1, index_stride=n * 4))
    b.emit("dma0", DmaCopy(dst=_tile(b, t + 8 * n + 2, n, "bf16"), src=_tile(b, t, n)))
    loaded = b.signal("dma0")
    b.wait("dma1", loaded)
    b.emit("dma1", DmaCopy(dst=out.ap((0, p), (0, n)), src=_tile(b, t, n), index=at(1),
                           index_dst=True, rows=n + 1, index_stride=4))
    b.emit("dma1", DmaCopy(dst=out.ap((0, p), (0, n)), src=_tile(b, t + 4 * n, n),
                           index=at(0), index_dst=True, rows=n + 1, index_stride=4, add=True))
    b.emit("dma1", DmaCopy(dst=halves.ap((0, p), (0, n)),
                           src=_tile(b, t + 8 * n + 2, n, "bf16"), index=at(1),
                           index_dst=True, rows=n + 1, index_stride=2, add=True))


def _dma_sums(b: Builder) -> None:
    """DmaCompute: three fp32 tensors from HBM summed into an SBUF tile of bf16 at a byte
    offset inside words (in fp32, cast once); two of other types (bf16 at a byte offset,
    int32) into HBM as fp16; an SBUF tile and an HBM tensor into fp32 SBUF, strided."""
    p, n = b.params.partitions, 12
    xs = [b.hbm(f"x{k}", (p, n), "fp32") for k in range(3)]
    h = b.hbm("h", (p, n), "bf16")
    i = b.hbm("i", (p, n), "int32")
    out = b.hbm("out", (p, n), "fp16")
    sh, si, s3 = b.sbuf(2 * n + 4, "h"), b.sbuf(4 * n, "i"), b.sbuf(2 * n + 4, "sum3")
    s2 = b.sbuf(4 * n, "sum2")
    b.emit("dma0", DmaCopy(dst=_tile(b, sh + 2, n, "bf16"), src=h.ap((0, p))))
    b.emit("dma0", DmaCopy(dst=_tile(b, si, n, "int32"), src=i.ap((0, p))))
    b.emit("dma0", DmaCompute(dst=_tile(b, s3 + 2, n, "bf16"), a=xs[0].ap((0, p)),
                              b=xs[1].ap((0, p)), c=xs[2].ap((0, p))))
    loaded = b.signal("dma0")
    b.wait("dma1", loaded)
    b.emit("dma1", DmaCompute(dst=out.ap((0, p)), a=_tile(b, sh + 2, n, "bf16"),
                              b=_tile(b, si, n, "int32")))
    b.emit("dma1", DmaCompute(dst=b.tile("sbuf", "fp32", s2, p, ((n // 2, 2),)),
                              a=b.tile("sbuf", "bf16", s3 + 2, p, ((n // 2, 2),)),
                              b=b.tile("hbm", "fp32", xs[0].offset, p, ((n // 2, 2),),
                                       pstride=4 * n)))


#: The element types :func:`_converting_dmas` converts fp32 into (an SBUF tile each).
_CASTS = ("bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn", "tf32", "int8", "uint8",
          "int32", "uint32")


def _converting_dmas(b: Builder) -> None:
    """DMAs between two types, each element cast through fp32: fp32 in HBM into SBUF tiles of
    every other type the DMA converts (narrow ones at byte offsets inside words), int32 into
    int8 and uint8 (negatives saturated to 0); each tile back into HBM as fp32 and as one of
    bf16, int32, fp8_e4m3 and uint8; then fp32 added into the bf16 and fp16 tiles and int32
    into a bf16 HBM tensor (sums in fp32, rounded to the destination's type)."""
    p, n, q = b.params.partitions, 6, b.params.dma_queues
    x, k = b.hbm("x", (p, n), "fp32"), b.hbm("k", (p, n), "int32")
    loads, tiles = [], {}
    for i, dtype in enumerate(_CASTS):
        size = isa.DTYPES[dtype][1]
        tiles[dtype] = _tile(b, b.sbuf(n * size + 4, dtype) + i * size % 4, n, dtype)
        loads.append(DmaCopy(dst=tiles[dtype], src=x.ap((0, p))))
    for dtype in ("int8", "uint8"):
        tiles[f"k_{dtype}"] = _tile(b, b.sbuf(n + 4, f"k_{dtype}") + 3, n, dtype)
        loads.append(DmaCopy(dst=tiles[f"k_{dtype}"], src=k.ap((0, p))))
    wide, whole = _tile(b, b.sbuf(4 * n, "wide"), n), _tile(b, b.sbuf(4 * n, "whole"), n, "int32")
    loads += [DmaCopy(dst=wide, src=x.ap((0, p))), DmaCopy(dst=whole, src=k.ap((0, p)))]
    for i, ins in enumerate(loads):
        b.emit(f"dma{i % q}", ins)
    loaded = [b.signal(f"dma{j}") for j in range(q)]
    for i, (name, tile) in enumerate(tiles.items()):
        queue = f"dma{i % q}"
        b.wait(queue, *loaded)
        for out in ("fp32", ("bf16", "int32", "fp8_e4m3", "uint8")[i % 4]):
            b.emit(queue, DmaCopy(dst=b.hbm(f"{name}_{out}", (p, n), out).ap((0, p)), src=tile))
    stored = [b.signal(f"dma{j}") for j in range(q)]
    b.wait("dma0", *stored)
    for name in ("bf16", "fp16"):
        b.emit("dma0", DmaCopy(dst=tiles[name], src=wide, add=True))
        b.emit("dma0", DmaCopy(dst=b.hbm(f"{name}_sum", (p, n), name).ap((0, p)),
                               src=tiles[name]))
    b.emit("dma0", DmaCopy(dst=b.hbm("acc", (p, n), "bf16").ap((0, p)), src=whole, add=True))


#: The per-partition operands of :func:`_mixed_types`: (type, element of its word-aligned
#: column it is read at, HBM name; names starting with ``s`` hold positive values), one of
#: each type the engines read (:data:`hdl.core.engines.OPERAND_DTYPES`) but fp32, narrow ones
#: at byte offsets inside words.
_OPERANDS = (("bf16", 1, "ob"), ("fp16", 0, "oh"), ("fp8_e4m3", 3, "oe"),
             ("fp8_e5m2", 1, "of"), ("fp8_e4m3fn", 2, "on"), ("int8", 3, "oi"),
             ("int32", 2, "sj"), ("uint32", 1, "su"), ("tf32", 3, "ot"))


def _load_operands(b: Builder, operands, loads: list) -> tuple[dict, list]:
    """Load ``operands`` ((type, element, name): a word-aligned group of four elements, the
    operand the element at ``element`` of it) beside ``loads``, every load on the DMA queues
    in turn; the operands' tiles by type, and the queues' signals."""
    p, q = b.params.partitions, b.params.dma_queues
    ops = {}
    for dtype, element, name in operands:
        size = isa.DTYPES[dtype][1]
        base = b.sbuf(4 * size, name)
        ops[dtype] = b.tile("sbuf", dtype, base + element * size, p, ((1, 1),))
        loads.append((b.tile("sbuf", dtype, base, p, ((4, 1),)),
                      b.hbm(name, (p, 4), dtype).ap((0, p))))
    for i, (dst, src) in enumerate(loads):
        b.emit(f"dma{i % q}", DmaCopy(dst=dst, src=src))
    return ops, [b.signal(f"dma{k}") for k in range(min(q, len(loads)))]


def _mixed_types(b: Builder) -> None:
    """Inputs of two types in one instruction and per-partition scalar operands of every
    type but fp32, on the vector, GpSimd and scalar engines: bf16 with fp32 both ways round,
    strided fp8_e4m3 with fp16 at byte offsets, fp32 in PSUM with bf16; TensorScalar on each
    operand type (integer ones by bitwise operations), a bf16 operand in PSUM, one of six
    partitions on the scalar engine; activations with a bf16 and an fp8 bias."""
    p, n = b.params.partitions, 8
    srcs = {"x": "bf16", "y": "fp32", "z": "fp8_e4m3", "w": "fp16"}
    at, loads = {}, []
    for name, dtype in srcs.items():
        size = isa.DTYPES[dtype][1]
        at[name] = b.sbuf(size * n, name)
        loads.append((_tile(b, at[name], n, dtype), b.hbm(name, (p, n), dtype).ap((0, p))))
    ops, ready = _load_operands(b, _OPERANDS, loads)
    x, y = _tile(b, at["x"], n, "bf16"), _tile(b, at["y"], n)
    half = n // 2
    z = b.tile("sbuf", "fp8_e4m3", at["z"] + 1, p, ((half, 2),))
    w = b.tile("sbuf", "fp16", at["w"] + 2, p, ((half, 2),))
    floats = (VectorOp.MULTIPLY, VectorOp.ADD, VectorOp.MAX, VectorOp.SUBTRACT)

    def slots(count: int, what: str):
        """The SBUF offsets of ``count`` results of ``n`` fp32 each."""
        base = b.sbuf(4 * n * count, what)
        return iter(range(base, base + 4 * n * count, 4 * n))

    bank = b.psum_banks(1, "psum")[0]
    for eng in ("vector", "gpsimd"):
        b.wait(eng, *ready)
        out = slots(len(_OPERANDS) + 6, f"{eng} results")
        b.emit(eng, TensorTensor(dst=_tile(b, next(out), n), a=x, b=y, op=VectorOp.ADD))
        b.emit(eng, TensorTensor(dst=_tile(b, next(out) + 2, n, "bf16"), a=y, b=x,
                                 op=VectorOp.MULTIPLY))
        b.emit(eng, TensorTensor(dst=_tile(b, next(out), half, "fp16"), a=z, b=w,
                                 op=VectorOp.SUBTRACT))
        b.emit(eng, TensorTensor(dst=_tile(b, next(out) + 1, half, "fp8_e5m2"), a=w, b=z,
                                 op=VectorOp.MIN))
        for k, (dtype, _, _) in enumerate(_OPERANDS):
            integer = dtype in ("int32", "uint32")
            op = (VectorOp.BITWISE_XOR, VectorOp.BITWISE_AND)[k % 2] if integer else \
                floats[k % len(floats)]
            b.emit(eng, TensorScalar(dst=_tile(b, next(out), n), src=x if k % 2 else y,
                                     op0=op, operand0=ops[dtype]))
        if eng == "vector":  # fp32 in PSUM against bf16, and a bf16 operand in PSUM
            b.emit(eng, TensorCopy(dst=_tile(b, bank, n, space="psum"), src=y))
            b.emit(eng, TensorTensor(dst=_tile(b, next(out), n), a=_tile(b, bank, n,
                                                                          space="psum"),
                                     b=x, op=VectorOp.MAX))
            b.emit(eng, TensorCopy(dst=_tile(b, bank + 4 * n, 4, "bf16", space="psum"),
                                   src=_tile(b, ops["bf16"].offset - 2, 4, "bf16")))
            b.emit(eng, TensorScalar(dst=_tile(b, next(out), n), src=y,
                                     op0=VectorOp.MULTIPLY,
                                     operand0=b.tile("psum", "bf16", bank + 4 * n + 6, p,
                                                     ((1, 1),))))
    sc = "scalar"
    b.wait(sc, *ready)
    out = slots(8, "scalar results")
    for k, dtype in enumerate(("bf16", "fp8_e5m2", "int8", "tf32", "uint32")):
        op = VectorOp.BITWISE_OR if dtype == "uint32" else floats[k % len(floats)]
        b.emit(sc, TensorScalar(dst=_tile(b, next(out), n), src=x if k % 2 else y, op0=op,
                                operand0=ops[dtype]))
    six = b.tile("sbuf", "fp16", ops["fp16"].offset, 6, ((1, 1),))
    b.emit(sc, TensorScalar(dst=b.tile("sbuf", "bf16", next(out) + 2, 6, ((n, 1),)),
                            src=b.tile("sbuf", "bf16", at["x"], 6, ((n, 1),)),
                            op0=VectorOp.ADD, operand0=six))
    b.emit(sc, Activation(dst=_tile(b, next(out), n), src=x, func=b.function("exp"),
                          scale=0.5, bias=ops["bf16"]))
    b.emit(sc, Activation(dst=_tile(b, next(out), n), src=y, func=b.function("gelu"),
                          bias=ops["fp8_e4m3"]))


def _count(n: int) -> float:
    """A shift's immediate count ``n``: the fp32 whose word is ``n``."""
    return float(np.array(n, np.uint32).view(np.float32))


#: The two operations of :func:`_two_ops`' TensorScalar instructions: (op0, its scalar, op1,
#: its scalar), a scalar an immediate (a float) or a per-partition operand of the type
#: named, read from the columns of :data:`_TWO_OP_OPERANDS`.
_TWO_OPS = (
    (VectorOp.MULTIPLY, 0.75, VectorOp.ADD, -1.25),
    (VectorOp.SUBTRACT, "bf16", VectorOp.MULTIPLY, 3.0),
    (VectorOp.ADD, 1.0 / 3.0, VectorOp.MAX, "fp8_e4m3"),
    (VectorOp.MULTIPLY, "fp16", VectorOp.ADD, "fp32"),
    (VectorOp.MAX, "fp8_e5m2", VectorOp.MIN, "int8"),
    (VectorOp.ADD, "tf32", VectorOp.GREATER, "fp8_e4m3fn"),
    (VectorOp.BITWISE_XOR, "int32", VectorOp.BITWISE_AND, "uint32"),
    (VectorOp.MULTIPLY, "fp32", VectorOp.SUBTRACT, "bf16"),
    (VectorOp.BITWISE_OR, "uint32", VectorOp.MULTIPLY, 0.5),
    (VectorOp.LOGICAL_AND, "fp16", VectorOp.LOGICAL_XOR, 1.0),
    (VectorOp.LEFT_SHIFT, _count(5), VectorOp.RIGHT_SHIFT, _count(9)),
)
#: The per-partition operands of :func:`_two_ops`, as :data:`_OPERANDS`, fp32 too.
_TWO_OP_OPERANDS = _OPERANDS + (("fp32", 2, "og"),)


def _two_ops(b: Builder) -> None:
    """Two-operation TensorScalar, ``op1(op0(src, s0), s1)``, on the vector, GpSimd and scalar
    engines: both scalars immediates, one of each, and per-partition operands of two types
    (every type the engines read, narrow ones at byte offsets inside words; integer ones
    through bitwise operations, whose results the second operation takes as they are), the
    logical operations and the shifts, results in fp32, bf16 at a byte offset and fp8; on
    the vector engine an operand in PSUM, on the scalar engine a tile of six partitions."""
    p, n = b.params.partitions, 8
    x, y = b.sbuf(2 * n, "x"), b.sbuf(4 * n, "y")
    loads = [(_tile(b, x, n, "bf16"), b.hbm("x", (p, n), "bf16").ap((0, p))),
             (_tile(b, y, n), b.hbm("y", (p, n), "fp32").ap((0, p)))]
    ops, ready = _load_operands(b, _TWO_OP_OPERANDS, loads)
    bank = b.psum_banks(1, "psum")[0]

    def scalars(k: int, value) -> dict:
        if isinstance(value, float):
            return {f"imm{k}": value}
        return {f"operand{k}": ops[value]}

    outs = ("fp32", "fp32", "bf16", "fp32", "fp8_e5m2")
    for eng in ("vector", "gpsimd", "scalar"):
        b.wait(eng, *ready)
        base = b.sbuf(4 * n * (len(_TWO_OPS) + 2), f"{eng} results")
        slots = iter(range(base, base + 4 * n * (len(_TWO_OPS) + 2), 4 * n))
        for k, (op0, s0, op1, s1) in enumerate(_TWO_OPS):
            out = outs[k % len(outs)]
            dst = _tile(b, next(slots) + (2 if out == "bf16" else 0), n, out)
            b.emit(eng, TensorScalar(dst=dst, src=_tile(b, x, n, "bf16") if k % 2 else
                                     _tile(b, y, n), op0=op0, op1=op1, **scalars(0, s0),
                                     **scalars(1, s1)))
        if eng == "vector":  # operand1 a bf16 in PSUM
            b.emit(eng, TensorCopy(dst=_tile(b, bank, 4, "bf16", space="psum"),
                                   src=_tile(b, ops["bf16"].offset - 2, 4, "bf16")))
            b.emit(eng, TensorScalar(dst=_tile(b, next(slots), n), src=_tile(b, y, n),
                                     op0=VectorOp.MULTIPLY, operand0=ops["fp16"],
                                     op1=VectorOp.ADD,
                                     operand1=b.tile("psum", "bf16", bank + 6, p, ((1, 1),))))
        if eng == "scalar":  # six partitions: fewer than the lanes' turns cover
            six = {dt: b.tile("sbuf", dt, ops[dt].offset, 6, ((1, 1),)) for dt in ("fp16", "int8")}
            b.emit(eng, TensorScalar(dst=b.tile("sbuf", "bf16", next(slots) + 2, 6, ((n, 1),)),
                                     src=b.tile("sbuf", "bf16", x, 6, ((n, 1),)),
                                     op0=VectorOp.ADD, operand0=six["fp16"],
                                     op1=VectorOp.MULTIPLY, operand1=six["int8"]))
            b.emit(eng, TensorScalar(dst=b.tile("sbuf", "fp32", next(slots), 6, ((n, 1),)),
                                     src=b.tile("sbuf", "bf16", x, 6, ((n, 1),)),
                                     op0=VectorOp.SUBTRACT, imm0=0.25,
                                     op1=VectorOp.MAX, operand1=six["fp16"]))


def _scans(b: Builder) -> None:
    """TensorTensorScan on the vector engine, ``r = op1(op0(a, r_prev), b)`` along each
    partition: the recurrence ``a * r + b`` from an immediate, operands swapped in either
    operation and both, COPY as either, inputs of two types (bf16 with fp32, fp8 with fp16 at
    byte offsets), ``b`` in PSUM, a strided ``a``, the initial value per partition in bf16,
    fp8, int8 and fp32, results in fp32, bf16 at a byte offset and fp8, and a tile of six
    partitions."""
    p, n = b.params.partitions, 12
    srcs = {"x": "bf16", "y": "fp32", "z": "fp8_e4m3", "w": "fp16"}
    at, loads = {}, []
    for name, dtype in srcs.items():
        at[name] = b.sbuf(isa.DTYPES[dtype][1] * n + 4, name)
        loads.append((_tile(b, at[name], n, dtype), b.hbm(name, (p, n), dtype).ap((0, p))))
    ops, ready = _load_operands(b, _OPERANDS[:3] + _OPERANDS[5:6] + (("fp32", 2, "og"),),
                                loads)
    x, y = _tile(b, at["x"], n, "bf16"), _tile(b, at["y"], n)
    half = n // 2
    z = b.tile("sbuf", "fp8_e4m3", at["z"] + 1, p, ((half, 2),))
    w = b.tile("sbuf", "fp16", at["w"] + 2, p, ((half, 1),))
    bank = b.psum_banks(1, "psum")[0]
    v = "vector"
    b.wait(v, *ready)
    base = b.sbuf(4 * n * 8, "scan results")
    out = iter(range(base, base + 4 * n * 8, 4 * n))
    b.emit(v, TensorCopy(dst=_tile(b, bank, n, space="psum"), src=y))
    scans = (  # (op0, op1, reverse0, reverse1, a, b, initial, dst type)
        (VectorOp.MULTIPLY, VectorOp.ADD, False, False, x, y, 0.5, "fp32"),
        (VectorOp.ADD, VectorOp.MAX, False, True, y, x, "bf16", "bf16"),
        (VectorOp.SUBTRACT, VectorOp.SUBTRACT, True, True, x,
         _tile(b, bank, n, space="psum"), "fp8_e4m3", "fp32"),
        (VectorOp.COPY, VectorOp.ADD, True, False, y, x, "int8", "fp8_e4m3"),
        (VectorOp.MAX, VectorOp.COPY, False, False, x, y, -1.5, "bf16"),
        (VectorOp.MULTIPLY, VectorOp.ADD, False, False, z, w, "fp32", "fp32"),
        (VectorOp.ADD, VectorOp.MULTIPLY, True, False, w, z, "fp16", "bf16"))
    for op0, op1, r0, r1, a, b_ap, initial, dtype in scans:
        at_byte = {"bf16": 2, "fp8_e4m3": 1}.get(dtype, 0)
        dst = b.tile("sbuf", dtype, next(out) + at_byte, p, ((a.free, 1),))
        start = {"imm": initial} if isinstance(initial, float) else {"initial": ops[initial]}
        b.emit(v, TensorTensorScan(dst=dst, a=a, b=b_ap, op0=op0, op1=op1, reverse0=r0,
                                   reverse1=r1, **start))
    six = b.tile("sbuf", "fp32", next(out), 6, ((n, 1),))
    b.emit(v, TensorTensorScan(dst=six, a=b.tile("sbuf", "fp32", at["y"], 6, ((n, 1),)),
                               b=b.tile("sbuf", "bf16", at["x"], 6, ((n, 1),)),
                               op0=VectorOp.ADD, op1=VectorOp.MULTIPLY, imm=1.0))


def _stochastic(b: Builder) -> None:
    """Stochastic rounding on every engine, its casts drawn from the units' lane generators
    (:func:`sim.core.data.unit_beats`): to bf16, fp16 and fp8 at byte offsets inside words,
    from TensorTensor, TensorScalar, TensorCopy and TensorTensorScan on the vector engine,
    TensorScalar and TensorCopy on the GpSimd engine, Activation, TensorScalar and TensorCopy
    on the scalar engine (its lanes' turns, a tile of six partitions); between them
    instructions rounded to nearest even, a reduction, an Iota and a memset, which advance
    the generators by their own beats (a memset by none)."""
    p, n = b.params.partitions, 12
    x = b.hbm("x", (p, n), "fp32")
    sx, sy = b.sbuf(4 * n, "x"), b.sbuf(4 * n, "y")
    t = [b.sbuf(4 * n + 4, f"t{k}") for k in range(13)]
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    loaded = b.signal("dma0")
    xs, ys = _tile(b, sx, n), _tile(b, sy, n)
    sto = {"rounding": "stochastic"}
    v, g, sc = "vector", "gpsimd", "scalar"
    b.wait(v, loaded)
    b.emit(v, TensorScalar(dst=ys, src=xs, op0=VectorOp.MULTIPLY, imm0=1.0 / 3.0))
    b.emit(v, TensorTensor(dst=_tile(b, t[0] + 2, n, "bf16"), a=xs, b=ys, op=VectorOp.ADD,
                           **sto))
    b.emit(v, TensorReduce(dst=b.column(t[1], p), src=xs, reduce=Reduce.SUM))
    b.emit(v, TensorScalar(dst=_tile(b, t[1] + 5, n, "fp8_e4m3"), src=ys,
                           op0=VectorOp.MULTIPLY, imm0=7.0, **sto))
    b.emit(v, Memset(dst=_tile(b, t[2], n), value=0.1))
    b.emit(v, TensorCopy(dst=_tile(b, t[3], n, "fp16"), src=xs))
    b.emit(v, TensorTensorScan(dst=_tile(b, t[4] + 2, n, "bf16"), a=xs, b=ys,
                               op0=VectorOp.MULTIPLY, op1=VectorOp.ADD, imm=0.5, **sto))
    b.emit(v, TensorCopy(dst=b.tile("sbuf", "fp16", t[5], 6, ((n, 1),)),
                         src=b.tile("sbuf", "fp32", sy, 6, ((n, 1),)), **sto))
    computed = b.signal(v)
    b.wait(g, computed)
    b.emit(g, TensorScalar(dst=_tile(b, t[6] + 2, n, "bf16"), src=ys, op0=VectorOp.ADD,
                           imm0=0.1, **sto))
    b.emit(g, Iota(dst=_tile(b, t[7], n), base=3, pstep=1, step=2))
    b.emit(g, TensorCopy(dst=_tile(b, t[7] + 3, n, "fp8_e5m2"), src=xs, **sto))
    b.wait(sc, computed)
    b.emit(sc, Activation(dst=_tile(b, t[8] + 2, n, "bf16"), src=xs, func=b.function("exp"),
                          scale=0.5, **sto))
    b.emit(sc, TensorScalar(dst=_tile(b, t[9], n, "fp16"), src=ys, op0=VectorOp.MULTIPLY,
                            imm0=3.0, **sto))
    b.emit(sc, Activation(dst=_tile(b, t[10], n), src=ys, func=b.function("exp")))
    b.emit(sc, TensorCopy(dst=b.tile("sbuf", "fp8_e4m3", t[11] + 1, 6, ((n, 1),)),
                          src=b.tile("sbuf", "fp32", sx, 6, ((n, 1),)), **sto))
    b.emit(sc, Activation(dst=_tile(b, t[12] + 2, n // 2, "bf16", dims=((n // 2, 2),)),
                          src=_tile(b, t[10], n // 2, dims=((n // 2, 1),)),
                          func=b.function("exp"), **sto))


def _draws(b: Builder) -> None:
    """Random and Dropout on the vector engine, each element from its lane generator's word
    of the beat (the words stochastic rounding takes, :func:`sim.core.data.unit_beats`):
    numbers in [0, 1) into fp32, bf16 at a byte offset and fp16 strided; dropout of fp32 at
    an immediate probability and of bf16 at a per-partition one (an Iota's, negative to
    above 1), then of NaNs and infinities (x * 1e38 * 1e38, times x > 0.5); between them a
    stochastic copy and a reduction, which advance the generators by their own beats."""
    p, n, v = b.params.partitions, 12, "vector"
    x, h = b.hbm("x", (p, n), "fp32"), b.hbm("h", (p, n), "bf16")
    sx, sh, probs = b.sbuf(4 * n, "x"), b.sbuf(2 * n, "h"), b.sbuf(4, "probs")
    t = [b.sbuf(4 * n + 4, f"t{k}") for k in range(8)]
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    b.emit("dma1", DmaCopy(dst=_tile(b, sh, n, "bf16"), src=h.ap((0, p))))
    prob = b.column(probs, p)
    b.emit("gpsimd", Iota(dst=prob, base=-2, pstep=1, step=0))
    b.emit("gpsimd", TensorScalar(dst=prob, src=prob, op0=VectorOp.MULTIPLY,
                                  imm0=1.0 / (p - 4)))
    b.wait(v, b.signal("dma0"), b.signal("dma1"), b.signal("gpsimd"))
    b.emit(v, Random(dst=_tile(b, t[0], n)))
    b.emit(v, Random(dst=_tile(b, t[1] + 2, n, "bf16")))
    b.emit(v, TensorCopy(dst=_tile(b, t[2], n, "fp16"), src=_tile(b, sx, n),
                         rounding="stochastic"))
    b.emit(v, Random(dst=_tile(b, t[3], n // 2, "fp16", dims=((n // 2, 2),))))
    b.emit(v, Dropout(dst=_tile(b, t[4], n), src=_tile(b, sx, n), imm=0.3))
    b.emit(v, TensorReduce(dst=b.column(t[5], p), src=_tile(b, sx, n), reduce=Reduce.SUM))
    b.emit(v, Dropout(dst=_tile(b, t[6], n, "bf16"), src=_tile(b, sh, n, "bf16"), prob=prob))
    inf = t[7]
    _infinities_and_nans(b, sx, n, inf, t[5] + 4)
    b.emit(v, Dropout(dst=_tile(b, inf, n), src=_tile(b, inf, n), imm=0.5))


def _inputs(b: Builder, types: dict[str, str], n: int) -> dict:
    """Tiles of ``n`` elements in every partition, one a name of ``types`` (name -> type),
    each in its own SBUF words, loaded by queue dma0 from the HBM tensor of its name."""
    p = b.params.partitions
    tiles = {}
    for name, dtype in types.items():
        tiles[name] = _tile(b, b.sbuf(4 * n, name), n, dtype)
        b.emit("dma0", DmaCopy(dst=tiles[name], src=b.hbm(name, (p, n), dtype).ap((0, p))))
    return tiles


def _element_types(b: Builder) -> None:
    """Every element type the engines stream besides the float types of the other programs:
    fp8_e4m3fn, tf32 (its code at the word's top), int8, uint8, int32 and uint32 (by value:
    to the nearest fp32, and written as the nearest integer, saturated; a bitwise
    operation's as words), as inputs and
    destinations of TensorTensor, TensorScalar, TensorCopy, TensorReduce and
    TensorTensorScan on the vector engine, of the GpSimd engine's (and its Iota into each,
    the integer ones written as integers), of the scalar engine's Activation, TensorScalar
    and TensorCopy; memsets into them; results rounded stochastically into fp8_e4m3fn and
    tf32; narrow results at byte offsets inside words."""
    p, n = b.params.partitions, 8
    src = _inputs(b, {"x": "fp32", "e": "fp8_e4m3fn", "i": "int8", "t": "tf32", "j": "int32",
                      "u": "uint8"}, n)
    loaded = b.signal("dma0")
    x, e, i, t, j, u = (src[k] for k in "xeitju")
    sto = {"rounding": "stochastic"}

    def out(dtype: str, at: int = 0):
        return _tile(b, next(slots) + at, n, dtype)

    for eng in ("vector", "gpsimd", "scalar"):
        base = b.sbuf(4 * n * 30, f"{eng} results")
        slots = iter(range(base, base + 4 * n * 30, 4 * n))
        b.wait(eng, loaded)
        for a_ap, dtype, at in ((e, "fp32", 0), (t, "bf16", 2), (i, "fp16", 0), (j, "fp32", 0),
                                (x, "fp8_e4m3fn", 3), (x, "tf32", 0), (x, "int8", 1),
                                (e, "int32", 0), (t, "uint32", 0), (x, "uint8", 2),
                                (u, "bf16", 0)):
            b.emit(eng, TensorCopy(dst=out(dtype, at), src=a_ap))
        b.emit(eng, TensorScalar(dst=out("int8", 2), src=t, op0=VectorOp.MULTIPLY, imm0=40.0))
        b.emit(eng, TensorScalar(dst=out("uint8", 1), src=u, op0=VectorOp.MULTIPLY, imm0=2.1))
        b.emit(eng, TensorScalar(dst=out("tf32"), src=x, op0=VectorOp.ADD, imm0=1.0 / 3.0,
                                 **sto))
        b.emit(eng, TensorScalar(dst=out("fp8_e4m3fn", 1), src=i, op0=VectorOp.MULTIPLY,
                                 imm0=0.37, **sto))
        if eng == "scalar":
            exp = b.function("exp")
            b.emit(eng, Activation(dst=out("int8", 3), src=t, func=exp, scale=2.0))
            b.emit(eng, Activation(dst=out("fp8_e4m3fn"), src=i, func=exp, scale=0.05))
            b.emit(eng, Activation(dst=out("tf32"), src=e, func=exp, scale=0.5, **sto))
            continue
        b.emit(eng, TensorTensor(dst=out("fp8_e4m3fn", 2), a=i, b=t, op=VectorOp.MULTIPLY))
        b.emit(eng, TensorTensor(dst=out("tf32"), a=x, b=e, op=VectorOp.ADD))
        b.emit(eng, TensorTensor(dst=out("int8"), a=x, b=i, op=VectorOp.SUBTRACT))
        b.emit(eng, TensorTensor(dst=out("uint32"), a=j, b=x, op=VectorOp.BITWISE_XOR))
        for dtype, value, at in (("int8", 3.5, 1), ("tf32", -0.3, 0), ("fp8_e4m3fn", 1000.0, 2),
                                 ("int32", 2.5, 0), ("int8", -1e9, 0)):
            b.emit(eng, Memset(dst=out(dtype, at), value=value))
        if eng == "vector":
            b.emit(eng, TensorReduce(dst=b.column(next(slots), p), src=i, reduce=Reduce.SUM))
            b.emit(eng, TensorReduce(dst=_tile(b, next(slots) + 1, 1, "int8"), src=t,
                                     reduce=Reduce.MAX))
            b.emit(eng, TensorTensorScan(dst=out("fp8_e4m3fn", 1), a=t, b=i,
                                         op0=VectorOp.MULTIPLY, op1=VectorOp.ADD, imm=0.5))
        else:
            for dtype, base, pstep, step in (("int32", -7, 3, -2**30), ("uint32", 2**31 - 5, -1, 5),
                                             ("int8", 100, -30, 20), ("tf32", 2**24 + 1, 7, 3),
                                             ("fp8_e4m3fn", -20, 9, 40)):
                b.emit(eng, Iota(dst=out(dtype, 1 if dtype == "int8" else 0), base=base,
                                 pstep=pstep, step=step))


def _vector_transposes(b: Builder) -> None:
    """The vector engine's transpose, ``dst[f, p] = src[p, f]`` bit for bit: a whole tile of
    the scale's largest (its ``vector_transpose`` a side), one row and one column, a tile of
    5 x 7 from a strided source, in bf16 at a byte offset, fp8 at byte offsets, tf32 and
    int8 words as they are stored, SBUF to SBUF, SBUF to PSUM and PSUM to SBUF."""
    t = b.params.vector_transpose
    types = {"x": "fp32", "h": "bf16", "e": "fp8_e4m3", "t": "tf32", "i": "int8"}
    src = _inputs(b, types, t)
    v = "vector"
    b.wait(v, b.signal("dma0"))
    base = b.sbuf(4 * t * 8, "transposes")
    out = iter(range(base, base + 4 * t * 8, 4 * t))
    bank = b.psum_banks(1, "psum")[0]

    def tile(space: str, dtype: str, offset: int, parts: int, free: int, step: int = 1):
        return b.tile(space, dtype, offset, parts, ((free, step),))

    x, h = src["x"], src["h"]
    b.emit(v, Transpose(dst=tile("sbuf", "fp32", next(out), t, t), src=x))
    b.emit(v, Transpose(dst=tile("psum", "bf16", bank + 2, t, t), src=h))
    b.emit(v, Transpose(dst=tile("sbuf", "bf16", next(out) + 2, t, t),
                        src=tile("psum", "bf16", bank + 2, t, t)))
    b.emit(v, Transpose(dst=tile("sbuf", "fp32", next(out), t, 1),
                        src=tile("sbuf", "fp32", x.offset, 1, t)))
    b.emit(v, Transpose(dst=tile("sbuf", "fp32", next(out), 1, t),
                        src=tile("sbuf", "fp32", x.offset, t, 1)))
    b.emit(v, Transpose(dst=tile("sbuf", "fp8_e4m3", next(out) + 3, 7, 5),
                        src=tile("sbuf", "fp8_e4m3", src["e"].offset + 1, 5, 7, 2)))
    for name in ("t", "i"):
        dtype = types[name]
        b.emit(v, Transpose(dst=tile("sbuf", dtype, next(out) + (1 if name == "i" else 0),
                                     t, t), src=src[name]))


def _matmuls(b: Builder) -> None:
    """The tensor engine: bf16, a double-rate fp8 tile of the array's rows (two partitions
    to a PE row) accumulated onto the bf16 result, fp32 with a strided moving tile and fewer
    rows than the array, stationaries at byte offsets inside words, and (where the array has
    it) tf32, its codes at the top of 32-bit words, accumulated onto the bf16 and fp8
    result."""
    p, r, c = b.params.partitions, b.params.rows, b.params.cols
    n = min(12, b.params.moving_max)
    x16 = b.hbm("x16", (p, 2 * n), "bf16")
    x8 = b.hbm("x8", (p, 2 * n), "fp8_e4m3")
    x32 = b.hbm("x32", (p, 2 * n), "fp32")
    s16, s8, s32 = b.sbuf(4 * n, "x16"), b.sbuf(2 * n, "x8"), b.sbuf(8 * n, "x32")
    bank0, bank1 = b.psum_banks(2, "psum")
    copies = [(x16, s16, "bf16"), (x8, s8, "fp8_e4m3"), (x32, s32, "fp32")]
    tf32 = "tf32" in b.params.formats
    if tf32:
        copies.append((b.hbm("xt", (p, 2 * n), "tf32"), b.sbuf(8 * n, "xt"), "tf32"))
    for q, (t, at, dt) in enumerate(copies):
        b.emit(f"dma{q}", DmaCopy(dst=_tile(b, at, 2 * n, dt), src=t.ap((0, p))))
    b.wait("tensor", *(b.signal(f"dma{q}") for q in range(len(copies))))
    t = "tensor"
    m16, m8 = c - 2, c - 2
    b.emit(t, LoadStationary(src=b.tile("sbuf", "bf16", s16 + 2, r, ((m16, 1),))))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank0, m16, ((n, 1),)),
                             src=b.tile("sbuf", "bf16", s16 + 2 * c, r, ((n, 1),))))
    k8 = min(r, p)
    b.emit(t, LoadStationary(src=b.tile("sbuf", "fp8_e4m3", s8 + 3, k8, ((m8, 1),))))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank0, m8, ((n, 1),)),
                             src=b.tile("sbuf", "fp8_e4m3", s8 + n, k8, ((n, 1),)),
                             accumulate=True))
    k32 = r - 3
    b.emit(t, LoadStationary(src=b.tile("sbuf", "fp32", s32, k32, ((c, 1),))))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank1, c, ((n, 1),)),
                             src=b.tile("sbuf", "fp32", s32 + 4, k32, ((n, 2),))))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank1, c, ((n, 1),)),
                             src=b.tile("sbuf", "fp32", s32, k32, ((n, 1),)),
                             accumulate=True))
    if tf32:
        st = copies[3][1]
        b.emit(t, LoadStationary(src=b.tile("sbuf", "tf32", st + 4, r, ((m16, 1),))))
        b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank0, m16, ((n, 1),)),
                                 src=b.tile("sbuf", "tf32", st + 4 * c, r, ((n, 1),)),
                                 accumulate=True))


def _matmul_tiles(b: Builder) -> None:
    """Stationaries at tile positions of the array's row and column tiling, each the smallest
    tile that holds it: a bf16 tile in the lower half of the rows and an fp8 one in the upper
    half, both on the left columns, a bf16 one on the right columns (loaded, never
    multiplied: its PSUM partitions would start at its column), multiplies on the first two
    accumulated into one bank, then an fp32 tile on the last row group (replacing the lower
    bf16 one), a bf16 tile of the array's width on the second row group (replacing the fp8
    and the right one), and multiplies on both, the fp32 tile's twice, around the other's
    load (the tiles hold disjoint rows, so the fp32 tile stays)."""
    p, r, c = b.params.partitions, b.params.rows, b.params.cols
    n = min(12, b.params.moving_max)
    half, quarter = r // 2, r // 4
    x16 = b.hbm("x16", (p, 4 * n), "bf16")
    x8 = b.hbm("x8", (p, 2 * n), "fp8_e4m3")
    x32 = b.hbm("x32", (p, 2 * n), "fp32")
    s16, s8, s32 = b.sbuf(8 * n, "x16"), b.sbuf(2 * n, "x8"), b.sbuf(8 * n, "x32")
    bank0, bank1 = b.psum_banks(2, "psum")
    copies = [(x16, s16, 4 * n, "bf16"), (x8, s8, 2 * n, "fp8_e4m3"),
              (x32, s32, 2 * n, "fp32")]
    for q, (t, at, size, dt) in enumerate(copies):
        b.emit(f"dma{q}", DmaCopy(dst=_tile(b, at, size, dt), src=t.ap((0, p))))
    b.wait("tensor", *(b.signal(f"dma{q}") for q in range(len(copies))))
    t = "tensor"

    def load(dt, at, k, m, row, col):
        b.emit(t, LoadStationary(src=b.tile("sbuf", dt, at, k, ((m, 1),)), row=row, col=col))

    def multiply(dt, at, k, m, bank, row, accumulate=False):
        b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank, m, ((n, 1),)),
                                 src=b.tile("sbuf", dt, at, k, ((n, 1),)), row=row,
                                 accumulate=accumulate))

    load("bf16", s16 + 2, half, half, half, 0)
    load("fp8_e4m3", s8 + 3, half, half - 1, 0, 0)
    load("bf16", s16 + 2 * n, half, half, 0, half)
    multiply("bf16", s16 + 4 * n, half, half, bank0, half)
    multiply("fp8_e4m3", s8 + n, half, half - 1, bank0, 0, accumulate=True)
    load("fp32", s32 + 4, quarter, quarter, r - quarter, 0)
    multiply("fp32", s32 + 4 * n, quarter, quarter, bank1, r - quarter)
    load("bf16", s16 + 6 * n, quarter, c - 2, quarter, 0)
    multiply("bf16", s16 + 2 * n + 2, quarter, c - 2, bank1, quarter, accumulate=True)
    multiply("fp32", s32, quarter, quarter, bank1, r - quarter, accumulate=True)


def _double_rows(b: Builder) -> None:
    """The tensor engine's fp8 double row (``[P, 2, free]`` operands, the pair axis holding
    the contraction's two halves): a stationary of the array's rows at a byte offset, its
    pairs an odd stride apart; an e4m3 moving tile, then an e5m2 one (the bytes of the same
    input) whose pair 1 lies before its pair 0 and whose columns are two free dimensions,
    accumulated; a double row of half the rows at the lower row group, multiplied; a plain
    fp8 tile (two partitions to a PE row) accumulated onto its result."""
    p, r, c = b.params.partitions, b.params.rows, b.params.cols
    n, half = min(12, b.params.moving_max), r // 2
    x8 = b.hbm("x8", (p, 6 * n), "fp8_e4m3")
    s8 = b.sbuf(6 * n, "x8")
    bank0, bank1 = b.psum_banks(2, "psum")
    b.emit("dma0", DmaCopy(dst=_tile(b, s8, 6 * n, "fp8_e4m3"), src=x8.ap((0, p))))
    b.wait("tensor", b.signal("dma0"))
    t = "tensor"

    def pairs(dt, at, k, stride, dims):
        return b.tile("sbuf", dt, s8 + at, k, ((2, stride),) + dims)

    def multiply(bank, m, src, **kw):
        b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank, m, ((n, 1),)), src=src,
                                 double_row=True, **kw))

    b.emit(t, LoadStationary(src=pairs("fp8_e4m3", 1, r, c + 3, ((c, 1),)), double_row=True))
    multiply(bank0, c, pairs("fp8_e4m3", 2 * c + 5, r, n + 1, ((n, 1),)))
    multiply(bank0, c, pairs("fp8_e5m2", 4 * n + 2, r, -(n + 2), ((2, n // 2 + 1),
                                                                 (n // 2, 1))),
             accumulate=True)
    b.emit(t, LoadStationary(src=pairs("fp8_e4m3", 3, half, c + 1, ((c - 1, 1),)), row=half,
                             double_row=True))
    multiply(bank1, c - 1, pairs("fp8_e4m3", 2, half, 3 * n, ((n, 1),)), row=half)
    b.emit(t, LoadStationary(src=b.tile("sbuf", "fp8_e4m3", s8 + 5, r, ((c - 1, 1),))))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank1, c - 1, ((n, 1),)),
                             src=b.tile("sbuf", "fp8_e4m3", s8 + 3 * n, r, ((n, 1),)),
                             accumulate=True))


def _transposes(b: Builder) -> None:
    """The tensor engine's transpose pass (``dst[f, p] = src[p, f]`` into PSUM, bit for bit)
    in every element type the core simulator transposes (the array's formats but MX), each
    type's results in a PSUM bank of its own: a tile of the array's rows and columns from
    SBUF, at a byte offset inside words for a sub-word type; a partial one (three rows fewer,
    three columns: one beat of the array's load) from a strided source, written at a byte
    offset inside words; the first two partitions of the first result's first five elements
    transposed back from PSUM (an odd column count, a partial beat). Then the results are
    used: the vector engine copies the first two to SBUF as fp32 (the types it reads), and
    the tensor engine loads the partial one from PSUM as a stationary and multiplies it by a
    moving tile of its type, every type's product accumulated into one shared bank (int32
    beside fp32)."""
    p, r, c = b.params.partitions, b.params.rows, b.params.cols
    types = [d for d in b.params.formats if d in isa.DTYPES and d not in isa.MX_DTYPES]
    banks = b.psum_banks(len(types) + 1, "psum")
    products, k2, m2, n = banks[-1], r - 3, 3, 4
    free = 1 + c + 2 * m2 + n
    t = "tensor"
    inputs = []
    for dt in types:
        x = b.hbm(f"x_{dt}", (p, free), dt)
        at = b.sbuf(isa.DTYPES[dt][1] * free, f"x_{dt}")
        b.emit("dma0", DmaCopy(dst=_tile(b, at, free, dt), src=x.ap((0, p))))
        inputs.append(at)
    b.wait(t, b.signal("dma0"))
    first = set()
    for dt, at, bank in zip(types, inputs, banks[:-1], strict=True):
        size = isa.DTYPES[dt][1]
        one = b.tile("psum", dt, bank, c, ((r, 1),))
        part = b.tile("psum", dt, bank + 32 + size % 4, m2, ((k2, 1),))
        b.emit(t, Transpose(dst=one, src=b.tile("sbuf", dt, at + size, r, ((c, 1),))))
        b.emit(t, Transpose(dst=part, src=b.tile("sbuf", dt, at + size * (1 + c), k2,
                                                 ((m2, 2),))))
        b.emit(t, Transpose(dst=b.tile("psum", dt, bank + 56, 5, ((2, 1),)),
                            src=b.tile("psum", dt, bank, 2, ((5, 1),))))
        integer = dt == "int8"
        b.emit(t, LoadStationary(src=part))
        b.emit(t, MultiplyMoving(
            dst=b.tile("psum", "int32" if integer else "fp32", products + 32 * integer, k2,
                       ((n, 1),)),
            src=b.tile("sbuf", dt, at + size * (1 + c + 2 * m2), m2, ((n, 1),)),
            accumulate=integer in first))
        first.add(integer)
        if dt in ENGINE_FORMATS:
            b.wait("vector", b.signal(t))
            out = b.sbuf(4 * (r + k2), f"copy_{dt}")
            b.emit("vector", TensorCopy(dst=b.tile("sbuf", "fp32", out, c, ((r, 1),)), src=one))
            b.emit("vector", TensorCopy(dst=b.tile("sbuf", "fp32", out + 4 * r, m2,
                                                   ((k2, 1),)), src=part))


def _mx_matmuls(b: Builder) -> None:
    """The tensor engine's MX quads with their E8M0 scales (an array with MX formats): an
    mxfp8 tile whose scale operand has one partition per group of 8, a multiply; an mxfp4
    tile of fewer rows than the array at a byte offset inside words, its scale with the
    tile's partitions at byte offsets inside words, an mxfp8 and a strided mxfp4 moving tile
    accumulated onto the first result."""
    p, r, c = b.params.partitions, b.params.rows, b.params.cols
    if "mxfp8" not in b.params.formats or "mxfp4" not in b.params.formats:
        raise KernelError(f"{b.params.name}'s array has no mxfp8 and mxfp4 formats")
    n = min(12, b.params.moving_max)
    groups = -(-r // isa.MX_GROUP_PARTITIONS)
    x8 = b.hbm("x8", (p, 2 * n), "mxfp8_x4")
    x4 = b.hbm("x4", (p, 2 * n + 2), "mxfp4_x4")
    sc = b.hbm("sc", (p, 2 * n + 4), "uint8")  # the DMA moves one element at a time
    s8, s4, ss = b.sbuf(8 * n, "x8"), b.sbuf(4 * n + 4, "x4"), b.sbuf(2 * n + 4, "scales")
    bank = b.psum_banks(1, "psum")[0]
    for q, (t, at, dt, free) in enumerate(((x8, s8, "mxfp8_x4", 2 * n),
                                           (x4, s4, "mxfp4_x4", 2 * n + 2),
                                           (sc, ss, "uint8", 2 * n + 4))):
        b.emit(f"dma{q}", DmaCopy(dst=_tile(b, at, free, dt), src=t.ap((0, p))))
    b.wait("tensor", *(b.signal(f"dma{q}") for q in range(3)))
    t = "tensor"

    def scale(offset, partitions, free, step=1):
        return b.tile("sbuf", "uint8", ss + offset, partitions, ((free, step),))

    b.emit(t, LoadStationary(src=b.tile("sbuf", "mxfp8_x4", s8, r, ((c, 1),)),
                             scale=scale(0, groups, c)))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank, c, ((n, 1),)),
                             src=b.tile("sbuf", "mxfp8_x4", s8 + 4 * c, r, ((n, 1),)),
                             scale=scale(c, groups, n)))
    k4, m4 = r - 3, c - 2
    b.emit(t, LoadStationary(src=b.tile("sbuf", "mxfp4_x4", s4 + 2, k4, ((m4, 1),)),
                             scale=scale(n + 9, k4, m4)))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank, m4, ((n, 1),)),
                             src=b.tile("sbuf", "mxfp8_x4", s8 + 4 * n, k4, ((n, 1),)),
                             scale=scale(n + 3, k4, n), accumulate=True))
    b.emit(t, MultiplyMoving(dst=b.tile("psum", "fp32", bank, m4, ((n, 1),)),
                             src=b.tile("sbuf", "mxfp4_x4", s4, k4, ((n, 2),)),
                             scale=scale(0, k4, n, 2), accumulate=True))


def _deadlock(b: Builder) -> None:
    """The vector engine waits for a count no stream will reach."""
    p, n = b.params.partitions, 4
    x = b.hbm("x", (p, n), "fp32")
    sx = b.sbuf(4 * n, "x")
    b.emit("dma0", DmaCopy(dst=_tile(b, sx, n), src=x.ap((0, p))))
    e = b.signal("dma0")
    b.emit("vector", SemWait(sem=e.sem, value=e.value + 1))
    b.emit("vector", Memset(dst=_tile(b, sx, n), value=1.0))


def _kernel(name: str, shape: dict, dtype: str):
    """A kernel of :data:`kernels.KERNELS` at one shape."""
    def build(b: Builder) -> None:
        kernel = KERNELS[name]
        kernel.build(b, *(shape[k] for k in kernel.dims), dtype)
    build.__doc__ = f"The library's {name} kernel, {shape}, {dtype}."
    return build


#: name -> (builder function, whether the program must deadlock)
PROGRAMS = {"vector_add": (_vector_add, False), "vector_ops": (_vector_ops, False),
            "vector_casts": (_vector_casts, False), "activations": (_activations, False),
            "scalar_ops": (_scalar_ops, False), "gpsimd": (_gpsimd, False),
            "matmuls": (_matmuls, False), "matmul_tiles": (_matmul_tiles, False),
            "double_rows": (_double_rows, False),
            "transposes": (_transposes, False),
            # the KV cache's prefill: K transposed on the tensor engine, D the array's rows
            "kv_prefill_bf16": (_kernel("kv_prefill", {"B": 2, "KVH": 1, "D": 8, "S": 16},
                                        "bf16"), False),
            "deadlock": (_deadlock, True),
            "residual_add": (_kernel("residual_add", {"R": 32, "C": 24}, "fp32"), False),
            "residual_add_bf16": (_kernel("residual_add", {"R": 16, "C": 40}, "bf16"),
                                  False),
            "gemm": (_kernel("gemm", {"M": 8, "K": 16, "N": 16}, "bf16"), False),
            # K = 15 on 8 rows: two single-row K-tiles (8 and 7); K = 40: two double rows
            # (K-tiles of 16) and one single-row tile of 8
            "gemm_fp8": (_kernel("gemm", {"M": 8, "K": 15, "N": 16}, "fp8_e4m3"), False),
            "gemm_fp8_double": (_kernel("gemm", {"M": 8, "K": 40, "N": 16}, "fp8_e4m3"),
                                False),
            "gemm_bias_gelu": (_kernel("gemm_bias_gelu", {"M": 8, "K": 16, "N": 16}, "bf16"),
                               False),
            "softmax": (_kernel("softmax", {"R": 16, "C": 24}, "fp32"), False),
            "rmsnorm": (_kernel("rmsnorm", {"R": 16, "C": 24}, "bf16"), False),
            "cross_entropy_fp32": (_kernel("cross_entropy", {"R": 16, "C": 24}, "fp32"),
                                   False),
            "gelu_backward_fp32": (_kernel("gelu_backward", {"R": 16, "C": 24}, "fp32"),
                                   False)}

#: Inputs of two types in one instruction and scalar operands of every type: the hand-written
#: program and the library's bf16 kernels that mix bf16 with fp32 operands.
PROGRAMS |= {"mixed_types": (_mixed_types, False),
             **{name: (_kernel(name, {"R": 16, "C": 24}, "bf16"), False)
                for name in ("cross_entropy", "gelu_backward", "grad_accumulate", "swiglu")}}

#: Two-operation TensorScalar: the hand-written program and the library's kernels that use it
#: (the backward passes of cross-entropy and SwiGLU, sampling), in both their types.
PROGRAMS |= {"two_ops": (_two_ops, False), "scans": (_scans, False),
             "stochastic": (_stochastic, False), "element_types": (_element_types, False),
             "vector_transposes": (_vector_transposes, False),
             "dynamic_copies": (_dynamic_copies, False), "shuffles": (_shuffles, False),
             "range_selects": (_range_selects, False), "top8s": (_top8s, False),
             "matches": (_matches, False), "sequence_bounds": (_sequence_bounds, False),
             "indirect_dmas": (_indirect_dmas, False), "draws": (_draws, False),
             "dmas_at_one_index": (_dmas_at_one_index, False),
             "converting_dmas": (_converting_dmas, False),
             "dma_sums": (_dma_sums, False),
             "affine_selects": (_affine_selects, False),
             "nonzeros": (_nonzeros, False),
             **{f"{name}_{dtype}": (_kernel(name, {"R": 16, "C": 24}, dtype), False)
                for name in ("cross_entropy_backward", "swiglu_backward")
                for dtype in ("fp32", "bf16")},
             **{f"sample_{dtype}": (_kernel("sample", {"B": 16, "V": 24, "K": 4}, dtype),
                                    False) for dtype in ("fp32", "bf16")},
             # top-24 of 32: a vector stream of 770 instructions, three times round its
             # sequencer's ring of 256, fed by the host as it runs
             "sample_ring": (_kernel("sample", {"B": 32, "V": 32, "K": 24}, "bf16"), False)}


#: The rest of the library at small shapes of the simulation scale: attention (causal too)
#: over two key blocks, token-major and decoding, with D the array's rows; the norms'
#: backward passes over two row tiles, the second partial (their weight gradients folded
#: onto the array's rows first); rope and the KV cache's append in the scale's SBUF;
#: LayerNorm, Adam, the loss's row max, the naive GEMM and the GEMM of lhs as rows.
PROGRAMS |= {
    "attention": (_kernel("attention", {"B": 1, "S": 24, "D": 8}, "bf16"), False),
    "attention_causal": (_kernel("attention_causal", {"B": 1, "S": 24, "D": 8}, "fp32"),
                         False),
    # token-major: two sequences of two heads, each tile turned by the array, copied out of
    # PSUM by the scalar engine
    "attention_rows": (_kernel("attention_rows", {"H": 2, "B": 2, "S": 12, "D": 8}, "bf16"),
                       False),
    "attention_rows_causal": (_kernel("attention_rows_causal",
                                      {"H": 3, "B": 1, "S": 12, "D": 8}, "fp32"), False),
    "decode_attention": (_kernel("decode_attention",
                                 {"B": 1, "H": 2, "KVH": 1, "S": 24, "D": 8}, "bf16"), False),
    "kv_append": (_kernel("kv_append", {"B": 2, "KVH": 2, "D": 8, "S": 24}, "bf16"), False),
    "rope": (_kernel("rope", {"T": 16, "H": 2, "D": 8}, "bf16"), False),
    **{name: (_kernel(name, shape, dtype), False)
       for name, shape, dtype in (("rmsnorm_backward", {"R": 20, "C": 8}, "bf16"),
                                  ("layernorm_backward", {"R": 20, "C": 8}, "fp32"),
                                  ("layernorm", {"R": 16, "C": 8}, "bf16"),
                                  ("adam", {"R": 16, "C": 8}, "fp32"),
                                  ("logits_max", {"R": 16, "C": 24}, "bf16"))},
    "gemm_naive": (_kernel("gemm_naive", {"M": 8, "K": 16, "N": 16}, "fp32"), False),
    # lhs as rows: its transposes through the array, the bias per column added in PSUM
    "gemm_rows": (_kernel("gemm_rows", {"M": 12, "K": 24, "N": 16}, "bf16"), False),
    "gemm_rows_bias_gelu": (_kernel("gemm_rows_bias_gelu", {"M": 8, "K": 16, "N": 16},
                                    "bf16"), False)}

#: Programs of the arrays with MX formats alone: name -> builder function (their builder
#: refuses another core with a KernelError).
MX_PROGRAMS = {"mx_matmuls": _mx_matmuls}

#: The name of the seeded random program (:func:`sim.tb.core_random.random_program`).
RANDOM = "random"

def kernel_shape(name: str, params: CoreParams) -> dict[str, int]:
    """The shape a kernel of :data:`kernels.KERNELS` runs at on the core at simulation
    scale: two tiles of every partition along its split dimension, the array's rows along a
    head's dimension ``D`` (the contraction of the attention kernels' and the KV cache's
    transposes, at most the rows), 24 along the others."""
    kernel = KERNELS[name]
    return {d: 2 * params.partitions if d == kernel.split else
            min(24, params.rows) if d == "D" else 24 for d in kernel.dims}


def program_names() -> list[str]:
    """Every name :func:`build_program` takes."""
    return list(PROGRAMS) + list(MX_PROGRAMS) + [RANDOM] + [k for k in KERNELS
                                                            if k not in PROGRAMS]


def must_deadlock(name: str) -> bool:
    return name in PROGRAMS and PROGRAMS[name][1]


def build_program(params: CoreParams, name: str, seed: int = 0) -> Program:
    """The program ``name`` for a core of ``params``: one of :data:`PROGRAMS` (or
    :data:`MX_PROGRAMS`), the random
    program of ``seed`` (:data:`RANDOM`), or a kernel of :data:`kernels.KERNELS` at
    :func:`kernel_shape` in its first type."""
    if name in PROGRAMS or name in MX_PROGRAMS:
        b = Builder(params)
        (PROGRAMS[name][0] if name in PROGRAMS else MX_PROGRAMS[name])(b)
        return b.program
    if name == RANDOM:
        return random_program(params, seed)
    if name in KERNELS:
        b = Builder(params)
        _kernel(name, kernel_shape(name, params), KERNELS[name].dtypes[0])(b)
        return b.program
    raise ValueError(f"program must be one of {', '.join(program_names())}, not {name!r}")


def random_inputs(program: Program, seed: int) -> np.ndarray:
    """The program's HBM with every tensor filled from ``seed``: normal values in the
    tensor's type (positive ones for names starting with ``s``; tf32 as fp32 words with
    their low 13 bits zero, as the instruction set stores it; int32 and uint32 20 times
    them, to the nearest integer, modulo the type's range; int8 any value); MX quads of
    random codes (mxfp8: normal values as float8_e4m3fn, no NaN; mxfp4: any code) and
    ``uint8`` E8M0 scales within 2**-8 .. 2**8 of 1."""
    rng = np.random.default_rng(seed)
    hbm = np.zeros(program.hbm_bytes, dtype=np.uint8)
    for t in program.tensors.values():
        v = rng.standard_normal(t.shape)
        if t.name.startswith("s"):
            v = np.abs(v) + 0.5
        if t.dtype == "uint8":
            raw = rng.integers(119, 136, t.shape, dtype=np.uint8).tobytes()
        elif t.dtype == "mxfp8_x4":  # code i in byte i of each element
            quad = rng.standard_normal((*t.shape, isa.MX_QUAD))
            raw = quad.astype(ml_dtypes.float8_e4m3fn).tobytes()
        elif t.dtype == "mxfp4_x4":
            raw = rng.integers(0, 1 << 16, t.shape, dtype=np.uint16).tobytes()
        elif t.dtype == "int8":
            raw = rng.integers(-128, 128, t.shape, dtype=np.int8).tobytes()
        elif t.dtype in ("int32", "uint32"):
            raw = np.rint(20 * v).astype(np.int64).astype(np.dtype(t.dtype)).tobytes()
        elif t.dtype == "tf32":
            raw = (v.astype(np.float32).view(np.uint32)
                   & np.uint32(~((1 << TF32_SHIFT) - 1) & 0xFFFFFFFF)).tobytes()
        else:
            raw = v.astype(ML_DTYPES[t.dtype]).tobytes()
        hbm[t.offset:t.offset + len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    return hbm


def throughput_program(params: CoreParams, instructions: int, n: int) -> Program:
    """Every engine at once, ``instructions`` compute instructions in each engine's stream
    (no DMA: the AXI model stays idle): the vector and GpSimd engines add fp32 tiles of
    ``n`` elements of every partition, the scalar engine applies exp to one, and the tensor
    engine loads a bf16 stationary of the array's size once and multiplies moving tiles of
    ``moving_max`` columns by it, accumulating into PSUM. Each engine first waits for the
    vector engine's memsets of its operands."""
    b = Builder(params)
    r, c, moving = params.rows, params.cols, params.moving_max
    a, k, d, e, f, g = (b.sbuf(4 * n, name) for name in "akdefg")
    w = b.sbuf(2 * max(c, moving), "w")
    bank = b.psum_banks(1, "psum")[0]
    b.emit("vector", Memset(dst=_tile(b, a, n), value=1.5))
    b.emit("vector", Memset(dst=_tile(b, k, n), value=-0.25))
    b.emit("vector", Memset(dst=_tile(b, w, max(c, moving), "bf16"), value=0.5))
    ready = b.signal("vector")
    for stream in ("gpsimd", "scalar", "tensor"):
        b.wait(stream, ready)
    for i in range(instructions):
        dst, src = (d, a) if i % 2 == 0 else (a, d)
        b.emit("vector", TensorTensor(dst=_tile(b, dst, n), a=_tile(b, src, n),
                                      b=_tile(b, k, n), op=VectorOp.ADD))
        dst, src = (e, k) if i % 2 == 0 else (f, e)
        b.emit("gpsimd", TensorTensor(dst=_tile(b, dst, n), a=_tile(b, src, n),
                                      b=_tile(b, k, n), op=VectorOp.ADD))
        b.emit("scalar", Activation(dst=_tile(b, g, n), src=_tile(b, k, n),
                                    func=b.function("exp")))
        if i == 0:
            b.emit("tensor", LoadStationary(src=b.tile("sbuf", "bf16", w, r, ((c, 1),))))
        else:
            b.emit("tensor", MultiplyMoving(dst=b.tile("psum", "fp32", bank, c, ((moving, 1),)),
                                            src=b.tile("sbuf", "bf16", w, r, ((moving, 1),)),
                                            accumulate=True))
    return b.program
