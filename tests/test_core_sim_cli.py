"""`gen sim SPEC --unit core`: what it refuses before simulating, the seeded random program,
and the co-simulation on Icarus (the deadlock, the MX matmuls of trn3)."""

import re

import pytest
from click.testing import CliRunner

from generators.cli import main
from hdl.core import engines, scalar
from hdl.core.isa import AP, Activation, Iota, TensorCopy, TensorScalar, TensorTensorScan
from hdl.params import core_params
from hdl.vector.ops import VectorOp
from sim.core import Core, Program
from sim.tb import core_programs
from sim.tb.core import check_program, core_files, core_verilog, rtl_refusal
from sim.tb.core_programs import RANDOM, build_program
from sim.tb.runner import skip_unless_available
from specs.loader import load


def run(*args):
    return CliRunner().invoke(main, list(args))


@pytest.fixture(scope="module")
def params():
    return core_params(load("trn2"), "sim")


def _too_big(b):
    """A program the kernel builder refuses: more SBUF than a partition has."""
    b.sbuf(b.params.sbuf_bytes + 1, "the buffer")


@pytest.mark.parametrize("args, message", [
    # 4,097 bytes in whole 64-byte units (kernels.builder.SBUF_ALIGN)
    (("--kernel", "too_big"), "error: not simulated: too_big: the buffer: the kernel needs "
                              "4160 bytes of SBUF per partition, trn2 has 4096\n"),
    (("--kernel", "softmx"), "error: --kernel must be one of vector_add, "),
])
def test_refused_before_anything_is_simulated(args, message, monkeypatch):
    monkeypatch.setitem(core_programs.PROGRAMS, "too_big", (_too_big, False))
    result = run("sim", "trn2", "--unit", "core", "--sim", "icarus", *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert result.output.count("\n") == 1


def _tile(dtype: str, partitions: int = 16) -> AP:
    return AP("sbuf", dtype, 0, partitions, 0, ((8, 1),))


def test_a_program_beyond_the_memory_model_is_never_simulated(params):
    """kv_prefill at its default shape (32 sequences of 24 KV heads) needs more external
    memory than the AXI memory model of the simulation scale holds: refused, not run."""
    result = run("sim", "trn2", "--unit", "core", "--sim", "icarus", "--kernel", "kv_prefill")
    assert result.exit_code == 2, result.output
    assert result.output.startswith("error: not simulated: kv_prefill: the core RTL cannot run "
                                    "it: its external memory is "), result.output
    assert result.output.endswith(f" bytes, the core's AXI memory {params.hbm_bytes}\n")
    assert params.hbm_bytes == 65536


def test_a_stream_longer_than_its_sequencer_is_fed_not_refused(params):
    """sample at its default shape (top-24 of 32 rows) has a vector stream three times the
    ring of a sequencer: the core RTL runs it (the host feeds the ring as it runs), and the
    co-simulation's programs include it (``sample_ring``, run on Verilator)."""
    prog = build_program(params, "sample")
    assert len(prog.streams["vector"]) > 3 * params.instructions == 768
    assert rtl_refusal(prog, params) is None
    ring = build_program(params, "sample_ring")
    assert [len(ring.streams[s]) for s in ring.streams] == [
        len(prog.streams[s]) for s in prog.streams]


def test_each_engine_is_named_in_its_refusal(params):
    """The GpSimd engine's datapath is the vector engine's plus Iota, AffineSelect and
    NonzeroWithCount; what it refuses, it refuses as itself."""
    act = Activation(dst=_tile("fp32"), src=_tile("fp32"), func=0)
    assert engines.supported(act, kind="gpsimd") == \
        ("the gpsimd engine runs Iota, TensorTensor, TensorScalar, TensorCopy, Memset, "
         "TensorCopyDynamic, SequenceBounds, AffineSelect, NonzeroWithCount")
    assert engines.supported(act) == \
        ("the vector engine runs TensorTensor, TensorScalar, TensorReduce, TensorCopy, Memset, "
         "TensorCopyDynamic, TensorTensorScan, Transpose, StreamShuffle, RangeSelect, Max8, "
         "FindIndex8, MatchReplace8, Random, Dropout")


@pytest.mark.parametrize("dtype", ["fp8_e4m3fn", "tf32", "int8", "int32", "uint32"])
def test_every_engine_streams_every_type_the_simulator_computes_on(params, dtype):
    """Inputs and destinations of every type but the MX quads and uint8, which the core
    simulator computes on none of; an Iota into each."""
    copy = TensorCopy(dst=_tile(dtype), src=_tile(dtype))
    for stream in ("vector", "gpsimd", "scalar"):
        assert rtl_refusal(Program(streams={stream: [copy]}), params) is None
    assert rtl_refusal(Program(streams={"gpsimd": [Iota(dst=_tile(dtype))]}), params) is None


@pytest.mark.parametrize("stream", ["vector", "scalar", "gpsimd"])
def test_every_engine_runs_stochastic_rounding(params, stream):
    ins = TensorCopy(dst=_tile("bf16"), src=_tile("fp32"), rounding="stochastic")
    assert rtl_refusal(Program(streams={stream: [ins]}), params) is None


def test_the_random_programs_draw_every_kind_of_scan(params):
    """The RTL runs TensorTensorScan; the random programs it is checked with draw scans from
    an immediate and from a per-partition column, with each operation's operands swapped
    and not."""
    scans = [ins for seed in range(60)
             for code in build_program(params, RANDOM, seed).streams.values()
             for ins in code if isinstance(ins, TensorTensorScan)]
    assert {(s.initial is None, s.reverse0, s.reverse1) for s in scans} == {
        (i, r0, r1) for i in (False, True) for r0 in (False, True) for r1 in (False, True)}
    prog = Program(streams={"vector": scans[:4]})
    assert rtl_refusal(prog, params) is None


def test_kernel_is_an_option_of_the_core_alone():
    result = run("sim", "trn2", "--unit", "vector", "--kernel", "random")
    assert result.exit_code == 2
    assert result.output == "error: --kernel is an option of --unit core, not of --unit " \
                            "vector\n"


def test_random_programs_keep_the_rules(params):
    """Every seed gives a program the core simulator accepts and the RTL can run, and the
    seed decides it."""
    for seed in range(60):
        assert check_program(params, RANDOM, seed) is None, seed
    a, b = (build_program(params, RANDOM, 7) for _ in range(2))
    assert a.streams == b.streams
    assert build_program(params, RANDOM, 8).streams != a.streams
    kinds = {(stream, type(ins).__name__) for seed in range(60)
             for stream, code in build_program(params, RANDOM, seed).streams.items()
             for ins in code}
    for stream, runs in (("vector", engines.ENGINE_RUNS["vector"]),
                         ("gpsimd", engines.ENGINE_RUNS["gpsimd"]),
                         ("scalar", scalar.SCALAR_OPS)):
        assert kinds >= {(stream, cls.__name__) for cls in runs}, stream
    two_ops = {(stream, ins.operand1 is not None) for seed in range(60)
               for stream, code in build_program(params, RANDOM, seed).streams.items()
               for ins in code if isinstance(ins, TensorScalar) and ins.op1 != VectorOp.COPY}
    assert two_ops == {(s, operand) for s in ("vector", "gpsimd", "scalar")
                       for operand in (False, True)}
    Core(params).run(a, timing_only=True)


def test_mx_matmuls_run_where_the_array_has_mx(params):
    """The MX co-simulation program passes the core simulator and the RTL's rules on trn3
    (it is one of `gen sim trn3 --unit core`'s programs) and is refused on trn2, whose array
    has no MX formats, with the reason."""
    from generators.cli.benches import _core_names

    trn3 = core_params(load("trn3"), "sim")
    assert check_program(trn3, "mx_matmuls", 0) is None
    assert "mx_matmuls" in _core_names(trn3, "verilator", 0)
    assert "mx_matmuls" not in _core_names(params, "verilator", 0)
    assert _core_names(params, "icarus", 0) == ["vector_add", "deadlock"]
    assert _core_names(trn3, "icarus", 0) == ["vector_add", "deadlock", "mx_matmuls"]
    assert check_program(params, "mx_matmuls", 0) == \
        "mx_matmuls: trn2's array has no mxfp8 and mxfp4 formats"


@pytest.mark.cocotb
def test_icarus_runs_the_core_the_deadlock_and_mx_matmuls():
    """`gen sim trn3 --unit core --sim icarus`, in one simulation of trn3's core at
    simulation scale: vector_add byte for byte; the program the simulator refuses as a
    deadlock stops with the core's deadlock bit instead of hanging; and the MX matmuls
    (mxfp8 and mxfp4 tiles with their scale operands, mixed and accumulated) equal the core
    simulator's SBUF, PSUM and external memory byte for byte, each multiply in the
    simulator's exact cycles (:func:`sim.tb.core.timing`)."""
    skip_unless_available("icarus")
    result = run("sim", "trn3", "--unit", "core", "--sim", "icarus", "--seed", "5")
    assert result.exit_code == 0, result.output
    assert "  PASS vector_add, deadlock, mx_matmuls: 1 tests, 0 failed" in result.output


def test_the_co_simulation_builds_the_shipped_core(tmp_path, params):
    """The core's co-simulation builds the files of the ``neuron_core.f`` that `gen chip
    trn2 --scale sim` writes, in its order, each text as written; SBUF and PSUM are
    memories of the toplevel ``neuron_core`` itself (where the testbench reads their rows),
    one 32-bit word of every partition a row, without an initial image."""
    out = tmp_path / "trn2"
    assert run("chip", "trn2", "--scale", "sim", "-o", str(out)).exit_code == 0
    rtl = out / "rtl"
    listed = [line for line in (rtl / "neuron_core.f").read_text().splitlines()
              if line and not line.startswith("#")]
    assert listed[-1] == "neuron_core.v" and list(core_files("trn2")) == listed
    assert core_verilog("trn2") == "".join((rtl / name).read_text() for name in listed)
    text = (rtl / "neuron_core.v").read_text()
    top = text[text.index("module neuron_core("):]
    top = top[:top.index("endmodule")]
    for memory, nbytes in (("sbuf", params.sbuf_bytes), ("psum", params.psum_bytes)):
        declared = re.findall(rf"^\s*reg \[(\d+):0\] {memory} \[(\d+):0\];", top, re.M)
        assert declared == [(str(32 * params.partitions - 1), str(nbytes // 4 - 1))]
        assert not re.search(rf"^\s*{memory}\[\d+\] = ", top, re.M)  # no initial image
