"""Analyses: pure functions from a Trace to small result frames or records."""
