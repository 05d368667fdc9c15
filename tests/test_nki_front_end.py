"""The NKI front end (kernels.nki): NKI kernels written here, in both generations of the
interface, traced, run on the core simulator and checked against numpy in float64 at the
tolerances of kernels.TOLERANCE; NKI's errors pinned to their messages and kernel lines."""

from __future__ import annotations

import re
import runpy
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

import kernels
import kernels.nki as knki
from hdl.core.isa import format_instruction

HERE = Path(__file__).parent / "nki_kernels"
BF16 = ml_dtypes.bfloat16


@pytest.fixture(scope="module")
def load():
    with knki.installed():
        yield lambda name: runpy.run_path(str(HERE / f"{name}.py"))


def _err(out, ref) -> float:
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / np.abs(ref).max())


def test_install_aliases_both_generations_and_uninstall_restores():
    assert "neuronxcc" not in sys.modules
    with knki.installed() as names:
        import neuronxcc.nki.isa as old_isa
        import nki.isa as new_isa

        assert "neuronxcc.nki.language" in names and "nki.language" in names
        assert old_isa is knki.isa and new_isa is knki.isa_dst
    assert "neuronxcc" not in sys.modules and "nki" not in sys.modules


def test_a_real_package_is_not_shadowed(tmp_path, monkeypatch):
    (tmp_path / "neuronxcc").mkdir()
    (tmp_path / "neuronxcc" / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with knki.installed() as names:
        assert not any(n.startswith("neuronxcc") for n in names)
        assert "nki" in names
    with knki.installed(force=True) as names:
        assert "neuronxcc.nki" in names


def test_every_dtype_name_is_its_own_type():
    """NKI's dtype names, the MX quad types (four codes an element) among them: each the ISA
    type of its name and size, no two equal (a kernel tells them apart with ``in``)."""
    from kernels.nki import language as nl
    from kernels.nki.tracer import isa_dtype

    names = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "tfloat32": "tf32",
             "float8_e4m3": "fp8_e4m3", "float8_e5m2": "fp8_e5m2",
             "float8_e4m3fn": "fp8_e4m3fn", "float8_e4m3fn_x4": "mxfp8_x4",
             "float8_e5m2_x4": "mxfp8_e5m2_x4", "float4_e2m1fn_x4": "mxfp4_x4", "int8": "int8",
             "uint8": "uint8", "uint16": "uint16", "int32": "int32", "uint32": "uint32"}
    types = [getattr(nl, name) for name in names]
    assert [isa_dtype(t) for t in types] == list(names.values())
    assert len({str(t) for t in types}) == len(types)
    assert all(t != u for i, t in enumerate(types) for u in types[i + 1:])
    assert (nl.float8_e4m3fn_x4.itemsize, nl.float8_e5m2_x4.itemsize,
            nl.float4_e2m1fn_x4.itemsize) == (4, 4, 2)
    # MX scales: ml_dtypes' E8M0 exponents, bytes to the core (as NKI's bool)
    assert nl.float8_e8m0fnu == ml_dtypes.float8_e8m0fnu and isa_dtype(nl.float8_e8m0fnu) \
        == "uint8"
    # a documented type the core has not: named, refused as a tensor's type
    from kernels.nki.errors import NotSupported

    with pytest.raises(NotSupported, match="dtype int16 is not supported yet"):
        isa_dtype(nl.int16)


def test_elementwise_mask_and_row_sum(load):
    k = load("elementwise")["scaled_exp_sum"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal((200, 256)).astype(np.float32)
    y = rng.standard_normal((200, 256)).astype(np.float32)
    out, sums = k(x, y)
    want = np.exp(x.astype(np.float64)) * 0.5 + y
    assert _err(out, want) <= kernels.POLYNOMIAL
    assert _err(sums, want.sum(axis=1, keepdims=True)) <= kernels.POLYNOMIAL


def test_reductions(load):
    k = load("elementwise")["row_stats"]
    x = np.random.default_rng(2).standard_normal((128, 300)).astype(np.float32)
    out = k(x)
    x64 = x.astype(np.float64)
    want = np.hstack([x64.max(1, keepdims=True), x64.min(1, keepdims=True),
                      x64.mean(1, keepdims=True), -x64.sum(1, keepdims=True)])
    for col in range(4):
        assert _err(out[:, col], want[:, col]) <= kernels.TOLERANCE["fp32"] * 10, col


def test_activation_bias_reduce_and_column_operand(load):
    k = load("elementwise")["bias_activation"]
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    b = rng.standard_normal((128, 1)).astype(np.float32)
    act = np.tanh(x.astype(np.float64) * 2 + b)
    assert _err(k(x, b), act - act.sum(axis=1, keepdims=True)) <= kernels.POLYNOMIAL


def test_activation_copy_as_nl_and_numpy_name_it(load):
    """``op=nl.copy`` and ``np.copy`` are the scalar engine's copy (scale and bias applied,
    no function): exact where the scale is a power of two and the bias adds exactly."""
    rng = np.random.default_rng(6)
    x = rng.integers(-64, 64, (128, 96)).astype(np.float32)
    b = rng.integers(-8, 8, (128, 1)).astype(np.float32)
    out = load("elementwise")["scaled_copies"](x, b)
    np.testing.assert_array_equal(out[0], x * 0.5 + b)
    np.testing.assert_array_equal(out[1], x * 4)


def test_transpose(load):
    x = np.random.default_rng(4).standard_normal((96, 128)).astype(BF16)
    assert np.array_equal(load("elementwise")["transpose_tile"](x), x.T)


def test_spmd_grid_program_id(load):
    k = load("elementwise")["spmd_add"]
    rng = np.random.default_rng(5)
    a = rng.standard_normal((512, 256)).astype(np.float32)
    b = rng.standard_normal((512, 256)).astype(np.float32)
    assert _err(k[4](a, b), a.astype(np.float64) + b) <= kernels.TOLERANCE["fp32"]


@pytest.mark.parametrize("gen", ["matmul_v1", "matmul_v2"])
def test_matmul_both_generations(load, gen):
    k = load(gen)["matmul"]
    rng = np.random.default_rng(6)
    a = rng.standard_normal((384, 256)).astype(BF16)
    b = rng.standard_normal((384, 1024)).astype(BF16)
    want = a.astype(np.float64).T @ b.astype(np.float64)
    assert _err(k(a, b), want) <= kernels.TOLERANCE["bf16"]


def test_matmul_without_transpose_x(load):
    k = load("matmul_v1")["matmul_plain"]
    rng = np.random.default_rng(7)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)
    assert _err(k(x, y), x.astype(np.float64) @ y) <= kernels.TOLERANCE["fp32"] * 10


def _program(kernel, *args) -> list[str]:
    tracer, *_ = kernel.trace(*args)
    program = tracer.program()
    return [f"{s}: {format_instruction(i)}" for s in sorted(program.streams)
            for i in program.streams[s]]


def test_both_generations_give_the_same_program(load):
    a = np.zeros((256, 256), BF16)
    b = np.zeros((256, 1024), BF16)
    v1 = _program(load("matmul_v1")["matmul"], a, b)
    v2 = _program(load("matmul_v2")["matmul"], a, b)
    assert v1 == v2 and len(v1) > 20


def test_programs_are_deterministic(load):
    a = np.zeros((256, 256), BF16)
    b = np.zeros((256, 1024), BF16)
    k = load("matmul_v1")["matmul"]
    assert _program(k, a, b) == _program(k, a, b)


def test_affine_iterations_overlap(load):
    """Loads of later K-tiles run while the tensor engine multiplies: the time is below the
    sum of the DMA and tensor-engine busy times."""
    from kernels.nki import typing as nt

    k = load("matmul_v1")["matmul"]
    k.benchmark(nt.tensor[[1024, 256], np.float32], nt.tensor[[1024, 1024], np.float32])
    run = knki.SESSION.launches[-1]
    dma = max(v for s, v in run.result.busy.items() if s.startswith("dma"))
    assert run.result.time < dma + run.result.busy["tensor"]
    assert k.benchmark_result.nc_latency.get_latency_percentile(99) == \
        pytest.approx(run.result.time * 1e6)


def _line(name: str) -> int:
    lines = (HERE / "errors.py").read_text().splitlines()
    return next(i + 1 for i, text in enumerate(lines) if f"# ERROR {name}" in text)


ERRORS = [
    ("too_many_partitions", ((256, 64), np.float32), None, "partitions",
     "number of partitions 256 exceed architecture limitation of 128"),
    ("wide_stationary", ((128, 256), BF16), ((128, 512), BF16), "stationary",
     "size of dimension 1 in 'stationary[128, 256]' of 'nc_matmul' exceed architecture "
     "limitation of 128"),
    ("wide_moving", ((128, 128), BF16), ((128, 1024), BF16), "moving",
     "size of dimension 1 in 'moving[128, 1024]' of 'nc_matmul' exceed architecture "
     "limitation of 512"),
    ("big_psum", ((128, 1), np.float32), None, "psum",
     "a PSUM tile of [128, 1024] fp32 takes 4096 bytes per partition, above one 2048-byte "
     "PSUM bank"),
    ("sbuf_full", ((128, 1), np.float32), None, "sbuf", "SBUF full: tensor sbuf"),
    ("sbuf_one_tile", ((128, 1), np.float32), None, "sbuf_one",
     "SBUF full: tensor sbuf [128, 50000] fp32 needs 200000 bytes per partition"),
    ("out_of_bounds", ((128, 1000), np.float32), None, "bounds",
     "Out-of-bound access for tensor `x` on dimension 1: index range [512, 1023] exceed "
     "dimension size of 1000"),
    ("unsupported_call", ((128, 64), np.float32), None, "unsupported",
     "nl.random_seed is not supported yet by trngen's NKI front end; supported:"),
    ("partition_mismatch", ((128, 512), np.float32), ((1, 512), np.float32), "mismatch",
     "number of partitions (dimension 0 size of a tile) mismatch in parameters "
     "(data1[128, 512], data2[1, 512]) of 'tensor_tensor' [err_num_partition_mismatch]"),
    ("load_from_sbuf", ((4, 4), np.float32), None, "space_load",
     "Expected operand 'src' of 'load' to be in address space 'hbm', but got a tile in "
     "'sbuf' instead. [err_unsupported_memory]"),
    ("exp_of_hbm", ((128, 512), np.float32), None, "space_exp",
     "Expected operand 'x' of 'exp' to be in address space 'psum|sbuf', but got a tile in "
     "'hbm' instead. [err_unsupported_memory]"),
    ("misaligned_rows", ((128, 64), np.float32), None, "start",
     "operand 'data' of 'exp' accesses 32 partitions from partition 16: an access of 1 to "
     "32 partitions must start at partition 0, 32, 64 or 96"),
    ("half_from_32", ((128, 64), np.float32), None, "start_half",
     "operand 'data' of 'exp' accesses 64 partitions from partition 32: an access of 33 to "
     "64 partitions must start at partition 0 or 64"),
    ("same_block_every_iteration", ((128, 1), np.float32), None, "affine",
     "Unexpected output dependencies: iterations 0 and 1 of the nl.affine_range loop at "
     "line {affine - 1} write the same elements of tensor `sbuf` (made at line "
     "{affine - 2}); index the destination by the loop, or iterate with "
     "nl.sequential_range [err_unexpected_output_dependencies]"),
    ("same_output_rows", ((128, 1024), np.float32), None, "affine_hbm",
     "Unexpected output dependencies: iterations 0 and 1 of the nl.affine_range loop at "
     "line {affine_hbm - 2} write the same elements of tensor `out`;"),
    ("psum_full", ((128, 1), np.float32), None, "psum_full",
     "PSUM full: tensor psum_8 [128, 512] fp32 needs 2048 bytes per partition; 16384 of "
     "16384 are held by live tensors"),
]


@pytest.mark.parametrize("name,a,b,tag,message", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors_name_the_kernel_line(load, monkeypatch, name, a, b, tag, message):
    """With spilling off, SBUF full is the allocation's own error (spilling: below)."""
    monkeypatch.setattr(knki.SESSION, "spill", False)
    k = load("errors")[name]
    args = [np.zeros(*a)] + ([np.zeros(*b)] if b else [])
    with pytest.raises(knki.NkiError) as info:
        k(*args)
    text = str(info.value)
    assert text.startswith(f"{HERE / 'errors.py'}:{_line(tag)}: "), text
    message = re.sub(r"\{(\w+) - (\d)\}", lambda m: str(_line(m[1]) - int(m[2])), message)
    assert message in text, text


def test_a_quadrant_of_partitions_is_a_legal_start(load):
    """Rows 32..63 (one quadrant) exponentiated in place, the others kept."""
    x = np.random.default_rng(11).standard_normal((128, 64)).astype(np.float32)
    want = x.astype(np.float64)
    want[32:64] = np.exp(want[32:64])
    assert _err(load("errors")["quadrant_rows"](x), want) <= kernels.POLYNOMIAL


def test_legal_writes_of_loop_iterations(load):
    """Writes of one block in a sequential_range (the last iteration's value stays),
    interleaved columns in an affine_range (their ranges overlap, their elements do not)
    and an accumulation in an affine_range are no conflict."""
    k = load("errors")
    assert np.array_equal(k["same_block_in_order"](np.zeros((128, 1), np.float32)),
                          np.full((128, 512), 3.0, np.float32))
    x = np.random.default_rng(12).standard_normal((128, 512)).astype(np.float32)
    scale = np.arange(512) % 4 + 1
    assert np.array_equal(k["interleaved_columns"](x), x * scale.astype(np.float32))
    y = np.random.default_rng(13).standard_normal((128, 2048)).astype(np.float32)
    want = y.astype(np.float64).reshape(128, 4, 512).sum(axis=1)
    assert _err(k["accumulate_in_affine"](y), want) <= kernels.TOLERANCE["fp32"] * 4


def test_masked_access_is_in_bounds(load):
    x = np.random.default_rng(8).standard_normal((128, 1000)).astype(np.float32)
    assert np.array_equal(load("errors")["masked_bounds"](x), x)


def test_gen_nki_kernel_report_and_error_line():
    from generators.cli import main

    runner = CliRunner()
    ok = runner.invoke(main, ["nki", str(HERE / "matmul_v1.py"), "--kernel", "matmul",
                              "--shape", "lhsT=256x128:bf16,rhs=256x512:bf16",
                              "--format", "json"])
    assert ok.exit_code == 0, ok.output
    assert '"kernel": "matmul"' in ok.output and '"hfu"' in ok.output
    bad = runner.invoke(main, ["nki", str(HERE / "errors.py"), "--kernel", "sbuf_full",
                               "--shape", "x=128x1", "--no-spill"])
    assert bad.exit_code == 2
    lines = bad.output.strip().splitlines()
    assert len(lines) == 1 and re.search(rf"errors\.py:{_line('sbuf')}: SBUF full", lines[0])
    spilled = runner.invoke(main, ["nki", str(HERE / "errors.py"), "--kernel", "sbuf_full",
                                   "--shape", "x=128x1"])
    assert spilled.exit_code == 0, spilled.output
    (warning,) = spilled.stderr.strip().splitlines()
    assert re.search(rf"^warning: \S*errors\.py:{_line('sbuf')}: SBUF full: tensor sbuf_48 "
                     r"\[128, 1024\] fp32 needs 4096 bytes per partition; \d+ live tensors "
                     r"spilled to HBM and back", warning), warning
    assert re.search(r"SBUF spills +\d+ tensors to HBM and back", spilled.stdout)
    bad = runner.invoke(main, ["nki", str(HERE / "errors.py"), "--kernel",
                               "same_block_every_iteration", "--shape", "x=128x1"])
    assert bad.exit_code == 2
    (line,) = bad.output.strip().splitlines()
    assert re.search(rf"errors\.py:{_line('affine')}: Unexpected output dependencies", line)


def test_gen_nki_names_the_kernels_line_when_its_own_code_fails():
    """An exception of the kernel's own code (its assertion) is one line naming the kernel's
    line, status 2, no traceback."""
    from generators.cli import main

    bad = CliRunner().invoke(main, ["nki", str(HERE / "errors.py"), "--kernel",
                                    "own_assertion", "--shape", "x=128x4", "--timing-only"])
    assert bad.exit_code == 2
    (line,) = bad.output.strip().splitlines()
    assert re.search(rf"errors\.py:{_line('assertion')}: the kernel raised AssertionError: "
                     r"rows must be a multiple of 256$", line), line


def test_an_exception_in_a_module_the_kernel_calls_names_that_modules_line(tmp_path):
    """A kernel built from a library's functions (as nki-library's are): an exception in the
    library's code names the library's line, not the kernel file's call of it."""
    from generators.cli import main

    (tmp_path / "kernel_library.py").write_text(
        "def tiles(t):\n"
        "    return t.no_such_attribute\n")
    (tmp_path / "kernel.py").write_text(
        "import neuronxcc.nki as nki\n"
        "import neuronxcc.nki.language as nl\n"
        "from kernel_library import tiles\n\n\n"
        "@nki.jit\n"
        "def calls_the_library(x):\n"
        "    return tiles(nl.load(x))\n")
    bad = CliRunner().invoke(main, ["nki", str(tmp_path / "kernel.py"), "--kernel",
                                    "calls_the_library", "--shape", "x=128x4",
                                    "--timing-only"])
    assert bad.exit_code == 2
    (line,) = bad.output.strip().splitlines()
    assert line.startswith(f"error: {tmp_path / 'kernel_library.py'}:2: the kernel raised "
                           f"AttributeError: "), line


def test_a_kernel_file_or_its_module_that_does_not_parse_is_one_line(tmp_path):
    """Code that does not parse (the documentation's own snippets include such a file; a
    library module may be one) is named at its line: status 2, no traceback."""
    from generators.cli import main

    (tmp_path / "broken.py").write_text("import neuronxcc.nki as nki\n\nx = (1,\n")
    (tmp_path / "broken_library.py").write_text("def f():\n  return 1\n    return 2\n")
    (tmp_path / "imports.py").write_text("import broken_library\n")
    for name, want in (("broken.py", f"{tmp_path / 'broken.py'}:3: "),
                       ("imports.py", f"{tmp_path / 'broken_library.py'}:3: ")):
        bad = CliRunner().invoke(main, ["nki", str(tmp_path / name)])
        assert bad.exit_code == 2
        (line,) = bad.output.strip().splitlines()
        assert line.startswith(f"error: {want}the kernel's code does not parse: "), line


def test_a_file_that_launches_nothing_names_its_kernels(tmp_path):
    """A file of kernels whose script launches none (as the vendor's tensor_addition example)
    says so and names the kernels to launch with --kernel; so does an unknown --kernel."""
    from generators.cli import main

    f = tmp_path / "kernels_only.py"
    f.write_text("import neuronxcc.nki as nki\nimport neuronxcc.nki.language as nl\n\n\n"
                 "@nki.jit\ndef double(x):\n    return nl.add(nl.load(x), nl.load(x))\n")
    for args, want in (([], "launched no kernel when run; its kernels: double (launch one "
                             "with --kernel NAME"),
                       (["--kernel", "triple"], "no kernel 'triple'; its kernels: double")):
        bad = CliRunner().invoke(main, ["nki", str(f), *args])
        assert bad.exit_code == 2
        (line,) = bad.output.strip().splitlines()
        assert line.startswith(f"error: {f}: {want}"), line


def test_a_bad_shape_option_is_named_as_the_option():
    """A --shape item that is no array's shape is the option's error, one line, status 2:
    no file and line of trngen's own code before it."""
    from generators.cli import main

    bad = CliRunner().invoke(main, ["nki", str(HERE / "matmul_v1.py"), "--kernel", "matmul",
                                    "--shape", "lhsT=128x128:bf16,rhs=0.5"])
    assert bad.exit_code == 2
    assert bad.output == "error: --shape items read NAME=DxD...[:DTYPE], not 'rhs=0.5'\n"


def test_tiles_held_past_their_last_use_fit_by_liveness(load):
    """SBUF is allocated by the program's liveness, not by Python's references: the tiles
    of 48 blocks (384 KiB a partition in all) fit in 192 KiB, and the reuse of their space
    is ordered by semaphores (the numeric run checks every cross-stream access for races)."""
    x = np.random.default_rng(9).standard_normal((128, 48 * 1024)).astype(np.float32)
    out = load("liveness")["held_tiles"](x)
    assert _err(out, 2 * x.astype(np.float64) + 1) <= kernels.TOLERANCE["fp32"]
    run = knki.SESSION.launches[-1]
    assert run.sbuf_high <= 196608 < 48 * 2 * 4096


def test_live_tiles_beyond_sbuf_spill_to_hbm_and_back(load):
    """64 blocks of 4 KiB a partition all live (256 KiB in 192): the blocks loaded last spill
    earlier ones to HBM and back, every byte restored (the sums equal numpy's in float32,
    in the kernel's order) and every reuse ordered (the numeric run checks every
    cross-stream access for races); the same with two-byte words, and the error kernel's
    64 tiles of constants."""
    rng = np.random.default_rng(14)
    x = rng.standard_normal((128, 64 * 1024)).astype(np.float32)
    k = load("liveness")
    out = k["held_blocks"](x)
    run = knki.SESSION.launches[-1]
    assert run.spills > 0 and run.spilled_bytes == 4096 * run.spills
    assert run.sbuf_high <= 196608
    want = x[:, :1024] * np.float32(1)
    for j in range(1, 64):
        want = want + x[:, j * 1024:(j + 1) * 1024] * np.float32(j + 1)
    assert np.array_equal(out, want)
    y = rng.standard_normal((128, 100 * 1023)).astype(BF16)
    out = k["held_halves"](y)
    assert knki.SESSION.launches[-1].spills > 0
    blocks = [y[:, j * 1023:(j + 1) * 1023].astype(np.float32) for j in range(100)]
    want = blocks[0].astype(BF16)
    for b in blocks[1:]:
        want = (want.astype(np.float32) - b).astype(BF16)
    want = (want.astype(np.float32) - blocks[0]).astype(BF16)
    assert np.array_equal(out.astype(np.float32), want.astype(np.float32))
    z = rng.standard_normal((128, 1)).astype(np.float32)
    want = z
    for i in range(64):
        want = want + np.float32(i)
    assert np.array_equal(load("errors")["sbuf_full"](z), want)


def test_spilling_is_deterministic(load):
    x = np.zeros((128, 64 * 1024), np.float32)
    k = load("liveness")["held_blocks"]
    assert _program(k, x) == _program(k, x)


def test_tiles_made_before_the_previous_are_dropped(load):
    rng = np.random.default_rng(10)
    a = rng.standard_normal((128, 2 * 40960)).astype(BF16)
    b = rng.standard_normal((128, 2 * 40960)).astype(BF16)
    out = load("liveness")["hoisted_blocks"](a, b)
    want = a.astype(np.float64) + b.astype(np.float64)
    assert _err(out, want) <= kernels.TOLERANCE["bf16"]


def _kinds(kernel, *args) -> dict[str, list[str]]:
    """The instructions of each stream of ``kernel``'s program, by class, semaphores left
    out."""
    program = kernel.trace(*args)[0].program()
    return {s: [type(i).__name__ for i in ins if not type(i).__name__.startswith("Sem")]
            for s, ins in program.streams.items()}


def test_a_repeated_instruction_is_computed_once(load):
    """The loop's product of two unchanged tiles is computed once, not once an iteration
    (the loop's own work, 2 instructions an iteration, stays); a tile written between two
    equal activations makes them two, a third repeats the second; loads of the same HBM
    are both kept. The results are numpy's either way."""
    rng = np.random.default_rng(21)
    x, y = rng.standard_normal((2, 128, 64)).astype(np.float32)
    s = rng.standard_normal((128, 5)).astype(np.float32)
    k = load("repeats")
    out = k["invariant_product"](x, y, s)
    assert knki.SESSION.launches[-1].merged == 4
    want = x.astype(np.float64) * y * s.astype(np.float64).sum(axis=1, keepdims=True)
    assert _err(out, want) <= kernels.TOLERANCE["fp32"]
    assert _kinds(k["invariant_product"], x, y, s)["vector"] == \
        ["TensorTensor"] + ["TensorScalar", "TensorTensor"] * 5
    first, second, third = k["written_between"](x)
    assert knki.SESSION.launches[-1].merged == 1
    assert _err(first, np.exp(x.astype(np.float64))) <= kernels.TOLERANCE["fp32"]
    for out in (second, third):
        assert _err(out, np.exp(2 * x.astype(np.float64))) <= kernels.TOLERANCE["fp32"]
    kinds = _kinds(k["written_between"], x)
    assert kinds["scalar"] == ["Activation"] * 2
    assert sum(ins.count("DmaCopy") for ins in kinds.values()) == 2 + 3


@pytest.mark.parametrize("seed", range(4))
def test_large_accesses_share_bytes_as_enumeration_says(seed, monkeypatch):
    """The tracer's test whether two accesses share a byte: past its enumeration limit
    (every access here), by residues of the larger's outermost stride, against numpy's
    intersection of the bytes each touches."""
    from hdl.core.isa import AP
    from kernels.nki import tracer as tr

    monkeypatch.setattr(tr, "_ENUMERATED", 0)
    rng = np.random.default_rng(seed)

    def access():
        item = int(rng.choice([1, 2, 4]))
        dims = tuple((int(rng.integers(1, 6)), int(rng.integers(1, 20)))
                     for _ in range(int(rng.integers(1, 4))))
        return AP("hbm", {1: "uint8", 2: "bf16", 4: "fp32"}[item], 0,
                  int(rng.integers(1, 3)), int(rng.integers(0, 64)) * item, dims,
                  int(rng.integers(0, 50)) * item)

    for _ in range(500):
        a, b = access(), access()
        bytes_a = {int(x) for x in tr._elements(a)}
        assert tr._share_bytes(a, b) == bool(bytes_a & {int(x) for x in tr._elements(b)})


def test_buffer_kinds():
    """nl.is_hbm, is_sbuf, is_psum, is_on_chip of NKI's buffer markers."""
    from kernels.nki import language as nl

    kinds = {b: (nl.is_hbm(b), nl.is_sbuf(b), nl.is_psum(b), nl.is_on_chip(b))
             for b in (nl.hbm, nl.shared_hbm, nl.private_hbm, nl.sbuf, nl.psum)}
    assert kinds == {nl.hbm: (True, False, False, False),
                     nl.shared_hbm: (True, False, False, False),
                     nl.private_hbm: (True, False, False, False),
                     nl.sbuf: (False, True, False, True), nl.psum: (False, False, True, True)}


def test_all_along_the_free_axes():
    """nl.all against numpy: a zero anywhere in a partition's elements makes it 0, a NaN is
    nonzero."""
    with knki.installed():
        k = runpy.run_path(str(Path(__file__).parent / "nki_kernels" / "isa_more_v2.py"))
        x = np.random.default_rng(19).standard_normal((32, 4, 6)).astype(np.float32)
        x[3, 2, 5] = x[17, 0, 0] = 0.0
        x[9, 1, 1] = np.nan
        out = k["all_nonzero"](x)
    np.testing.assert_array_equal(out, np.all(x, axis=(1, 2)).astype(np.float32))


def test_divide_is_a_true_division():
    """nl.divide of int32 tiles gives float32 (numpy's true division), through the scalar
    engine's reciprocal; by a number, a multiplication by its reciprocal."""
    with knki.installed():
        k = runpy.run_path(str(Path(__file__).parent / "nki_kernels" / "isa_more_v2.py"))
        rng = np.random.default_rng(20)
        a = rng.integers(-1000, 1000, (16, 24)).astype(np.int32)
        b = rng.integers(1, 50, (16, 24)).astype(np.int32)
        out, out2 = k["divided"](a, b)
    assert out.dtype == np.float32
    assert _err(out, a / b) <= kernels.POLYNOMIAL
    np.testing.assert_array_equal(out2, (a * np.float32(0.25)).astype(np.float32))
