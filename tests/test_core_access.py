"""The access-pattern walker of the core RTL (:class:`hdl.core.access.ApWalker`) against
numpy: the byte address of every element, in the order numpy's strided view of the same
pattern lists them (the order of the core simulator's ``_Data._view``)."""

import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.core.access import ApWalker
from hdl.core.isa import AP, AP_FIELDS, DTYPES, SPACES


def _expected(ap: AP) -> list[int]:
    shape = (ap.partitions,) + tuple(n for n, _ in ap.dims)
    idx = np.indices(shape).reshape(len(shape), -1)
    elements = sum(idx[1 + i] * s for i, (_, s) in enumerate(ap.dims))
    return list(ap.offset + idx[0] * ap.pstride + elements * ap.itemsize)


def _fields(ap: AP) -> dict:
    v = {"space": SPACES.index(ap.space), "dtype": DTYPES[ap.dtype][0],
         "partition": ap.partition, "partitions": ap.partitions, "offset": ap.offset,
         "pstride": ap.pstride}
    for i in range(3):
        n, s = ap.dims[i] if i < len(ap.dims) else (0, 0)
        v[f"n{i}"], v[f"s{i}"] = n, s
    assert set(v) == {name for name, _, _ in AP_FIELDS}
    return v


def _walk(ap: AP) -> tuple[list[int], list[int], list[int]]:
    dut = ApWalker()
    count = ap.partitions * ap.free
    got, rows, lasts = [], [], []

    async def bench(ctx):
        for name, value in _fields(ap).items():
            ctx.set(getattr(dut.ap, name), value)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.step, 1)
        for _ in range(count):
            got.append(ctx.get(dut.byte))
            rows.append(ctx.get(dut.row))
            lasts.append(ctx.get(dut.last))
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    return got, rows, lasts


CASES = [
    AP("sbuf", "fp32", 0, 1, 64, ((1, 1),)),
    AP("sbuf", "bf16", 0, 3, 0, ((4, 1), (3, 4))),
    AP("hbm", "fp32", 0, 3, 1024, ((2, 8), (3, -2), (2, 1)), pstride=400),
    AP("psum", "fp8_e4m3", 32, 2, 7, ((5, 3),)),
]


@pytest.mark.parametrize("ap", CASES, ids=lambda ap: f"{ap.space}-{ap.partitions}x"
                                                     f"{'x'.join(str(n) for n, _ in ap.dims)}")
def test_walker_visits_numpy_order(ap):
    got, rows, lasts = _walk(ap)
    assert got == _expected(ap)
    assert rows == [r for r in range(ap.partitions) for _ in range(ap.free)]
    assert lasts == [0] * (len(got) - 1) + [1]
