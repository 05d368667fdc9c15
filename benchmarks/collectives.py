"""Executed collectives (sim/system/execute.py): wall time, agreement with the alpha-beta
formula across message sizes, and how the time converges as the chunks shrink.

    PYTHONPATH=. python benchmarks/collectives.py [--skip speed,sizes,chunks,contention,faults]

Prints Markdown tables; the results are in benchmarks/collectives.md.
"""

from __future__ import annotations

import argparse
import os
import time

from sim.system import execute, model

SIZES = [4 * 2**10, 64 * 2**10, 2**20, 16 * 2**20, 256 * 2**20, 2**30]
CHUNKS = [2**30, 256 * 2**20, 64 * 2**20, 16 * 2**20, 4 * 2**20, 2**20, 256 * 2**10]


def _size(n: int) -> str:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} B"


def speed() -> None:
    s = model.build("trn2-ultraserver")
    print("## 1 GiB all-reduce over the 64 chips of a Trn2 UltraServer, timing only\n")
    print("| algorithm | chunk | wall s | operations | executed ms | busbw GB/s | load |")
    print("|---|---|---|---|---|---|---|")
    for alg in ("torus", "ring"):
        t0 = time.perf_counter()
        r = execute.run(s, "all_reduce", 2**30, algorithm=alg)
        wall = time.perf_counter() - t0
        print(f"| {alg} | 4 MiB | {wall:.2f} | {r.operations:,} | {r.time * 1e3:.4f} | "
              f"{r.busbw / 1e9:.1f} | {os.getloadavg()[0]:.1f} |")
    print()


def sizes() -> None:
    print("## Executed against the alpha-beta formula, by message size (4 MiB chunks)\n")
    print("| system | op | algorithm | size | executed | formula | executed / formula |")
    print("|---|---|---|---|---|---|---|")
    for name, alg in (("trn2.48xlarge", "torus"), ("trn2.48xlarge", "ring"),
                      ("trn2-ultraserver", "torus"), ("trn3-ultraserver", "direct")):
        s = model.build(name)
        for op in ("all_reduce", "all_gather"):
            for n in SIZES:
                r = execute.run(s, op, n, algorithm=alg)
                f = execute.analytic(s, op, n, alg)
                print(f"| {name} | {op} | {alg} | {_size(n)} | {r.time * 1e6:.2f} us | "
                      f"{f * 1e6:.2f} us | {r.time / f:.3f} |")
    c = model.build("trn2-ultracluster")
    for n in SIZES:
        r = execute.run(c, "all_reduce", n, members=2)
        f = execute.analytic(c, "all_reduce", n, "hierarchical", 2)
        print(f"| trn2-ultracluster (2 instances) | all_reduce | hierarchical | {_size(n)} | "
              f"{r.time * 1e6:.2f} us | {f * 1e6:.2f} us | {r.time / f:.3f} |")
    print()


def chunks() -> None:
    print("## Chunk size against the executed time (1 GiB all-reduce)\n")
    print("| system | chunk | executed ms | vs finest chunk | formula ms | wall s |")
    print("|---|---|---|---|---|---|")
    for name in ("trn2.48xlarge", "trn2-ultraserver"):
        s = model.build(name)
        rows = []
        for c in CHUNKS:
            t0 = time.perf_counter()
            r = execute.run(s, "all_reduce", 2**30, chunk=c)
            f = execute.analytic(s, "all_reduce", 2**30, "torus", chunk=c)
            rows.append((c, r.time, f, time.perf_counter() - t0))
        finest = rows[-1][1]
        for c, t, f, wall in rows:
            print(f"| {name} | {_size(c)} | {t * 1e3:.4f} | {100 * (t / finest - 1):+.2f} % | "
                  f"{f * 1e3:.4f} | {wall:.2f} |")
    print()


def contention() -> None:
    print("## Contended links: all-to-all on the torus (no formula in the model)\n")
    print("| system | size | executed | busiest link's bytes / payload rate | links used |")
    print("|---|---|---|---|---|")
    for name in ("trn2.48xlarge", "trn2-ultraserver"):
        s = model.build(name)
        rate = s._link() * s.chip.efficiency
        for n in (2**20, 64 * 2**20, 2**30):
            r = execute.run(s, "all_to_all", n - n % (s.chips * 4))
            bound = max(r.link_bytes.values()) / rate
            print(f"| {name} | {_size(n)} | {r.time * 1e3:.4f} ms | {bound * 1e3:.4f} ms | "
                  f"{len(r.link_bytes)} |")
    print()


def faults() -> None:
    from sim.golden import link as golden_link

    print("## Link bit errors: executed slowdown against the link model's go-back-N figure\n")
    print("| system | transfer | bit error rate | packet error rate | replays | executed "
          "slowdown | efficiency / efficiency_with_errors |")
    print("|---|---|---|---|---|---|---|")
    s = model.build("trn2.48xlarge")
    fab = execute.fabric(s)
    lp, D = fab.link_params, fab.link_latency
    clean = execute.run(s, "send_recv", 2**30, peer=1)
    for ber in (1e-12, 1e-9, 1e-7, 1e-6, 5e-6):
        r = execute.run(s, "send_recv", 2**30, peer=1, bit_error_rate=ber, seed=1)
        want = (golden_link.efficiency(lp, D, lp.max_packet)
                / golden_link.efficiency_with_errors(lp, D, lp.max_packet, ber))
        per = golden_link.packet_error_rate(lp, lp.max_packet, ber)
        print(f"| trn2.48xlarge | 1 GiB, one link | {ber:g} | {per:.3g} | {r.replays:,} | "
              f"{r.time / clean.time:.5f} | {want:.5f} |")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--skip", default="", help="comma-separated parts to skip")
    skip = set(ap.parse_args().skip.split(","))
    for name, part in (("speed", speed), ("sizes", sizes), ("chunks", chunks),
                       ("contention", contention), ("faults", faults)):
        if name not in skip:
            part()


if __name__ == "__main__":
    main()
