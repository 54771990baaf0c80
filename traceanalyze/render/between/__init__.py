"""Renderers for the time between kernels."""
