"""`gen kernels` and `gen run`."""

import json

import pytest
from click.testing import CliRunner

import kernels
from generators.cli import main


def run(*args):
    return CliRunner().invoke(main, list(args))


def test_kernels_lists_every_kernel():
    result = run("kernels")
    assert result.exit_code == 0, result.output
    for name in kernels.KERNELS:
        assert name in result.output


def test_run_numeric_with_trace(tmp_path):
    trace = tmp_path / "t.json"
    result = run("run", "trn1", "gemm_bias_gelu", "--shape", "M=130,K=200,N=600",
                 "--trace", str(trace))
    assert result.exit_code == 0, result.output
    out = result.output
    assert "trn1: gemm_bias_gelu M=130 K=200 N=600 bf16" in out
    assert "% of the tensor engine's 91.8 TFLOPS (bf16)" in out
    for engine in ("tensor", "scalar", "dma0"):
        assert f"\n {engine} " in out
    assert "out: max error" in out and " ok" in out
    spans = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    assert {"matmul", "ldst", "act", "dma"} <= {e["name"] for e in spans}


def test_run_mx_gemm_on_trn3():
    """`gen run` takes the MX formats where the array has them, its utilisation against the
    spec's MX rate (four times bf16's 79 TFLOPS per core)."""
    result = run("run", "trn3", "gemm", "--shape", "M=64,K=512,N=128", "--dtype", "mxfp8")
    assert result.exit_code == 0, result.output
    assert "trn3: gemm M=64 K=512 N=128 mxfp8" in result.output
    assert "% of the tensor engine's 315 TFLOPS (mxfp8)" in result.output
    assert "out: max error" in result.output and " ok" in result.output


def test_run_timing_only_lnc():
    one = run("run", "trn2", "gemm", "--shape", "M=4096,K=1024,N=2048", "--timing-only")
    two = run("run", "trn2", "gemm", "--shape", "M=4096,K=1024,N=2048", "--timing-only",
              "--lnc", "2")
    assert one.exit_code == two.exit_code == 0, one.output + two.output
    assert "each physical core runs M=2048" in two.output

    def ms(text):
        return float(text.split("time")[1].split("ms")[0])

    assert ms(two.output) < 0.6 * ms(one.output)


@pytest.mark.parametrize("args, message", [
    (("run", "trn1", "gemm", "--shape", "M=4,K=x"),
     "error: --shape must be KEY=INT,... with keys M, K, N, found 'K=x'"),
    (("run", "trn1", "gemm", "--shape", "M=4,K=4"), "error: gemm needs shape keys M, K, N; "
                                                    "missing N"),
    (("run", "trn1", "gemmm"), "error: expected a kernel, found 'gemmm'"),
    (("run", "trn1", "adam", "--dtype", "bf16", "--shape", "R=1,C=1"),
     "error: adam takes dtype fp32, not 'bf16'"),
    (("run", "trn1", "gemm", "--lnc", "2"), "error: --lnc must be one of [1] on trn1, not 2"),
    (("run", "trn1", "softmax", "--shape", "R=4,C=100000"),
     "error: C must be at most 65536 (one SBUF tile's free size), not 100000"),
    (("run", "inf1", "gemm"), "error: inf1: the core simulator needs"),
    (("run", "trn2", "gemm", "--dtype", "mxfp8"), "error: dtype must be one of fp8_e4m3, "
                                                  "fp8_e5m2, cfp8, bf16, fp16, tf32, fp32 on "
                                                  "trn2, not 'mxfp8'"),
    (("run", "trn2.48xlarge", "gemm"), "error: --shard: expected tp=N to run gemm on a "
                                       "system"),
])
def test_bad_input_exits_2_with_one_line(args, message):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert result.output.startswith(message), result.output
    assert result.output.count("\n") == 1
    assert "Traceback" not in result.output
