"""What bounds a step: one verdict, its margin and its evidence, from the step's time split.

A step's wall time splits into parts that add up (:mod:`.split`, :mod:`.gaps`), and each part
belongs to one *side* (``SIDES``): the GPU (compute, exposed copies, and short idle gaps before
work already queued: dispatch), communication (collectives no compute hides), the CPU (idle gaps
waiting for the host: its work, its launches, its data loading), synchronisation (idle gaps
after a blocking sync) or waiting (longer gaps before work already queued: the GPU had work and
waited on a dependency the trace does not show, another stream's event, a host callback, a
peer). The verdict, in order:

* ``GPU-bound`` when the GPU side holds at least ``GPU_BOUND_MIN_PCT`` of the wall: a faster
  kernel shortens the step;
* else ``communication-bound``, ``CPU-bound`` or ``sync-bound``: the side that holds more than
  half of the time the GPU side leaves (where that side is waiting, ``cannot tell``: the trace
  does not show what the GPU waited for);
* else ``balanced``: no side holds most of it;
* ``cannot tell`` where the evidence is missing (no GPU activity, no launch calls to tell why
  the GPU waited), one step only, or steps that disagree.

``bound_margin_pct`` is how many points of the wall's split would have to move for the verdict
to change (the distance to the nearest rule's threshold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from traceanalyze.analyses.step.gaps import (
    DATA_LOADING,
    HOST,
    LAUNCH,
    LAUNCH_FIRST_CALL,
    SYNC,
)

GPU_BOUND = "GPU-bound"
COMMUNICATION_BOUND = "communication-bound"
CPU_BOUND = "CPU-bound"
SYNC_BOUND = "sync-bound"
BALANCED = "balanced"
CANNOT_TELL = "cannot tell"
BOUNDS = (GPU_BOUND, COMMUNICATION_BOUND, CPU_BOUND, SYNC_BOUND, BALANCED, CANNOT_TELL)

# The GPU side bounds the step when it holds at least this share of the wall time.
GPU_BOUND_MIN_PCT = 80.0
# A gap before queued work shorter than this is the GPU's own dispatch between kernels (HTA's
# kernel wait uses 30 µs by default); a longer one is a wait on a dependency.
DISPATCH_MAX_NS = 10_000
QUEUED_DISPATCH = "idle_queued_dispatch_us"
QUEUED_WAITING = "idle_queued_waiting_us"
# A verdict over several steps holds when at least this share of the steps has it (2 of 3).
AGREEING_STEPS = (2, 3)
# A profiled run's GPU time may exceed an unprofiled capture median by a few percent; beyond
# this the two do not describe the same work and no verdict is given.
BUSY_OVER_WALL_TOLERANCE_PCT = 10.0


def idle_column(cause: str) -> str:
    """The step table's column for the idle time of one cause."""
    return f"idle_{cause}_us"


@dataclass(frozen=True)
class Side:
    """One side of a step: the split's columns that are its time, and its verdict's name."""

    name: str
    bound: str
    parts: tuple[str, ...]
    meaning: str


SIDES: tuple[Side, ...] = (
    Side("gpu", GPU_BOUND, ("compute_us", "exposed_copy_us", QUEUED_DISPATCH),
         "the GPU runs the step's kernels and copies, or dispatches the next one queued"),
    Side("communication", COMMUNICATION_BOUND, ("exposed_communication_us",),
         "collective kernels that no compute hides (their time includes waiting for peers)"),
    Side("cpu", CPU_BOUND,
         tuple(idle_column(c) for c in (HOST, LAUNCH, LAUNCH_FIRST_CALL, DATA_LOADING)),
         "the GPU waits for the host: its CPU work, its launches (one-off first calls apart), "
         "its data loading"),
    Side("sync", SYNC_BOUND, (idle_column(SYNC),),
         "the GPU waits out the round trip of a blocking synchronisation"),
    Side("waiting", CANNOT_TELL, (QUEUED_WAITING,),
         "the GPU has work queued and waits on a dependency the trace does not show"),
)  # fmt: skip
OTHER_SIDES = SIDES[1:]


@dataclass(frozen=True)
class Verdict:
    """What bounds the steps: ``bound`` (one of ``BOUNDS``), ``margin_pct`` (null for
    ``cannot tell``), the share of the wall each side holds and the evidence in ``note``."""

    bound: str
    margin_pct: float | None
    shares_pct: Mapping[str, float]
    note: str


def side_times(parts: Mapping[str, float]) -> dict[str, float]:
    """The µs of each side (``SIDES``) from a step's (or the means') split columns."""
    return {side.name: sum(float(parts.get(p) or 0.0) for p in side.parts) for side in SIDES}


def judge(times: Mapping[str, float]) -> tuple[str, float]:
    """The verdict and its margin from the µs of each side (module docstring)."""
    total = sum(times.values())
    if total <= 0:
        return CANNOT_TELL, 0.0
    shares = {name: value / total * 100 for name, value in times.items()}
    gpu = shares["gpu"]
    if gpu >= GPU_BOUND_MIN_PCT:
        return GPU_BOUND, gpu - GPU_BOUND_MIN_PCT
    half_of_rest = (100 - gpu) / 2
    ranked = sorted(OTHER_SIDES, key=lambda side: shares[side.name], reverse=True)
    top = shares[ranked[0].name]
    to_gpu = GPU_BOUND_MIN_PCT - gpu
    if top > half_of_rest:
        return ranked[0].bound, min(to_gpu, top - half_of_rest)
    return BALANCED, min(to_gpu, half_of_rest - top)


def shares_of(times: Mapping[str, float]) -> dict[str, float]:
    """Each side's share of the total, in % (0 for all when the total is 0)."""
    total = sum(times.values())
    return {name: (value / total * 100 if total > 0 else 0.0) for name, value in times.items()}


def describe(times: Mapping[str, float], parts: Mapping[str, float]) -> str:
    """The split as evidence: each side's share of the wall and its parts (the GPU and CPU
    sides always, communication and sync where they have time)."""
    total = sum(times.values())
    if total <= 0:
        return "no time in the steps' windows"
    pieces = []
    for side in SIDES:
        share = times[side.name] / total * 100
        if side.name in ("communication", "sync", "waiting") and times[side.name] <= 0:
            continue
        inner = [
            f"{_label(p)} {float(parts.get(p) or 0.0) / total * 100:.1f}%"
            for p in side.parts
            if len(side.parts) > 1 and float(parts.get(p) or 0.0) > 0
        ]
        detail = f" ({', '.join(inner)})" if inner else ""
        pieces.append(f"{SIDE_LABELS[side.name]} {share:.1f}%{detail}")
    return ", ".join(pieces) + " of the wall"


SIDE_LABELS = {
    "gpu": "GPU",
    "communication": "communication",
    "cpu": "CPU",
    "sync": "sync",
    "waiting": "waiting on queued work",
}
_LABELS = {
    "compute_us": "compute",
    "exposed_copy_us": "copies",
    QUEUED_DISPATCH: "dispatch gaps",
    idle_column(HOST): "host",
    idle_column(LAUNCH): "launch",
    idle_column(LAUNCH_FIRST_CALL): "one-off launch calls",
    idle_column(DATA_LOADING): "data loading",
}


def _label(part: str) -> str:
    return _LABELS.get(part, part)
