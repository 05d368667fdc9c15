"""The bench of a memory emitted without its initial contents (as `gen chip` emits the core's
SBUF and PSUM, tests/test_amaranth_internals.py): what is written reads back, and a word never
written reads undefined (Icarus's X) instead of the zero Amaranth's public path gives it.

The design under test is one memory of 16 bytes with a write port and a synchronous read
port; the cocotb test ``write_then_read`` writes eight words and reads all sixteen back.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

TOPLEVEL = "sram"
WRITTEN = {address: (37 * address + 11) % 256 for address in range(8)}


class Sram(wiring.Component):
    """16 words of 8 bits: ``we`` writes ``wdata`` at ``waddr``; ``rdata`` is the word at
    ``raddr`` of the cycle before."""

    def __init__(self):
        super().__init__({"we": In(1), "waddr": In(4), "wdata": In(8), "raddr": In(4),
                          "rdata": Out(8)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=8, depth=16, init=[])
        write, read = mem.write_port(), mem.read_port()
        m.d.comb += [write.en.eq(self.we), write.addr.eq(self.waddr),
                     write.data.eq(self.wdata), read.addr.eq(self.raddr),
                     self.rdata.eq(read.data)]
        return m


try:
    import cocotb
    from cocotb.clock import Clock
    from cocotb.triggers import ReadOnly, RisingEdge
except ImportError:  # pytest collection without cocotb is not a supported setup
    cocotb = None


if cocotb is not None:
    @cocotb.test()
    async def write_then_read(dut):
        cocotb.start_soon(Clock(dut.clk, 2, unit="ns").start())
        dut.rst.value = 0
        dut.we.value = 0
        for address, value in WRITTEN.items():
            dut.we.value, dut.waddr.value, dut.wdata.value = 1, address, value
            await RisingEdge(dut.clk)
        dut.we.value = 0
        for address in range(16):
            dut.raddr.value = address
            await RisingEdge(dut.clk)
            await ReadOnly()
            word = dut.rdata.value
            if address in WRITTEN:
                assert word.is_resolvable and int(word) == WRITTEN[address], (address, word)
            elif cocotb.SIM_NAME.lower().startswith("icarus"):
                assert not word.is_resolvable, f"word {address} reads {word}, not undefined"
            await RisingEdge(dut.clk)
