"""Handlers that ship with the core (only the NumPy reference handler)."""
