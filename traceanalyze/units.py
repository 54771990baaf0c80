"""Numbers written for people: sizes in binary units, durations in sensible units.

Shared by findings (sentences the analyses write) and the renderers, so a figure reads the
same in a sentence and in a table.
"""

from __future__ import annotations


def byte_size(value: float) -> str:
    """4 -> "4 B", 1024 -> "1 KiB", 268435456 -> "256 MiB", 134144 -> "131 KiB"."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(value) >= scale:
            scaled = value / scale
            return f"{scaled:,.0f} {unit}" if abs(scaled) >= 100 else f"{scaled:.3g} {unit}"
    return f"{value:,.0f} B" if value == round(value) else f"{value:.3g} B"


def duration(us: float) -> str:
    """Microseconds in the largest unit that keeps them readable: 43334104.0 -> "43.3 s"."""
    for unit, scale in (("s", 1e6), ("ms", 1e3)):
        if abs(us) >= scale:
            return (
                f"{us / scale:,.3g} {unit}"
                if abs(us) < 1000 * scale
                else f"{us / scale:,.0f} {unit}"
            )
    return f"{us:.3g} µs" if abs(us) < 100 else f"{us:,.0f} µs"
