"""Lanes as submodules or as instances of a module emitted once.

At full scale (128 partitions) elaborating every lane's floating-point units takes minutes and
repeats the same Verilog 128 times; instead the lane is emitted once as its own module and the
engine instantiates it by name (``Instance``). Both forms have the same ports and behaviour.
The same holds inside a lane for the fp32 adder and multiplier (:data:`FP_MODULES`), which
the vector and scalar engines' lanes use (the scalar lane about twenty times), and for the
output cast that both lanes share (:func:`cast_module`): each is emitted once per chip, so
that synthesis reads it once and the area roll-up counts it by instance.
"""

from collections.abc import Callable
from functools import partial

from amaranth.hdl import Signal, Value
from amaranth.lib.wiring import In, Out

from hdl.emitted import module_text, place
from hdl.numerics.cast import FormatCastLane
from hdl.numerics.formats import format_by_name
from hdl.numerics.fpu import FpAdd32, FpMul32

#: The modules of the fp32 adder and multiplier (:class:`~hdl.numerics.fpu.FpAdd32`,
#: :class:`~hdl.numerics.fpu.FpMul32`) that lanes instantiate, by operation: named after
#: their unit, ``numerics`` (``hdl/numerics/``, whose golden models are ``add32`` and ``mul32``
#: in ``sim/golden/numerics.py``), and emitted once by every engine that instantiates them.
FP_MODULES = {"add": "numerics_add32", "mul": "numerics_mul32"}
FP_UNITS = {"add": FpAdd32, "mul": FpMul32}


def add_lane(m, name: str, factory, module: str | None, inputs: dict, outputs: dict, *,
             clocked: bool = True):
    """Add one lane to module ``m`` (:func:`hdl.emitted.place`): ``factory()`` as a
    submodule when ``module`` is None, else an instance of the module called ``module``.
    ``inputs`` and ``outputs`` map the lane's port names to the values that drive them / the
    signals they drive. A unit that is not ``clocked`` (combinational) has no ``clk`` and
    ``rst`` ports."""
    place(m, name, factory, module,
          [*((port, In, value) for port, value in inputs.items()),
           *((port, Out, signal) for port, signal in outputs.items())], clocked=clocked)


def shared_verilog(formats: tuple[str, ...], rng: str | None) -> dict[str, Callable[[], str]]:
    """The modules the lanes of an engine of ``formats`` and ``rng`` instantiate besides the
    lane, by name, each as a function that elaborates its Verilog: the fp32 adder and
    multiplier (:data:`FP_MODULES`), then the output cast (:func:`cast_module`). The vector
    and scalar engines' lanes share them; each name holds every parameter of its text, so
    that a caller holding the text of a name (elaborated for the other engine) need not
    elaborate it again. Without Verilator's ``no_inline_module``: Verilator inlines each into
    the lane module, which is compiled once, as when it was elaborated in the lane."""
    makers = {module: partial(_fp_verilog, kind, module) for kind, module in FP_MODULES.items()}
    makers[cast_module(formats, rng)] = partial(_cast_verilog, formats, rng)
    return makers


def _fp_verilog(kind: str, module: str) -> str:
    return module_text(FP_UNITS[kind](), module, no_inline=False)


def add_fp(m, kind: str, name: str, a, b, instance: bool) -> Value:
    """Add an fp32 unit of ``kind`` (``"add"`` or ``"mul"``) on operands ``a`` and ``b`` to
    ``m`` as the submodule ``name``: elaborated in place, or with ``instance`` an
    ``Instance`` of its module of :data:`FP_MODULES` (emitted once by the engine). Returns
    its result."""
    if not instance:
        unit = FP_UNITS[kind]()
        m.submodules[name] = unit
        m.d.comb += [unit.a.eq(a), unit.b.eq(b)]
        return unit.y
    y = Signal(32, name=f"{name}_y")
    add_lane(m, name, None, FP_MODULES[kind], {"a": a, "b": b}, {"y": y}, clocked=False)
    return y


def cast_module(formats: tuple[str, ...], rng: str | None) -> str:
    """The name of the output cast's module (:class:`~hdl.numerics.cast.FormatCastLane` of
    ``formats`` with the generator ``rng``, ``rne`` without one) when a lane instantiates it:
    the name holds every parameter of the text, so that the vector and scalar engines'
    lanes share one module where their casts are equal, and two unequal casts never share a
    name."""
    return "_".join(("output_cast", *formats, rng or "rne"))


def _format_cast(formats: tuple[str, ...], rng: str | None) -> FormatCastLane:
    return FormatCastLane(tuple(map(format_by_name, formats)), rng)


def _cast_verilog(formats: tuple[str, ...], rng: str | None) -> str:
    return module_text(_format_cast(formats, rng), cast_module(formats, rng), no_inline=False)


def add_cast(m, formats: tuple[str, ...], rng: str | None, instance: bool, inputs: dict,
             y, word=None) -> None:
    """Add a lane's output cast (:class:`~hdl.numerics.cast.FormatCastLane` of ``formats``,
    ``rng``) to ``m`` as the submodule ``cast``: elaborated in place, or with ``instance``
    an ``Instance`` of the module :func:`cast_module` (emitted once by the engine). Its
    ports are driven from ``inputs`` (port name -> value) and its result drives ``y``;
    its generator's word of the beat drives ``word`` where given (an instance's otherwise
    drives a wire of its own, so that every pin is connected)."""
    outputs = {"y": y}
    if rng is not None and (word is not None or instance):
        outputs["word"] = Signal(32, name="cast_word") if word is None else word
    add_lane(m, "cast", lambda: _format_cast(formats, rng),
             cast_module(formats, rng) if instance else None, inputs, outputs,
             clocked=rng is not None)
