"""A sequencer's ring (:class:`hdl.core.sequencer.Sequencer`), in Amaranth's simulator: a
stream longer than the ring runs as the host feeds it."""

from amaranth.hdl import Module
from amaranth.sim import Simulator

from hdl.core.isa import WORD_BITS, TensorCopy
from hdl.core.sequencer import CHUNK_BITS, Sequencer

DEPTH, LENGTH = 4, 11
CHUNKS = WORD_BITS // CHUNK_BITS


def test_a_stream_longer_than_the_ring_runs_as_the_host_feeds_it():
    """Eleven instructions through a ring of four slots, the host writing each into slot
    ``i % 4`` once its predecessor there has retired: each is issued once, in order; while
    every loaded instruction has retired the sequencer waits at fetch (running, nothing
    issued, ``pc`` unmoved); the stamps of a slot are its last instruction's."""
    words = [TensorCopy.OPCODE | (i + 1) << (WORD_BITS - 32) for i in range(LENGTH)]
    seq = Sequencer(DEPTH)
    top = Module()
    top.submodules.seq = seq
    top.d.comb += seq.done.eq(seq.issue)  # an engine that finishes as it is issued
    issued, starved, cycle = [], [], [0]

    async def bench(ctx):
        async def tick():
            await ctx.tick()
            cycle[0] += 1
            ctx.set(seq.cycle, cycle[0])
            if ctx.get(seq.issue):
                issued.append(ctx.get(seq.word))

        async def feed(begin, end):
            for i in range(begin, end):
                for k in range(CHUNKS):
                    ctx.set(seq.load_en, 1)
                    ctx.set(seq.load_index, i % DEPTH)
                    ctx.set(seq.load_chunk, k)
                    ctx.set(seq.load_data, words[i] >> (CHUNK_BITS * k) & (2**CHUNK_BITS - 1))
                    await tick()
            ctx.set(seq.load_en, 0)
            ctx.set(seq.loaded, end)

        await feed(0, DEPTH)
        ctx.set(seq.length, LENGTH)
        ctx.set(seq.start, 1)
        await tick()
        ctx.set(seq.start, 0)
        loaded = DEPTH
        while ctx.get(seq.running):
            pc = ctx.get(seq.pc)
            if pc == loaded:  # starved: it must hold here until fed
                before = len(issued)
                for _ in range(5):
                    await tick()
                starved.append((pc, ctx.get(seq.pc), len(issued) - before,
                                ctx.get(seq.running)))
                end = min(LENGTH, pc + DEPTH)
                await feed(loaded, end)
                loaded = end
            await tick()

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    assert issued == words
    assert starved == [(4, 4, 0, 1), (8, 8, 0, 1)]
