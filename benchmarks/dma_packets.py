"""Where a kernel's DMA time goes under the packet rule (sim/core/costs.py): its DMAs grouped by
packet size and direction, with the bytes moved and the bytes' worth of time charged.

    PYTHONPATH=. python benchmarks/dma_packets.py SPEC KERNEL[,KERNEL...] [KEY=VALUE,...]

The shape is the kernel's example (``gen kernels``) with the given keys replaced; bf16 where
the kernel has it.
"""

from __future__ import annotations

import sys
from collections import defaultdict

import kernels
from hdl.core.isa import DmaCopy
from hdl.params import core_params
from sim.core.costs import dma_charged_bytes, dma_packet
from specs.loader import load


def main() -> None:
    spec, names = sys.argv[1], sys.argv[2].split(",")
    given = dict(kv.split("=") for kv in sys.argv[3].split(",")) if len(sys.argv) > 3 else {}
    p = core_params(load(spec))
    for name in names:
        k = kernels.KERNELS[name]
        shape = dict(k.example) | {a: int(v) for a, v in given.items() if a in k.dims}
        dtype = "bf16" if "bf16" in k.dtypes else k.dtypes[0]
        prog = kernels.build(p, k, shape, dtype).program
        groups: dict = defaultdict(lambda: [0, 0, 0.0])  # dmas, bytes, bytes charged
        for ins in (i for s in prog.streams.values() for i in s if isinstance(i, DmaCopy)):
            packet = dma_packet(ins.src, ins.dst)
            g = groups[(packet, ins.src.space, ins.dst.space)]
            g[0] += 1
            g[1] += ins.src.nbytes
            g[2] += dma_charged_bytes(p, ins.src, ins.dst)
        moved = sum(g[1] for g in groups.values())
        charged = sum(g[2] for g in groups.values())
        print(f"{name} {shape} {dtype}: {moved / 1e6:.2f} MB moved, charged as "
              f"{charged / 1e6:.2f} MB ({charged / max(moved, 1):.2f}x)")
        for (packet, src, dst), g in sorted(groups.items(), key=lambda kv: -kv[1][2]):
            print(f"  packets of {packet:>6} B {src} -> {dst}: {g[0]} DMAs, "
                  f"{g[1] / 1e6:.2f} MB, charged {g[2] / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
