"""Column headings for people, derived from the machine-readable keys.

One figure has one name: the markdown heading is the JSON/CSV key spelled for reading
(``gpu_busy_us_per_iter`` -> "GPU busy µs/iter"), never a second name chosen by hand.
"""

from __future__ import annotations

# Words spelled differently for people; the rest read as they are.
_WORDS = {
    "gpu": "GPU", "cpu": "CPU", "us": "µs", "ms": "ms", "pct": "%", "gbps": "GB/s",
    "tflops": "TFLOP/s", "tbps": "TB/s", "cudnn": "cuDNN", "api": "API", "sdpa": "SDPA",
    "speedup": "speed-up", "hta": "HTA", "nccl": "NCCL", "gemm": "GEMM", "flops": "FLOPs",
}  # fmt: skip


# Whole-trace columns that sit beside per-iteration ones say so.
_KEYS = {
    "count": "count (whole trace)",
    "total_us": "total µs (whole trace)",
    # The roofline's per-call figures (one call of one op with one set of shapes).
    "gpu_us": "GPU µs per call",
    "flops": "FLOPs per call",
    "bytes": "bytes per call",
    "intensity": "FLOP/byte",
    "us_per_iter_delta": "change µs/iter",
}


def heading(key: str) -> str:
    """``gpu_busy_us_per_iter`` -> ``GPU busy µs/iter``; ``count_per_iter`` -> ``count/iter``."""
    if key in _KEYS:
        return _KEYS[key]
    words = key.split("_")
    suffix = ""
    if words[-2:] == ["per", "iter"]:
        words, suffix = words[:-2], "/iter"
    return " ".join(_WORDS.get(word, word) for word in words) + suffix
