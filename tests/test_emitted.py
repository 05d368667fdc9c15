# amaranth: UnusedElaboratable=no
# (the components made here for their signatures are emitted apart, never elaborated)
"""hdl.emitted: a component emitted once as its own module and instantiated by name, the
instance's ports taken from the component's signature."""

import re

from amaranth.back import verilog
from amaranth.hdl import Module, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from hdl import emitted
from hdl.emitted import Emitted, member_ports, module_text, place, signature_ports, texts


class Doubler(wiring.Component):
    """A registered stream stage that doubles its payload (a stream in, a stream out, a
    plain input): ports of every kind an instance must carry."""

    i: In(stream.Signature(8))
    o: Out(stream.Signature(9))
    hold: In(1)

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.i.ready.eq(~self.hold & (~self.o.valid | self.o.ready))
        with m.If(self.i.ready):
            m.d.sync += [self.o.valid.eq(self.i.valid), self.o.payload.eq(self.i.payload * 2)]
        return m


def _module_ports(text: str, name: str) -> dict[str, str]:
    """Port -> direction of the module ``name`` in the Verilog ``text`` (Yosys' backend
    declares each port on a line of its own)."""
    body = text[re.search(rf"^module {re.escape(name)}\(", text, re.M).end():]
    body = body[:body.index("endmodule")]
    return {m.group(2): m.group(1) for m in
            re.finditer(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[[^]]*\]\s*)?(\S+?);",
                        body, re.M)}


def _connections(text: str, module: str) -> set[str]:
    """The ports connected on the instance of ``module`` in ``text``."""
    start = re.search(rf"^\s*{re.escape(module)}\s+\S+\s*\(", text, re.M).end()
    return set(re.findall(r"\.(\w+)\(", text[start:text.index(");", start)]))


def test_signature_ports_follow_amaranths_port_names_and_flows():
    """Each member of an interface as Amaranth's Verilog names the top module's port, with
    its flow from the component's side."""
    unit = Doubler()
    got = {name: flow for name, flow, _ in signature_ports(unit)}
    assert got == {"i__payload": In, "i__valid": In, "i__ready": Out, "o__payload": Out,
                   "o__valid": Out, "o__ready": In, "hold": In}
    declared = _module_ports(module_text(Doubler(), "doubler"), "doubler")
    assert declared == {"clk": "input", "rst": "input",
                        **{name: "input" if flow == In else "output"
                           for name, flow in got.items()}}


def test_an_emitted_instance_connects_every_port_of_its_module():
    """The instance inside :class:`Emitted` connects each port the module's own Verilog
    declares (clock and reset included), no other."""
    top = Emitted(Doubler(), "doubler", name="stage")
    wrapper = verilog.convert(top, name="wrapper", emit_src=False)
    assert _connections(wrapper, "doubler") == set(_module_ports(
        module_text(Doubler(), "doubler"), "doubler"))
    assert re.search(r"^\s*doubler stage \(", wrapper, re.M)
    assert list(top.modules()) == ["doubler"]
    assert "verilator no_inline_module" in top.modules()["doubler"]()


def test_modules_are_named_without_elaborating_and_taken_ones_never_are(monkeypatch):
    """A unit's modules list their names without elaborating a text; :func:`texts`
    elaborates those it is not told another unit gives, and a name's text defines the
    module of that name (the lane's, the fp32 multiplier's)."""
    from hdl.vector.vector import Vector, VectorParams

    unit = Vector(VectorParams(lanes=1, rng=None, formats=("fp32", "bf16")),
                  lane_instances=True)
    real = emitted.verilog.convert
    calls = []
    monkeypatch.setattr(emitted.verilog, "convert",
                        lambda *a, **k: calls.append(k["name"]) or real(*a, **k))
    modules = unit.modules()
    names = list(modules)
    assert calls == [] and names[0] == Vector.LANE_MODULE
    got = texts(modules, taken=names[1:])
    assert calls == [names[0]]
    assert got[names[0]].count(f"module {names[0]}(") == 1
    assert {name: got[name] for name in names[1:]} == dict.fromkeys(names[1:])
    mul = names.index("numerics_mul32")
    assert re.search(r"^module numerics_mul32\(", modules[names[mul]](), re.M)


class Adder(wiring.Component):
    """A registered adder of plain ports (as a lane's)."""

    a: In(8)
    b: In(8)
    y: Out(9)

    def elaborate(self, platform):
        m = Module()
        m.d.sync += self.y.eq(self.a + self.b)
        return m


def test_a_placed_unit_is_elaborated_in_place_or_instantiated_by_name():
    """:func:`place` without a module name elaborates the unit in place, its ports wired
    (simulated here: the registered sum), and with one instantiates that module, every port
    of the module's own Verilog connected."""
    wires = {"a": Signal(8), "b": Signal(8), "y": Signal(9)}
    ports = member_ports(Adder().signature.members, wires.__getitem__)
    m = Module()
    place(m, "add", Adder, None, ports)
    sim = Simulator(m)
    sim.add_clock(1e-6)
    seen = []

    async def bench(ctx):
        for a, b in ((3, 4), (200, 100), (255, 255)):
            ctx.set(wires["a"], a)
            ctx.set(wires["b"], b)
            await ctx.tick()
            seen.append(ctx.get(wires["y"]))

    sim.add_testbench(bench)
    sim.run()
    assert seen == [7, 300, 510]
    m = Module()
    place(m, "add", Adder, "adder", ports)
    text = verilog.convert(m, name="outer", emit_src=False, ports=list(wires.values()))
    assert _connections(text, "adder") == set(_module_ports(module_text(Adder(), "adder"),
                                                            "adder"))
