"""The NKI matrix-multiplication tutorial's kernels, run unchanged through `gen nki`: the
predicted time and HFU of each at the tutorial's shape, and what tracing and simulating cost.

The kernels are not part of the project: fetch the public aws-neuron-sdk repository and give
the path of ``general/nki/examples/matrix_multiplication/matrix_multiplication_nki_kernels.py``
(at commit 49ee15c). The published times are in benchmarks/nki.md beside the results.

    PYTHONPATH=. python benchmarks/nki.py KERNELS_FILE [--spec trn1] [--scale 1]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--spec", default="trn1")
    parser.add_argument("--scale", type=int, default=1,
                        help="divide M, K and N by this (a quicker run)")
    args = parser.parse_args()
    m, k, n = (d // args.scale for d in (4096, 8192, 8192))
    shape = f"lhsT={k}x{m}:bf16,rhs={k}x{n}:bf16"
    for kernel in KERNELS:
        start = time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "generators.cli", "nki", str(args.file),
                              "--kernel", kernel, "--shape", shape, "--spec", args.spec,
                              "--timing-only", "--format", "json"],
                             capture_output=True, text=True)
        wall = time.perf_counter() - start
        if run.returncode != 0:
            print(f"{kernel}: refused ({(run.stderr or run.stdout).strip()}) [{wall:.1f} s]")
            continue
        (row,) = json.loads(run.stdout)
        print(f"{kernel}: {row['time_s'] * 1e3:.3f} ms, HFU {row['hfu'] * 100:.1f} %, "
              f"{row['instructions']:,} instructions, traced {row['compile_s']:.1f} s, "
              f"simulated {row['simulate_s']:.1f} s, {wall:.1f} s wall")


if __name__ == "__main__":
    main()
