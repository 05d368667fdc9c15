"""The stream rule (:mod:`hdl.core.timing`): its figures worked by hand, the RTL's
:class:`~hdl.core.timing.StreamRule` against it on every instruction of random programs, and
the sequencer holding an instruction's retirement to it."""

import pytest
from amaranth.hdl import Module, Mux, Signal
from amaranth.sim import Simulator

from conftest import comb_outputs
from hdl.core.isa import (
    AP,
    WORD_BITS,
    Activation,
    Iota,
    SequenceBounds,
    TensorCopy,
    TensorCopyDynamic,
    TensorTensor,
    encode,
)
from hdl.core.sequencer import CHUNK_BITS, Sequencer
from hdl.core.timing import StreamRule, instruction_cycles
from hdl.params import core_params
from hdl.vector.ops import VectorOp
from sim.tb.core_random import random_program
from specs.loader import load

STREAMS = ("vector", "scalar", "gpsimd")


def ap(space, free, stride=1, dtype="fp32", partitions=4, offset=0):
    return AP(space, dtype, 0, partitions, offset, ((free, stride),))


@pytest.fixture(scope="module")
def trn2():
    return core_params(load("trn2"), "sim")


def test_hand_worked_figures(trn2):
    """trn2 at simulation scale (access start 60, least interval 64, dynamic 600, the vector
    engine 2 elements a cycle, strides over 16 bytes doubled, 4 activation lanes), worked by
    hand."""
    p = trn2
    assert (p.access_start, p.min_interval, p.dynamic_interval, p.stride_penalty,
            p.vector_elements, p.activation_lanes) == (60, 64, 600, 16, 2, 4)
    add = TensorTensor(dst=ap("sbuf", 101), a=ap("sbuf", 101), b=ap("sbuf", 101),
                       op=VectorOp.ADD)
    assert instruction_cycles(p, "vector", add) == 60 + 101  # two streams of 101, 2 a cycle
    assert instruction_cycles(p, "gpsimd", add) == 60 + 202  # 1 a cycle
    from_psum = TensorTensor(dst=ap("sbuf", 101), a=ap("psum", 101), b=ap("sbuf", 101),
                             op=VectorOp.ADD)
    assert instruction_cycles(p, "vector", from_psum) == 60 + 64  # ceil(101 / 2) = 51 < 64
    copy = TensorCopy(dst=ap("sbuf", 129), src=ap("sbuf", 129, stride=5))  # 20 B > 16 B
    assert instruction_cycles(p, "vector", copy) == 60 + 129
    assert instruction_cycles(p, "scalar", copy) == 60 + 258
    narrow = TensorCopy(dst=ap("sbuf", 129), src=ap("sbuf", 129, stride=8, dtype="bf16"))
    assert instruction_cycles(p, "vector", narrow) == 60 + 65  # 16 B: not over
    dynamic = TensorCopyDynamic(dst=ap("sbuf", 8), src=ap("sbuf", 8),
                                offset=ap("sbuf", 1, dtype="int32", partitions=1),
                                stride=1, count=1)
    assert instruction_cycles(p, "vector", dynamic) == 60 + 600
    act = Activation(dst=ap("sbuf", 200), src=ap("sbuf", 200), func=0,
                     reduce_dst=ap("sbuf", 1))
    assert instruction_cycles(p, "scalar", act) == 60 + 200 + 64
    wide = Activation(dst=ap("sbuf", 32, partitions=16), src=ap("sbuf", 32, partitions=13),
                      func=0)
    assert instruction_cycles(p, "scalar", wide) == 60 + 4 * 32  # 13 rows: 4 turns of 4 lanes
    assert instruction_cycles(p, "vector", wide) == 60 + 64
    bounds = SequenceBounds(dst=ap("sbuf", 300, dtype="int32", partitions=1),
                            src=ap("sbuf", 150, dtype="int32", partitions=1))
    assert instruction_cycles(p, "gpsimd", bounds) == 60 + 300  # its dst's elements
    iota = Iota(dst=AP("sbuf", "int32", 0, 4, 0, ((3, 35), (5, 7), (7, 1))))
    assert instruction_cycles(p, "gpsimd", iota) == 60 + 105


@pytest.mark.parametrize("chip", ["trn1", "trn2"])
def test_the_rtl_rule_is_the_simulators(chip, trn2):
    """:class:`StreamRule` gives :func:`instruction_cycles` of every vector, scalar and
    GpSimd instruction of eight random programs and the hand-worked cases' kinds."""
    p = core_params(load(chip), "sim")
    programs = [random_program(p, seed) for seed in range(1, 9)]
    checked = 0
    for engine in STREAMS:
        instructions = [ins for prog in programs for ins in prog.streams.get(engine, [])
                        if type(ins).__name__ not in ("SemSignal", "SemWait")]
        words = [int.from_bytes(encode(ins), "little") for ins in instructions]
        want = [instruction_cycles(p, engine, ins) for ins in instructions]
        rule = StreamRule(p, engine)
        assert comb_outputs(rule, rule.word, rule.cycles, words) == want
        checked += len(words)
    assert checked > 50


def _stream(words: list[int], busy: int, least: int = 0, depth: int = 4):
    """Run ``words`` through a sequencer of ``depth`` slots (loaded before the start, the
    retirement held to ``least``), its engine done in its ``busy``-th cycle of issue: the
    cycles ``issue`` was high, the words of the cycles it was done, and each instruction's
    (decode, retirement) stamps."""
    seq = Sequencer(depth)
    top = Module()
    top.submodules.seq = seq
    count = Signal(8)
    with top.If(seq.issue):
        top.d.sync += count.eq(Mux(seq.done, 0, count + 1))
    top.d.comb += seq.done.eq(seq.issue & (count == busy - 1))
    top.d.sync += seq.cycle.eq(seq.cycle + 1)
    issue_cycles, done_words, stamps = [0], [], []

    async def bench(ctx):
        for i, w in enumerate(words):
            for k in range(WORD_BITS // CHUNK_BITS):
                ctx.set(seq.load_en, 1)
                ctx.set(seq.load_index, i)
                ctx.set(seq.load_chunk, k)
                ctx.set(seq.load_data, w >> (CHUNK_BITS * k) & (2**CHUNK_BITS - 1))
                await ctx.tick()
        ctx.set(seq.load_en, 0)
        ctx.set(seq.least, least)
        ctx.set(seq.length, len(words))
        ctx.set(seq.loaded, len(words))
        ctx.set(seq.start, 1)
        await ctx.tick()
        ctx.set(seq.start, 0)
        while ctx.get(seq.running):
            issue_cycles[0] += ctx.get(seq.issue)
            if ctx.get(seq.issue) and ctx.get(seq.done):
                done_words.append(ctx.get(seq.word))
            await ctx.tick()
        for i in range(len(words)):
            ctx.set(seq.stamp_index, i)
            await ctx.tick()
            stamp = ctx.get(seq.stamp)
            stamps.append((stamp & 0xFFFFFFFF, stamp >> 32))

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return issue_cycles[0], done_words, stamps


WORDS = [TensorCopy.OPCODE | (i + 1) << 64 for i in range(3)]


def test_the_sequencer_holds_retirement_to_the_rule():
    """An engine done in the fifth cycle of its issue retires at the rule's cycles after
    decode when they are more (and not before), at its own time when they are fewer; issued
    once either way."""
    for least, span in ((0, 6), (3, 6), (40, 40)):
        issued, done, stamps = _stream(WORDS[:1], busy=5, least=least)
        assert (issued, done) == (5, WORDS[:1])  # issued until its done, once
        assert stamps[0][1] - stamps[0][0] == span  # its own: five issued, the retirement


def test_a_streams_instructions_follow_without_a_gap():
    """Three instructions loaded before the start, each done in the third cycle of its
    issue: each is decoded in the cycle its predecessor retires (its slot read while that
    one ran), as the simulator starts an engine's next instruction when the last ends."""
    issued, done, stamps = _stream(WORDS, busy=3)
    assert done == WORDS
    assert [end - begin for begin, end in stamps] == [4, 4, 4]  # 3 issued, the retirement
    assert [stamps[i + 1][0] for i in range(2)] == [stamps[i][1] for i in range(2)]
