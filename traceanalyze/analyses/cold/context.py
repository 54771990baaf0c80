"""What a cold-start figure is for: the caches it started with, the wall-clock timing it is
checked against (the capture manifest), and the steady advantage that pays it back.

Read from a manifest entry written by ``python -m capture --cold``: ``variants.<name>.cold``
holds ``cache_state`` ("empty": every process got fresh empty CUDA JIT, Triton, Inductor and
kernel caches; "as_found": the caches were used as they were), ``call1_ms`` and
``steady_median_ms`` (wall clock without the profiler: medians over the timing processes,
``call1_ms_per_process`` each one's call 1) and, per process (``profile`` wrote the trace,
``time`` measured), the caches it started with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from capture.caches import CacheState
from capture.manifest import Manifest, VariantResult

UNKNOWN_CACHES = "unknown (no capture manifest says)"
FROM_TIMING = "capture timing"
FROM_TRACE = "trace"


@dataclass(frozen=True)
class ColdContext:
    """The manifest's cold-start facts of one variant (all None where it has none)."""

    cache_state: str | None = None  # "empty" | "as_found"
    trace_caches: str | None = None  # the profiled process's caches when it started
    timing_caches: str | None = None  # the timing process's caches when it started
    timed_first_call_us: float | None = None
    timed_steady_us: float | None = None
    # Call 1 in each timing process: one-off costs vary between fresh processes.
    timed_first_call_runs_us: tuple[float, ...] = ()
    call_shapes: tuple[int | str, ...] | None = None  # each call's sequence length, in order

    @classmethod
    def from_entry(
        cls, entry: VariantResult | None, manifest: Manifest | None = None
    ) -> ColdContext:
        """From a manifest's variant entry and the manifest (whose ``config.cold.call_seqs``
        give each call's shape); without a ``cold`` record in the entry nothing is known."""
        cold = entry.cold if entry is not None else None
        if cold is None:
            return cls()
        caches = {p.role: _caches(p.caches_before) for p in cold.processes}
        return cls(
            cache_state=cold.cache_state,
            trace_caches=caches.get("profile"),
            timing_caches=caches.get("time"),
            timed_first_call_us=_us(cold.call1_ms),
            timed_steady_us=_us(cold.steady_median_ms),
            timed_first_call_runs_us=tuple(
                us for us in map(_us, cold.call1_ms_per_process) if us is not None
            ),
            call_shapes=manifest.call_seqs if manifest is not None else None,
        )

    @property
    def timed_excess_us(self) -> float | None:
        if self.timed_first_call_us is None or self.timed_steady_us is None:
            return None
        return self.timed_first_call_us - self.timed_steady_us

    @property
    def timed_first_call_spread_pct(self) -> float | None:
        """The timing processes' call 1 range, (max - min) / median x 100 (None for one)."""
        runs = self.timed_first_call_runs_us
        if len(runs) < 2 or not self.timed_first_call_us:
            return None
        return (max(runs) - min(runs)) / self.timed_first_call_us * 100

    @property
    def caches_note(self) -> str | None:
        """Why the trace and the timing may not be like for like (caches differ)."""
        if self.trace_caches and self.timing_caches and self.trace_caches != self.timing_caches:
            return (
                f"the profiled process started with caches {self.trace_caches}, the timing "
                f"process with {self.timing_caches}"
            )
        return None


def _us(ms: float | None) -> float | None:
    return float(ms) * 1e3 if isinstance(ms, (int, float)) else None


def _caches(states: Sequence[CacheState]) -> str:
    """``cuda_jit 12 files, triton empty, inductor absent``: one process's caches."""
    parts = []
    for state in states:
        if not state.exists:
            held = "absent"
        elif state.empty:
            held = "empty"
        else:
            held = f"{state.files:,} files"
        parts.append(f"{state.name} {held}")
    return ", ".join(parts)


@dataclass(frozen=True)
class Payback:
    """How fast a variant's steady advantage over the baseline pays back one-off work."""

    advantage_us: float | None  # the baseline's steady call time minus the variant's
    source: str | None  # FROM_TIMING or FROM_TRACE
    note: str | None  # why there is no break-even (None when there is one)
    # The baseline's own one-off cost from the same source: the baseline pays it too.
    baseline_excess_us: float = 0.0

    def calls(self, excess_us: float | None) -> int | None:
        """Calls after which ``excess_us`` is paid back (0: nothing to pay back)."""
        if self.note is not None or self.advantage_us is None or excess_us is None:
            return None
        return max(0, math.ceil(excess_us / self.advantage_us))

    def net_calls(self, excess_us: float | None) -> int | None:
        """Calls after which the variant's one-off cost beyond the baseline's own is paid
        back: (excess_us - baseline_excess_us) / advantage, 0 when the variant is cheaper
        from the first call."""
        if excess_us is None:
            return None
        return self.calls(excess_us - self.baseline_excess_us)


NO_BASELINE = Payback(
    None,
    None,
    "no baseline: break-even needs the baseline variant's steady time (run `cold` on the "
    "capture folder)",
)


def payback(
    variant: tuple[float | None, float | None],
    baseline: tuple[float | None, float | None],
    baseline_label: str,
    is_baseline: bool,
    baseline_excess: tuple[float | None, float | None] = (None, None),
) -> Payback:
    """The steady advantage from (timed, trace) steady call times of the variant and of the
    baseline: the capture's wall-clock timing where both have it, else the traces'; with the
    baseline's (timed, trace) one-off cost from the same source."""
    if is_baseline:
        return Payback(None, None, "the baseline itself")
    for index, source in enumerate((FROM_TIMING, FROM_TRACE)):
        mine, theirs = variant[index], baseline[index]
        if mine is not None and theirs is not None:
            advantage = theirs - mine
            if advantage <= 0:
                return Payback(
                    advantage,
                    source,
                    f"no steady advantage over {baseline_label} ({mine:,.1f} vs "
                    f"{theirs:,.1f} µs per call, {source}): never paid back",
                )
            return Payback(advantage, source, None, baseline_excess[index] or 0.0)
    return Payback(None, None, f"no steady time for this variant or for {baseline_label}")
