"""What a cold-start figure is for: the caches it started with, the process it ran in, the
timing it is checked against (the capture manifest), and the steady advantage that pays it
back.

Read from a manifest entry written by ``python -m capture --cold``: ``variants.<name>.cold``
holds ``cache_state`` ("empty": every process got fresh empty CUDA JIT, Triton, Inductor and
kernel caches; "as_found": the caches were used as they were), ``call_wall_ms`` (each call's
wall clock without the profiler, call 1 first: medians over the timing processes),
``call1_ms_per_process`` each timing process's call 1 and, per process (``profile`` wrote the
trace, ``time`` measured), the caches it started with. Every variant of such a capture runs in
fresh processes: its call 1 is a fresh process's first call. Any capture's entry has
``median_ms``: CUDA events over ``repeats`` calls after a warm-up, without the profiler.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from capture.caches import CacheState
from capture.manifest import Manifest, VariantResult

UNKNOWN_CACHES = "unknown (no capture manifest says, no cache event in the trace)"
FROM_TIMING = "capture timing"
FROM_TRACE = "trace (under the profiler)"
# Where ``timed_steady_us`` comes from.
TIMED_CALLS = "cold capture: each call's wall clock, no profiler (call_wall_ms)"
TIMED_MEDIAN = "capture median: CUDA events over {repeats} calls after a warm-up, no profiler"
# The steady times without the profiler that a break-even is checked against, by short name.
PER_CALL = "timed per call with a synchronize (call_wall_ms)"
BACK_TO_BACK = "timed back to back (CUDA events, median_ms)"
# Where call 1 ran: what its excess is the one-off cost of.
FRESH_PROCESS = "a fresh process (capture manifest)"
AFTER_WARM_UP = "a process after {calls} warm-up call{s} (capture manifest)"
IN_THIS_TRACE = "this trace (not known to be the process's first call)"


@dataclass(frozen=True)
class CallTimes:
    """Call 1's time and its median steady call's, from one source (µs; None: unknown)."""

    first_call_us: float | None = None
    steady_us: float | None = None

    @property
    def excess_us(self) -> float | None:
        if self.first_call_us is None or self.steady_us is None:
            return None
        return self.first_call_us - self.steady_us


@dataclass(frozen=True)
class ColdContext:
    """The manifest's cold-start facts of one variant (all None where it has none)."""

    cache_state: str | None = None  # "empty" | "as_found"
    trace_caches: str | None = None  # the profiled process's caches when it started
    timing_caches: str | None = None  # the timing process's caches when it started
    timed: CallTimes = CallTimes()  # call 1 and its shape's median steady call, timed
    timed_source: str | None = None  # TIMED_CALLS | TIMED_MEDIAN
    median_us: float | None = None  # the manifest's median_ms: CUDA events, back to back
    # Call 1 in each timing process: one-off costs vary between fresh processes.
    timed_first_call_runs_us: tuple[float, ...] = ()
    call_shapes: tuple[int | str, ...] | None = None  # each call's sequence length, in order
    fresh_process: bool = False  # a cold capture: the trace's call 1 is the process's first
    warm_up_calls: int | None = None  # calls before profiling, as the manifest says

    @classmethod
    def from_entry(
        cls,
        entry: VariantResult | None,
        manifest: Manifest | None = None,
        warm_up_calls: int | None = None,
    ) -> ColdContext:
        """From a manifest's variant entry and the manifest (``config.cold`` gives each
        call's shape and the steady calls; ``warm_up_calls``, where given, the calls made
        before profiling); without an entry only the warm-up calls are known."""
        warm_up = warm_up_calls
        if warm_up is None and manifest is not None:
            warm_up = manifest.warm_up_calls
        if entry is None:
            return cls(warm_up_calls=warm_up)
        cold = entry.cold
        median = _us(entry.median_ms)
        if cold is None:
            source = TIMED_MEDIAN.format(repeats=entry.repeats) if median is not None else None
            return cls(
                timed=CallTimes(None, median),
                timed_source=source,
                median_us=median,
                warm_up_calls=warm_up,
            )
        caches = {p.role: _caches(p.caches_before) for p in cold.processes}
        shapes = manifest.call_seqs if manifest is not None else None
        timed = _timed_calls(cold.call_wall_ms, shapes, _steady_calls(manifest))
        if timed is None:  # an older manifest: call 1 and the steady median alone
            timed = CallTimes(_us(cold.call1_ms), _us(cold.steady_median_ms))
        return cls(
            cache_state=cold.cache_state,
            trace_caches=caches.get("profile"),
            timing_caches=caches.get("time"),
            timed=timed,
            timed_source=TIMED_CALLS,
            median_us=median,
            timed_first_call_runs_us=tuple(
                us for us in map(_us, cold.call1_ms_per_process) if us is not None
            ),
            call_shapes=shapes,
            fresh_process=not warm_up,
            warm_up_calls=warm_up,
        )

    @property
    def timed_first_call_spread_pct(self) -> float | None:
        """The timing processes' call 1 range, (max - min) / median x 100 (None for one)."""
        runs = self.timed_first_call_runs_us
        first = self.timed.first_call_us
        if len(runs) < 2 or not first:
            return None
        return (max(runs) - min(runs)) / first * 100

    @property
    def caches_note(self) -> str | None:
        """Why the trace and the timing may not be like for like (caches differ)."""
        if self.trace_caches and self.timing_caches and self.trace_caches != self.timing_caches:
            return (
                f"the profiled process started with caches {self.trace_caches}, the timing "
                f"process with {self.timing_caches}"
            )
        return None

    @property
    def untraced(self) -> tuple[tuple[str, float], ...]:
        """The steady times measured without the profiler, by what measured them."""
        found = [(PER_CALL, self.timed.steady_us)] if self.timed_source == TIMED_CALLS else []
        found.append((BACK_TO_BACK, self.median_us))
        return tuple((name, us) for name, us in found if us is not None)

    @property
    def first_call_in(self) -> str:
        """Where call 1 ran: a fresh process, one after warm-up calls, or unknown."""
        if self.warm_up_calls:
            s = "" if self.warm_up_calls == 1 else "s"
            return AFTER_WARM_UP.format(calls=self.warm_up_calls, s=s)
        return FRESH_PROCESS if self.fresh_process else IN_THIS_TRACE


def _timed_calls(
    walls_ms: Sequence[float], shapes: Sequence[int | str] | None, steady: Sequence[int] | None
) -> CallTimes | None:
    """Call 1 and the lower median of the steady calls of call 1's shape (each a real call,
    as in the trace), from each call's timed wall clock; None without per-call times."""
    if not walls_ms:
        return None
    numbers = steady if steady is not None else range(2, len(walls_ms) + 1)
    same_shape = [
        i for i in numbers if 1 < i <= len(walls_ms) and (not shapes or shapes[i - 1] == shapes[0])
    ]
    times = sorted(walls_ms[i - 1] for i in same_shape)
    median = times[(len(times) - 1) // 2] if times else None
    return CallTimes(_us(walls_ms[0]), _us(median))


def _steady_calls(manifest: Manifest | None) -> list[int] | None:
    cold = manifest.config.get("cold") if manifest is not None else None
    calls = cold.get("steady_calls") if isinstance(cold, dict) else None
    return [int(c) for c in calls] if isinstance(calls, list) else None


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
class Timings:
    """One variant's call times from each source, what checks them and what they are for."""

    label: str
    timed: CallTimes  # the capture's timing (no profiler)
    traced: CallTimes  # the trace's calls (under the profiler)
    untraced: tuple[tuple[str, float], ...]  # ColdContext.untraced
    fresh_process: bool  # call 1 is a fresh process's first call
    cache_state: str | None
    warm_up_calls: int | None = None  # calls before profiling, as the manifest says


@dataclass(frozen=True)
class Payback:
    """How a variant's steady advantage over the baseline pays back its extra one-off cost.

    ``advantage_us`` (the baseline's steady call minus the variant's) and
    ``one_off_difference_us`` (the variant's first-call excess minus the baseline's) come
    from one ``source``; ``calls`` is the break-even, None where there is none, and ``note``
    says how it was found and what it holds, or why there is none."""

    source: str | None
    advantage_us: float | None
    one_off_difference_us: float | None
    calls: int | None
    note: str | None

    def calls_for(self, excess_us: float) -> int | None:
        """Calls after which ``excess_us`` alone is paid back by this advantage."""
        if self.calls is None or not self.advantage_us:
            return None
        return max(0, math.ceil(excess_us / self.advantage_us))


NO_BASELINE = Payback(
    None,
    None,
    None,
    None,
    "no baseline: break-even needs the baseline variant's steady time (run `cold` on the "
    "capture folder)",
)


def payback(variant: Timings, baseline: Timings, *, only_trace: bool = False) -> Payback:
    """The break-even of ``variant`` against ``baseline``: from the capture's timing where
    both have call 1 and the steady call timed, else from the traces (``only_trace``: from
    the traces alone, for the breakdown's rows, whose excess is the trace's)."""
    if variant.label == baseline.label:
        return Payback(None, None, None, None, "the baseline itself")
    pairs = [(FROM_TRACE, variant.traced, baseline.traced)]
    if not only_trace:
        pairs.insert(0, (FROM_TIMING, variant.timed, baseline.timed))
    for source, mine, theirs in pairs:
        if mine.excess_us is not None and theirs.excess_us is not None:
            return _paid(variant, baseline, source, mine, theirs)
    return Payback(
        None, None, None, None, f"no call 1 and steady call from one source for both this "
        f"variant and {baseline.label}",
    )  # fmt: skip


def _paid(
    variant: Timings, baseline: Timings, source: str, mine: CallTimes, theirs: CallTimes
) -> Payback:
    assert mine.steady_us is not None and theirs.steady_us is not None  # excess_us is known
    assert mine.excess_us is not None and theirs.excess_us is not None
    advantage = theirs.steady_us - mine.steady_us
    one_off = mine.excess_us - theirs.excess_us
    warmed = [t for t in (variant, baseline) if t.warm_up_calls]
    if source == FROM_TRACE and warmed:
        note = (
            f"no break-even: {' and '.join(t.label for t in warmed)} ran warm-up calls before "
            "profiling (manifest), so the one-off work is not in the trace"
        )
        return Payback(source, advantage, one_off, None, note)
    if advantage < 0 or (advantage == 0 and one_off > 0):
        note = _never(baseline.label, advantage, one_off, source)
        return Payback(source, advantage, one_off, None, note)
    if any(gain <= 0 for _, gain in _untraced_advantages(variant, baseline)):
        measured = _gains(_all_advantages(variant, baseline))
        note = (
            f"no break-even: the timings disagree on whether it is faster per call than "
            f"{baseline.label} ({measured})"
        )
        return Payback(source, advantage, one_off, None, note)
    calls = max(0, math.ceil(one_off / advantage)) if advantage else 0
    note = _caveats(variant, baseline, source, one_off, advantage)
    return Payback(source, advantage, one_off, calls, note)


def _never(base: str, advantage: float, one_off: float, source: str) -> str:
    slower = f"{-advantage:,.1f} µs per call slower than {base}"
    if advantage == 0:
        return f"never catches up: as fast as {base} per call and {one_off:,.1f} µs costlier once"
    if one_off > 0:
        return f"never catches up: {slower} and {one_off:,.1f} µs costlier once ({source})"
    behind = math.floor(-one_off / -advantage) + 1  # calls after call 1 until it is behind
    return (
        f"no break-even: {-one_off:,.1f} µs cheaper once but {slower}, so it falls behind "
        f"after {behind:,} more call{'' if behind == 1 else 's'} ({source})"
    )


def _untraced_advantages(variant: Timings, baseline: Timings) -> list[tuple[str, float]]:
    """The per-call difference (baseline minus variant) by each steady time without the
    profiler that both have."""
    theirs = dict(baseline.untraced)
    return [(name, theirs[name] - us) for name, us in variant.untraced if name in theirs]


def _gains(against: list[tuple[str, float]]) -> str:
    """``1.0 µs faster per call timed ..., 2.0 µs slower timed ...``."""
    return ", ".join(
        f"{abs(gain):,.1f} µs {'faster' if gain > 0 else 'slower'} per call {name}"
        for name, gain in against
    )


def _caveats(
    variant: Timings, baseline: Timings, source: str, one_off: float, advantage: float
) -> str:
    """How the break-even was found, and what it holds."""
    if one_off <= 0:
        first = f"{-one_off:,.1f} µs cheaper once and {advantage:,.1f} µs faster per call"
    else:
        first = f"{one_off:,.1f} µs more one-off work / {advantage:,.1f} µs less per call"
    parts = [f"{first}, both from the {source}"]
    other = _other_advantage(variant, baseline, source)
    if other is not None:
        parts.append(other)
    if source == FROM_TRACE and not (variant.fresh_process and baseline.fresh_process):
        parts.append(
            "the first calls are the traces' first, not known to be fresh processes' (one-off "
            "work done before a trace began is not in it)"
        )
    states = {s for s in (variant.cache_state, baseline.cache_state) if s is not None}
    if states:
        parts.append(f"for caches {' / '.join(sorted(states))}")
    return "; ".join(parts)


def _all_advantages(variant: Timings, baseline: Timings) -> list[tuple[str, float]]:
    """The per-call difference by every timing both have: without the profiler, then under
    it."""
    found = _untraced_advantages(variant, baseline)
    if variant.traced.steady_us is not None and baseline.traced.steady_us is not None:
        found.append(("under the profiler", baseline.traced.steady_us - variant.traced.steady_us))
    return found


def _other_advantage(variant: Timings, baseline: Timings, source: str) -> str | None:
    """The per-call differences the other timings give, where they have one."""
    chosen = PER_CALL if source == FROM_TIMING else "under the profiler"
    others = [(name, gain) for name, gain in _all_advantages(variant, baseline) if name != chosen]
    return _gains(others) if others else None
