"""Simulation top for the systolic array: tiles in on-chip memories, streams driven in RTL.

A testbench writes a whole program (commands, stationary beats, moving beats) into the
harness memories through the simulator's memory access, sets the knobs and pulses ``start``;
the harness then feeds the array and captures every output beat with the cycle of its
transfer, with no testbench action per clock. This keeps the per-cycle cost of the testbench
out of the measurement (cocotb's per-edge cost would otherwise dominate).

Random idle cycles on the three sources and random backpressure on the sink come from one
xorshift32 generator per stream, seeded from ``seed``; a source that offered a beat keeps it
offered until it is taken. ``idle`` and ``stall`` are probabilities in 1/256. A tiled
array has a moving source per row group and a result memory per column group; the run ends
when every command is taken and column group h has given ``expect[h]`` beats.
"""

from __future__ import annotations

from dataclasses import dataclass

from amaranth import Cat, ClockSignal, Instance, Module, ResetSignal, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .params import SystolicParams
from .systolic import SystolicArray, cmd_layout, stationary_layout

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
            "expect": In(32 * params.array.ways),
            "done": Out(1),
        })

    def elaborate(self, platform):
        hp, p = self.params, self.params.array
        m = Module()
        ways = p.ways
        cmd_width = cmd_layout(p).size
        stat_width = stationary_layout(p).size
        mov_width = p.group_rows * p.width
        res_width = 32 * p.group_cols

        # The testbench reads and writes these through the simulator (names are the API):
        # per row group g its moving words ``mov`` (one group) or ``mov_<g>``, per column
        # group h its output words and their cycles ``res``/``res_stamp`` (one group) or
        # ``res_<h>``/``res_stamp_<h>``.
        def name(base, g):
            return base if ways == 1 else f"{base}_{g}"

        m.submodules.prog = prog = memory.Memory(shape=cmd_width, depth=hp.program_depth,
                                                 init=[])
        m.submodules.stat = stat = memory.Memory(shape=stat_width, depth=hp.stationary_depth,
                                                 init=[])
        movs, results, stamps = [], [], []
        for g in range(ways):
            movs.append(memory.Memory(shape=mov_width, depth=hp.moving_depth, init=[]))
            results.append(memory.Memory(shape=res_width, depth=hp.result_depth, init=[]))
            stamps.append(memory.Memory(shape=32, depth=hp.result_depth, init=[]))
            m.submodules[name("mov", g)] = movs[g]
            m.submodules[name("res", g)] = results[g]
            m.submodules[name("res_stamp", g)] = stamps[g]
        m.submodules.cmd_stamp = cmd_stamp = memory.Memory(shape=32, depth=hp.program_depth,
                                                           init=[])

        def stream_of(name, width, valid=1, ready=1):
            return {"payload": Signal(width, name=f"{name}_payload"),
                    "valid": Signal(valid, name=f"{name}_valid"),
                    "ready": Signal(ready, name=f"{name}_ready")}

        streams = {"cmd": stream_of("cmd", cmd_width),
                   "stationary": stream_of("stationary", stat_width),
                   "moving": stream_of("moving", ways * mov_width, ways, ways),
                   "out": stream_of("out", ways * res_width, ways, 1)}
        if self.dut_module is None:
            m.submodules.dut = dut = SystolicArray(p)
            for name_, s in streams.items():
                port = getattr(dut, name_)
                if name_ == "out":
                    m.d.comb += [s["payload"].eq(port.payload), s["valid"].eq(port.valid),
                                 port.ready.eq(s["ready"])]
                else:
                    m.d.comb += [port.payload.eq(s["payload"]), port.valid.eq(s["valid"]),
                                 s["ready"].eq(port.ready)]
        else:
            kwargs = {"i_clk": ClockSignal(), "i_rst": ResetSignal()}
            for name_, s in streams.items():
                out = name_ == "out"
                kwargs[f"{'o' if out else 'i'}_{name_}__payload"] = s["payload"]
                kwargs[f"{'o' if out else 'i'}_{name_}__valid"] = s["valid"]
                kwargs[f"{'i' if out else 'o'}_{name_}__ready"] = s["ready"]
            m.submodules.dut = Instance(self.dut_module, **kwargs)

        running = Signal()
        cycle = Signal(32)
        sources = ["cmd", "stationary"] + [f"moving{g}" for g in range(ways)]
        ptr = {n: Signal(32, name=f"{n}_ptr") for n in sources}
        out_ptr = [Signal(32, name=f"out{h}_ptr") for h in range(ways)]
        rng = {n: Signal(32, name=f"{n}_rng", init=1) for n in sources + ["out"]}
        hold = {n: Signal(name=f"{n}_hold") for n in sources}

        with m.If(self.start):
            m.d.sync += [running.eq(1), cycle.eq(0), self.done.eq(0)]
            m.d.sync += [p_.eq(0) for p_ in [*ptr.values(), *out_ptr]]
            m.d.sync += [h.eq(0) for h in hold.values()]
            for i, r in enumerate(rng.values()):
                m.d.sync += r.eq(self.seed ^ (0x9E3779B9 * (i + 1) & 0xFFFFFFFF) | 1)
        with m.Else():
            m.d.sync += cycle.eq(cycle + 1)
            for r in rng.values():
                s1 = r ^ (r << 13)[:32]
                s2 = s1 ^ (s1 >> 17)
                m.d.sync += r.eq(s2 ^ (s2 << 5)[:32])

        mov = streams["moving"]
        readers = {"cmd": (prog, streams["cmd"], 0, cmd_width),
                   "stationary": (stat, streams["stationary"], 0, stat_width)}
        for g in range(ways):
            readers[f"moving{g}"] = (movs[g], mov, g, mov_width)
        for n, (mem, s, g, width) in readers.items():
            rp = mem.read_port(domain="comb")
            valid, ready = s["valid"][g], s["ready"][g]
            m.d.comb += [rp.addr.eq(ptr[n]), s["payload"][g * width:(g + 1) * width].eq(rp.data)]
            available = running & ~self.start
            if n == "cmd":
                available = available & (ptr["cmd"] < self.n_cmds)
            gate = rng[n][:8] < self.idle
            m.d.comb += valid.eq(available & (hold[n] | ~gate))
            m.d.sync += hold[n].eq(valid & ~ready & ~self.start)
            with m.If(valid & ready & ~self.start):
                m.d.sync += ptr[n].eq(ptr[n] + 1)

        out = streams["out"]
        m.d.comb += out["ready"].eq(running & ~self.start & ~(rng["out"][:8] < self.stall))

        cmd = streams["cmd"]
        cmd_fire = cmd["valid"] & cmd["ready"]
        cwp = cmd_stamp.write_port()
        m.d.comb += [cwp.addr.eq(ptr["cmd"]), cwp.data.eq(cycle), cwp.en.eq(cmd_fire)]

        fires, finished = [], []
        for h in range(ways):
            fire = out["valid"][h] & out["ready"]
            rwp, swp = results[h].write_port(), stamps[h].write_port()
            m.d.comb += [
                rwp.addr.eq(out_ptr[h]), rwp.en.eq(fire),
                rwp.data.eq(out["payload"][h * res_width:(h + 1) * res_width]),
                swp.addr.eq(out_ptr[h]), swp.data.eq(cycle), swp.en.eq(fire),
            ]
            with m.If(fire):
                m.d.sync += out_ptr[h].eq(out_ptr[h] + 1)
            fires.append(fire)
            finished.append(out_ptr[h] == self.expect[32 * h:32 * (h + 1)])

        with m.If(running & ~self.start & (ptr["cmd"] == self.n_cmds)
                  & Cat(*finished).all() & ~cmd_fire & ~Cat(*fires).any()):
            m.d.sync += [self.done.eq(1), running.eq(0)]
        return m
