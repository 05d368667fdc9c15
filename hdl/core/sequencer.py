"""One engine's sequencer: its instruction memory, fetch, the semaphore instructions and
the hand-off of every other instruction to its engine.

The instruction memory is a ring of ``depth`` slots: instruction ``i`` of the stream sits in
slot ``i % depth``. The host writes it 32 bits at a time (``load``), the stream's ``length``
and ``loaded``, the instructions written so far; ``start`` runs the stream from instruction
0. A stream longer than the ring is fed as it runs: the host reads ``pc`` (the instructions
retired), collects their stamps, writes the next instructions into their slots (instruction
``j`` only once ``j < pc + depth``) and raises ``loaded``; the sequencer waits at fetch while
``pc == loaded``. Per instruction: fetch (one cycle: the memory's read latency), decode, then

* ``SemSignal``: one cycle, ``signal`` carries the semaphore and count to the core's
  semaphores (every earlier instruction of the stream has completed: the sequencer runs one
  instruction at a time);
* ``SemWait``: ``wait_sem``/``wait_value`` out, ``waiting`` high until ``wait_ok``;
* otherwise ``issue`` holds the word to the engine until the engine's ``done``, and the
  instruction retires once the engine is done and ``least`` cycles have passed since its
  decode (the engine's cost rule, :class:`hdl.core.timing.StreamRule`; 0 where the engine's
  own schedule is its time).

The next instruction's slot is read while one executes: where it was loaded by then, it is
decoded in the cycle its predecessor retires, so a stream's instructions follow one another
without a cycle between them (else it is fetched as the first is).

Each retired instruction's start cycle (its decode) and end cycle (its retirement) go to the
stamp memory, to the instruction's slot, which the host reads (before the slot is loaded
again).
"""

from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from hdl.core.isa import OPCODE_BITS, WORD_BITS, SemSignal, SemWait, field_positions

__all__ = ["CHUNK_BITS", "COUNT_BITS", "CYCLE_BITS", "Sequencer"]

#: Width of one host write into the instruction memory.
CHUNK_BITS = 32
CYCLE_BITS = 32
#: Width of a stream's length, its loaded count and its program counter.
COUNT_BITS = 32


def _field(word, cls, name):
    pos, bits, _ = field_positions(cls)[name]
    return word[pos:pos + bits]


class Sequencer(wiring.Component):
    """The sequencer of one instruction stream, its instruction memory a ring of ``depth``
    slots (see the module docstring)."""

    def __init__(self, depth: int):
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"depth must be a positive integer, not {depth!r}")
        self.depth = depth
        chunks = WORD_BITS // CHUNK_BITS
        super().__init__({
            "load_en": In(1), "load_index": In(range(depth)), "load_chunk": In(range(chunks)),
            "load_data": In(CHUNK_BITS),
            "length": In(COUNT_BITS), "loaded": In(COUNT_BITS),
            "start": In(1),
            "cycle": In(CYCLE_BITS),
            "word": Out(WORD_BITS),
            "issue": Out(1),
            "done": In(1),
            "least": In(CYCLE_BITS),
            "signal": Out(1), "signal_sem": Out(8), "signal_count": Out(16),
            "waiting": Out(1), "wait_sem": Out(8), "wait_value": Out(32), "wait_ok": In(1),
            "running": Out(1),
            "pc": Out(COUNT_BITS),
            "stamp_index": In(range(depth)),
            "stamp": Out(2 * CYCLE_BITS),
        })

    def elaborate(self, platform):
        m = Module()
        chunks = WORD_BITS // CHUNK_BITS
        m.submodules.imem = imem = Memory(shape=WORD_BITS, depth=self.depth, init=[])
        load = imem.write_port(granularity=CHUNK_BITS)
        fetch = imem.read_port()
        m.d.comb += [
            load.addr.eq(self.load_index),
            load.data.eq(Cat(*([self.load_data] * chunks))),
            load.en.eq(Cat(*[self.load_en & (self.load_chunk == i) for i in range(chunks)])),
        ]
        m.submodules.stamps = stamps = Memory(shape=2 * CYCLE_BITS, depth=self.depth, init=[])
        record = stamps.write_port()
        host = stamps.read_port()
        m.d.comb += host.addr.eq(self.stamp_index), self.stamp.eq(host.data)

        word = self.word
        begin = Signal(CYCLE_BITS)
        finished = Signal()  # the engine is done, the retirement waits for ``least``
        slot = Signal(range(self.depth))
        after = Mux(slot == self.depth - 1, 0, slot + 1)
        ahead = Signal()  # the next instruction was loaded when its slot was read
        opcode = word[:OPCODE_BITS]
        m.d.comb += [
            self.signal_sem.eq(_field(word, SemSignal, "sem")),
            self.signal_count.eq(_field(word, SemSignal, "count")),
            self.wait_sem.eq(_field(word, SemWait, "sem")),
            self.wait_value.eq(_field(word, SemWait, "value")),
            record.addr.eq(slot),
            record.data.eq(Cat(begin, self.cycle)),
        ]
        with m.FSM():
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += self.pc.eq(0), slot.eq(0)
                    m.d.sync += self.running.eq(self.length != 0)
                    with m.If(self.length != 0):
                        m.next = "FETCH"
            with m.State("FETCH"):
                m.d.comb += fetch.addr.eq(slot)
                with m.If(self.pc != self.loaded):
                    m.next = "DECODE"
            with m.State("DECODE"):
                m.d.sync += word.eq(fetch.data), begin.eq(self.cycle)
                m.next = "EXECUTE"
            with m.State("EXECUTE"):
                # the next instruction's slot is read every cycle, for the retirement
                m.d.comb += fetch.addr.eq(after)
                m.d.sync += ahead.eq(self.loaded != self.pc + 1)
                with m.If(opcode == SemSignal.OPCODE):
                    m.d.comb += self.signal.eq(1)
                    m.next = "RETIRE"
                with m.Elif(opcode == SemWait.OPCODE):
                    m.d.comb += self.waiting.eq(~self.wait_ok)
                    with m.If(self.wait_ok):
                        m.next = "RETIRE"
                with m.Else():
                    m.d.comb += self.issue.eq(~finished)
                    with m.If(self.done | finished):
                        with m.If((self.cycle - begin)[:CYCLE_BITS] + 1 >= self.least):
                            m.d.sync += finished.eq(0)
                            m.next = "RETIRE"
                        with m.Else():
                            m.d.sync += finished.eq(1)
            with m.State("RETIRE"):
                m.d.comb += record.en.eq(1)
                m.d.sync += self.pc.eq(self.pc + 1)
                m.d.sync += slot.eq(after)
                with m.If(self.pc + 1 == self.length):
                    m.d.sync += self.running.eq(0)
                    m.next = "IDLE"
                with m.Elif(ahead):  # decoded as this one retires
                    m.d.sync += word.eq(fetch.data), begin.eq(self.cycle)
                    m.next = "EXECUTE"
                with m.Else():
                    m.next = "FETCH"
        return m
