"""The hardware: unit parameters from the specs, and the Amaranth units that they size."""
