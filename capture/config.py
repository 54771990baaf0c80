"""What to record: one frozen configuration, defaults from the seed article."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from capture.errors import CaptureError
from capture.variants import VARIANTS

# Largest accepted ||out - ref|| / ||ref|| against the float64 reference, by input dtype.
TOLERANCE = {"bfloat16": 2e-2, "float16": 5e-3, "float32": 1e-4}
DTYPE_ALIASES = {"bf16": "bfloat16", "fp16": "float16", "half": "float16", "fp32": "float32"}
DEVICES = ("cuda", "cpu")


@dataclass(frozen=True)
class CaptureConfig:
    """Shape, numerics and profiler settings shared by every variant of one capture.

    Defaults reproduce the seed article: B8 H16 S1024 D64 bf16 causal, forward only under
    ``torch.no_grad()``, profiler schedule wait=1 warmup=1 active=3 over 5 steps.
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
    record_shapes: bool = False
    with_stack: bool = False
    profile_memory: bool = False
    variants: tuple[str, ...] = tuple(VARIANTS)
    device: str = "cuda"
    seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "dtype", DTYPE_ALIASES.get(self.dtype, self.dtype))
        object.__setattr__(self, "variants", tuple(self.variants))
        _validate(self)

    @property
    def tolerance(self) -> float:
        """Largest relative error a variant may show against the float64 reference."""
        return TOLERANCE[self.dtype]

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready copy (the manifest's ``config``)."""
        return {**dataclasses.asdict(self), "variants": list(self.variants)}


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
    if problems:
        raise CaptureError("invalid capture configuration: " + "; ".join(problems))
