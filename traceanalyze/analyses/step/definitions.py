"""One sentence per per-step figure: the report's glossary and the README's "How time is
counted" both print these (a test keeps the README in step), so a figure is defined once."""

from __future__ import annotations

from traceanalyze.analyses.iterations import WARM_UP_MIN_PCT
from traceanalyze.analyses.step.verdict import (
    AGREEING_STEPS,
    BUSY_OVER_WALL_TOLERANCE_PCT,
    GPU_BOUND_MIN_PCT,
    LONE_STEP_MIN_MARGIN_PCT,
)

DEFINITIONS: dict[str, str] = {
    "gpu_activity_us_per_iter": "sum of the durations of the kernels, memory copies and memory "
    "sets launched in the step",
    "gpu_kernel_us_per_iter": "the kernels' part of that GPU activity time",
    "gpu_span_us_per_iter": "first start to last end of the GPU activities the step launched",
    "wall_us_per_iter": "the step's window: the span of its slower side, the step on the CPU "
    "or, where longer, the GPU span of the work it launched, that one from where the GPU last "
    "ran other work before it (no earlier than the step's CPU start: the GPU's idle time before "
    "the step's first activity, such as a wait for data loading, is the step's); windows of a "
    "rank never overlap (one starts no earlier than the previous ends, and right there where "
    "that end falls after the step began on the CPU): the pace of back-to-back steps, so a "
    "step whose start the previous step's GPU work still occupies is shorter than its CPU or "
    "GPU span by at most that overlap",
    "gpu_busy_us_per_iter": "time at least one GPU activity runs in the step's window, whatever "
    "its launch time: the union of the intervals across streams (and a rank's devices), cut "
    "at the window's bounds",
    "gpu_idle_us_per_iter": "the window's time with nothing running on the GPU (wall minus "
    "busy); `idle` splits it by cause",
    "compute_us_per_iter": "the window's time a compute kernel (any kernel but a collective) runs",
    "exposed_communication_us_per_iter": "the window's time a collective kernel runs while no "
    "compute kernel does (a collective's time includes waiting for its peers)",
    "exposed_copy_us_per_iter": "the window's time a memory copy or set runs while no kernel "
    "does; compute, exposed communication and exposed copies add up to the busy time",
    "communication_us_per_iter": "the window's time any collective kernel runs, hidden under "
    "compute or not",
    "carried_in_us_per_iter": "the busy time in the step's window of work launched before the "
    "step began on the CPU (by an earlier step, between steps, or before the profiler started: "
    "no launch recorded); backward work the autograd thread launches during the step is the "
    "step's own",
    "cpu_op_us_per_iter": "time inside outermost CPU operators (aten ops and other `cpu_op` "
    "events with no operator above them) that start in the step, summed over threads",
    "launch_us_per_iter": "time in the runtime/driver calls that launched the step's GPU "
    "activities",
    "cpu_span_us_per_iter": "the step's span on the CPU (its annotation's duration; for the "
    "whole trace taken as one iteration, the first start to the last end of its CPU "
    "operators, annotations and runtime calls; with_stack's `python_function` events are not "
    "among them)",
    "median_ms": "the capture's median time per call, measured with CUDA events without the "
    "profiler (the manifest): the truth for wall time",
    "speedup": "the baseline's GPU busy time over the variant's",
    "speedup_wall": "the baseline's wall time over the variant's: capture medians where both "
    "have the same kind (a warm capture's median, or a cold capture's steady median that leaves "
    "out its one-off first call), else the traces' wall time",
    "gpu_busy_pct_of_wall": "GPU busy time as a share of the wall time that `wall_source` "
    "names: the capture's median where a warm capture's manifest gives one, a cold capture's "
    "steady median (its first call left out), else the steps' windows; at most 100 (more than "
    f"{BUSY_OVER_WALL_TOLERANCE_PCT:g}% over a capture's median, the two do not describe the "
    "same work and the share and verdict are left out); over the counted steps, as the "
    "verdict",
    "bound": "what bounds the steps, from the window's split into sides: GPU (compute, exposed "
    "copies, idle gaps whose work was already queued), communication (exposed collectives), "
    "CPU (idle gaps waiting for the host's work, launches or data loading) and sync (idle gaps "
    "after a blocking sync). `GPU-bound` when the GPU side holds at least "
    f"{GPU_BOUND_MIN_PCT:g}% of the wall; else `communication-bound`, `CPU-bound` or "
    "`sync-bound` for the side holding more than half of the rest; else `balanced`; `cannot "
    "tell` without GPU activity, without launch calls to tell why the GPU waited, where the "
    "GPU's clock is offset from the CPU's (`audit`'s gpu_clock_offset), with one counted step "
    "only (unless it is a marked step, not the whole trace, GPU-bound by "
    f"{LONE_STEP_MIN_MARGIN_PCT:g} points or more with under {WARM_UP_MIN_PCT:g}% of its wall "
    "carried in: a lone step's host side is often one-off), or where the steps that share a "
    "verdict hold less than "
    f"{AGREEING_STEPS[0]}/{AGREEING_STEPS[1]} of the counted steps' wall time or their mean "
    "split says otherwise; the counted steps are the means' population too (a warm-up step "
    "and a first step waiting on the CPU are not counted). "
    "Against "
    "a capture's median, the GPU side keeps its traced time and the rest of the median is the "
    "host's, split as the trace's gaps are",
    "bound_margin_pct": "how many points of the wall's split would have to move for the "
    "verdict to change, or, where some steps disagree and it is nearer, how far the agreeing "
    "steps' share of the voting wall is above two thirds (null for `cannot tell`)",
}
