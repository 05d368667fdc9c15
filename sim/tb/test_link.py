"""Pytest entry points of the link port's cocotb testbench (:mod:`sim.tb.link`)."""

from __future__ import annotations

import random

import pytest

from hdl.link.link import LinkParams
from sim.golden import link as golden
from sim.tb.link import ERROR_TOLERANCE, measured_efficiency, simulate

# --- pytest entry points -----------------------------------------------------------------------

PARAMS = {
    # Edge sizes: single-word packets with one credit each way; power-of-two sizes;
    # non-power-of-two sizes with a narrow datapath (multi-flit header and CRC).
    "one": LinkParams(width=32, credits=1, max_packet=1, replay_depth=1, ack_timeout=64),
    "pow2": LinkParams(width=64, credits=16, max_packet=8, replay_depth=32, ack_timeout=256),
    "odd": LinkParams(width=24, credits=11, max_packet=7, replay_depth=13, ack_timeout=200),
}
PACKETS = {"verilator": 10_000, "icarus": 1_000}


@pytest.mark.cocotb
@pytest.mark.parametrize("name", list(PARAMS))
def test_link(name, sim, seed):
    """Random lengths, idle cycles, backpressure and bit errors; in order, exactly once."""
    params = PARAMS[name]
    result = simulate(params, sim, seed, packets=PACKETS[sim], bit_error_rate=2e-4,
                      latency=3, directed_packets=60)
    assert result.ok, result


@pytest.mark.cocotb
def test_link_error_free_matches_golden_schedule(sim, seed):
    """Without errors the RTL's delivered words match the cycle-exact golden model."""
    result = simulate(PARAMS["odd"], sim, seed, packets=PACKETS[sim] // 2, bit_error_rate=0.0,
                      latency=3, directed_packets=0)
    assert result.ok, result


@pytest.mark.cocotb
def test_link_checker_catches_a_corrupted_word(sim, seed):
    """One word flipped after the receiver (where no CRC looks): the in-hardware checker
    counts exactly one mismatch, so its silence in the other runs means something."""
    result = simulate(PARAMS["pow2"], sim, seed, packets=200, bit_error_rate=0.0, latency=3,
                      directed_packets=0, corrupt_at=random.Random(seed).randrange(1, 500))
    assert result.ok, result


@pytest.mark.cocotb
@pytest.mark.parametrize("length, bit_error_rate", [(8, 0.0), (3, 0.0), (8, 1e-4)])
def test_link_efficiency(length, bit_error_rate, sim):
    """Saturated fixed-length traffic: efficiency against the closed form."""
    params = PARAMS["pow2"]
    packets = {"verilator": (400, 3000), "icarus": (150, 500)}[sim][bool(bit_error_rate)]
    measured = measured_efficiency(params, sim, length=length, latency=3, packets=packets,
                                   bit_error_rate=bit_error_rate)
    if bit_error_rate:
        expect = golden.efficiency_with_errors(params, 3, length, bit_error_rate)
        assert measured == pytest.approx(expect, rel=ERROR_TOLERANCE)
    else:
        expect = golden.efficiency(params, 3, length)
        assert measured == pytest.approx(expect, abs=0.01)
