"""Every figure a command prints is defined in docs/ (issue 41's newcomer pass met ~30 that were
not). Walks the declared tables (tests/test_schemas.py holds every command's output to them on
every trace): each numeric column must have a definition line in docs/ (``- `name`: ...``), be
built from a defined figure by one of the rules docs/formats.md states (``base_X``, ``new_X``,
``X_delta``, ``X_step_min``/``_max``, a per-step table's ``X`` for ``X_per_iter``), or be on
the list of columns still undefined below, which may only shrink."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from traceanalyze.tables.declared import DECLARED
from traceanalyze.tables.definitions import COLUMN_DEFINITIONS

DOCS = Path(__file__).resolve().parents[1] / "docs"
# Tables of one row per step: their X is the step's value of the figure X_per_iter.
PER_STEP = {("iterations", ""), ("sql", "iterations"), ("streams", "iteration")}
PER_STEP |= {("critical-path", "iterations")}
# Tables that describe the tool, not a trace.
NOT_FIGURES = {"schema", "cache info", "cache clear"}

# Figure columns with no definition in docs/ yet (issue 41: a ratchet; define one and remove
# it here, the test then keeps it defined).
STILL_UNDEFINED = frozenset((
    # main's fix38b (merged 8c23f8c): per-step columns whose _per_iter figure has no line yet.
    "carried_in_warmup_us", "idle_launch_first_call_us",
    "activities_per_iter", "activity_us", "activity_us_per_iter", "allocated_in_iteration",
    "attention_us_per_iter", "base", "base_peak_increase_bytes_per_iter", "base_per_iter",
    "batch", "block_bytes", "blocks_kv", "blocks_per_iter", "blocks_q", "busbw_gbps_median",
    "busbw_pct_of_peak", "busy_us", "busy_us_per_iter", "busy_us_per_iter_delta",
    "bytes_median", "call", "calls", "change", "change_pct", "change_us",
    "collectives_matched", "cpu_blocked_us_per_iter", "cpu_excess_us", "cpu_us", "delta",
    "device_growth_bytes_per_iter", "dropout", "error_bar_per_iter", "first_rank", "flops",
    "gpu_activities_per_iter", "gpu_busy_us_step_max", "gpu_busy_us_step_min",
    "gpu_excess_us", "gpu_sm", "gpu_us", "gpu_waited_us_per_iter", "graph", "head_dim",
    "head_dim_v", "heads_kv", "heads_q", "idle_data_loading_us", "idle_host_us",
    "idle_launch_us", "idle_queued_dispatch_us", "idle_queued_us", "idle_queued_waiting_us",
    "idle_sync_us", "idle_us", "idle_us_per_iter", "intensity", "iterations",
    "kernel_align_elements", "kernel_sm", "kernel_us", "kernel_us_per_iter",
    "largest_block_bytes", "last_rank", "lifetime_us", "link_peak_gbps",
    "max_start_spread_us", "mean_kernel_us", "measured", "median_start_spread_us",
    "median_wall_us_per_iter", "modelled_pct", "name_median_delay_us", "new",
    "new_peak_increase_bytes_per_iter", "new_per_iter", "occurrence", "offset_us",
    "one_off_difference_us", "own_busy_us", "pct_of_roofline", "peak_bf16_tflops",
    "peak_fp16_tflops", "peak_fp32_tflops", "peak_fp64_tensor_tflops", "peak_fp64_tflops",
    "peak_fp8_tflops", "peak_increase_bytes_per_iter", "peak_increase_bytes_per_iter_delta",
    "peak_tbps", "peak_tf32_tflops", "peak_tflops", "plan_builds_per_iter", "position",
    "rank", "replays_per_iter", "seq_kv", "seq_q", "shape_index", "share_of_excess_pct",
    "slack_us_per_iter", "steady_call", "steady_calls", "straggler_pct", "stream", "tbps",
    "thread", "timed_excess_us", "timed_steady_us", "tokens_q", "total_us_per_iter_delta",
    "total_us_per_iter_delta_high", "total_us_per_iter_delta_low", "us_per_call", "wall_us",
    "wall_us_step_max", "wall_us_step_min",
))  # fmt: skip


def _docs() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in sorted(DOCS.glob("*.md")))


def _defined_names(docs: str) -> set[str]:
    """Names with a definition line: ``- `name`: ...`` or ``- `a`, `name` (...): ...``, or a
    ``*name*:`` line of a definitions list the report and docs print."""
    names: set[str] = set()
    for line in re.findall(r"^\s*[-*] (.+)$", docs, re.MULTILINE):
        head = re.match(r"((?:`[a-z0-9_]+`(?:,? (?:and |or )?)?)+)(?: \([^)]*\))?: ", line)
        if head:
            names |= set(re.findall(r"`([a-z0-9_]+)`", head[1]))
        names |= set(re.findall(r"^\*([a-z0-9_ ]+)\*: ", line))
    return names


def _defined(column: str, table: tuple[str, str], names: set[str]) -> bool:
    if column in names:
        return True
    for prefix in ("base_", "new_"):
        if column.startswith(prefix) and column.removeprefix(prefix) in names:
            return True
    for suffix in ("_delta", "_step_min", "_step_max"):
        if column.endswith(suffix) and column.removesuffix(suffix) in names:
            return True
    return table in PER_STEP and f"{column}_per_iter" in names


def _undefined() -> dict[str, list[str]]:
    names = _defined_names(_docs())
    missing: dict[str, list[str]] = {}
    for table in DECLARED:
        if table.command in NOT_FIGURES:
            continue
        for column, dtype in table.columns.items():
            key = (table.command, table.view)
            if dtype.is_numeric() and not _defined(column, key, names):
                missing.setdefault(column, []).append(f"{table.command} {table.view}".strip())
    return missing


def test_every_figure_column_is_defined_in_docs() -> None:
    missing = _undefined()
    new = {c: tables for c, tables in missing.items() if c not in STILL_UNDEFINED}
    assert not new, f"figure columns with no definition in docs/ (define them): {new}"


def test_the_list_of_undefined_columns_only_shrinks() -> None:
    defined_now = STILL_UNDEFINED - set(_undefined())
    assert not defined_now, f"now defined in docs/: remove from STILL_UNDEFINED: {defined_now}"


@pytest.mark.parametrize(
    "column",
    ["speedup_low", "speedup_high", "speedup_wall_low", "speedup_wall_high", "self_us_mean",
     "self_us_first_in_trace", "self_us_steady_median", "calls_total", "share_of_cpu_op_pct",
     "waves", "blocks_per_wave", "last_wave_fill_pct", "wave_efficiency_pct", "wave_loss_pct",
     "launch_delay_us_median", "queue_median", "placement", "module_stack"],
)  # fmt: skip
def test_the_figures_the_newcomer_met_are_defined(column: str) -> None:
    assert column in _defined_names(_docs())


def test_column_definitions_are_printed_in_formats_md() -> None:
    text = (DOCS / "formats.md").read_text(encoding="utf-8")
    for column, definition in COLUMN_DEFINITIONS.items():
        assert f"- `{column}`: {definition}." in text, column
