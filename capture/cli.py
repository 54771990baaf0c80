"""``capture`` command: record a trace of every attention variant (also ``traceanalyze capture``).

Imports no torch at module level, so the traceanalyze CLI can register this command anywhere.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import click

from capture.config import DTYPE_ALIASES, TOLERANCE, CaptureConfig
from capture.errors import CaptureError
from capture.manifest import VariantResult
from capture.variants import VARIANTS

DEFAULTS = CaptureConfig(device="cpu")


def _variant_list(
    _ctx: click.Context, _param: click.Parameter, value: str | None
) -> tuple[str, ...]:
    if value is None:
        return tuple(VARIANTS)
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
    help=f"Comma-separated subset of: {', '.join(VARIANTS)}. [default: all]",
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
@click.option("--record-shapes", is_flag=True, help="Profiler record_shapes.")
@click.option("--with-stack", is_flag=True, help="Profiler with_stack.")
@click.option("--profile-memory", is_flag=True, help="Profiler profile_memory.")
@click.option("--seed", type=int, default=DEFAULTS.seed, show_default=True)
@click.pass_context
def capture(ctx: click.Context, /, out_dir: Path, **options: object) -> None:
    """Record a Chrome trace (torch.profiler) of each attention variant, plus manifest.json.

    Each variant gets one untimed call, an accuracy check against a float64 reference, a median
    time over --repeats calls and a profiled run. Variants this machine cannot run are skipped
    with the reason in the manifest; a wrong result marks the variant failed and the command
    exits 1 after the others ran.
    """
    from capture.run import run_capture

    try:
        config = CaptureConfig(**options)  # type: ignore[arg-type]
        manifest = run_capture(
            config, out_dir, progress=_progress_printer(), command=_command_line(ctx)
        )
    except CaptureError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {out_dir / 'manifest.json'}", err=True)
    if manifest.failed:
        click.echo(
            f"Error: {len(manifest.failed)} variant(s) failed: "
            f"{', '.join(manifest.failed)} (reasons in the manifest)",
            err=True,
        )
        ctx.exit(1)


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
    line = f"{name:<15} {result.status:<8} {result.median_ms:9.3f} ms  rel.err {error}{backend}"
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
