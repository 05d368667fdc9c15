"""Spec -> parameters -> elaborated Amaranth designs -> Verilog, datasheets and file lists."""

__version__ = "0.1.0"
