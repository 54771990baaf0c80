"""Renderers for memory: tables and the memory curve."""
