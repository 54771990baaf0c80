"""``capture`` command: record a trace of every attention variant (also ``traceanalyze capture``).

Imports no torch at module level, so the traceanalyze CLI can register this command anywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from capture.config import CUDA_GRAPH_MODES, DTYPE_ALIASES, TOLERANCE, CaptureConfig, ColdConfig
from capture.errors import CaptureError
from capture.manifest import MANIFEST_FILE, Manifest, VariantResult
from capture.variants import CASES, DEFAULT_VARIANTS, VARIANTS

DEFAULTS = CaptureConfig(device="cpu")
# --variants cases: every variant with inputs of its own.
CASES_SELECTION = "cases"
COLD_DEFAULTS = ColdConfig(DEFAULTS)
# Options that mean something only with --cold (click parameter names).
COLD_ONLY = ("cold_calls", "empty_caches", "new_shape_every", "process_timeout", "timing_processes")


def _variant_list(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, ...]:
    if value is None:
        return DEFAULT_VARIANTS
    if value.strip() == CASES_SELECTION:
        return tuple(v.name for v in CASES)
    names = tuple(name.strip() for name in value.split(",") if name.strip())
    unknown = [name for name in names if name not in VARIANTS]
    if unknown or not names:
        raise click.BadParameter(
            f"unknown variant(s) {', '.join(unknown) or '(none given)'}; "
            f"choose among {', '.join(VARIANTS)}"
        )
    return names


@click.command(
    "capture",
    epilog="""\b
Example (the seed article's configuration, every variant, on a GPU box):
  python -m capture --out traces/h200
\b
Larger shape with the backward pass, three variants:
  python -m capture --out traces/bwd --backward --batch 4 --heads 32 \\
      --seq 2048 --head-dim 128 --variants naive,sdpa_flash,sdpa_cudnn
\b
Cold start (fresh processes, call 1 profiled and timed), starting from empty caches:
  python -m capture --cold --empty-caches --out traces/cold
\b
CUDA graph replays (and, in a second run, the capture itself in the trace):
  python -m capture --cuda-graph replay --variants naive,sdpa_flash --out traces/graph
\b
The cases real models run (masks, GQA, decode, nested, flex masks, fp8), with stacks:
  python -m capture --with-stack --variants cases --out traces/cases
""",
)
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for <variant>.json.gz and manifest.json (created if missing).",
)
@click.option(
    "--variants",
    callback=_variant_list,
    help=f"Comma-separated subset of: {', '.join(VARIANTS)}; or '{CASES_SELECTION}' for "
    f"{', '.join(v.name for v in CASES)}. [default: the variants that share one set of "
    f"inputs, {', '.join(DEFAULT_VARIANTS)}]",
)
@click.option(
    "--device",
    type=click.Choice(["cuda", "cpu"]),
    default="cuda",
    show_default=True,
    help="cpu runs only the variants that do not need CUDA (the rest are skipped).",
)
@click.option("--batch", type=click.IntRange(min=1), default=DEFAULTS.batch, show_default=True)
@click.option("--heads", type=click.IntRange(min=1), default=DEFAULTS.heads, show_default=True)
@click.option(
    "--seq",
    type=click.IntRange(min=1),
    default=DEFAULTS.seq,
    show_default=True,
    help="Sequence length (queries and keys).",
)
@click.option(
    "--head-dim", type=click.IntRange(min=1), default=DEFAULTS.head_dim, show_default=True
)
@click.option(
    "--dtype",
    type=click.Choice([*TOLERANCE, *DTYPE_ALIASES]),
    default=DEFAULTS.dtype,
    show_default=True,
)
@click.option("--causal/--no-causal", default=DEFAULTS.causal, show_default=True)
@click.option(
    "--backward",
    is_flag=True,
    help="Profile forward + backward (default: forward only, under torch.no_grad()).",
)
@click.option(
    "--steps",
    type=click.IntRange(min=1),
    default=DEFAULTS.steps,
    show_default=True,
    help="Profiler steps; must cover wait + warmup + active.",
)
@click.option("--wait", type=click.IntRange(min=0), default=DEFAULTS.wait, show_default=True)
@click.option("--warmup", type=click.IntRange(min=0), default=DEFAULTS.warmup, show_default=True)
@click.option("--active", type=click.IntRange(min=1), default=DEFAULTS.active, show_default=True)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=DEFAULTS.repeats,
    show_default=True,
    help="Timed calls (outside the profiler) for median_ms.",
)
@click.option(
    "--record-shapes/--no-record-shapes",
    default=DEFAULTS.record_shapes,
    show_default=True,
    help="Profiler record_shapes (Input Dims, types and scalars of every op, for FLOP models).",
)
@click.option("--with-stack", is_flag=True, help="Profiler with_stack.")
@click.option(
    "--profile-memory/--no-profile-memory",
    default=DEFAULTS.profile_memory,
    show_default=True,
    help="Profiler profile_memory ([memory] events: what each op allocates, for `memory`).",
)
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True)
@click.option(
    "--cuda-graph",
    type=click.Choice(CUDA_GRAPH_MODES),
    default=DEFAULTS.cuda_graph,
    show_default=True,
    help="replay: capture each forward in a CUDA graph before profiling and profile its "
    "replays; capture: the profiled window also holds the capture (forward only, CUDA only).",
)
@click.option(
    "--cold",
    is_flag=True,
    help="Cold start: each variant in fresh processes, call 1 onwards profiled (each call in "
    "record_function('call<i>')) and, in another process, timed with the wall clock.",
)
@click.option(
    "--cold-calls",
    type=click.IntRange(min=2),
    default=COLD_DEFAULTS.calls,
    show_default=True,
    help="With --cold: calls per process (call 1 and the steady calls after it).",
)
@click.option(
    "--empty-caches",
    is_flag=True,
    help="With --cold: give every process fresh empty CUDA JIT, Triton, Inductor and "
    "PyTorch kernel cache folders (default: use the caches as found, state recorded).",
)
@click.option(
    "--new-shape-every",
    type=click.IntRange(min=2),
    help="With --cold: a 64-token longer sequence every N calls, to show re-planning.",
)
@click.option(
    "--timing-processes",
    type=click.IntRange(min=1),
    default=COLD_DEFAULTS.timing_processes,
    show_default=True,
    help="With --cold: fresh processes that time the calls without the profiler (their "
    "median is the timing; one-off costs vary between processes).",
)
@click.option(
    "--process-timeout",
    type=click.FloatRange(min=1),
    default=COLD_DEFAULTS.process_timeout_s,
    show_default=True,
    help="With --cold: seconds a process may run before it is killed (the variant fails).",
)
@click.pass_context
def capture(ctx: click.Context, /, out_dir: Path, cold: bool, **options: object) -> None:
    """Record a Chrome trace (torch.profiler) of each attention variant, plus manifest.json.

    Each variant gets one untimed call, an accuracy check against a float64 reference, a median
    time over --repeats calls and a profiled run. Variants this machine cannot run are skipped
    with the reason in the manifest; a wrong result marks the variant failed and the command
    exits 1 after the others ran. With --cold nothing runs before call 1 (see --cold).
    """
    cold_options = {name: options.pop(name) for name in COLD_ONLY}
    if not cold:
        _refuse_cold_only(ctx)
    try:
        config = CaptureConfig(**options)  # type: ignore[arg-type]
        manifest = _run(ctx, out_dir, config, cold_options if cold else None)
    except CaptureError as exc:
        raise CaptureFailed(ctx, str(exc)) from exc
    click.echo(f"wrote {out_dir / MANIFEST_FILE}", err=True)
    if manifest.failed:
        raise CaptureFailed(
            ctx,
            f"{len(manifest.failed)} variant(s) failed: "
            f"{', '.join(manifest.failed)} (reasons in the manifest)",
        )


class CaptureFailed(click.ClickException):
    """The one place a `CaptureError` (or a failed variant) becomes one line on stderr and exit
    status 1, named after the program that ran (``traceanalyze`` or ``capture``), as
    traceanalyze's own errors are."""

    exit_code = CaptureError.exit_code

    def __init__(self, ctx: click.Context, message: str) -> None:
        super().__init__(message)
        self.program = ctx.find_root().info_name or "capture"

    def show(self, file: object = None) -> None:
        click.echo(f"{self.program}: error: {self.format_message()}", err=True)


def _run(
    ctx: click.Context, out_dir: Path, config: CaptureConfig, cold: dict[str, object] | None
) -> Manifest:
    progress, command = _progress_printer(), _command_line(ctx)
    if cold is None:
        from capture.run import run_capture

        return run_capture(config, out_dir, progress=progress, command=command)
    from capture.cold import run_cold

    if config.cuda_graph != "off":
        raise click.UsageError("--cold runs eager calls; drop --cuda-graph", ctx)
    cold_config = ColdConfig(
        config,
        calls=cold["cold_calls"],  # type: ignore[arg-type]
        empty_caches=cold["empty_caches"],  # type: ignore[arg-type]
        new_shape_every=cold["new_shape_every"],  # type: ignore[arg-type]
        process_timeout_s=cold["process_timeout"],  # type: ignore[arg-type]
        timing_processes=cold["timing_processes"],  # type: ignore[arg-type]
    )
    return run_cold(cold_config, out_dir, progress=progress, command=command)


def _refuse_cold_only(ctx: click.Context) -> None:
    given = [
        f"--{name.replace('_', '-')}"
        for name in COLD_ONLY
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT
    ]
    if given:
        raise click.UsageError(f"{', '.join(given)} only apply with --cold", ctx)


def _command_line(ctx: click.Context) -> list[str]:
    """argv as typed: ``python -m capture ...`` or ``traceanalyze capture ...``."""
    depth, parent = 0, ctx.parent
    while parent is not None:
        depth, parent = depth + 1, parent.parent
    return [*ctx.command_path.split(), *sys.argv[1 + depth :]]


def _describe(name: str, result: VariantResult) -> str:
    if result.status != "ok" and result.median_ms is None:
        return f"{name:<15} {result.status:<8} {result.reason}"
    backend = f"  backend {result.backend}" if result.backend else ""
    error = "n/a" if result.relative_error is None else f"{result.relative_error:.2e}"
    median = "n/a" if result.median_ms is None else f"{result.median_ms:9.3f}"
    line = f"{name:<15} {result.status:<8} {median} ms  rel.err {error}{backend}"
    if result.cold is not None and result.cold.call1_ms is not None:
        line += f"  call1 {result.cold.call1_ms:.1f} ms"
    return line + (f"  {result.reason}" if result.reason else "")


def _progress_printer() -> Callable[[str, VariantResult], None]:
    """One line per variant on stderr, coloured by status when rich is installed."""
    try:
        from rich.console import Console
        from rich.markup import escape
    except ImportError:
        return lambda name, result: click.echo(_describe(name, result), err=True)
    console = Console(stderr=True, highlight=False)
    colours = {"ok": "green", "skipped": "yellow", "failed": "bold red"}
    return lambda name, result: console.print(
        f"[{colours[result.status]}]{escape(_describe(name, result))}[/]", soft_wrap=True
    )
