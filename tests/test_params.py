"""The one spec -> unit parameters mapping (hdl/params.py), against the spec files read by hand.

Every expectation is written from the YAML (trn2 extends trn1; the spec language's defaults
are in specs/model.py), never computed by the code under test.
"""

from __future__ import annotations

import pytest

from generators.units import UNITS
from hdl.link.link import LinkParams
from hdl.params import (
    ModelError,
    core_params,
    params_from_spec,
    rtl_format_name,
    systolic_params,
    tensor_params,
)
from hdl.tensor.params import SystolicParams
from specs.loader import bundled, load
from specs.model import ChipSpec


def _variant(tmp_path, text: str, base: str = "trn2") -> ChipSpec:
    (tmp_path / "toy.yaml").write_text(f"extends: {base}\nchip:\n  name: toy\n  title: Toy\n"
                                       + text)
    return load(tmp_path / "toy.yaml")


def test_trn2_full_scale():
    p = params_from_spec(load("trn2"), "full")
    # formats [fp8_e4m3, fp8_e5m2, cfp8, bf16, fp16, tf32, fp32], the 8-bit floats at rate 2,
    # fp32 at 0.25, cFP8 inherited from trn1 as e4m3 with bias 7; one 128 x 128 array,
    # moving_max 512, split 1, 2 or 4 ways (row_tiles).
    assert p.tensor == SystolicParams(
        rows=128, cols=128, moving_max=512,
        formats=("fp8_e4m3", "fp8_e5m2", "cfp8_e4m3_b7", "bf16", "fp16", "tf32", "fp32"),
        double_rate=("fp8_e4m3", "fp8_e5m2", "cfp8_e4m3_b7"), quarter_rate=("fp32",),
        tiles=(1, 2, 4))
    # 128 lanes, stochastic rounding by the 32-bit LFSR.
    assert (p.vector.lanes, p.vector.rng) == (128, "lfsr32")
    assert (p.scalar.lanes, p.scalar.rng) == (128, "lfsr32")
    assert [f.name for f in p.scalar.functions] == [
        "identity", "relu", "exp", "gelu", "silu", "sigmoid", "tanh", "softplus", "erf",
        "reciprocal", "rsqrt", "sqrt", "log", "square", "abs", "mish", "gelu_tanh", "sin", "cos",
        "arctan", "gelu_sigmoid", "silu_dx", "gelu_sigmoid_dx", "gelu_dx", "erf_dx"]
    # 4096-byte packets of 256-bit flits are 128 words; 512 credits, replay as deep.
    assert p.link == LinkParams(width=256, credits=512, max_packet=128, replay_depth=512,
                                ack_timeout=512)


def test_trn2_sim_scale():
    p = params_from_spec(load("trn2"), "sim")
    # chip.sim of trn1: an 8 x 8 array, 4 lanes; moving_max min(512, 16); a 64-bit link of
    # 16 credits and 8-word packets, replay as deep as the credits, timeout 256.
    assert (p.tensor.rows, p.tensor.cols, p.tensor.moving_max) == (8, 8, 16)
    full = params_from_spec(load("trn2"), "full").tensor
    assert (p.tensor.formats, p.tensor.double_rate) == (full.formats, full.double_rate)
    assert (p.vector.lanes, p.scalar.lanes) == (4, 4)
    assert p.link == LinkParams(width=64, credits=16, max_packet=8, replay_depth=16,
                                ack_timeout=256)


def test_inf1_has_no_link_and_no_double_rate_int8():
    p = params_from_spec(load("inf1"), "full")
    assert p.link is None
    # rates {int8: 2}: the RTL has no double-rate int8, so int8 runs one product per PE
    assert p.tensor == SystolicParams(rows=128, cols=64, formats=("int8", "bf16", "fp16"),
                                      moving_max=512)


def test_spec_fields_reach_the_parameters(tmp_path):
    spec = _variant(tmp_path, "  core:\n"
                              "    tensor: {moving_max: 8, cfp8: {layout: e5m2, bias: 12}}\n"
                              "  neuronlink: {replay_depth: 1024, ack_timeout: 900}\n"
                              "  sim: {tensor_moving_max: 32, link_replay_depth: 40, "
                              "link_ack_timeout: 99}\n")
    full, sim = params_from_spec(spec, "full"), params_from_spec(spec, "sim")
    assert (full.link.replay_depth, full.link.ack_timeout) == (1024, 900)
    assert (sim.link.replay_depth, sim.link.ack_timeout) == (40, 99)
    assert full.tensor.formats[2] == "cfp8_e5m2_b12"
    assert full.tensor.moving_max == 8
    assert sim.tensor.moving_max == 8     # min(8, 32): never above full scale


def test_block_formats_in_the_array():
    """trn3's array takes mxfp8 (E4M3 and E5M2) and mxfp4 at the spec's rate 4: a word is the
    instruction set's quad (four 8-bit elements, 32 bits as ``mxfp8_x4``) and its 8-bit
    scale, four multipliers per PE, a tile's k counting quads; the core lists every format of
    the array, in order, its instruction set's MX quad types among them. Another MX rate is
    refused."""
    spec = load("trn3")
    t = spec.core.tensor
    array = systolic_params(t)
    assert array.formats[-3:] == ("mxfp8", "mxfp8_e5m2", "mxfp4") and t.rates["mxfp8"] == 4
    assert t.rates["mxfp8_e5m2"] == 4 and array.is_mx("mxfp8_e5m2")
    assert array.is_mx("mxfp8") and not array.is_double("mxfp4")
    assert (array.width, array.mx_scale_lsb, array.lanes) == (32 + 8, 32, 4)
    assert array.k_limit("mxfp8") == array.rows
    assert array.contraction("mxfp4", array.rows) == 4 * array.rows
    assert rtl_format_name(t, "mxfp4") == "mxfp4"
    assert rtl_format_name(t, "bf16") == "bf16"
    core = core_params(spec)
    assert core.formats == tuple(t.formats)
    assert core.array_format("mxfp8") == "mxfp8" and core.array_format("cfp8") == array.formats[3]
    with pytest.raises(ModelError, match=r"core\.tensor\.rates of mxfp4 must be 4 \(the RTL's "
                                         r"MX word is a quad\), not 2$"):
        systolic_params(t.model_copy(update={"rates": {**t.rates, "mxfp4": 2}}))


def test_parameters_that_make_no_unit(tmp_path):
    spec = _variant(tmp_path, "  sim: {link_credits: 4}\n")
    with pytest.raises(ModelError, match=r"toy: sim\.link_\* fields do not make a LinkParams "
                                         r"\(credits must be at least max_packet \(8\), not 4\)"):
        params_from_spec(spec, "sim")
    spec = _variant(tmp_path, "  neuronlink: {credits: 16}\n")
    with pytest.raises(ModelError, match=r"toy: neuronlink parameters do not make a link port "
                                         r"\(credits must be at least max_packet \(128\)"):
        params_from_spec(spec, "full")
    spec = _variant(tmp_path, "  core:\n    tensor: {rates: {bf16: 2}}\n")
    # bf16 at rate 2 is not an 8-bit float: the array cannot be double rate, so single rate
    assert "bf16" not in params_from_spec(spec, "full").tensor.double_rate
    with pytest.raises(ValueError, match=r"scale must be one of 'full', 'sim', not 'half'"):
        tensor_params(spec, "half")


@pytest.mark.parametrize("name", bundled()["chip"])
@pytest.mark.parametrize("scale", ["full", "sim"])
def test_the_generators_use_the_one_mapping(name, scale):
    spec = load(name)
    p = params_from_spec(spec, scale)
    assert list(UNITS["tensor"].params(spec, scale)) == [p.tensor]
    assert list(UNITS["vector"].params(spec, scale)) == [p.vector]
    assert list(UNITS["scalar"].params(spec, scale)) == [p.scalar]
    if p.link is not None:
        assert list(UNITS["link"].params(spec, scale)) == [p.link]
