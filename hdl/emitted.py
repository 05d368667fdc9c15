"""Components emitted once as Verilog modules of their own, and instantiated by name.

Logic that repeats (a lane per partition, a PE per cell of the array, a sequencer per
instruction stream) or that the chip emits apart (the tensor array, the core's engines) is
emitted once, as the module of a name (:func:`module_text`), and the design above it
instantiates that name (:func:`instance`), the instance's ports being the component's
signature (:func:`signature_ports`); :class:`Emitted` is such an instance as a component
of its own.

A unit that instantiates modules says which, by name and leaves first, as
:data:`Modules`: each name with a function that elaborates its text, so that a caller can
list the names without elaborating anything, take a module by name from elsewhere (the
chip's unit of the same parameters), or elaborate the texts (:func:`texts`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from amaranth.back import verilog
from amaranth.hdl import ClockSignal, Instance, Module, ResetSignal, Value
from amaranth.lib import wiring
from amaranth.lib.wiring import Flow, In

__all__ = ["Emitted", "Modules", "Port", "instance", "member_ports", "module_text",
           "modules_of", "place", "signature_ports", "texts"]

#: Modules by name, leaves first, each with the function that elaborates its Verilog text.
Modules = Mapping[str, Callable[[], str]]
#: A port of an instance: its name, its flow seen from the module, the value it connects.
Port = tuple[str, Flow, Value]


def module_text(component, module: str, *, no_inline: bool = True) -> str:
    """Verilog of ``component`` as the module called ``module``.

    With ``no_inline`` the module carries Verilator's ``no_inline_module`` metacomment, so
    that a Verilator build compiles the module's C++ once and shares it between the
    instances instead of flattening every copy into the top (which multiplies the C++
    compile time by the instance count). Other tools read it as a comment. A small unit
    inside a lane goes without it: Verilator inlines it into the lane, which is compiled
    once anyway.
    """
    text = verilog.convert(component, name=module, emit_src=False)
    if not no_inline:
        return text
    header = text.index(f"module {module}(")
    end = text.index(");\n", header) + 3
    return text[:end] + "  /* verilator no_inline_module */\n" + text[end:]


def instance(module: str, ports: Iterable[Port], *, clocked: bool = True) -> Instance:
    """An ``Instance`` of the module ``module`` with ``ports`` in order (after the clock
    and reset of a ``clocked`` module: a combinational one has neither)."""
    kwargs = {"i_clk": ClockSignal(), "i_rst": ResetSignal()} if clocked else {}
    for name, flow, value in ports:
        kwargs[f"{'i' if flow == In else 'o'}_{name}"] = Value.cast(value)
    return Instance(module, **kwargs)


def place(m: Module, name: str, factory: Callable[[], wiring.Component] | None,
          module: str | None, ports: Iterable[Port], *, clocked: bool = True) -> None:
    """Add a unit to ``m`` as the submodule ``name``, its ``ports`` (named as the unit's
    members, each with its flow and the value it connects) in order: ``factory()``
    elaborated in place when ``module`` is None, else an instance of the module ``module``
    (:func:`instance`; ``clocked`` as there). Both forms have the same ports and
    behaviour."""
    if module is not None:
        m.submodules[name] = instance(module, ports, clocked=clocked)
        return
    m.submodules[name] = unit = factory()
    for port, flow, value in ports:
        m.d.comb += (getattr(unit, port).eq(value) if flow == In
                     else value.eq(getattr(unit, port)))


def signature_ports(component: wiring.Component) -> list[Port]:
    """The ports of ``component``'s signature, each member of an interface as Amaranth's
    Verilog names a port of the top module it emits (the path joined by ``__``)."""
    return [("__".join(map(str, path)), member.flow, value)
            for path, member, value in component.signature.flatten(component)]


def member_ports(members: Mapping[str, wiring.Member],
                 bind: Callable[[str], Value]) -> list[Port]:
    """Ports of the plain ``members`` of a signature (name -> ``In(...)`` / ``Out(...)``),
    each connected to ``bind(name)``."""
    return [(name, member.flow, bind(name)) for name, member in members.items()]


def modules_of(component, /, **shared) -> dict[str, Callable[[], str]]:
    """The modules ``component`` instantiates (its ``modules(**shared)``; none when it has
    no such method)."""
    own = getattr(component, "modules", None)
    return {} if own is None else dict(own(**shared))


def texts(modules: Modules, taken: Iterable[str] = ()) -> dict[str, str | None]:
    """The Verilog text of each of ``modules`` by name, elaborated, except those named in
    ``taken`` (None: the module is another unit's file, not elaborated here)."""
    taken = set(taken)
    return {name: None if name in taken else make() for name, make in modules.items()}


class Emitted(wiring.Component):
    """An instance of ``unit`` emitted once as the module ``module``, with ``unit``'s
    signature as its ports; the instance inside is the submodule ``name``.

    Its modules (:meth:`modules`) are ``modules`` where given (a unit whose module is not
    Amaranth's emission of it: the tensor array's template), else those ``unit``
    instantiates (:func:`modules_of`) followed by ``unit``'s own (:func:`module_text`)."""

    def __init__(self, unit: wiring.Component, module: str, *, name: str = "engine",
                 modules: Modules | None = None):
        self.unit, self.module, self.name = unit, module, name
        self._modules = modules
        super().__init__(unit.signature)

    def modules(self, **shared) -> dict[str, Callable[[], str]]:
        """The modules this instance stands for, leaves first, its own last (``shared``:
        the unit's arguments that leave some of its modules to another unit)."""
        if self._modules is not None:
            return dict(self._modules)
        return {**modules_of(self.unit, **shared),
                self.module: lambda: module_text(self.unit, self.module)}

    def elaborate(self, platform):
        m = Module()
        m.submodules[self.name] = instance(self.module, signature_ports(self))
        return m
