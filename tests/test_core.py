"""The core simulator: rules with named errors, semaphores, timing against the cycle model."""

import json
import math

import numpy as np
import pytest

from hdl.core.isa import (
    AP,
    Activation,
    AffineSelect,
    DmaCompute,
    DmaCopy,
    Dropout,
    FindIndex8,
    GatherFlattened,
    LoadStationary,
    Max8,
    Memset,
    MultiplyMoving,
    NonzeroWithCount,
    RangeSelect,
    SemSignal,
    SemWait,
    StreamShuffle,
    TensorCopy,
    TensorCopyDynamic,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TensorTensorScan,
    Transpose,
)
from hdl.numerics.formats import BF16
from hdl.params import core_params
from hdl.tensor.params import SystolicParams
from hdl.vector.ops import Reduce, VectorOp
from sim.core import Core, Program, ProgramError
from sim.golden import numerics, systolic_cycles
from specs.loader import load


def sbuf(p0, n, off, free, dtype="fp32"):
    return AP("sbuf", dtype, p0, n, off, ((free, 1),))


def psum(p0, n, off, free):
    return AP("psum", "fp32", p0, n, off, ((free, 1),))


def program(**streams):
    prog = Program()
    prog.tensor("x", (128, 1024), "fp32")
    prog.streams = {k: list(v) for k, v in streams.items()}
    return prog


@pytest.mark.parametrize("fmt, k, m, n", [("bf16", 128, 128, 512), ("bf16", 64, 128, 32),
                                          ("fp32", 128, 96, 512), ("fp8_e4m3", 1, 1, 1)])
def test_tensor_timing_is_the_cycle_model(trn1, fmt, k, m, n):
    pairs = 5
    ins = [LoadStationary(src=sbuf(0, k, 0, m, fmt)),
           MultiplyMoving(dst=psum(0, m, 0, n), src=sbuf(0, k, 4096, n, fmt))] * pairs
    r = Core(trn1).run(program(tensor=ins), timing_only=True, trace=True)
    array = SystolicParams(rows=128, cols=128, formats=(fmt,),
                           double_rate=(fmt,) if fmt == "fp8_e4m3" else (),
                           quarter_rate=(fmt,) if fmt == "fp32" else ())  # the spec's rates
    sched = systolic_cycles.schedule(array, [systolic_cycles.Load(k, m, fmt),
                                             systolic_cycles.Multiply(n, fmt=fmt)] * pairs)
    clock = trn1.clock("tensor")
    starts = [round(e["ts"] * 1e-6 * clock) for e in r.events if e["name"] == "matmul"]
    assert starts == list(sched.accepted[1::2])
    assert round(r.time * clock) == sched.total  # the last output beat's cycle


def test_semaphore_latency_and_order(trn1):
    lat = trn1.semaphore_latency
    prog = program(vector=[Memset(dst=sbuf(0, 128, 0, 64), value=2.0), SemSignal(sem=0)],
                   scalar=[SemWait(sem=0, value=1),
                           TensorCopy(dst=sbuf(0, 128, 512, 64), src=sbuf(0, 128, 0, 64))])
    r = Core(trn1).run(prog, trace=True)
    memset, copy = (next(e for e in r.events if e["name"] == n) for n in ("memset", "copy"))
    assert copy["ts"] == pytest.approx(memset["ts"] + memset["dur"] + lat * 1e6)
    # vector: 60 + max(64, 64) cycles at 1.12 GHz, the spec's access start and interval
    assert memset["dur"] * 1e-6 == pytest.approx((60 + 64) / 1.12e9)


def test_dma_shares_bandwidth(trn1):
    src = AP("hbm", "fp32", 0, 128, 0, ((1024, 1),), pstride=4096)
    one = [DmaCopy(dst=sbuf(0, 128, 0, 1024), src=src)]
    two = {"dma0": one, "dma1": [DmaCopy(dst=sbuf(0, 128, 8192, 1024), src=src)]}
    t1 = Core(trn1).run(program(dma0=one), timing_only=True).time
    t2 = Core(trn1).run(program(**two), timing_only=True).time
    # 128 packets of one 4 KiB row each, 150 B of overhead a packet (trn1's spec), on the
    # core's 16 engines at 17 B/ns after 1.3 us
    bandwidth, latency = 16 * 17e9, 1.3e-6
    assert trn1.dma_bandwidth == bandwidth and trn1.dma_latency == latency
    assert t1 == pytest.approx(latency + 128 * (4096 + 150) / bandwidth)
    assert t2 == pytest.approx(latency + 2 * 128 * (4096 + 150) / bandwidth)


@pytest.mark.parametrize(("src", "dst", "charged"), [
    # 256 B a partition: 128 packets, each at the packet minimum (2,400 B in trn1's spec)
    (AP("hbm", "bf16", 0, 128, 0, ((128, 1),), pstride=16384), sbuf(0, 128, 0, 128, "bf16"),
     128 * 2400),
    # whole rows that follow on in HBM, copied within HBM: one packet
    (AP("hbm", "fp32", 0, 64, 0, ((1024, 1),), pstride=4096),
     AP("hbm", "fp32", 0, 64, 1 << 20, ((1024, 1),), pstride=4096), 64 * 4096 + 150),
    # a column of HBM (element stride 512) into SBUF rows: every element its own packet
    (AP("hbm", "fp32", 0, 128, 0, ((8, 512),), pstride=4), sbuf(0, 128, 0, 8), 128 * 8 * 2400),
    # the SBUF side's rows cut in two runs by a stride: the shorter runs make the packets
    (AP("hbm", "fp32", 0, 128, 0, ((2, 1024), (1024, 1)), pstride=8192),
     AP("sbuf", "fp32", 0, 128, 0, ((2, 2048), (1024, 1))), 256 * (4096 + 150)),
])
def test_dma_cost_per_packet(trn1, src, dst, charged):
    prog = Program()
    prog.tensor("x", (512, 4096), "fp32")  # 8 MiB of HBM
    prog.streams = {"dma0": [DmaCopy(dst=dst, src=src)]}
    t = Core(trn1).run(prog, timing_only=True).time
    assert t == pytest.approx(1.3e-6 + charged / (16 * 17e9))


@pytest.mark.parametrize(("src", "dst", "charged"), [
    # [1024, 128] bf16 in HBM into SBUF [128, 1024]: 64 blocks of 128 x 16, at 90 %
    (AP("hbm", "bf16", 0, 128, 0, ((1024, 128),), pstride=2), sbuf(0, 128, 0, 1024, "bf16"),
     math.ceil(64 * 128 * 16 * 2 / 0.9)),
    # 40 partitions of 20 fp32: two blocks, each moved whole
    (AP("hbm", "fp32", 0, 40, 0, ((20, 40),), pstride=4), sbuf(0, 40, 0, 20),
     math.ceil(2 * 128 * 16 * 4 / 0.9)),
    # one byte an element: no transpose, a packet each (2,400 B)
    (AP("hbm", "uint8", 0, 128, 0, ((8, 128),), pstride=1), sbuf(0, 128, 0, 8, "uint8"),
     128 * 8 * 2400),
])
def test_dma_transpose_cost_where_the_engines_transpose(src, dst, charged):
    """trn2's DMA engines transpose (its spec: 90 % of a copy's throughput, in blocks of 128
    partitions by 16 elements); trn1's move such a copy element by element."""
    from hdl.params import core_params
    from specs.loader import load

    trn2 = core_params(load("trn2"))
    prog = Program()
    prog.tensor("x", (512, 4096), "fp32")
    prog.streams = {"dma0": [DmaCopy(dst=dst, src=src)]}
    t = Core(trn2).run(prog, timing_only=True).time
    assert t == pytest.approx(trn2.dma_latency + charged / trn2.dma_bandwidth)
    trn1 = core_params(load("trn1"))
    t = Core(trn1).run(prog, timing_only=True).time
    assert t == pytest.approx(trn1.dma_latency + src.partitions * src.free * 2400
                              / trn1.dma_bandwidth)


@pytest.mark.parametrize("op, fn", [(VectorOp.GREATER_EQUAL, np.greater_equal),
                                    (VectorOp.LESS, np.less), (VectorOp.IS_EQUAL, np.equal),
                                    (VectorOp.NOT_EQUAL, np.not_equal)])
def test_affine_select_keeps_where_its_comparison_with_zero_holds(trn1, op, fn, seed):
    """GpSimd's AffineSelect against numpy: src where op(base + p pstep + i step, 0), else
    the fill; into bf16 as ml_dtypes rounds."""
    import ml_dtypes

    x = np.random.default_rng(seed).standard_normal((16, 24)).astype(np.float32)
    src, dst = sbuf(0, 16, 0, 24), sbuf(0, 16, 1024, 24, "bf16")
    ins = AffineSelect(dst=dst, base=-5, pstep=2, step=-1, src=src, op=op, fill=-2.5)
    out = _run(trn1, "gpsimd", [ins], {src: x}, [dst])
    v = -5 + 2 * np.arange(16)[:, None] - np.arange(24)[None, :]
    want = np.where(fn(v, 0), x, np.float32(-2.5)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out[dst].view(np.uint16).reshape(16, 24), want.view(np.uint16))


@pytest.mark.parametrize("dtype", ["fp32", "int32"])
def test_nonzero_positions_and_count_in_each_gpsimd_cores_first_partition(trn3, dtype, seed):
    """GpSimd's NonzeroWithCount against numpy: in partitions 0, 16, 32 and 48 of 64 the
    positions of the nonzero elements (-0.0 is zero, a NaN is not) plus the offset, the
    padding, the count last (NKI's example: [0, 1, 1, 0, 0, 1, 0, 0] from 16 gives
    [17, 18, 21, -1, ..., 3]); every other partition keeps what it held."""
    rng = np.random.default_rng(seed)
    t = 12
    x = (rng.random((64, t)) < 0.4) * rng.integers(-9, 9, (64, t))
    x = x.astype(np.float32) if dtype == "fp32" else x.astype(np.int32)
    x[0, :8] = [0, 1, 1, 0, 0, 1, 0, 0]
    x[0, 8:] = 0
    if dtype == "fp32":
        x[16, :3] = [-0.0, np.nan, np.inf]
    held = rng.integers(-99, 99, (64, t + 1)).astype(np.int32)
    src, dst = sbuf(0, 64, 0, t, dtype), sbuf(0, 64, 1024, t + 1, "int32")
    ins = NonzeroWithCount(dst=dst, src=src, offset=16, padding=-1)
    out = _run(trn3, "gpsimd", [ins], {src: x, dst: held}, [dst])[dst].view(np.int32)
    want = held.copy()
    for p in (0, 16, 32, 48):
        at = np.flatnonzero(x[p] != 0)
        want[p] = np.concatenate([at + 16, np.full(t - at.size, -1), [at.size]])
    assert np.array_equal(out.reshape(64, t + 1), want)
    assert list(want[0]) == [17, 18, 21] + [-1] * 9 + [3]


def test_nonzero_search_is_refused_where_the_rules_say(trn1, trn3):
    src, dst = sbuf(0, 32, 0, 8), sbuf(0, 32, 1024, 9, "int32")
    with pytest.raises(ProgramError, match="NeuronCore-v2\\) has no nonzero search"):
        Core(trn1).check(program(gpsimd=[NonzeroWithCount(dst=dst, src=src)]))
    with pytest.raises(ProgramError, match="dst one element longer"):
        Core(trn3).check(program(gpsimd=[NonzeroWithCount(dst=sbuf(0, 32, 1024, 8, "int32"),
                                                          src=src)]))


def test_a_dma_sums_its_sources_in_fp32_and_casts_once(trn1, seed):
    """DmaCompute against numpy: fp32 + bf16 + int32 (each widened by value) summed in fp32
    in that order, the total cast to bf16 once (ml_dtypes); the bytes charged are the three
    sources' as copies into dst, after one latency (the DMA rule)."""
    import ml_dtypes

    from sim.core import dma_seconds

    rng = np.random.default_rng(seed)
    a = rng.standard_normal((16, 20)).astype(np.float32)
    b = rng.standard_normal((16, 20)).astype(ml_dtypes.bfloat16)
    c = rng.integers(-1000, 1000, (16, 20)).astype(np.int32)
    ia, ib, ic = sbuf(0, 16, 0, 20), sbuf(0, 16, 128, 20, "bf16"), sbuf(0, 16, 256, 20, "int32")
    dst = sbuf(0, 16, 512, 20, "bf16")
    ins = DmaCompute(dst=dst, a=ia, b=ib, c=ic)
    out = _run(trn1, "dma2", [ins], {ia: a, ib: b, ic: c}, [dst])
    want = ((a + b.astype(np.float32)) + c.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out[dst].view(np.uint16).reshape(16, 20), want.view(np.uint16))
    latency, transfer = dma_seconds(trn1, ia, dst, (ib, ic))
    copies = sum(dma_seconds(trn1, s, dst)[1] for s in (ia, ib, ic))
    assert (latency, transfer) == (trn1.dma_latency, pytest.approx(copies))
    with pytest.raises(ProgramError, match="a DMA sums operands of one shape"):
        Core(trn1).check(program(dma0=[DmaCompute(dst=dst, a=ia, b=sbuf(0, 16, 128, 10,
                                                                        "bf16"))]))


def test_numeric_result_through_golden_models(trn1, seed):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((32, 8)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    ia, ib, total, top = (sbuf(0, 32, 0, 8), sbuf(0, 32, 512, 8), sbuf(0, 32, 1024, 8),
                          sbuf(0, 32, 2048, 1))
    out = _run(trn1, "vector", [TensorTensor(dst=total, a=ia, b=ib, op=VectorOp.ADD),
                                TensorReduce(dst=top, src=total, reduce=Reduce.MAX)],
               {ia: a, ib: b}, [total, top])
    assert np.array_equal(out[total].view(np.float32).reshape(32, 8), a + b)
    assert np.array_equal(out[top].view(np.float32), (a + b).max(axis=1))


@pytest.mark.parametrize("streams, rule", [
    ({"gpsimd": [Memset(dst=psum(0, 128, 0, 8), value=0.0)]},
     r"gpsimd\[0\] `memset dst=psum.fp32\[0:128\]@0x0\{8x1\} value=0.0`: engine reach: "
     r"the gpsimd engine cannot reach PSUM"),
    ({"tensor": [TensorCopy(dst=sbuf(0, 1, 0, 1), src=sbuf(0, 1, 0, 1))]},
     r"tensor\[0\] `copy .*`: engine: the tensor engine does not run TensorCopy"),
    ({"vector": [Memset(dst=sbuf(32, 64, 0, 8), value=0.0)]},
     r"vector\[0\] .*: partition start: a tile of 64 partitions cannot start at partition 32"),
    ({"vector": [Memset(dst=sbuf(0, 128, 192 * 1024 - 16, 8), value=0.0)]},
     r"SBUF bounds: dst spans bytes 196592 .. 196624 of a 196608-byte partition"),
    ({"vector": [Memset(dst=psum(0, 128, 16 * 1024, 1), value=0.0)]}, r"PSUM bounds"),
    ({"vector": [Memset(dst=sbuf(96, 64, 0, 8), value=0.0)]}, r"partition bounds"),
    ({"tensor": [LoadStationary(src=sbuf(0, 128, 0, 129, "bf16"))]}, r"tensor\[0\].*tile limit"),
    ({"tensor": [LoadStationary(src=sbuf(0, 128, 0, 128, "bf16")),
                 MultiplyMoving(dst=psum(0, 128, 0, 513), src=sbuf(0, 128, 0, 513, "bf16"))]},
     r"tensor\[1\].*tile limit: moving free size 513 exceeds 512"),
    ({"tensor": [LoadStationary(src=sbuf(0, 128, 0, 128, "bf16")),
                 MultiplyMoving(dst=psum(0, 128, 1024, 512), src=sbuf(0, 128, 0, 512, "bf16"))]},
     r"tensor\[1\].*PSUM bank overflow: dst spans bytes 1024 .. 3071, across the 2048-byte "
     r"bank boundary at 2048"),
    # a bf16 transpose's 2-byte elements: 128 of them from byte 1,920 reach past the bank
    ({"tensor": [Transpose(dst=AP("psum", "bf16", 0, 128, 1920, ((128, 1),)),
                           src=sbuf(0, 128, 0, 128, "bf16"))]},
     r"tensor\[0\].*PSUM bank overflow: dst spans bytes 1920 .. 2175, across the 2048-byte "
     r"bank boundary at 2048"),
    ({"tensor": [MultiplyMoving(dst=psum(0, 128, 0, 8), src=sbuf(0, 128, 0, 8, "bf16"))]},
     r"tensor\[0\].*stationary: no stationary tile is loaded"),
    ({"tensor": [LoadStationary(src=sbuf(0, 128, 0, 128, "fp16")),
                 MultiplyMoving(dst=psum(0, 128, 0, 8), src=sbuf(0, 128, 0, 8, "int32"))]},
     r"tensor\[1\].*format: the tensor engine of trn1 takes .*, not int32"),
    ({"vector": [TensorTensor(dst=sbuf(0, 8, 0, 4), a=sbuf(0, 8, 0, 4), b=sbuf(0, 8, 0, 5),
                              op=VectorOp.ADD)]},
     r"operand shape: dst and b: 8 x 4 against 8 x 5"),
    ({"scalar": [Activation(dst=sbuf(0, 8, 0, 4), src=sbuf(0, 8, 0, 4), func=40)]},
     r"function: func 40 is not one of the \d+ functions of trn1"),
    ({"vector": [TensorTensor(dst=sbuf(0, 8, 0, 4), a=sbuf(0, 8, 0, 4), b=sbuf(0, 8, 0, 4),
                              op=VectorOp.POWER)]},
     r"vector\[0\] .*: op: power runs on the gpsimd engine, not the vector engine"),
    ({"vector": [Activation(dst=sbuf(0, 8, 0, 4), src=sbuf(0, 8, 0, 4), func=2)]},
     r"vector\[0\] `act .*`: function: the vector engine of trn1 evaluates no function, "
     r"not exp"),
    ({"vector": [Memset(dst=sbuf(0, 8, 2, 4), value=0.0)]}, r"alignment"),
    ({"dma0": [DmaCopy(dst=sbuf(0, 1, 0, 4), src=AP("hbm", "fp32", 0, 1, 1 << 30, ((4, 1),)))]},
     r"dma0\[0\].*HBM bounds"),
    ({"dma0": [DmaCopy(dst=psum(0, 1, 0, 4), src=AP("hbm", "fp32", 0, 1, 0, ((4, 1),)))]},
     r"engine reach: the dma engine cannot reach PSUM"),
    ({"dma99": [SemSignal(sem=0)]}, r"dma99: the core has DMA queues dma0 .. dma15"),
    ({"vector": [StreamShuffle(dst=sbuf(0, 32, 0, 4), src=sbuf(0, 16, 64, 4),
                               shuffle=tuple(range(32)))]},
     r"vector\[0\] `shuffle .*`: shuffle: dst partition 16 takes src partition 16 of 16"),
    ({"vector": [StreamShuffle(dst=sbuf(32, 32, 0, 4), src=sbuf(0, 64, 64, 4),
                               shuffle=(0,) * 32)]},
     r"start partition: a shuffle over 64 partitions cannot start dst at partition 32"),
    ({"vector": [TensorCopyDynamic(dst=sbuf(0, 32, 0, 4), src=sbuf(0, 32, 64, 4),
                                   offset=sbuf(0, 32, 512, 1), stride=4, count=8)]},
     r"dynamic offset: one int32 or uint32 in SBUF, and a count of places, not 32 x 1 fp32"),
    ({"vector": [Max8(dst=sbuf(0, 32, 0, 4), src=sbuf(0, 32, 64, 64))]},
     r"vector\[0\] `max8 .*`: operand shape: dst holds 8 elements a partition, not 4"),
    ({"vector": [FindIndex8(dst=sbuf(0, 32, 0, 8), data=sbuf(0, 32, 64, 64),
                            vals=sbuf(0, 32, 512, 8))]},
     r"format: dst holds uint32 indices, not fp32"),
    ({"gpsimd": [GatherFlattened(dst=sbuf(0, 32, 0, 8), src=sbuf(0, 16, 64, 64),
                                 indices=AP("sbuf", "uint32", 0, 32, 512, ((8, 1),)))]},
     r"operand shape: src has 16 partitions, dst 32"),
    ({"vector": [StreamShuffle(dst=sbuf(0, 32, 0, 4), src=sbuf(0, 32, 64, 2),
                               shuffle=(0,) * 32)]},
     r"operand shape: a shuffle copies 2 fp32 elements a partition into 4 fp32"),
    ({"tensor": [SemWait(sem=1, value=1), SemSignal(sem=0)],
      "vector": [SemWait(sem=0, value=1), SemSignal(sem=1)]},
     r"tensor\[0\] `wait sem=1 value=1`: deadlock: every unfinished stream waits: tensor\[0\] "
     r"waits for S\[1\] to reach 1 \(at 0; signalled later by vector\); vector\[0\] waits for "
     r"S\[0\] to reach 1 \(at 0; signalled later by tensor\)"),
    ({"scalar": [SemWait(sem=3, value=2)], "vector": [SemSignal(sem=3)]},
     r"scalar\[0\].*deadlock.*S\[3\] to reach 2 \(at 1; nothing left signals it\)"),
])
def test_rules_name_the_instruction(trn1, streams, rule):
    with pytest.raises(ProgramError, match=rule):
        Core(trn1).run(program(**streams), timing_only=True)
    with pytest.raises(ProgramError, match=rule):  # the same in numeric mode
        Core(trn1).run(program(**streams))


def test_trace_is_trace_event_json(trn1):
    prog = program(vector=[Memset(dst=sbuf(0, 128, 0, 64), value=1.0), SemSignal(sem=0)],
                   dma0=[SemWait(sem=0, value=1),
                         DmaCopy(dst=AP("hbm", "fp32", 0, 128, 0, ((64, 1),), pstride=4096),
                                 src=sbuf(0, 128, 0, 64))])
    doc = json.loads(Core(trn1).run(prog, trace=True).trace_json())
    names = {e["args"]["name"] for e in doc["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"vector", "dma0"}
    spans = [e for e in doc["traceEvents"] if e["ph"] == "X"]
    assert {e["name"] for e in spans} == {"memset", "dma"}
    assert all(e["dur"] > 0 and {"ts", "pid", "tid"} <= e.keys() for e in spans)


@pytest.mark.parametrize("chip, overlap", [("trn1", False), ("trn2", True)])
def test_shared_ports_take_turns_on_v2(chip, overlap):
    params = core_params(load(chip))
    prog = program(vector=[Memset(dst=sbuf(0, 128, 0, 512), value=1.0)],
                   gpsimd=[Memset(dst=sbuf(0, 128, 4096, 512), value=2.0)],
                   scalar=[TensorCopy(dst=sbuf(0, 128, 8192, 512), src=sbuf(0, 128, 0, 512))])
    r = Core(params).run(prog, timing_only=True, trace=True)
    start = {e["stream"]: e["ts"] for e in r.events}
    end = {e["stream"]: e["ts"] + e["dur"] for e in r.events}
    # vector and GpSimd both write SBUF: one waits for the other on v2 only [NKI2, NKI3]
    assert (start["gpsimd"] < end["vector"] and start["vector"] < end["gpsimd"]) == overlap
    assert start["scalar"] == 0.0  # the scalar engine shares no SBUF port


def _run(params, stream, instructions, inputs, outputs, seed=0):
    """Run ``instructions`` on ``stream`` with ``inputs`` (AP -> array) DMA'd in from HBM
    first and ``outputs`` (APs) DMA'd back after; returns the outputs' bytes."""
    prog = Program()
    dma_in, dma_out = [], []
    hbm_aps = {}
    for ap in list(inputs) + list(outputs):
        t = prog.tensor(f"t{len(hbm_aps)}", (ap.partitions, ap.free), ap.dtype)
        hbm_aps[ap] = t.ap((0, ap.partitions))
    for ap in inputs:
        dma_in.append(DmaCopy(dst=ap, src=hbm_aps[ap]))
    for ap in outputs:
        dma_out.append(DmaCopy(dst=hbm_aps[ap], src=ap))
    prog.streams = {"dma0": dma_in + [SemSignal(sem=0)],
                    stream: [SemWait(sem=0, value=1)] + instructions + [SemSignal(sem=1)],
                    "dma1": [SemWait(sem=1, value=1)] + dma_out}
    hbm = np.zeros(prog.hbm_bytes, dtype=np.uint8)
    for ap, values in inputs.items():
        off = hbm_aps[ap].offset
        raw = np.ascontiguousarray(values).view(np.uint8).reshape(-1)
        hbm[off: off + raw.size] = raw
    Core(params).run(prog, hbm=hbm, seed=seed)
    out = {}
    for ap in outputs:
        off = hbm_aps[ap].offset
        out[ap] = hbm[off: off + ap.nbytes].copy()
    return out


def test_stochastic_cast_rounds_to_a_neighbour(trn1, seed):
    import ml_dtypes

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 256)).astype(np.float32)
    src, rne, sto = sbuf(0, 64, 0, 256), sbuf(0, 64, 2048, 256, "bf16"), \
        sbuf(0, 64, 4096, 256, "bf16")
    out = _run(trn1, "vector", [TensorCopy(dst=rne, src=src),
                             TensorCopy(dst=sto, src=src, rounding="stochastic")],
                      {src: x}, [rne, sto], seed=seed)
    near = out[rne].view(ml_dtypes.bfloat16).reshape(x.shape)
    assert np.array_equal(near, x.astype(ml_dtypes.bfloat16))  # RNE as ml_dtypes rounds
    got = out[sto].view(ml_dtypes.bfloat16).reshape(x.shape).astype(np.float64)
    down = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.abs(x))) - 7)  # bf16 keeps 7 fraction bits
    assert np.all(np.abs(got - x) < ulp * 1.0001)  # a neighbour of x on the bf16 grid
    assert 0.2 < np.mean(got != down) < 0.8  # and not always the nearest one



@pytest.mark.parametrize("stream", ["vector", "scalar"])
def test_stochastic_casts_draw_from_the_units_beats(stream):
    """Each unit's lane generators advance once per output beat since the run began, rounded
    or not (hdl.core's units): on the vector engine a 5-element copy, a reduction (one beat)
    and a memset (none) come first, so the 3-element stochastic copy draws the lanes' beats
    6..8; on the scalar engine (4 lanes at simulation scale) a 5-element copy of 6 partitions
    takes two turns, 10 beats, and the stochastic copy's turn t of partitions 4t..4t+3 draws
    beats 10 + 3t .. 12 + 3t. The reference steps the generators from their seeding."""
    params = core_params(load("trn2"), "sim")
    assert (params.partitions, params.activation_lanes) == (16, 4)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((16, 3)).astype(np.float32)
    src, dst = sbuf(0, 16, 0, 3), sbuf(0, 16, 64, 3, "bf16")
    before = [TensorCopy(dst=sbuf(0, 6, 128, 5, "bf16"), src=sbuf(0, 6, 192, 5))]
    if stream == "vector":
        before = [TensorCopy(dst=sbuf(0, 16, 128, 5, "bf16"), src=sbuf(0, 16, 192, 5)),
                  TensorReduce(dst=sbuf(0, 16, 256, 1), src=src, reduce=Reduce.SUM),
                  Memset(dst=sbuf(0, 16, 320, 4), value=1.0)]
    out = _run(params, stream, before + [TensorCopy(dst=dst, src=src, rounding="stochastic")],
               {src: x}, [dst], seed=3)
    got = out[dst].view(np.uint16).reshape(16, 3)
    if stream == "vector":  # (beats, lanes): beat 6 + i of lane p
        want = numerics.cast_bits(np.vstack([np.zeros((6, 16), np.float32), x.T]), BF16,
                                  "stochastic", 3, params.rng)[6:].T
    else:
        want = np.empty((16, 3), np.uint32)
        for t in range(4):
            beats = np.zeros((13 + 3 * t, 4), np.float32)
            beats[10 + 3 * t:] = x[4 * t:4 * t + 4].T
            want[4 * t:4 * t + 4] = numerics.cast_bits(beats, BF16, "stochastic", 3,
                                                       params.rng)[10 + 3 * t:].T
    assert np.array_equal(got, want)
    near = numerics.cast_bits(x, BF16)
    assert not np.array_equal(got, near)  # not every cast the nearest one

def test_iota_values(trn1):
    from hdl.core.isa import Iota

    ints, floats = AP("sbuf", "int32", 0, 4, 0, ((3, 2),)), sbuf(0, 4, 64, 3)
    out = _run(trn1, "gpsimd", [Iota(dst=ints, base=7, pstep=100, step=-1),
                                Iota(dst=floats, base=-1, pstep=3, step=2)], {}, [ints, floats])
    got = out[ints].view(np.int32).reshape(4, 3)  # i counts elements, not their addresses
    assert got.tolist() == [[7 + 100 * p - i for i in range(3)] for p in range(4)]
    assert out[floats].view(np.float32).reshape(4, 3).tolist() == \
        [[-1.0 + 3 * p + 2 * i for i in range(3)] for p in range(4)]


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
@pytest.mark.parametrize("fmt, k, m, n", [("bf16", 128, 128, 512), ("fp32", 128, 128, 512),
                                          ("fp8_e4m3", 96, 64, 48), ("bf16", 1, 1, 1)])
def test_steady_pairs_match_the_system_models_tile_interval(chip, fmt, k, m, n):
    """The core simulator and the chip model time a tile alike (two models, one rule)."""
    from sim.system.model import tile_interval

    spec = load(chip)
    params = core_params(spec)
    pairs = 6
    ins = [LoadStationary(src=sbuf(0, k, 0, m, fmt)),
           MultiplyMoving(dst=psum(0, m, 0, n), src=sbuf(0, k, 4096, n, fmt))] * pairs
    r = Core(params).run(program(tensor=ins), timing_only=True, trace=True)
    starts = [e["ts"] * 1e-6 for e in r.events if e["name"] == "matmul"]
    per_pair = (starts[-1] - starts[1]) / (pairs - 2) * params.clock("tensor")
    assert per_pair == pytest.approx(tile_interval(spec.core.tensor, fmt, k, m, n))


def test_dma_shape_and_type_must_match(trn1):
    hbm = AP("hbm", "fp32", 0, 4, 0, ((8, 1),), pstride=32)
    for dst, add, rule in (
            (sbuf(0, 4, 0, 9), False, r"operand shape: dst \(4, 9\) and src \(4, 8\)"),
            (sbuf(0, 4, 0, 8, "mxfp8_x4"), False,
             r"format: a DMA converts between fp32, .*, uint32: fp32 cannot become mxfp8_x4"),
            (sbuf(0, 4, 0, 8, "int32"), True, r"format: a DMA adds into fp32, bf16, fp16 "
                                              r"elements, not int32")):
        with pytest.raises(ProgramError, match=rule):
            Core(trn1).run(program(dma0=[DmaCopy(dst=dst, src=hbm, add=add)]),
                           timing_only=True)


_CAST_VALUES = np.array([0.0, -0.0, 1.0, -1.5, 2.5, 3.5, -2.5, 0.49999997, 1.00390625,
                         1.01171875, 300.7, -300.2, 1e10, -1e10, 65520.0, 1e-8, np.inf,
                         -np.inf, np.nan, 4294967296.0, 2147483520.0, -129.5, 255.5, 0.5],
                        dtype=np.float32)


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fn",
                                   "tf32", "int8", "uint8", "int32", "uint32"])
def test_a_dma_between_two_types_casts_through_fp32(trn1, dtype):
    """HBM fp32 into SBUF of another type, and back, as NKI's DMA converts ("first casting
    from src.dtype to float32, then from float32 to dst.dtype"): against ml_dtypes' casts
    (nearest even) and numpy's nearest integers (ties to even, saturated, NaN 0); an
    adding copy of fp32 into bf16 sums in fp32. Times: a packet is the wider side's."""
    import ml_dtypes

    x = _CAST_VALUES.reshape(4, 6)
    prog = Program()
    src, back, summed = (prog.tensor(name, (4, 6), "fp32").ap((0, 4))
                         for name in ("x", "back", "summed"))
    mid, acc = sbuf(0, 4, 0, 6, dtype), sbuf(0, 4, 64, 6, "bf16")
    prog.streams = {"dma0": [DmaCopy(dst=mid, src=src), DmaCopy(dst=back, src=mid),
                             DmaCopy(dst=acc, src=mid), DmaCopy(dst=acc, src=src, add=True),
                             DmaCopy(dst=summed, src=acc)]}
    hbm = np.zeros(prog.hbm_bytes, np.uint8)
    hbm[:x.nbytes] = x.view(np.uint8).reshape(-1)
    Core(trn1).run(prog, hbm=hbm)
    got = hbm[back.offset:back.offset + x.nbytes].view(np.float32).reshape(4, 6)
    ints = {"int8": np.int8, "uint8": np.uint8, "int32": np.int32, "uint32": np.uint32}
    if dtype in ints:
        info = np.iinfo(ints[dtype])
        near = np.clip(np.nan_to_num(np.rint(x.astype(np.float64))), info.min, info.max)
        want = near.astype(ints[dtype]).astype(np.float32)
    elif dtype == "tf32":  # 10 fraction bits: bf16's exponent, fp16's precision
        bits = x.view(np.uint32).astype(np.uint64)
        up = (bits + 0xFFF + ((bits >> 13) & 1)) & ~np.uint64(0x1FFF)
        want = np.where(np.isnan(x), np.float32(np.nan),
                        up.astype(np.uint32).view(np.float32))
    else:
        kind = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16,
                "fp8_e4m3": ml_dtypes.float8_e4m3, "fp8_e5m2": ml_dtypes.float8_e5m2,
                "fp8_e4m3fn": ml_dtypes.float8_e4m3fn}[dtype]
        with np.errstate(over="ignore"):  # past fp16's largest: its infinity
            want = x.astype(kind).astype(np.float32)
    assert np.array_equal(got, want, equal_nan=True)
    out = hbm[summed.offset:summed.offset + x.nbytes].view(np.float32).reshape(4, 6)
    twice = (want.astype(ml_dtypes.bfloat16).astype(np.float32) + x).astype(ml_dtypes.bfloat16)
    assert np.array_equal(out, twice.astype(np.float32), equal_nan=True)
    # a packet is a run of elements both sides share, in the wider side's bytes
    from sim.core.costs import dma_charged_bytes

    size = max(4, AP("sbuf", dtype, 0, 1, 0, ()).itemsize)
    per = max(6 * size + trn1.dma_packet_overhead, trn1.dma_packet_minimum)
    assert dma_charged_bytes(trn1, src, mid) == 4 * per


def test_unordered_access_is_a_race(trn1):
    write = Memset(dst=sbuf(0, 128, 0, 64), value=1.0)
    read = TensorCopy(dst=sbuf(0, 128, 1024, 16), src=sbuf(0, 128, 128, 16))
    with pytest.raises(ProgramError, match=r"scalar\[0\] `copy .*`: race: it reads SBUF bytes "
                                           r"that vector\[0\] `memset .*` also accesses"):
        Core(trn1).run(program(vector=[write], scalar=[read]))
    # ordered by a semaphore, or touching other bytes: no race
    Core(trn1).run(program(vector=[write, SemSignal(sem=0)],
                           scalar=[SemWait(sem=0, value=1), read]))
    apart = TensorCopy(dst=sbuf(0, 128, 1024, 16), src=sbuf(0, 128, 256, 16))
    Core(trn1).run(program(vector=[write], scalar=[apart]))


def test_hbm_footprints_overlap_exactly(seed):
    from sim.core.races import footprint, overlap

    rng = np.random.default_rng(seed)
    for _ in range(400):
        aps = []
        for _ in range(2):
            n = int(rng.integers(1, 6))
            aps.append(AP("hbm", "bf16", 0, int(rng.integers(1, 5)), 2 * int(rng.integers(40)),
                          ((n, int(rng.integers(1, 3))),), pstride=2 * int(rng.integers(0, 12))))

        def touched(ap):
            return {ap.offset + r * ap.pstride + 2 * i * ap.dims[0][1] + byte
                    for r in range(ap.partitions) for i in range(ap.dims[0][0])
                    for byte in range(2)}

        exact = bool(touched(aps[0]) & touched(aps[1]))
        found = overlap(footprint(aps[0]), footprint(aps[1]))
        assert found or not exact  # never misses a shared byte
        if aps[0].dims[0][1] == 1 and aps[1].dims[0][1] == 1:
            assert found == exact  # rows of contiguous bytes: exact


def test_hbm_runs_of_interleaved_accesses_are_told_apart(seed):
    """Two-axis HBM accesses (a token-major tensor's head groups: rows of 24 elements, two
    tiles of 8 rows, 16 and 8 columns side by side) meet exactly where they share a byte,
    up to RUNS runs a row; past it the row's span is kept (never a missed byte)."""
    from sim.core.races import RUNS, footprints, overlap

    def meets(a, b):
        return any(overlap(x, y) for x in footprints(a) for y in footprints(b))

    def touched(ap):
        (n0, s0), (n1, s1) = ap.dims
        return {ap.offset + r * ap.pstride + 4 * (i * s0 + j * s1) + byte
                for r in range(ap.partitions) for i in range(n0) for j in range(n1)
                for byte in range(4)}

    def group(first, cols, tiles=2):
        return AP("hbm", "fp32", 0, 8, 4 * first, ((tiles, 192), (cols, 1)), pstride=96)

    assert not meets(group(0, 16), group(16, 8))
    assert meets(group(0, 16), group(15, 8))
    rng = np.random.default_rng(seed)
    for _ in range(200):
        a, b = (group(int(rng.integers(24)), int(rng.integers(1, 9)),
                      int(rng.integers(1, RUNS + 3))) for _ in range(2))
        exact = bool(touched(a) & touched(b))
        assert meets(a, b) or not exact
        if a.dims[0][0] <= RUNS and b.dims[0][0] <= RUNS:
            assert meets(a, b) == exact


def test_multiply_reads_the_tile_in_its_own_format(trn1, seed):
    """A bf16 stationary tile under an fp16 moving tile (same rate, both float, as the array
    allows): each operand is read in its own format; numpy float32 sums k in order."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    k, m, n = 16, 8, 8
    w = rng.standard_normal((k, m)).astype(ml_dtypes.bfloat16)
    x = rng.standard_normal((k, n)).astype(np.float16)
    st, mv, out = sbuf(0, k, 0, m, "bf16"), sbuf(0, k, 512, n, "fp16"), psum(0, m, 0, n)
    prog = Program()
    hbm_st, hbm_mv = (prog.tensor(name, (k, c), dt).ap((0, k))
                      for name, c, dt in (("w", m, "bf16"), ("x", n, "fp16")))
    prog.streams = {"dma0": [DmaCopy(dst=st, src=hbm_st), DmaCopy(dst=mv, src=hbm_mv),
                             SemSignal(sem=0)],
                    "tensor": [SemWait(sem=0, value=1), LoadStationary(src=st),
                               MultiplyMoving(dst=out, src=mv)]}
    hbm = np.zeros(prog.hbm_bytes, dtype=np.uint8)
    for ap, values in ((hbm_st, w), (hbm_mv, x)):
        raw = values.view(np.uint8).reshape(-1)
        hbm[ap.offset: ap.offset + raw.size] = raw
    result = Core(trn1).run(prog, hbm=hbm)
    got = result.psum[:m, :4 * n].copy().view(np.float32)
    want = np.zeros((m, n), np.float32)
    for i in range(k):
        want = want + w[i].astype(np.float32)[:, None] * x[i].astype(np.float32)[None, :]
    assert np.array_equal(got, want)


def test_multiply_must_match_its_tile_in_rate(trn1):
    ins = [LoadStationary(src=sbuf(0, 8, 0, 8, "bf16")),
           MultiplyMoving(dst=psum(0, 8, 0, 8), src=sbuf(0, 8, 512, 8, "fp32"))]
    with pytest.raises(ProgramError, match=r"tensor\[1\].*stationary: the loaded stationary "
                                           r"is 8 x 8 bf16.*must match its tile's 'bf16' in "
                                           r"rate and kind, not 'fp32'\)$"):
        Core(trn1).run(program(tensor=ins), timing_only=True)


def test_tf32_mixes_with_no_other_format(trn1):
    """"FP32/TF32 not mixed with others" [ISA]: tf32 runs at bf16's rate, yet a bf16 tile
    takes no tf32 moving tile, nor a tf32 tile an fp16 one (programs: test_core_formats.py)."""
    rules = Core(trn1).rules
    assert rules.partners("bf16", "fp16") and rules.partners("tf32", "tf32")
    assert not rules.partners("bf16", "tf32") and not rules.partners("tf32", "fp16")


def test_transpose_is_the_arrays_pass(trn1):
    """A transpose writes the input's own bf16 codes to PSUM, -0 and a NaN payload kept (an
    identity matmul would give +0 and the canonical NaN), against numpy's transpose of the
    typed tile; its time is the array's load and transpose pass from the cycle model."""
    import ml_dtypes

    rng = np.random.default_rng(3)
    k, m = 8, 6
    raw = rng.integers(0, 1 << 16, size=(k, m)).astype(np.uint16)
    raw[0, 0], raw[1, 2] = 0x8000, 0x7F81  # -0, a signalling NaN with a payload
    src, dst = sbuf(0, k, 0, m, "bf16"), AP("psum", "bf16", 0, m, 0, ((k, 1),))
    prog = Program()
    hbm_src = prog.tensor("x", (k, m), "bf16").ap((0, k))
    prog.streams = {"dma0": [DmaCopy(dst=src, src=hbm_src), SemSignal(sem=0)],
                    "tensor": [SemWait(sem=0, value=1), Transpose(dst=dst, src=src)]}
    hbm = np.zeros(prog.hbm_bytes, dtype=np.uint8)
    hbm[hbm_src.offset: hbm_src.offset + raw.nbytes] = raw.view(np.uint8).reshape(-1)
    result = Core(trn1).run(prog, hbm=hbm)
    got = result.psum[:m, :2 * k].copy().view(np.uint16)
    assert np.array_equal(got, raw.view(ml_dtypes.bfloat16).T.view(np.uint16))
    alone = Core(trn1).run(program(tensor=[Transpose(dst=dst, src=src)]), timing_only=True)
    array = SystolicParams(rows=128, cols=128, formats=("bf16",))
    total = systolic_cycles.schedule(array, [systolic_cycles.Load(k, m),
                                             systolic_cycles.Transpose(k)]).total
    assert round(alone.time * trn1.clock("tensor")) == total
    # 128 bf16 codes from byte 1,792 end at the bank's last byte: the bank holds them
    edge = Transpose(dst=AP("psum", "bf16", 0, 128, 1792, ((128, 1),)),
                     src=sbuf(0, 128, 0, 128, "bf16"))
    Core(trn1).run(program(tensor=[edge]), timing_only=True)
    bad = [Transpose(dst=AP("psum", "fp32", 0, m, 0, ((k, 1),)), src=src)]
    with pytest.raises(ProgramError, match=r"tensor\[0\].*format: a transpose writes its "
                                           r"input's format to PSUM \(bf16\), not fp32"):
        Core(trn1).run(program(tensor=bad), timing_only=True)


def test_core_rtl_runs_every_transpose_the_simulator_runs():
    """The core RTL's tensor engine runs Transpose in every type the simulator transposes
    (the array's formats but MX, on trn1 int8 too; the co-simulation's ``transposes``
    program), and its cycles are exact: on trn2's simulation array (8 x 8, four columns a
    load beat) an 8 x 8 tile is its 8 columns read in 2 beats (10 cycles), the pass's 8 beats
    behind the array's 8 + 8 stages and 2 more (26), the write (1) and the RTL's 5 stages:
    42; a 5 x 3 tile 3 + 1, 5 + 18, 1 and 5: 33."""
    from hdl.core import tensor
    from sim.core.rtl_cycles import rtl_cycles
    from sim.tb.core import check_program

    for chip, types in (("trn1", ("int8", "fp8_e4m3", "fp8_e5m2", "bf16", "fp16", "tf32",
                                  "fp32")),
                        ("trn3", ("fp8_e4m3", "fp8_e4m3fn", "fp8_e5m2", "bf16", "fp16",
                                  "tf32", "fp32"))):
        params = core_params(load(chip), "sim")
        for dtype in types:
            ins = Transpose(dst=AP("psum", dtype, 0, 8, 0, ((8, 1),)), src=sbuf(0, 8, 0, 8, dtype))
            assert tensor.supported(ins, params.formats) is None, (chip, dtype)
        assert check_program(params, "transposes", 0) is None, chip
    trn3 = core_params(load("trn3"), "sim")
    mx = Transpose(dst=AP("psum", "mxfp8_x4", 0, 8, 0, ((8, 1),)),
                   src=sbuf(0, 8, 0, 8, "mxfp8_x4"))
    assert tensor.supported(mx, trn3.formats) == "the array has no transpose of an MX tile"
    trn2 = core_params(load("trn2"), "sim")
    for (k, m), want in (((8, 8), 42), ((5, 3), 33)):
        ins = Transpose(dst=AP("psum", "bf16", 0, m, 0, ((k, 1),)), src=sbuf(0, k, 0, m, "bf16"))
        assert rtl_cycles(trn2, "tensor", ins) == want


def test_double_row_takes_no_column_tile():
    """trn2's fp8 double row (a contraction over twice the PE rows) is not combinable with
    column tiling (the spec's note on core.tensor.rates, NKI3): its tile takes the array's
    whole width, so its one column position is 0; at sim scale, 8 partitions of pairs feed
    8 PE rows, as 128 do at full scale."""
    p = core_params(load("trn2"), "sim")
    pairs = AP("sbuf", "fp8_e4m3", 0, 8, 0, ((2, 2), (2, 1)))
    fine = [LoadStationary(src=pairs, double_row=True)]
    Core(p).run(program(tensor=fine), timing_only=True)
    bad = [LoadStationary(src=pairs, col=2, double_row=True)]
    with pytest.raises(ProgramError, match=r"tensor\[0\].*tile position: the double row takes "
                                           r"the array's whole width \(no column tiling\), so "
                                           r"col must be 0, not 2"):
        Core(p).run(program(tensor=bad), timing_only=True)


@pytest.mark.parametrize("tiles", [(1,), (1, 2), (1, 2, 4)])
def test_a_stationary_takes_the_smallest_tile_that_holds_it(tiles):
    """The one placement rule (:meth:`SystolicParams.tile_groups`) of the core simulator and
    the core RTL's decoder: the smallest of the tiling's sizes ``8 / w`` that holds ``k``
    rows and ``m`` columns, the whole array for a contraction deeper than the array (the fp8
    double row). Its Amaranth form, which the decoder runs, gives the same for every k and
    m, and so does the simulator's placement."""
    from amaranth.hdl import Module, Signal
    from amaranth.sim import Simulator

    a = SystolicParams(rows=8, cols=8, formats=("bf16", "fp8_e4m3"),
                       double_rate=("fp8_e4m3",), tiles=tiles)
    sizes = [8 // w for w in tiles]
    cases = [(k, m) for k in range(1, 17) for m in range(1, 9)]
    want = [(8, 8) if k > 8 else (min(s for s in sizes if s >= k),
                                  min(s for s in sizes if s >= m)) for k, m in cases]
    ways = max(tiles)
    assert [(r * 8 // ways, c * 8 // ways) for r, c in (a.tile_groups(k, m) for k, m in cases)
            ] == want

    k_in, m_in = Signal(range(17)), Signal(range(9))
    rows, cols = Signal(range(ways + 1)), Signal(range(ways + 1))
    dut = Module()
    dut.d.comb += [rows.eq(a.tile_groups(k_in, m_in)[0]), cols.eq(a.tile_groups(k_in, m_in)[1])]
    got = []

    async def bench(ctx):
        for k, m in cases:
            ctx.set(k_in, k)
            ctx.set(m_in, m)
            got.append((ctx.get(rows) * 8 // ways, ctx.get(cols) * 8 // ways))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    assert got == want

    if tiles == (1, 2, 4):  # trn2's array at simulation scale
        p = core_params(load("trn2"), "sim")
        assert (p.tensor.rows, p.tensor.cols, p.tensor.tiles) == (8, 8, tiles)
        placed = [Core(p).rules.placement(LoadStationary(src=sbuf(0, k, 0, m, "fp8_e4m3")))
                  for k, m in cases]
        assert [(q.row_size, q.col_size) for q in placed] == want


def test_tiles_at_disjoint_positions_multiply_at_once(trn1):
    """trn1's array splits two ways: 64 x 64 tiles on the diagonal multiply at once, timed
    as the array's replayed sequencer times them; the same pairs at one position take
    turns."""
    n, pairs = 256, 4
    half = {"row_size": 64, "col_size": 64}
    array = trn1.tensor
    clock = trn1.clock("tensor")
    totals = []
    for places in (((0, 0), (64, 64)), ((0, 0), (0, 0))):
        ins, golden = [], []
        for i in range(pairs):
            row, col = places[i % 2]
            ins += [LoadStationary(src=sbuf(row, 64, 0, 64, "bf16"), row=row, col=col),
                    MultiplyMoving(dst=psum(col, 64, 0, n), src=sbuf(row, 64, 4096, n, "bf16"),
                                   row=row, col=col)]
            golden += [systolic_cycles.Load(64, 64, "bf16", row=row, col=col, **half),
                       systolic_cycles.Multiply(n, fmt="bf16", row=row, col=col)]
        r = Core(trn1).run(program(tensor=ins), timing_only=True, trace=True)
        sched = systolic_cycles.schedule(array, golden)
        starts = [round(e["ts"] * 1e-6 * clock) for e in r.events if e["name"] == "matmul"]
        assert starts == list(sched.accepted[1::2])
        assert round(r.time * clock) == sched.total
        assert r.busy["tensor"] <= r.time
        totals.append(sched.total)
    # two at once: of the four multiplies' 4 n cycles, about 2 n are hidden
    assert totals[1] - totals[0] > 1.9 * n


def test_each_multiply_reads_the_tile_at_its_position(trn1):
    """Two tiles loaded at (0, 0) and (64, 64) before either multiplies: each multiply reads
    its own (small integers in bf16: every product and sum exact, checked with numpy)."""
    k, m, n = 64, 64, 8
    rng = np.random.default_rng(3)
    prog = Program()
    w = rng.integers(-4, 5, (128, m)).astype(np.float32)
    x = rng.integers(-4, 5, (128, n)).astype(np.float32)
    hbm_w, hbm_x = (prog.tensor(name, (128, c), "bf16").ap((0, 128))
                    for name, c in (("w", m), ("x", n)))
    st, mv = sbuf(0, 128, 0, m, "bf16"), sbuf(0, 128, 512, n, "bf16")
    tensor = [SemWait(sem=0, value=1)]
    for at in (0, 64):
        tensor.append(LoadStationary(src=sbuf(at, k, 0, m, "bf16"), row=at, col=at))
    for at in (64, 0):
        tensor.append(MultiplyMoving(dst=psum(at, m, 0, n), src=sbuf(at, k, 512, n, "bf16"),
                                     row=at, col=at))
    prog.streams = {"dma0": [DmaCopy(dst=st, src=hbm_w), DmaCopy(dst=mv, src=hbm_x),
                             SemSignal(sem=0)], "tensor": tensor}
    hbm = np.zeros(prog.hbm_bytes, dtype=np.uint8)
    for ap, values in ((hbm_w, w), (hbm_x, x)):
        raw = (values.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8).reshape(-1)
        hbm[ap.offset: ap.offset + raw.size] = raw
    result = Core(trn1).run(prog, hbm=hbm)
    got = result.psum[:, :4 * n].copy().view(np.float32)
    for at in (0, 64):
        want = w[at:at + k].T @ x[at:at + k]
        assert np.array_equal(got[at:at + m], want)


def test_tile_positions_are_rules(trn1):
    """A multiply reads the tile at its own position; a later tile over the same PEs
    replaces it; positions are multiples of the tile's size."""
    st, mv = sbuf(0, 64, 0, 64, "bf16"), sbuf(0, 64, 4096, 8, "bf16")
    cases = [
        ([LoadStationary(src=st), MultiplyMoving(dst=psum(64, 64, 0, 8), src=mv, row=64,
                                                 col=64)],
         r"tensor\[1\].*stationary: no stationary tile is loaded at tile position \(64, 64\)"),
        ([LoadStationary(src=st, row=64, col=64),
          LoadStationary(src=sbuf(0, 128, 0, 100, "bf16")),
          MultiplyMoving(dst=psum(64, 64, 0, 8), src=mv, row=64, col=64)],
         r"tensor\[2\].*no stationary tile is loaded at tile position"),
        ([LoadStationary(src=sbuf(0, 64, 0, 8, "bf16"), row=32)],
         r"tensor\[0\].*tile position: row must be a multiple of the tile's row_size 64 "
         r"below 128, not 32"),
    ]
    for ins, match in cases:
        with pytest.raises(ProgramError, match=match):
            Core(trn1).run(program(tensor=ins), timing_only=True)


def test_a_multiply_writes_the_psum_partitions_of_its_tile_columns(trn1):
    """Array column ``col + j`` sums into PSUM partition ``col + j`` (a tile at a column
    group writes only the partitions of its columns): a multiply on the tile at (64, 64)
    writes partitions 64 .. 127 and one on the tile at (0, 0) partitions 0 .. 63; any other
    destination is refused before the program runs."""
    st, mv = sbuf(0, 64, 0, 64, "bf16"), sbuf(0, 64, 4096, 8, "bf16")
    for at in (0, 64):
        fine = [LoadStationary(src=st, row=at, col=at),
                MultiplyMoving(dst=psum(at, 64, 0, 8), src=mv, row=at, col=at)]
        Core(trn1).run(program(tensor=fine), timing_only=True)
        other = 64 - at
        bad = [LoadStationary(src=st, row=at, col=at),
               MultiplyMoving(dst=psum(other, 64, 0, 8), src=mv, row=at, col=at)]
        with pytest.raises(ProgramError, match=rf"tensor\[1\] `matmul .*`: tile position: a "
                                               rf"stationary at column {at} writes PSUM "
                                               rf"partitions {at} \.\. {at + 63} \(its array "
                                               rf"columns\), not dst's {other} \.\. "
                                               rf"{other + 63}$"):
            Core(trn1).check(program(tensor=bad))
    # inside the tile's 64 columns but shifted: column j still sums into partition j
    shifted = [LoadStationary(src=sbuf(0, 64, 0, 32, "bf16")),
               MultiplyMoving(dst=psum(32, 32, 0, 8), src=mv)]
    with pytest.raises(ProgramError, match=r"tensor\[1\].*column 0 writes PSUM partitions "
                                           r"0 \.\. 31 \(its array columns\), not dst's 32"):
        Core(trn1).check(program(tensor=shifted))
    # the transpose pass's tile takes the whole array: its M x K result starts at partition 0
    src = sbuf(0, 8, 0, 6, "bf16")
    Core(trn1).check(program(tensor=[Transpose(dst=AP("psum", "bf16", 0, 6, 0, ((8, 1),)),
                                               src=src)]))
    with pytest.raises(ProgramError, match=r"tensor\[0\] `transpose .*`: tile position: a "
                                           r"stationary at column 0 writes PSUM partitions "
                                           r"0 \.\. 5 \(its array columns\), not dst's 32 "
                                           r"\.\. 37$"):
        Core(trn1).check(program(tensor=[Transpose(dst=AP("psum", "bf16", 32, 6, 0,
                                                          ((8, 1),)), src=src)]))


def test_scan_is_the_recurrence_in_fp32(trn1, seed):
    """``r[i] = op1(op0(a[i], r[i - 1]), b[i])`` per partition against numpy float32 step
    by step (each operation rounded to fp32), from a per-partition initial value, from an
    immediate with reversed operands, and cast into bf16 at the end."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.0, (16, 40)).astype(np.float32)
    b = rng.standard_normal((16, 40)).astype(np.float32)
    init = rng.standard_normal((16, 1)).astype(np.float32)
    ia, ib, ii = sbuf(0, 16, 0, 40), sbuf(0, 16, 512, 40), sbuf(0, 16, 1024, 1)
    r1, r2, r3 = sbuf(0, 16, 2048, 40), sbuf(0, 16, 4096, 40), sbuf(0, 16, 6144, 40, "bf16")
    out = _run(trn1, "vector", [
        TensorTensorScan(dst=r1, a=ia, b=ib, op0=VectorOp.MULTIPLY, op1=VectorOp.ADD,
                         initial=ii),
        TensorTensorScan(dst=r2, a=ia, b=ib, op0=VectorOp.SUBTRACT, op1=VectorOp.SUBTRACT,
                         imm=2.0, reverse0=True, reverse1=True),
        TensorTensorScan(dst=r3, a=ia, b=ib, op0=VectorOp.MULTIPLY, op1=VectorOp.MAX,
                         imm=-1.0)], {ia: a, ib: b, ii: init}, [r1, r2, r3])
    w1, w2, w3 = (np.empty((16, 40), np.float32) for _ in range(3))
    p1, p2, p3 = init[:, 0], np.full(16, 2.0, np.float32), np.full(16, -1.0, np.float32)
    for i in range(40):
        p1 = w1[:, i] = a[:, i] * p1 + b[:, i]
        p2 = w2[:, i] = b[:, i] - (p2 - a[:, i])
        p3 = w3[:, i] = np.maximum(a[:, i] * p3, b[:, i])
    assert np.array_equal(out[r1].view(np.float32).reshape(16, 40), w1)
    assert np.array_equal(out[r2].view(np.float32).reshape(16, 40), w2)
    assert np.array_equal(out[r3].view(ml_dtypes.bfloat16).reshape(16, 40),
                          w3.astype(ml_dtypes.bfloat16))


@pytest.mark.parametrize("n", [1, 512, 1000])
def test_scan_costs_two_passes(trn1, n):
    """max(MIN_II, 2N) vector cycles, the documented cost: the spec's access start plus
    the larger of its minimum interval and two element streams, as a TensorTensor of two
    SBUF operands (two streams) and twice a one-stream copy's streaming part."""
    x, y, z = sbuf(0, 128, 0, n), sbuf(0, 128, 4096, n), sbuf(0, 128, 8192, n)

    def busy(ins):
        return Core(trn1).run(program(vector=[ins]), timing_only=True).busy["vector"]

    scan = busy(TensorTensorScan(dst=z, a=x, b=y, op0=VectorOp.MULTIPLY, op1=VectorOp.ADD))
    p = trn1
    want = (p.access_start + max(p.min_interval, 2 * n / p.vector_elements)) / p.clock("vector")
    assert scan == pytest.approx(want)
    assert scan == pytest.approx(busy(TensorTensor(dst=z, a=x, b=y, op=VectorOp.ADD)))


@pytest.mark.parametrize("n", [16, 512])
def test_an_activation_on_the_vector_engine_streams_at_its_rate(trn3, n):
    """trn3's vector engine evaluates exp (``core.vector.functions``): an Activation there
    takes the vector stream rule, the spec's access start plus the larger of its minimum
    interval and N over the vector engine's elements a cycle, at the vector clock, and a
    minimum interval more with its row sums; the same numbers as the scalar engine's."""
    p = trn3
    exp = [f.name for f in p.functions].index("exp")
    x, y, s = sbuf(0, 128, 0, n), sbuf(0, 128, 4096, n), sbuf(0, 128, 8192, 1)

    def run(stream, ins):
        core = Core(p)
        return core.run(program(**{stream: [ins]}), timing_only=True).busy[stream]

    plain = Activation(dst=y, src=x, func=exp)
    want = p.access_start + max(p.min_interval, math.ceil(n / p.vector_elements))
    assert run("vector", plain) == pytest.approx(want / p.clock("vector"))
    summed = Activation(dst=y, src=x, func=exp, reduce_dst=s)
    assert run("vector", summed) == pytest.approx((want + p.min_interval) / p.clock("vector"))
    rng = np.random.default_rng(n)
    a = (rng.standard_normal((128, n)) * 4).astype(np.float32)
    got = {kind: _run(p, kind, [summed], {x: a}, [y, s]) for kind in ("vector", "scalar")}
    for ap in (y, s):
        assert np.array_equal(got["vector"][ap], got["scalar"][ap])


@pytest.mark.parametrize("op, kind", [(VectorOp.RECIPROCAL, "vector"),
                                      (VectorOp.RSQRT, "gpsimd")])
def test_an_operation_of_several_cycles_an_element(trn1, op, kind):
    """The vector engine's reciprocal and GpSimd's rsqrt take the spec's op_cycles an
    element in the stream rule (NKI: max(MIN_II, 8 N) for the reciprocal; rsqrt at a
    quarter of the scalar engine's throughput); refused on the other engine."""
    p, n = trn1, 300
    x, y = sbuf(0, 128, 0, n), sbuf(0, 128, 4096, n)
    ins = TensorScalar(dst=y, src=x, op0=op, imm0=0.0)
    busy = Core(p).run(program(**{kind: [ins]}), timing_only=True).busy[kind]
    c = dict(p.op_cycles)[op.name.lower()]
    e = p.vector_elements if kind == "vector" else 1
    want = p.access_start + max(p.min_interval, math.ceil(c * n / e))
    assert busy == pytest.approx(want / p.clock(kind))
    other = "gpsimd" if kind == "vector" else "vector"
    with pytest.raises(ProgramError, match=rf"op: {op.name.lower()} runs on the {kind} "
                                           rf"engine, not the {other} engine"):
        Core(p).check(program(**{other: [ins]}))


def test_scan_rules(trn1):
    a, b = sbuf(0, 8, 0, 4), psum(0, 8, 0, 4)
    bad = {
        "operand shape: dst and b: 8 x 4 against 8 x 5":
            TensorTensorScan(dst=a, a=a, b=sbuf(0, 8, 64, 5), op0=VectorOp.ADD,
                             op1=VectorOp.ADD),
        "initial must hold one element per partition of the 8, not 8 x 2":
            TensorTensorScan(dst=a, a=a, b=a, op0=VectorOp.ADD, op1=VectorOp.ADD,
                             initial=sbuf(0, 8, 64, 2)),
        "a scan reads at most one of a and b from PSUM":
            TensorTensorScan(dst=a, a=b, b=b, op0=VectorOp.ADD, op1=VectorOp.ADD),
    }
    for message, ins in bad.items():
        with pytest.raises(ProgramError, match=message):
            Core(trn1).run(program(vector=[ins]), timing_only=True)
    with pytest.raises(ProgramError, match="the scalar engine does not run TensorTensorScan"):
        Core(trn1).run(program(scalar=[TensorTensorScan(dst=a, a=a, b=a, op0=VectorOp.ADD,
                                                        op1=VectorOp.ADD)]), timing_only=True)


@pytest.mark.parametrize("copy", ["plain", "dynamic", "max8", "range_select", "dropout"])
def test_every_copy_through_the_vector_unit_makes_a_nan_canonical(copy):
    """A NaN with a payload, loaded from HBM, leaves the vector engine's copies and searches
    as the unit's canonical NaN (0x7FC00000), as the core RTL streams them through its copy:
    TensorCopy, TensorCopyDynamic, Max8, RangeSelect and Dropout (nothing dropped at a
    probability of 0) alike; the other elements as they were."""
    from kernels.builder import Builder

    p = core_params(load("trn2"), "sim")
    b = Builder(p)
    n = p.partitions
    x, out = b.hbm("x", (n, 8), "fp32"), b.hbm("out", (n, 8), "fp32")
    sx, so, st, sb = b.sbuf(32, "x"), b.sbuf(4, "offset"), b.sbuf(32, "out"), b.sbuf(4, "bound")
    row = b.tile("sbuf", "fp32", sx, n, ((8, 1),))
    dst = b.tile("sbuf", "fp32", st, n, ((8, 1),))
    at = b.tile("sbuf", "int32", so, 1, ((1, 1),))
    b.emit("dma0", DmaCopy(dst=row, src=x.ap((0, n))))
    b.emit("vector", Memset(dst=at, value=0.0))
    b.emit("vector", Memset(dst=b.column(sb, n), value=1000.0))  # every place within
    b.wait("vector", b.signal("dma0"))
    b.emit("vector", {
        "plain": TensorCopy(dst=dst, src=row),
        "dynamic": TensorCopyDynamic(dst=dst, src=row, offset=at, stride=8, count=1),
        "max8": Max8(dst=dst, src=row),
        "range_select": RangeSelect(dst=dst, src=row, bound0=b.column(sb, n),
                                    bound1=b.column(sb, n), op0=VectorOp.LESS_EQUAL,
                                    op1=VectorOp.LESS_EQUAL, start=-100),
        "dropout": Dropout(dst=dst, src=row, imm=0.0)}[copy])
    b.wait("dma1", b.signal("vector"))
    b.emit("dma1", DmaCopy(dst=out.ap((0, n)), src=dst))
    values = -np.arange(1, 8 * n + 1, dtype=np.float32).reshape(n, 8)  # descending a row
    words = values.view(np.uint32).copy()
    words[:, 0] = 0x7FC00001  # a quiet NaN with a payload
    hbm = np.zeros(p.hbm_bytes, np.uint8)
    hbm[:words.nbytes] = words.view(np.uint8).reshape(-1)
    Core(p).run(b.program, hbm=hbm)
    got = hbm[out.offset:out.offset + words.nbytes].view(np.uint32).reshape(n, 8)
    nan_at = 7 if copy == "max8" else 0  # Max8: a NaN below every other, last
    assert (got[:, nan_at] == 0x7FC00000).all()
    assert np.array_equal(np.delete(got, nan_at, axis=1), words[:, 1:])
