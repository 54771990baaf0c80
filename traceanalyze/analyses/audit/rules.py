"""The audit's domain knowledge as data: its checks, what each can find, and the thresholds.

A check (:data:`CHECKS`) finds events of one kind of fault; a *finding* is one kind of what it
finds, with a severity when found (:data:`FINDINGS`): ``info`` for what a profiler does by
design (work launched before the window, launches captured into a CUDA graph), ``warning``
for a fault in the trace, escalated to ``error`` where the rule says from which share of a
figure it moves. Every threshold below is named, with why it has its value.
"""

from __future__ import annotations

from dataclasses import dataclass

INFO = "info"
WARNING = "warning"
ERROR = "error"
SEVERITIES = (INFO, WARNING, ERROR)

# The checks, in the order the audit lists them.
CHECKS = (
    "launches_without_activity",
    "activity_without_launch",
    "overlapping_on_stream",
    "duration_overflow",
    "bad_timestamps",
    "truncated",
    "clock_skew",
    "gpu_clock_offset",
    "profiler_overhead",
    "graph_replays_opaque",
    "missing_metadata",
)
# A check that found nothing has one row with this finding, count 0 and severity info.
CLEAN = "none"
# A step and an operator "end together" with the rank's last CPU event within this much: the
# trace writes µs with three decimals, so a cut rewritten into a step's dur rounds by up to 1 ns
# per event (the step and its enclosing ops each).
CUT_TOLERANCE_NS = 1_000
# A fault that moves a figure by this share of its value or more is an error, not a warning.
ERROR_PCT = 10.0


@dataclass(frozen=True)
class FindingRule:
    severity: str  # INFO or WARNING, when found
    error_pct: float | None  # escalate to ERROR from this move of a figure (None: never)
    meaning: str  # what it is and why it matters, one sentence
    # Said on stderr by every command that loads the trace, whatever figures it moves (a
    # fault of the file itself, that no figure weighs).
    said_always: bool = False


FINDINGS: dict[tuple[str, str], FindingRule] = {
    ("launches_without_activity", "dropped"): FindingRule(
        WARNING,
        ERROR_PCT,
        "a launch call (kernel, copy, set, graph) whose GPU activity is not in the trace: a "
        "dropped record (a memset's call does not record its size, so one may also be a "
        "zero-byte no-op); its GPU time is estimated from recorded activities launched alike",
    ),
    ("launches_without_activity", "captured"): FindingRule(
        INFO,
        None,
        "a launch made while its thread captured a CUDA/HIP graph: it is recorded into the "
        "graph, not run, so it has no activity by design",
    ),
    ("activity_without_launch", "before_window"): FindingRule(
        INFO,
        None,
        "GPU work launched before the profiled window (its correlation id precedes every "
        "launch call of the trace): expected, and left out of per-iteration figures",
    ),
    ("activity_without_launch", "inside_window"): FindingRule(
        WARNING,
        ERROR_PCT,
        "GPU work whose launch call is missing although it was launched inside the window "
        "(its correlation id is among the trace's launch calls): no launching op, no "
        "iteration, so it is left out of per-iteration figures",
    ),
    ("activity_without_launch", "extra"): FindingRule(
        WARNING,
        ERROR_PCT,
        "a second activity of a launch call that starts one (any but a graph launch), not "
        "overlapping the first: a duplicated or mis-correlated record, counted twice",
    ),
    ("activity_without_launch", "no_launch_calls"): FindingRule(
        INFO,
        None,
        "the trace records GPU activity but no launch calls at all (CPU activity not "
        "profiled): no activity can be matched to its launch",
    ),
    ("overlapping_on_stream", "duplicate"): FindingRule(
        WARNING,
        ERROR_PCT,
        "two records of one activity (same name and correlation id; in a graph replay, also "
        "the same duration and starts within 1 µs) overlapping on a stream: a duplicated "
        "record counted twice",
    ),
    ("overlapping_on_stream", "timing"): FindingRule(
        WARNING,
        ERROR_PCT,
        "an activity that starts before the previous one on its stream ends, which in-order "
        "execution cannot do: a timing error",
    ),
    ("overlapping_on_stream", "programmatic_launch"): FindingRule(
        INFO,
        None,
        "an activity launched with an extended launch call (cudaLaunchKernelEx) on compute "
        "capability 9.0 or newer overlapping the tail of the previous one (at most a quarter of "
        "it, and half of its own length): programmatic dependent launch lets the next kernel "
        "start early by design",
    ),
    ("overlapping_on_stream", "graph_branches"): FindingRule(
        INFO,
        None,
        "activities of one graph replay overlapping on the replay's stream: independent "
        "branches of a graph run concurrently",
    ),
    ("duration_overflow", "past_next"): FindingRule(
        WARNING,
        ERROR_PCT,
        "an activity that runs past the start of the next one on its stream by more than the "
        "time it had before it (recorded duration over twice the plausible one): an "
        "overflowing duration; the excess is the part past the next start",
    ),
    ("duration_overflow", "implausible"): FindingRule(
        WARNING,
        ERROR_PCT,
        "an activity implausibly long for its kind: beyond a kind's limit, or "
        "over a hundred times the median of the same kernel and launch shape (copy or set "
        "size); the excess is the part over that median",
    ),
    ("bad_timestamps", "ts_zero"): FindingRule(
        WARNING,
        ERROR_PCT,
        "an event written at time 0 in a trace whose clock is elsewhere: its time is lost",
    ),
    ("bad_timestamps", "negative_duration"): FindingRule(
        WARNING, ERROR_PCT, "an event whose duration is negative"
    ),
    ("bad_timestamps", "missing_duration"): FindingRule(
        WARNING,
        ERROR_PCT,
        "a kernel with no duration (its `dur` missing or 0) on a rank that times kernels to "
        "the nanosecond, where no kernel takes 0 ns: its time is lost, estimated from the "
        "median of the same kernel's other runs (a trace of whole microseconds, where short "
        "kernels round to 0, is not checked)",
    ),
    ("bad_timestamps", "outside_span"): FindingRule(
        WARNING,
        ERROR_PCT,
        "an event that starts or ends far outside the span of the rest of its rank's events "
        "(another clock, or a corrupt time)",
    ),
    ("bad_timestamps", "before_launch"): FindingRule(
        WARNING,
        ERROR_PCT,
        "a GPU activity that starts before its launch call does: the GPU's times are not on the "
        "CPU's clock (or the activity's time is wrong); weighed by starting it where its call "
        "ends; what it overlaps on its stream is part of this fault",
    ),
    ("bad_timestamps", "steps_out_of_order"): FindingRule(
        WARNING,
        None,
        "profiler steps whose numbers do not increase with time, or that overlap on one thread",
    ),
    ("truncated", "open_step"): FindingRule(
        WARNING,
        ERROR_PCT,
        "a profiler step with no duration (an X event without one, or a B event never "
        "ended): it was opened and never closed",
    ),
    ("truncated", "short_last_step"): FindingRule(
        WARNING,
        ERROR_PCT,
        "the last counted step has less than half the span on the CPU and half the GPU "
        "activities of the step before it: cut short when the profiler stopped, and counted in "
        "the means",
    ),
    ("truncated", "cut_last_step"): FindingRule(
        WARNING,
        ERROR_PCT,
        "the recording ends inside the rank's last step: the step ends where the rank's last "
        "CPU event ends, at the same nanosecond as an operator running in it (both cut there), "
        "so its later work and the GPU activity of its last launches are lost; left out of the "
        "means (whatever its length, and whether or not its GPU work lags: a clean trace's "
        "last step, the profiler's closing one included, ends before its last CPU event and "
        "no operator ends with it)",
    ),
    ("truncated", "gzip_cut"): FindingRule(
        WARNING,
        None,
        "a gzip file that ends early (its trailer, or a member after the JSON, cut) although "
        "the JSON inside is whole: every event was read, so no figure moves, but the data's "
        "checksum could not be verified; said by every command",
        said_always=True,
    ),
    ("truncated", "empty_last_step"): FindingRule(
        INFO,
        None,
        "the last step holds no GPU work (the profiler's closing step): left out of the means",
    ),
    ("clock_skew", "skewed"): FindingRule(
        WARNING,
        None,
        "rank clocks apart by more than the tolerance, estimated from collectives that must "
        "end together: cross-rank times compared raw are off by that much (`ranks` aligns "
        "them; `--clock-align` applies these offsets)",
    ),
    ("clock_skew", "aligned"): FindingRule(
        INFO, None, "rank clocks agree within the tolerance on collectives that end together"
    ),
    ("clock_skew", "not_estimable"): FindingRule(
        INFO,
        None,
        "rank clocks cannot be compared: no collective that must end together is shared by "
        "the ranks, or those shared do not end together",
    ),
    ("gpu_clock_offset", "offset"): FindingRule(
        WARNING,
        None,
        "a rank's GPU times are not on its CPU's clock: the shortest launch-to-start delay is at "
        "the rank's floor or past it (100 µs where its work runs on one stream with no stream "
        "waits, else 1,000 µs), or that of its 20 or more launches onto an idle GPU is 100 µs or "
        "more, while the GPU idles with that work queued; or many activities start before their "
        "launch call; idle causes, the bound verdict and the critical path compare the two "
        "clocks, so the step model gives no verdict",
    ),
    ("gpu_clock_offset", "drift"): FindingRule(
        WARNING,
        None,
        "a rank's GPU clock drifts from its CPU's: the shortest delay of the launches that find "
        "the GPU idle (starting after all earlier work ended, the GPU busy under half the time "
        "since their launch call), per counted step (or per eighth of the steps' span), moves "
        "steadily (a straight line through 4 or more windows' minima, R² 0.9 or more) by 100 µs "
        "or more across the trace, while on one clock it stays at the dispatch's few µs; the "
        "detail gives each window's minimum; idle causes, the bound verdict and the critical "
        "path compare the two clocks, so the step model gives no verdict",
    ),
    ("gpu_clock_offset", "unclear"): FindingRule(
        WARNING,
        None,
        "a rank's shortest launch-to-start delay is a millisecond or more, but the GPU idles with "
        "that work queued only before its first recorded activity: its clock is offset, or it "
        "was busy with work launched before the profiler started (not recorded); the trace "
        "cannot tell which, so the step model gives no verdict",
    ),
    ("profiler_overhead", "recorded"): FindingRule(
        INFO,
        None,
        "what the profiler recorded besides ops and GPU activity (shapes, stacks, memory, its "
        "own events): each costs CPU time in the profiled run",
    ),
    ("profiler_overhead", "measured"): FindingRule(
        INFO,
        None,
        "the traced wall time per iteration over the capture's untraced median: CPU time the "
        "profiler added per step",
    ),
    ("graph_replays_opaque", "opaque"): FindingRule(
        WARNING,
        None,
        "GPU time inside CUDA/HIP graph replays that no op explains (the capture is not in "
        "the trace): per-op figures put it all under the graph launch",
    ),
    ("missing_metadata", "no_device_properties"): FindingRule(
        INFO,
        None,
        "the trace has GPU activity but no deviceProperties: theoretical occupancy and the "
        "device's peaks cannot be computed",
    ),
    ("missing_metadata", "unknown_gpu"): FindingRule(
        INFO,
        None,
        "the GPU is not in the table of peaks (or unnamed): roofline shares cannot be computed",
    ),
    ("missing_metadata", "no_distributed_info"): FindingRule(
        INFO,
        None,
        "the trace runs collectives but has no distributedInfo: its rank and world size are "
        "unknown",
    ),
}

# The findings (``check/finding``) every command says, whatever figures they move.
SAID_ALWAYS = frozenset(f"{check}/{finding}" for (check, finding), rule in FINDINGS.items()
                        if rule.said_always)  # fmt: skip

# --- thresholds -------------------------------------------------------------------------------

# The first examples a finding's detail names (with their timestamps).
EXAMPLES = 3
# Runtime/driver calls that begin and end a stream capture (a CUDA or HIP graph).
CAPTURE_BEGIN = (
    "cudaStreamBeginCapture",
    "cudaStreamBeginCaptureToGraph",
    "hipStreamBeginCapture",
    "hipStreamBeginCaptureToGraph",
)
CAPTURE_END = ("cudaStreamEndCapture", "hipStreamEndCapture")
# Launch calls that can carry the programmatic stream serialization attribute (PDL), and the
# compute capability from which the hardware honours it (Hopper).
PDL_LAUNCH_APIS = ("cudaLaunchKernelExC", "cuLaunchKernelEx")
PDL_MIN_COMPUTE_MAJOR = 9
# A dependent kernel starts in the tail of the one before it and runs past its end: at most
# PDL_MAX_OVERLAP_PCT of that kernel's duration and PDL_MAX_OWN_OVERLAP_PCT of its own overlap
# (the B200 trace's 74 such overlaps reach 3.6% and 16%); beyond, the overlap is a timing
# error (or the kernel before overflows), however launched.
PDL_MAX_OVERLAP_PCT = 25.0
PDL_MAX_OWN_OVERLAP_PCT = 50.0
# Two records of one graph replay with the same name, the same duration and starts this close
# are one activity recorded twice, not concurrent branches (the real graph traces' same-name
# branches overlap from 2 µs apart, with durations that differ).
GRAPH_TWIN_NS = 1000
# An activity longer than this, by kind, is implausible whatever it did (communication
# kernels are exempt: they wait for the slowest rank, seconds if need be). The largest
# non-communication kernel among the project's 100 real traces ran 30 ms.
IMPLAUSIBLE_US: dict[str, float] = {"kernel": 10e6, "memcpy": 60e6, "memset": 1e6}
# An activity over this many times the median of its peers (same kind, name and launch shape
# or size), by at least IMPLAUSIBLE_MIN_EXCESS_US, with at least IMPLAUSIBLE_MIN_PEERS others
# (the median then is a peer's, whatever the outlier): among the 100 real traces, the largest
# ratio of a non-communication activity to its peers' median is 20 with three or more others,
# 7.5 with two (a kernel of an MI300X trace made 1000x longer, last on its stream, has two).
IMPLAUSIBLE_RATIO = 100.0
IMPLAUSIBLE_MIN_EXCESS_US = 1000.0
IMPLAUSIBLE_MIN_PEERS = 2
# An event is outside its rank's span when its start or end lies this far from it, or
# OUTSIDE_FACTOR times the span's length where that is further: a clock of another origin or a
# corrupt time lies days or years away. Real traces hold events seconds from the rest (an op
# 3 s before the others, a step ending 13 s after them, a window end 2 s after the last op).
OUTSIDE_MIN_NS = 60_000_000_000
OUTSIDE_FACTOR = 10
# The last counted step is cut short when its span on the CPU and its GPU activities are both
# under this share of the step before it (with at least SHORT_STEP_MIN_OTHERS steps before).
SHORT_LAST_STEP_PCT = 50.0
SHORT_STEP_MIN_OTHERS = 2
# Rank clocks further apart than this are skewed (a collective's start spread below it is
# below what raw clocks of different hosts can tell).
CLOCK_SKEW_WARN_US = 10.0
# Collective kinds (comms_rules' kinds) whose kernels complete on every rank at nearly the
# same moment: the reduction or exchange needs every rank's data. Point-to-point send/recv
# pairs ranks and ends per pair, so it is left out.
ENDS_TOGETHER = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "barrier")
# A rank's offset is trusted when its collectives' end differences agree: their median
# absolute deviation from the offset is at most this, or CLOCK_SPREAD_PCT of the median
# collective duration, whichever is larger.
CLOCK_SPREAD_US = 20.0
CLOCK_SPREAD_PCT = 5.0
# A figure a command prints moved this much (share of its value) by a warning or error: the
# command says so in one line on stderr.
WARN_LINE_PCT = 1.0
