"""NKI tutorials' kernels, run unchanged through `gen nki`: the predicted time and HFU of
each at the tutorial's shapes, and what tracing and simulating cost.

The kernels are not part of the project: fetch the public aws-neuron-sdk repository and give
the path of its kernels file (at commit 49ee15c):
``general/nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py`` for the
matrix-multiplication tutorial, ``general/nki/examples/fused_mamba/mamba_nki_kernels.py`` for
the fused Mamba tutorial (``--tutorial mamba``). The published times are in
benchmarks/nki.md beside the results.

    PYTHONPATH=. python benchmarks/nki.py KERNELS_FILE [--spec trn1] [--scale 1]
    PYTHONPATH=. python benchmarks/nki.py MAMBA_FILE --tutorial mamba
    PYTHONPATH=. python benchmarks/nki.py MAMBA_FILE --tutorial mamba-scaling
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

#: The tutorial's kernels, in its order, and the shape each is benchmarked at (lhsT is
#: [K, M], rhs [K, N]; the tutorial's M, K, N = 4096, 8192, 8192).
KERNELS = ("nki_matmul_tiled_", "nki_matmul_hoist_load_", "nki_matmul_block_free_dimension_",
           "nki_matmul_fully_optimized_")
#: The Mamba tutorial's runs: kernel, channels, sequence length (batch 1, state size 16, f32).
MAMBA = (("mamba_v1", 256, 512), ("mamba_v1", 4096, 512), ("mamba_v2", 4096, 512),
         ("mamba_v2", 4096, 8192), ("mamba_v3", 4096, 8192))
#: The Mamba tutorial's scaling table (``--tutorial mamba-scaling``): v2 and v3 at 4,096
#: channels from sequence length 1,024 to 7,168 (512 and 8,192 are runs of MAMBA).
MAMBA_SCALING = tuple((kernel, 4096, s) for s in range(1024, 8192, 1024)
                      for kernel in ("mamba_v2", "mamba_v3"))


def _run(file: Path, kernel: str, shape: str, spec: str, label: str) -> None:
    start = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "generators.cli", "nki", str(file),
                          "--kernel", kernel, "--shape", shape, "--spec", spec,
                          "--timing-only", "--format", "json"],
                         capture_output=True, text=True)
    wall = time.perf_counter() - start
    if run.returncode != 0:
        print(f"{label}: refused ({(run.stderr or run.stdout).strip()}) [{wall:.1f} s]")
        return
    (row,) = json.loads(run.stdout)
    busy = ", ".join(f"{s} {b * 1e6:.1f} us" for s, b in row["busy_s"].items()
                     if not s.startswith("dma"))
    print(f"{label}: {row['time_s'] * 1e3:.3f} ms, HFU {row['hfu'] * 100:.1f} %, "
          f"{row['instructions']:,} instructions, busy {busy}, traced "
          f"{row['compile_s']:.1f} s, simulated {row['simulate_s']:.1f} s, {wall:.1f} s wall")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--tutorial", choices=("matmul", "mamba", "mamba-scaling"),
                        default="matmul")
    parser.add_argument("--spec", default="trn1")
    parser.add_argument("--scale", type=int, default=1,
                        help="divide the matmul's M, K and N by this (a quicker run)")
    args = parser.parse_args()
    if args.tutorial.startswith("mamba"):
        for kernel, c, s in MAMBA if args.tutorial == "mamba" else MAMBA_SCALING:
            shape = (f"delta=1x{c}x{s}:fp32,u=1x{c}x{s}:fp32,A={c}x16:fp32,"
                     f"B=1x16x{s}:fp32,C=1x16x{s}:fp32")
            _run(args.file, kernel, shape, args.spec, f"{kernel} [1, {s}, {c}, 16]")
        return
    m, k, n = (d // args.scale for d in (4096, 8192, 8192))
    shape = f"lhsT={k}x{m}:bf16,rhs={k}x{n}:bf16"
    for kernel in KERNELS:
        _run(args.file, kernel, shape, args.spec, kernel)


if __name__ == "__main__":
    main()
