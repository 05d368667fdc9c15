"""The chip-to-chip link RTL: the link port and a loopback fixture for its simulation."""
