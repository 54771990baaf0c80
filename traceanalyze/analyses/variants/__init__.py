"""Variants side by side: compare, explain (why one is faster), diff."""
