"""Bit-exact golden models of the RTL units: numerics, the array, the engines and the link."""
