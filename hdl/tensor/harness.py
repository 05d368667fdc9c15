"""Simulation top for the systolic array: tiles in on-chip memories, streams driven in RTL.

A testbench writes a whole program (commands, stationary beats, moving beats) into the
harness memories through the simulator's memory access, sets the knobs and pulses ``start``;
the harness then feeds the array and captures every output beat with the cycle of its
transfer, with no testbench action per clock. This keeps the per-cycle cost of the testbench
out of the measurement (cocotb's per-edge cost would otherwise dominate).

Random idle cycles on the three sources and random backpressure on the sink come from one
xorshift32 generator per stream, seeded from ``seed``; a source that offered a beat keeps it
offered until it is taken. ``idle`` and ``stall`` are probabilities in 1/256.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import ClockSignal, Instance, Module, ResetSignal, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .params import SystolicParams
from .systolic import Op, SystolicArray, cmd_layout, stationary_layout

__all__ = ["HarnessParams", "SystolicHarness", "xorshift32"]


def xorshift32(state: int) -> int:
    """One step of the generator (Marsaglia's 13/17/5 xorshift), as the RTL computes it."""
    state ^= (state << 13) & 0xFFFFFFFF
    state ^= state >> 17
    state ^= (state << 5) & 0xFFFFFFFF
    return state


@dataclass(frozen=True, kw_only=True)
class HarnessParams:
    """Memory depths of the harness around one array."""

    array: SystolicParams
    program_depth: int = 16
    stationary_depth: int = 64
    moving_depth: int = 256
    result_depth: int = 256

    def __post_init__(self):
        if not isinstance(self.array, SystolicParams):
            raise ValueError(f"array must be a SystolicParams, not {self.array!r}")
        for field in ("program_depth", "stationary_depth", "moving_depth", "result_depth"):
            value = getattr(self, field)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{field} must be a positive integer, not {value!r}")


class SystolicHarness(wiring.Component):
    """Memories, stream sources and sink around a :class:`SystolicArray`.

    With ``dut_module`` set, the array is an instance of that separately emitted Verilog
    module (the generator's hierarchical emission) instead of an elaborated submodule.
    """

    def __init__(self, params: HarnessParams, *, dut_module: str | None = None):
        self.params = params
        self.dut_module = dut_module
        super().__init__({
            "start": In(1),
            "n_cmds": In(bits_for(params.program_depth)),
            "seed": In(32),
            "idle": In(8),
            "stall": In(8),
            "done": Out(1),
        })

    def elaborate(self, platform):
        hp, p = self.params, self.params.array
        m = Module()
        cmd_width = cmd_layout(p).size
        stat_width = stationary_layout(p).size
        mov_width = p.rows * p.width
        res_width = 32 * p.cols

        # The testbench reads and writes these through the simulator (names are the API).
        m.submodules.prog = prog = memory.Memory(shape=cmd_width, depth=hp.program_depth,
                                                 init=[])
        m.submodules.stat = stat = memory.Memory(shape=stat_width, depth=hp.stationary_depth,
                                                 init=[])
        m.submodules.mov = mov = memory.Memory(shape=mov_width, depth=hp.moving_depth, init=[])
        m.submodules.res = res = memory.Memory(shape=res_width, depth=hp.result_depth, init=[])
        m.submodules.cmd_stamp = cmd_stamp = memory.Memory(shape=32, depth=hp.program_depth,
                                                           init=[])
        m.submodules.res_stamp = res_stamp = memory.Memory(shape=32, depth=hp.result_depth,
                                                           init=[])

        streams = {}
        for name, width in (("cmd", cmd_width), ("stationary", stat_width),
                            ("moving", mov_width), ("out", res_width)):
            streams[name] = {
                "payload": Signal(width, name=f"{name}_payload"),
                "valid": Signal(name=f"{name}_valid"),
                "ready": Signal(name=f"{name}_ready"),
            }
        if self.dut_module is None:
            m.submodules.dut = dut = SystolicArray(p)
            for name, s in streams.items():
                port = getattr(dut, name)
                if name == "out":
                    m.d.comb += [s["payload"].eq(port.payload), s["valid"].eq(port.valid),
                                 port.ready.eq(s["ready"])]
                else:
                    m.d.comb += [port.payload.eq(s["payload"]), port.valid.eq(s["valid"]),
                                 s["ready"].eq(port.ready)]
        else:
            kwargs = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
            for name, s in streams.items():
                out = name == "out"
                kwargs[f"{'o' if out else 'i'}_{name}__payload"] = s["payload"]
                kwargs[f"{'o' if out else 'i'}_{name}__valid"] = s["valid"]
                kwargs[f"{'i' if out else 'o'}_{name}__ready"] = s["ready"]
            m.submodules.dut = Instance(self.dut_module, **kwargs)

        running = Signal()
        cycle = Signal(32)
        expected = Signal(32)
        ptr = {name: Signal(32, name=f"{name}_ptr") for name in ("cmd", "stationary", "moving",
                                                               "out")}
        rng = {name: Signal(32, name=f"{name}_rng", init=1) for name in ptr}
        hold = {name: Signal(name=f"{name}_hold") for name in ("cmd", "stationary", "moving")}

        with m.If(self.start):
            m.d.sync += [running.eq(1), cycle.eq(0), expected.eq(0), self.done.eq(0)]
            m.d.sync += [p_.eq(0) for p_ in ptr.values()]
            m.d.sync += [h.eq(0) for h in hold.values()]
            for i, r in enumerate(rng.values()):
                m.d.sync += r.eq(self.seed ^ (0x9E3779B9 * (i + 1) & 0xFFFFFFFF) | 1)
        with m.Else():
            m.d.sync += cycle.eq(cycle + 1)
            for r in rng.values():
                s1 = r ^ (r << 13)[:32]
                s2 = s1 ^ (s1 >> 17)
                m.d.sync += r.eq(s2 ^ (s2 << 5)[:32])

        readers = {"cmd": prog, "stationary": stat, "moving": mov}
        for name, mem in readers.items():
            s = streams[name]
            rp = mem.read_port(domain="comb")
            m.d.comb += [rp.addr.eq(ptr[name]), s["payload"].eq(rp.data)]
            available = running & ~self.start
            if name == "cmd":
                available = available & (ptr["cmd"] < self.n_cmds)
            gate = rng[name][:8] < self.idle
            m.d.comb += s["valid"].eq(available & (hold[name] | ~gate))
            m.d.sync += hold[name].eq(s["valid"] & ~s["ready"] & ~self.start)
            with m.If(s["valid"] & s["ready"] & ~self.start):
                m.d.sync += ptr[name].eq(ptr[name] + 1)

        out = streams["out"]
        m.d.comb += out["ready"].eq(running & ~self.start & ~(rng["out"][:8] < self.stall))

        cmd = streams["cmd"]
        cmd_view = Signal(cmd_layout(p))
        m.d.comb += cmd_view.eq(cmd["payload"])
        cmd_fire = cmd["valid"] & cmd["ready"]
        cwp = cmd_stamp.write_port()
        m.d.comb += [cwp.addr.eq(ptr["cmd"]), cwp.data.eq(cycle), cwp.en.eq(cmd_fire)]
        with m.If(cmd_fire & (cmd_view.op != Op.LOAD)):
            m.d.sync += expected.eq(expected + cmd_view.n)

        out_fire = out["valid"] & out["ready"]
        rwp = res.write_port()
        swp = res_stamp.write_port()
        m.d.comb += [
            rwp.addr.eq(ptr["out"]), rwp.data.eq(out["payload"]), rwp.en.eq(out_fire),
            swp.addr.eq(ptr["out"]), swp.data.eq(cycle), swp.en.eq(out_fire),
        ]
        with m.If(out_fire):
            m.d.sync += ptr["out"].eq(ptr["out"] + 1)

        with m.If(running & ~self.start & (ptr["cmd"] == self.n_cmds)
                  & (ptr["out"] == expected) & ~cmd_fire & ~out_fire):
            m.d.sync += [self.done.eq(1), running.eq(0)]
        return m
