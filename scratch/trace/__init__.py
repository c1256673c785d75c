"""Traces: every step of a call recorded, its words and bounds, compared."""
