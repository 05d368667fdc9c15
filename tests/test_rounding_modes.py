"""The spec's rounding modes reach the engines: a chip whose ``rounding.modes`` have no
stochastic rounding (inf1) gets engines without generators or stochastic datapaths, and
every model refuses a stochastic instruction on it; a chip with it (trn2) keeps its
generator."""

import dataclasses
import gc
from operator import attrgetter

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from generators.cli import main
from hdl.core.core import NeuronCore
from hdl.core.isa import Memset, TensorCopy
from hdl.numerics.cast import FormatCastLane, roundings
from hdl.numerics.formats import format_by_name
from hdl.params import core_params, rounding_rng, scalar_params, vector_params
from hdl.vector.activation import Activation, ActivationLane
from hdl.vector.vector import Vector, VectorLane
from kernels.builder import Builder
from sim.core import Core, ProgramError
from sim.golden import activation, vector
from sim.system.execute import run as execute
from sim.system.model import build
from sim.tb import core_programs
from specs.errors import ModelError
from specs.loader import load

GENERATOR_PORTS = {"stochastic", "seed", "en"}

# the components below are built for their port lists and parameters, never elaborated
pytestmark = pytest.mark.filterwarnings("ignore::amaranth.hdl.UnusedElaboratable")


@pytest.fixture(autouse=True)
def _collect_components():
    """Collect them while the filter holds (their reference cycles outlive the test)."""
    yield
    gc.collect()


def _members(component) -> set[str]:
    return set(component.signature.members.keys())


def _rne_spec(tmp_path):
    """trn2 with round-to-nearest-even alone: a chip that has a core simulator."""
    path = tmp_path / "rne.yaml"
    path.write_text("extends: trn2\nchip:\n  name: rne\n  title: RNE\n"
                    "  rounding: {modes: [rne], rng: lfsr32}\n")
    return path


@pytest.mark.parametrize("scale", ["full", "sim"])
def test_inf1_engines_have_no_generator(scale):
    spec = load("inf1")
    assert spec.rounding.modes == ["rne"] and rounding_rng(spec) is None
    vp, sp = vector_params(spec, scale), scalar_params(spec, scale)
    assert vp.rng is None and sp.rng is None
    formats = tuple(map(format_by_name, vp.formats))
    assert not _members(FormatCastLane(formats, vp.rng)) & GENERATOR_PORTS
    assert not _members(VectorLane(vp.formats, vp.rng)) & {"stochastic", "seed"}
    assert not _members(ActivationLane(sp)) & {"stochastic", "seed"}
    # the engines keep the instruction's rounding input, so one bench drives every chip
    assert "stochastic" in _members(Vector(vp)) and "stochastic" in _members(Activation(sp))


def test_trn2_engines_keep_their_generator():
    spec = load("trn2")
    vp, sp = vector_params(spec, "sim"), scalar_params(spec, "sim")
    assert vp.rng == sp.rng == spec.rounding.rng == "lfsr32"
    assert _members(FormatCastLane(tuple(map(format_by_name, vp.formats)), vp.rng)) \
        >= GENERATOR_PORTS
    assert _members(VectorLane(vp.formats, vp.rng)) >= {"stochastic", "seed"}
    assert _members(ActivationLane(sp)) >= {"stochastic", "seed"}
    assert roundings(vp.rng) == ("rne", "stochastic")


def test_core_engines_follow_the_modes(tmp_path):
    """The core's vector, GpSimd and scalar engines: no generator on a chip without
    stochastic rounding; trn2's keep theirs (its core Verilog is unchanged)."""
    rne = NeuronCore(core_params(load(_rne_spec(tmp_path)), "sim"))
    trn2 = NeuronCore(core_params(load("trn2"), "sim"))
    for name in ("vector.unit", "gpsimd.unit", "scalar.unit"):  # each an instance
        assert attrgetter(name)(rne).params.rng is None
        assert attrgetter(name)(trn2).params.rng is not None


def test_golden_models_refuse_stochastic_rounding_on_inf1():
    spec = load("inf1")
    vp, sp = vector_params(spec, "sim"), scalar_params(spec, "sim")
    x = np.full((2, vp.lanes), 0x3EAAAAAB, np.uint32)  # 1/3
    message = r"rounding must be 'rne' on an engine without a generator \(rng None\), " \
              r"not 'stochastic'"
    for out_format in ("bf16", "fp32"):
        with pytest.raises(ValueError, match=message):
            vector.run(vp, 0, x, out_format=out_format, rounding="stochastic")
    ones = np.full(sp.lanes, 0x3F800000, np.uint32)
    with pytest.raises(ValueError, match=message):
        activation.run(sp, 0, x, ones, ones * 0, [False, True], out_format="bf16",
                       rounding="stochastic")
    # round-to-nearest-even, as ml_dtypes casts
    want = np.float32(1 / 3).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert (vector.run(vp, 0, x, out_format="bf16") == want).all()


def test_trn2_golden_models_round_stochastically():
    vp = vector_params(load("trn2"), "sim")
    x = np.full((64, vp.lanes), 0x3EAAAAAB, np.uint32)
    out = vector.run(vp, 0, x, out_format="bf16", rounding="stochastic")
    near = np.float32(1 / 3).astype(ml_dtypes.bfloat16).view(np.uint16)
    assert set(np.unique(out)) == {near - 1, near}  # both bf16 neighbours of 1/3


def _stochastic_copy(b: Builder) -> None:
    n = 8
    src, dst = b.sbuf(4 * n, "x"), b.sbuf(2 * n, "y")
    p = b.params.partitions
    b.emit("vector", Memset(dst=b.tile("sbuf", "fp32", src, p, ((n, 1),)), value=1 / 3))
    b.emit("vector", TensorCopy(dst=b.tile("sbuf", "bf16", dst, p, ((n, 1),)),
                                src=b.tile("sbuf", "fp32", src, p, ((n, 1),)),
                                rounding="stochastic"))


def test_core_simulator_refuses_stochastic_rounding_without_it(tmp_path):
    params = core_params(load(_rne_spec(tmp_path)), "sim")
    assert params.rng is None
    b = Builder(params)
    _stochastic_copy(b)
    with pytest.raises(ProgramError, match=r"^vector\[1\] `.*`: rounding: rne rounds to "
                                           r"nearest even only \(its spec's rounding.modes "
                                           r"have no stochastic rounding\)$"):
        Core(params).run(b.program, timing_only=True)
    b = Builder(dataclasses.replace(params, rng="lfsr32"))
    _stochastic_copy(b)
    Core(b.params).run(b.program)  # the same program on a chip with stochastic rounding


def test_gen_sim_refuses_a_stochastic_program_on_a_chip_without_it(tmp_path, monkeypatch):
    monkeypatch.setitem(core_programs.PROGRAMS, "stochastic_copy", (_stochastic_copy, False))
    result = CliRunner().invoke(main, ["sim", str(_rne_spec(tmp_path)), "--unit", "core",
                                       "--sim", "icarus", "--kernel", "stochastic_copy"])
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: not simulated: stochastic_copy: the core "
                                    "simulator rejects it: vector[1]"), result.output
    assert "rne rounds to nearest even only" in result.output
    assert result.output.count("\n") == 1


def test_executed_collective_refuses_stochastic_rounding_on_inf1():
    system = build("inf1.24xlarge")
    with pytest.raises(ModelError, match=r"^inf1.24xlarge: rounding must be 'rne', not "
                                         r"'stochastic' \(inf1 rounds to nearest even only"):
        execute(system, "all_reduce", 4096, rounding="stochastic")
