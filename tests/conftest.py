import textwrap

import pytest
from amaranth.sim import Simulator

BASE_CHIP = textwrap.dedent("""\
    chip:
      name: testchip
      title: Test chip
      family: trainium
      neuron_core: v2
      cores: 2
      core:
        tensor:
          rows: 128
          cols: 128
          clock: 2.8 GHz
          formats: [bf16, fp16, fp32]
          rates: {fp32: 0.25}
        vector: {clock: 1.12 GHz, lanes: 128}
        scalar: {clock: 1.4 GHz, lanes: 128, functions: [exp, gelu]}
        sbuf: {partitions: 128, partition_size: 192 KiB}
        psum: {partitions: 128, partition_size: 16 KiB, banks: 8}
      memory: {kind: hbm2e, stacks: 2, capacity: 32 GiB, bandwidth: 820 GiB/s}
      dma: {engines: 32, bandwidth: 1 TB/s}
      neuronlink: {version: v2, links: 4}
      lnc: {options: [1], default: 1}
      rounding: {modes: [rne, stochastic]}
      area: {sram_bit: 0.9635}
      claims:
        - {quantity: compute.bf16, value: 190 TFLOPS, source: TRN1}
      assumptions:
        - {key: core.tensor.rows, note: "as published"}
    """)


@pytest.fixture
def base_chip() -> str:
    return BASE_CHIP


@pytest.fixture(scope="session")
def trn1():
    """trn1's NeuronCore parameters, as the core simulator and kernels take them."""
    from hdl.params import core_params
    from specs.loader import load
    return core_params(load("trn1"))


@pytest.fixture(scope="session")
def trn3():
    """trn3's NeuronCore parameters."""
    from hdl.params import core_params
    from specs.loader import load
    return core_params(load("trn3"))


def comb_outputs(dut, port_in, port_out, values) -> list[int]:
    """``port_out`` of the combinational component ``dut`` (its top) for each of ``values``
    set on ``port_in``, in Amaranth's simulator."""
    out = []

    async def bench(ctx):
        for v in values:
            ctx.set(port_in, v)
            out.append(ctx.get(port_out))

    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()
    return out
