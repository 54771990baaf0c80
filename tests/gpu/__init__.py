"""GPU-only tests: marked ``gpu`` and skipped without CUDA."""
