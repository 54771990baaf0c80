"""*What the traces say* and *Guesses*: the report's first sections, in sentences.

Each rule of :mod:`traceanalyze.analyses.report.findings` has one :class:`Sentence` here, keyed
by the rule's id. A sentence is a template over the finding's figures; a *clause* (a named piece of
the template) is written only when every figure it names is known, so a sentence never states
a figure the trace did not give. Numbers are written as the report's tables write them.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import polars as pl

from traceanalyze.analyses.audit.rules import SAID_ALWAYS
from traceanalyze.analyses.report.findings import Finding
from traceanalyze.render.table import markdown_table, number_cell
from traceanalyze.units import byte_size

# A clause: its template, or (template, fallback) where the fallback is written instead of
# nothing when a figure is unknown (it must name only known figures).
Clause = str | tuple[str, str]


@dataclass(frozen=True)
class Sentence:
    text: str
    clauses: Mapping[str, Clause] = field(default_factory=dict)
    item: str = ""  # the template of each entry of the figure ``items``
    joiner: str = ", "  # between items


WORKLOADS = {
    "training": "a training step: backward or optimizer ops ran",
    "inference": "forward only: no backward or optimizer ops ran",
}


def _names(value: Any) -> str:
    names = [f"`{v}`" for v in value]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _pairs(value: Any) -> str:
    return ", ".join(f"`{name}` {number_cell(us)} µs" for name, us in value)


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def _misaligned(value: Any) -> str:
    """(dim, size, multiple, padded) tuples: "N = 50,257 is not a multiple of 8"."""
    return _and(
        [f"{dim} = {size:,} is not a multiple of {multiple}" for dim, size, multiple, _ in value]
    )


def _pads(value: Any) -> str:
    """The fix of each misaligned dimension: "N from 50,257 to 50,304"."""
    return _and([f"{dim} from {size:,} to {padded:,}" for dim, size, _, padded in value])


def _count(value: Any) -> str:
    """A count, or a mean count per iteration: whole numbers as such ("1,342"), a mean that is
    not whole to one decimal ("805.3 gaps per iteration", not "805.333")."""
    number = float(value)
    return f"{number:,.0f}" if number.is_integer() else f"{number:,.1f}"


# Format specs a template may use: {figure:spec}.
SPECS: dict[str, Callable[[Any], str]] = {
    "t": number_cell,  # a time, speed-up or share, as the tables write it
    "n": _count,  # a count, or a mean count per iteration
    "b": byte_size,
    "pct0": lambda v: f"{v:.0f}",
    "names": _names,
    "pairs": _pairs,
    "misaligned": _misaligned,
    "pads": _pads,
    "flag": lambda v: "",  # a clause that only needs the figure to be known
    "workload": lambda v: WORKLOADS[v],
}


class _Figures(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if format_spec in SPECS:
            return SPECS[format_spec](value)
        return str(super().format_field(value, format_spec))


_FORMATTER = _Figures()


def fields(template: str) -> set[str]:
    """The figures a template names."""
    return {name for _, name, _, _ in _FORMATTER.parse(template) if name}


def _known(value: Any) -> bool:
    return value is not None and value != ()


def fill(template: str, clauses: Mapping[str, Clause], figures: Mapping[str, Any]) -> str:
    """``template`` with its figures and clauses; a clause with an unknown figure is its
    fallback where the fallback's figures are known, or empty."""

    def known(text: str) -> bool:
        return all(_known(figures.get(f)) for f in fields(text))

    values = dict(figures)
    for name, clause in clauses.items():
        when, otherwise = clause if isinstance(clause, tuple) else (clause, "")
        chosen = when if known(when) else otherwise if known(otherwise) else ""
        values[name] = _FORMATTER.format(chosen, **figures)
    return _FORMATTER.format(template, **values)


SENTENCES: dict[str, Sentence] = {
    "ranking": Sentence(
        "Fastest on the GPU: `{fastest}`, {fastest_speedup:t}x `{baseline}` "
        "({fastest_busy_us:t} against {baseline_busy_us:t} µs of GPU busy time per "
        "iteration){wall}.{cpu}",
        {
            "wall": "; on wall time ({wall_source}) `{fastest_wall}`, {fastest_wall_speedup:t}x",
            "cpu": " CPU-bound, so their wall speed-up trails the GPU's: {cpu_bound:names}.",
        },
    ),
    "copy_removed": Sentence(
        "`{variant}` removes the {activity} of `{twin}` ({copies_per_iter:n} per iteration: "
        "{copy_us:t} µs{size}, from {chain}) and is {speedup:t}x faster on the GPU: {advice}.",
        {"size": ", {bytes_per_iter:b}"},
    ),
    "slowest": Sentence(
        "Slowest: `{variant}`{vs} ({busy_us:t} µs per "
        "iteration), with {kernels:n} kernels per iteration against {fastest_kernels:n} in "
        "`{fastest}`{fp32}{upcast}.",
        {
            "vs": ", {speedup:t}x `{baseline}` on the GPU",
            "fp32": "; {fp32_gemms:n} of them are GEMMs in fp32 on CUDA cores, no tensor cores "
            "({fp32_us:t} µs, {fp32_pct:t}% of its GPU activity)",
            "upcast": ": `{upcast_op}` computes in float32",
        },
    ),
    "top_categories": Sentence(
        "GPU activity {activity_us:t} µs per iteration{what}; most in {items}.",
        {"what": " ({workload:workload})"},
        item="{category} {us:t} µs ({pct:t}%)",
    ),
    "top_op": Sentence(
        "The op launching the most GPU activity: `{top_op}`, {top_op_us:t} µs per iteration "
        "({top_op_pct:t}% of the GPU activity)."
    ),
    "bound": Sentence(
        "{bound}: {note}; per iteration {busy_us:t} µs GPU busy,{cpu} {wall_us:t} µs wall"
        "{whole}{advice}.",
        {
            "cpu": " {cpu_op_us:t} µs in CPU operators,",
            "whole": " (the whole trace is taken as one iteration, so its wall time includes "
            "any wait outside the work){whole_trace:flag}",
            "advice": "; {advice_text}",
        },
    ),
    "fp32_gemm": Sentence(
        "GEMMs in fp32 on CUDA cores, no tensor cores: {fp32_gemms:n} per iteration, "
        "{fp32_us:t} µs ({fp32_pct:t}% of the GPU activity){longest}{upcast}{fix}.",
        {
            "longest": ", the longest `{op}` {shapes}",
            "upcast": ": `{upcast_op}` computes in float32",
            "fix": (
                "; a fused SDPA backend (flash, memory-efficient or cuDNN) computes in the "
                "inputs' bf16/fp16 on tensor cores{upcast_op:flag}",
                "; {tensor_core_fix}",
            ),
        },
    ),
    "copies": Sentence(
        "{where}{chain}: {copies_per_iter:n} per iteration ({copy_us:t} µs{size}): {advice}.",
        {"where": "In `{variant}`, ", "size": ", {bytes_per_iter:b}"},
    ),
    "cudnn_cpu": Sentence(
        "{where}{library} ops spend {cpu_us:t} µs of CPU self time per iteration ({several}"
        "`{op}`{one_off}{others}){lead}{wall}.",
        {
            "one_off": ", a mean that holds a one-off first call of {first_us:t} µs against a "
            "steady median of {steady_us:t} µs",
            "where": "In `{variant}`, ",
            "several": "{ops:n} ops, {op_us:t} µs in ",
            "others": "; {others:pairs}",
            "lead": ", against a GPU lead of {lead_us:t} µs per iteration over `{runner}` "
            "({busy_us:t} against {runner_busy_us:t} µs GPU busy)",
            "wall": "; CPU-bound, it is {speedup_wall:t}x `{baseline}` on wall time against "
            "{speedup:t}x on the GPU",
        },
    ),
    "occupancy_design": Sentence(
        "Occupancy low by design (a large footprint in a kernel known to trade occupancy for "
        "reuse), theoretical occupancy of the longest kernel: {items}{more}.",
        {"more": "; {more:n} more"},
        item="`{who}` {occupancy_pct:t}% ({limiter}: {footprint}{threads:n} threads/block"
        "{reported}; {design})",
        joiner="; ",
    ),
    "gemm_shapes": Sentence(
        "GEMMs slowed by their shape or kernel: {items}{more}.",
        {"more": "; {more:n} more"},
        item="{gemm_where}`{op}`{gemm_shape}, {us:t} µs per iteration ({pct:t}% of the GPU "
        "activity) in `{kernel}`{gemm_dims}{gemm_narrow}{gemm_arch}{gemm_fp32}{gemm_fix}"
        "{gemm_strides}",
        joiner="; ",
    ),
    "occupancy_accident": Sentence(
        "Occupancy low by accident (blocks too small to fill an SM: larger blocks would raise "
        "it), theoretical occupancy of the longest kernel: {items}{more}.",
        {"more": "; {more:n} more"},
        item="`{who}` {occupancy_pct:t}% ({limiter}: {threads:n} threads/block{reported})",
        joiner="; ",
    ),
    "ranks": Sentence(
        "{ranks:n} ranks: the slowest, rank {slowest_rank}, takes {slowest_wall_us:t} µs per "
        "iteration, {over_median_pct:t}% over the median of {median_wall_us:t} µs; "
        "{stragglers_text}.",
        {
            "stragglers_text": (
                "stragglers (over {straggler_pct:t}%): rank {stragglers:names}",
                "no straggler over {straggler_pct:t}%",
            ),
        },
    ),
    "idle": Sentence(
        "The GPU is idle {idle_us:t} µs per iteration, {idle_pct:t}% of the step's wall time of "
        "{span_us:t} µs; most of it {cause} ({cause_us:t} µs, {cause_pct:t}% of the idle time, "
        "{gaps:n} gaps per iteration): {meaning}.",
    ),
    "critical_path": Sentence(
        "Critical path {length_us:t} µs per iteration, {gpu_pct:pct0}% GPU work and "
        "{cpu_pct:pct0}% CPU time ({bound}){slack}.",
        {
            "slack": "; removing `{item}` ({item_kind}) would shorten an iteration by at most "
            "{slack_us:t} µs",
        },
    ),
    "critical_cpu": Sentence(
        "Bound on the host side, with the CPU item on the critical path whose removal would "
        "shorten an iteration most: {items}{more}.",
        {"more": "; {more:n} more"},
        item="`{who}` ({bound}) {cpu_pct:pct0}% CPU time of {length_us:t} µs, `{item}` "
        "({item_kind}) at most {slack_us:t} µs",
        joiner="; ",
    ),
    "collectives": Sentence(
        "{where}Collectives: {count:n} per iteration, {total_us:t} µs; most of it {collective} "
        "({top_us:t} µs){bandwidth}{peak_text}.",
        {
            "where": "In `{variant}`, ",
            "bandwidth": (
                " at a median bus bandwidth of {busbw:t} GB/s",
                ", bus bandwidth unknown (no message sizes in the trace)",
            ),
            "peak_text": ", {busbw_pct:pct0}% of the link's {peak:pct0} GB/s",
        },
    ),
    "memory_wall": Sentence(
        "Memory: `{variant}` raises the GPU's allocated peak by {peak_bytes:b} per iteration"
        "{block}, against {least_bytes:b} in `{least}`{ratio}.",
        {
            "block": " (largest block {block_bytes:b}, from `{block_op}`)",
            "ratio": " ({ratio:t}x)",
        },
    ),
    "memory_peak": Sentence(
        "Memory: the GPU's allocated peak rises {peak_bytes:b} per iteration above the "
        "iteration's start{block}.",
        {"block": "; largest block {block_bytes:b}, from `{block_op}`"},
    ),
}
# Clauses of the items' templates.
ITEM_CLAUSES: dict[str, Clause] = {
    "reported": "; CUPTI's estimate, not a measurement: {reported_pct:pct0}%",
    # A GEMM's shape findings.
    "gemm_where": "in `{variant}`, ",
    "gemm_shape": (" {shapes} {dtype}", " (shapes not recorded)"),
    "gemm_dims": ": {misaligned:misaligned} for {dtype}",
    "gemm_narrow": ", so it loads {align:n}-element operands (`align{align:n}`)",
    "gemm_arch": ", an sm{kernel_sm:n} kernel on this sm{gpu_sm:n} GPU (none of its own "
    "tensor-core instructions)",
    "gemm_fp32": ", fp32 on the CUDA cores{fp32:flag}",
    "gemm_fix": "; pad {misaligned:pads}",
    "gemm_strides": "; its N and K are aligned, so an operand's stride or offset is not (a "
    "strided view or an offset slice){aligned_shape:flag}",
    # The footprint that binds (a design item has one of the two).
    "footprint": (
        "{registers:n} registers/thread, ",
        "{shared_memory_bytes:b} shared memory/block, ",
    ),
}


def sentence(finding: Finding) -> str:
    """The finding in one sentence, figures as the tables write them."""
    template = SENTENCES[finding.rule]
    figures = dict(finding.figures)
    if template.item:
        items = [fill(template.item, ITEM_CLAUSES, item) for item in figures["items"]]
        figures["items"] = template.joiner.join(items)
    return fill(template.text, template.clauses, figures)


def findings_section(
    findings: tuple[Finding, ...], audit_lines: tuple[str, ...] = (), audit_command: str = ""
) -> str:
    """The report's first section: the audit's finding first where the traces' own faults
    move figures the report prints, then one line per finding, the command that shows the
    detail."""
    if not findings:
        lines = ["No finding: none of the rules has the evidence it needs in these traces."]
    else:
        lines = [f"- {sentence(f)} (`{f.command}`)" for f in findings]
    if audit_lines:
        lines.insert(0, f"- {audit_sentence(audit_lines)} (`{audit_command}`)")
    return "## What the traces say\n\n" + "\n".join(lines) + "\n"


def audit_sentence(audit_lines: tuple[str, ...]) -> str:
    """The audit's finding: the traces' own faults that move the figures below, the largest
    first."""
    more = f"; and {len(audit_lines) - 3} more" if len(audit_lines) > 3 else ""
    # a finding said whatever it moves (a cut gzip file) moves no figure
    said = sum(any(f": {key}: " in line for key in SAID_ALWAYS) for line in audit_lines)
    what = [
        *(["move figures below by 1% or more"] if said < len(audit_lines) else []),
        *(["leave a file unverified"] if said else []),
    ]
    return f"Trace faults {', or '.join(what)}: " + "; ".join(audit_lines[:3]) + more + "."


def guesses_section(guesses: pl.DataFrame) -> str:
    """`--expect`: each expectation held or broken per variant, broken first."""
    broken = int((~guesses["held"]).sum())
    shown = guesses.with_columns(
        pl.when(pl.col("held")).then(pl.lit("held")).otherwise(pl.lit("BROKEN")).alias("held")
    )
    return (
        f"## Guesses\n\n{broken} of {guesses.height} expectations broken (`--expect`, the "
        "syntax of `traceanalyze check`).\n\n" + markdown_table(shown)
    )
