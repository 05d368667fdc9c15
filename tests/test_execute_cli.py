"""`gen run SYSTEM --collective ...` and `gen run SYSTEM KERNEL --shard tp=N`."""

import json

import pytest
from click.testing import CliRunner

from generators.cli import main
from sim.system import execute, model


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_collective_prints_time_bandwidths_and_links(tmp_path):
    trace = tmp_path / "t.json"
    result = run("run", "trn2.48xlarge", "--collective", "all_reduce", "--size", "64 MiB",
                 "--trace", str(trace))
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.startswith("trn2.48xlarge: all_reduce of 64 MiB per chip over 16 chips "
                          "(torus, fp32, chunks of 4 MiB, timing only)")
    r = execute.run(model.build("trn2.48xlarge"), "all_reduce", 64 * 2**20)
    assert f"time     {r.time * 1e3:.4g} ms" in out
    assert f"busbw    {r.busbw / 1e9:.4g} GB/s" in out
    assert "torus dim 0" in out and "torus dim 1" in out
    names = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"]
             if e["name"] == "thread_name"}
    assert "chip 15" in names and "(0, 0)->(1, 0)" in names


def test_sharded_gemm_numeric():
    result = run("run", "trn2.48xlarge", "gemm", "--shard", "tp=16", "--shape",
                 "M=128,K=2048,N=64")
    assert result.exit_code == 0, result.output
    err = float(result.output.split("out: max error ")[1].split()[0])
    assert 0 < err < 16 * 2**-8  # 16 bf16 roundings of partials and sums at most


def test_sharded_gemm_adds_the_all_reduce():
    result = run("run", "trn2.48xlarge", "gemm", "--shard", "tp=16", "--shape",
                 "M=1024,K=2048,N=512", "--timing-only")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "gemm M=1024 K=2048 N=512 bf16, tensor-parallel over 16 chips" in out
    assert "each chip: gemm with K=128 on its 8 cores, M=128 each" in out
    assert "all-reduce of 1 MiB" in out


@pytest.mark.parametrize("args, message", [
    (("--collective", "broadcast"), "error: --collective: expected one of all_reduce"),
    (("--collective", "all_reduce", "--size", "1 GHz"), "error: --size: expected a size"),
    (("--collective", "all_reduce", "--size", "3 B"), "error: size must be a whole number"),
    (("--collective", "all_reduce", "--algorithm", "hierarchical"),
     "error: trn2.48xlarge: algorithm must be one of torus, ring"),
    (("--collective", "all_reduce", "--bit-error-rate", "2"),
     "error: bit_error_rate must be in [0, 1)"),
    (("--collective", "all_reduce", "--members", "3"),
     "error: trn2.48xlarge: members slices a cluster"),
    (("gemm", "--shard", "tp=4"), "error: --shard: expected tp=16"),
    (("softmax", "--shard", "tp=16"), "error: --shard: expected a kernel with a contraction"),
    ((), "error: expected --collective OP or a KERNEL"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    result = run("run", "trn2.48xlarge", *args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert result.output.count("\n") == 1


def test_collective_on_a_chip_is_bad_input():
    result = run("run", "trn2", "gemm", "--collective", "all_reduce")
    assert result.exit_code == 2
    assert result.output.startswith("error: --collective runs on a system spec")


def test_bit_errors_are_replayed():
    result = run("run", "trn2.48xlarge", "--collective", "send_recv", "--size", "64 MiB",
                 "--bit-error-rate", "1e-6")
    assert result.exit_code == 0, result.output
    assert "packets replayed after bit errors" in result.output
