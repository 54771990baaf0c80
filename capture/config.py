"""What to record: one frozen configuration per capture, defaults from the seed article."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from capture.cases import CaseSpec
from capture.errors import CaptureError
from capture.variants import DEFAULT_VARIANTS, VARIANTS, AttentionSpec

# Largest accepted ||out - ref|| / ||ref|| against the float64 reference, by input dtype.
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32"}
DEVICES = ("cuda", "cpu")
# off: eager calls; replay: the graph is captured before profiling and only its replays are
# profiled; capture: the profiled window opens with the capture itself, then the replays.
CUDA_GRAPH_MODES = ("off", "replay", "capture")
# --new-shape-every: each new shape is this many tokens longer (a multiple of every fused
# kernel's tile, so no backend refuses it).
NEW_SHAPE_SEQ_STEP = 64


@dataclass(frozen=True)
class CaptureConfig:
    """Shape, numerics and profiler settings shared by every variant of one capture.

    Defaults reproduce the seed article: B8 H16 S1024 D64 bf16 causal, forward only under
    ``torch.no_grad()``, profiler schedule wait=1 warmup=1 active=3 over 5 steps; shapes are
    recorded (``Input Dims``) so FLOPs and bytes can be modelled from the trace.
    """

    batch: int = 8
    heads: int = 16
    seq: int = 1024
    head_dim: int = 64
    dtype: str = "bfloat16"
    causal: bool = True
    backward: bool = False
    steps: int = 5
    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeats: int = 20
    record_shapes: bool = True
    with_stack: bool = False
    # Memory events show where the [seq, seq] scores are written (the memory wall); the timings
    # (median_ms) come from separate unprofiled calls, so the profiler's cost does not touch them.
    profile_memory: bool = True
    variants: tuple[str, ...] = DEFAULT_VARIANTS
    device: str = "cuda"
    seed: int = 0
    cuda_graph: str = "off"

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DTYPE_ALIASES.get(self.dtype, self.dtype))
        object.__setattr__(self, "variants", tuple(self.variants))
        _validate(self)

    @property
    def tolerance(self) -> float:
        """Largest relative error a variant may show against the float64 reference."""
        return TOLERANCE[self.dtype]

    def attention_spec(self, seqs: tuple[int, ...] = ()) -> AttentionSpec:
        """What the variant builders need, for ``seqs`` (default: this configuration's seq)."""
        return AttentionSpec(self.head_dim, self.causal, seqs or (self.seq,))

    def case_spec(self) -> CaseSpec:
        """The sizes the cases (variants with inputs of their own) build from."""
        return CaseSpec(self.batch, self.heads, self.seq, self.head_dim, self.dtype, self.seed)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready copy (the manifest's ``config``)."""
        return {**dataclasses.asdict(self), "variants": list(self.variants)}


@dataclass(frozen=True)
class ColdConfig:
    """A cold-start capture: each variant in fresh processes, its first calls profiled.

    ``calls`` calls are profiled (call 1 and the steady calls after it) and, in
    ``timing_processes`` other fresh processes, timed with the wall clock (one-off costs vary
    from process to process by tens of percent, so the timing is a median over several);
    ``new_shape_every`` starts a longer sequence every N calls (re-planning); ``empty_caches``
    gives every process its own empty cache folders.
    """

    capture: CaptureConfig
    calls: int = 10
    empty_caches: bool = False
    new_shape_every: int | None = None
    process_timeout_s: float = 300.0
    timing_processes: int = 3

    def __post_init__(self) -> None:
        _validate_cold(self)

    @property
    def call_seqs(self) -> tuple[int, ...]:
        """The sequence length of each call, call 1 first."""
        every = self.new_shape_every or self.calls
        base = self.capture.seq
        return tuple(base + NEW_SHAPE_SEQ_STEP * (i // every) for i in range(self.calls))

    @property
    def steady_calls(self) -> tuple[int, ...]:
        """The calls (numbered from 1) that repeat the previous call's shape: the steady ones.
        The others are call 1 and each first call of a new shape (where plans are rebuilt)."""
        seqs = self.call_seqs
        return tuple(i + 1 for i in range(1, len(seqs)) if seqs[i] == seqs[i - 1])

    @property
    def cache_state(self) -> str:
        """The label of the cache state every figure of this capture is for."""
        return "empty" if self.empty_caches else "as_found"

    def to_dict(self) -> dict[str, object]:
        """The manifest's ``config.cold``."""
        return {
            "calls": self.calls,
            "call_seqs": list(self.call_seqs),
            "steady_calls": list(self.steady_calls),
            "new_shape_every": self.new_shape_every,
            "empty_caches": self.empty_caches,
            "cache_state": self.cache_state,
            "process_timeout_s": self.process_timeout_s,
            "timing_processes": self.timing_processes,
        }


def _validate(config: CaptureConfig) -> None:
    sizes = {
        "batch": config.batch,
        "heads": config.heads,
        "seq": config.seq,
        "head_dim": config.head_dim,
        "steps": config.steps,
        "active": config.active,
        "repeats": config.repeats,
    }
    problems = [
        f"{name} must be positive (got {value})" for name, value in sizes.items() if value < 1
    ]
    problems += [
        f"{name} must not be negative" for name in ("wait", "warmup") if getattr(config, name) < 0
    ]
    if config.steps < config.wait + config.warmup + config.active:
        problems.append(
            f"steps ({config.steps}) must cover wait + warmup + active "
            f"({config.wait + config.warmup + config.active})"
        )
    if config.dtype not in TOLERANCE:
        problems.append(f"dtype {config.dtype!r} is not one of {', '.join(TOLERANCE)}")
    if config.device not in DEVICES:
        problems.append(f"device {config.device!r} is not one of {', '.join(DEVICES)}")
    unknown = [name for name in config.variants if name not in VARIANTS]
    if unknown:
        problems.append(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    if not config.variants:
        problems.append("no variants selected")
    cased = [n for n in config.variants if n in VARIANTS and VARIANTS[n].case is not None]
    if cased and (config.backward or config.cuda_graph != "off"):
        problems.append(
            f"{', '.join(cased)} record the forward only, eager: drop --backward/--cuda-graph"
        )
    if config.cuda_graph not in CUDA_GRAPH_MODES:
        problems.append(
            f"cuda_graph {config.cuda_graph!r} is not one of {', '.join(CUDA_GRAPH_MODES)}"
        )
    elif config.cuda_graph != "off" and config.backward:
        problems.append("CUDA graph capture records the forward only; drop backward")
    if problems:
        raise CaptureError("invalid capture configuration: " + "; ".join(problems))


def _validate_cold(cold: ColdConfig) -> None:
    problems = []
    if cold.calls < 2:
        problems.append(f"calls must be at least 2: call 1 and a steady call (got {cold.calls})")
    if cold.new_shape_every is not None and cold.new_shape_every < 2:
        problems.append(
            "new_shape_every must be at least 2, so each shape has a steady call after its "
            f"first (got {cold.new_shape_every})"
        )
    if cold.process_timeout_s <= 0:
        problems.append(f"process_timeout_s must be positive (got {cold.process_timeout_s})")
    if cold.timing_processes < 1:
        problems.append(f"timing_processes must be at least 1 (got {cold.timing_processes})")
    if cold.capture.cuda_graph != "off":
        problems.append("a cold capture runs eager calls; drop cuda_graph")
    cased = [n for n in cold.capture.variants if VARIANTS[n].case is not None]
    if cased:
        problems.append(f"{', '.join(cased)} bring inputs of their own: not in a cold capture")
    if problems:
        raise CaptureError("invalid cold capture configuration: " + "; ".join(problems))
