"""Whether compared traces ran the same workload on the same GPU: a speed-up between two
traces means something only when they did the same work.

The evidence, in order:

* a capture's manifest: its variants are one configuration run by different code (naive
  attention against SDPA's backends), the same workload by declaration (several manifests
  only where they share one configuration);
* otherwise the trace's *workload*: the multiset of its outermost CPU operators per counted
  iteration, each with its recorded input shapes (``aten::linear`` on ``[16,128,896]``, 72 per
  iteration). The same multiset is the same workload (``same``); one that shares at least
  :data:`MIN_SIMILAR_OVERLAP` of it (:func:`ops_overlap`) is the same workload with some code
  changed (``similar``: an in-place op for an out-of-place one); one that shares less did
  other work (``different``: unrelated corpus traces share nothing, and gave speed-ups of
  322x). Code that replaces most of the operators (naive attention against one SDPA call)
  needs a manifest to be compared. A trace without CPU operators (GPU-only) cannot be compared
  this way: ``unknown``.

The GPU is the traces' device names (``deviceProperties``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import iteration_count, per_trace
from traceanalyze.analyses.cputree import outermost_mask
from traceanalyze.analyses.iterations import counted
from traceanalyze.load.variants import Variant, VariantSet
from traceanalyze.trace import Trace

SAME = "same"
SIMILAR = "similar"
DIFFERENT = "different"
UNKNOWN = "unknown"
# At least this share of the operators alike (same op, same shapes, as many per iteration):
# one workload with some code changed (masked_fill against masked_fill_ share 5 of 6 op kinds),
# a speed-up worth giving. Below it, another workload (unrelated traces share none).
MIN_SIMILAR_OVERLAP = 0.5
FROM_MANIFEST = "the capture's manifest: one configuration"
FROM_OPS = "the outermost CPU operators per iteration, with their recorded shapes"
FROM_OP_NAMES = "the outermost CPU operators per iteration (names only: shapes not recorded)"
NO_OPS = "a trace without CPU operators"


@dataclass(frozen=True)
class Sameness:
    """Per variant label: ``workload`` (SAME, DIFFERENT or UNKNOWN, against the baseline's),
    ``gpu`` (its device names) and ``same_gpu`` (the baseline's device names or not);
    ``evidence`` says what the workload verdict rests on."""

    workload: dict[str, str]
    gpu: dict[str, str | None]
    same_gpu: dict[str, bool | None]
    evidence: str


@per_trace
def workload_ops(trace: Trace) -> pl.DataFrame:
    """The outermost CPU operators of the counted iterations: ``name``, ``shapes`` (the
    recorded input dims without spaces; null without record_shapes) and ``per_iter``."""
    steps = counted(trace)
    outermost = steps.cpu.filter(outermost_mask(steps) & pl.col("iteration").is_not_null())
    return (
        outermost.group_by("name", shapes=pl.col("input_dims").str.replace_all(r"\s+", ""))
        .agg(per_iter=pl.len() / iteration_count(steps))
        .sort("name", "shapes", "per_iter", nulls_last=True)
    )


def ops_overlap(base: pl.DataFrame, other: pl.DataFrame, shapes: bool) -> float:
    """The share of two op multisets in common: the sum over (op, shapes) of the lesser count
    per iteration, over the larger multiset's size. 1 for the same ops, 0 for none alike."""
    key = ["name", "shapes"] if shapes else ["name"]

    def counts(frame: pl.DataFrame) -> pl.DataFrame:
        return frame.group_by(key).agg(pl.col("per_iter").sum())

    joined = counts(base).join(counts(other), on=key, how="inner", nulls_equal=True)
    common = float(joined.select(pl.min_horizontal("per_iter", "per_iter_right")).sum().item())
    larger = max(float(base["per_iter"].sum()), float(other["per_iter"].sum()))
    return common / larger if larger else 0.0


def _verdict(overlap: float) -> str:
    if overlap >= 1.0 - 1e-9:
        return SAME
    return SIMILAR if overlap >= MIN_SIMILAR_OVERLAP else DIFFERENT


def _devices(trace: Trace) -> str | None:
    names = trace.devices["name"].drop_nulls().unique().sort().to_list()
    return ", ".join(names) if names else None


def _declared_same(variants: Sequence[Variant]) -> bool:
    """Every loaded variant has an entry in a capture manifest, and the set's manifests (a
    :class:`VariantSet` carries them; a plain sequence of variants is taken as one capture's)
    share one configuration."""
    loaded = [v for v in variants if v.trace is not None]
    manifests = variants.manifests if isinstance(variants, VariantSet) else ()
    return (
        bool(loaded)
        and all(v.manifest_entry is not None for v in loaded)
        and all(m.config == manifests[0].config for m in manifests)
    )


def sameness(variants: Sequence[Variant], baseline: str | None) -> Sameness:
    """Each loaded variant's workload and GPU against the baseline's (see the module
    docstring)."""
    traces = {v.label: v.trace for v in variants if v.trace is not None}
    gpus = {label: _devices(trace) for label, trace in traces.items()}
    base_gpu = gpus.get(baseline) if baseline is not None else None
    same_gpu = {
        label: None if gpu is None or base_gpu is None else gpu == base_gpu
        for label, gpu in gpus.items()
    }
    if _declared_same(variants):
        return Sameness(dict.fromkeys(traces, SAME), gpus, same_gpu, FROM_MANIFEST)
    if baseline not in traces:
        return Sameness(dict.fromkeys(traces, UNKNOWN), gpus, same_gpu, FROM_OPS)
    ops = {label: workload_ops(trace) for label, trace in traces.items()}
    base = ops[baseline]
    with_shapes = all(frame["shapes"].is_not_null().any() for frame in ops.values())
    workload = {}
    for label, frame in ops.items():  # one per variant: a handful
        if not frame.height or not base.height:
            workload[label] = UNKNOWN
        else:
            workload[label] = _verdict(ops_overlap(base, frame, with_shapes))
    evidence = FROM_OPS if with_shapes else FROM_OP_NAMES
    return Sameness(workload, gpus, same_gpu, evidence)
