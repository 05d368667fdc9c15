"""Chip and system specs: loading, schema and model, units and quantities, and input errors."""
