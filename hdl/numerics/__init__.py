"""The numerics contract's RTL: float formats, their constants, binary32 units and casts."""
