"""Parts of the core's engines (:mod:`hdl.core.engines`) against numpy."""

import numpy as np
from amaranth.sim import Simulator

from hdl.core.engines import IOTA_BITS, IotaLane


def test_iota_values_convert_to_fp32_as_numpy_does():
    """GpSimd's Iota values (``IOTA_BITS`` signed bits) to fp32, round to nearest even:
    zero, exact small values, ties either way above 2**24, and the range's ends."""
    rng = np.random.default_rng(5)
    top = 2 ** (IOTA_BITS - 1)
    values = [0, 1, -1, 2**24 + 1, 2**24 + 3, -(2**24 + 1), 2**25 + 2, 2**25 + 6,
              top - 1, -top + 1, -(2**31), 2**31 - 1]
    values += [int(v) for v in rng.integers(-top + 1, top, 400)]
    values += [int(v) for v in rng.integers(-2**26, 2**26, 200)]
    dut = IotaLane()
    got = []

    async def bench(ctx):
        for v in values:
            ctx.set(dut.value, v)
            got.append(ctx.get(dut.y))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    want = np.array(values, dtype=np.int64).astype(np.float32).view(np.uint32)
    assert got == [int(w) for w in want]
