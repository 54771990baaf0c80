"""GPU memory from profile_memory events: usage per iteration, blocks, leaks, diffs."""
