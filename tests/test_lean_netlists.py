"""`gen chip` elaborates with Amaranth's per-net checks left out
(:func:`generators.chip.lean_netlists`): the Verilog must be the text Amaranth writes with
them, and Amaranth's own definitions must be back after it."""

from __future__ import annotations

import pytest
from amaranth.back import verilog
from amaranth.hdl import _nir

from generators.chip import lean_netlists
from hdl.link.link import LinkPort
from hdl.numerics.fpu import FpAdd32
from hdl.params import link_params
from specs.loader import load


def _link():
    return LinkPort(link_params(load("trn2"), "sim"))


@pytest.mark.parametrize("make", [FpAdd32, _link], ids=["fp32_adder", "link_port"])
def test_lean_netlists_write_the_same_verilog(make):
    checked = verilog.convert(make(), name="top", emit_src=False)
    with lean_netlists():
        lean = verilog.convert(make(), name="top", emit_src=False)
    assert lean == checked


def test_lean_netlists_restore_amaranth():
    before = [_nir.Value.__dict__["__new__"], _nir.Net.__dict__["from_cell"],
              _nir.Netlist.__dict__["resolve_value"]]
    with pytest.raises(RuntimeError), lean_netlists():
        assert _nir.Netlist.__dict__["resolve_value"] is not before[2]
        raise RuntimeError
    assert [_nir.Value.__dict__["__new__"], _nir.Net.__dict__["from_cell"],
            _nir.Netlist.__dict__["resolve_value"]] == before
    with pytest.raises(AssertionError):  # the checks are Amaranth's again
        _nir.Value(["not a net"])
