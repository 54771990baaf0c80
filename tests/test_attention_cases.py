"""`attention` against the GPU captures of the cases (sample_traces/<gpu>_attention_cases,
recorded by scripts/record_attention_gpu.sh): every variant's row names its implementation,
kernels, FLOPs and % of peak; shapes and FLOPs equal the manifest's facts; why_not agrees with
PyTorch's own verdict (`dispatch`, torch.backends.cuda.can_use_* on the GPU). Skipped where no
such folder is in the checkout."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import traceanalyze
from traceanalyze.api import attention

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
FOLDERS = sorted(SAMPLES.glob("*_attention_cases")) + sorted(SAMPLES.glob("*_attention_default"))


def _entries() -> list[tuple[Path, str, dict[str, Any]]]:
    found = []
    for folder in FOLDERS:
        manifest = json.loads((folder / "manifest.json").read_text())
        for name, entry in manifest["variants"].items():
            if entry["status"] == "ok" and entry.get("attention"):
                found.append((folder, name, entry))
    return found


ENTRIES = _entries()
pytestmark = pytest.mark.skipif(not ENTRIES, reason="no GPU capture of the cases in sample_traces")
SHAPES = ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim", "dtype")


def _forward_row(folder: Path, name: str) -> dict[str, Any]:
    result = attention(folder / f"{name}.json.gz")
    assert isinstance(result, traceanalyze.api.AttentionResult)
    rows = [r for r in result.rows.to_dicts() if r["direction"] == "forward"]
    assert len(rows) == 1, (name, rows)
    return rows[0]


@pytest.mark.parametrize(("folder", "name", "entry"), ENTRIES, ids=[e[1] for e in ENTRIES])
def test_each_case_row_matches_its_manifest(folder: Path, name: str, entry: dict[str, Any]) -> None:
    facts = entry["attention"]
    row = _forward_row(folder, name)
    assert row["implementation"] and row["kernels_per_call"] >= 1
    assert row["pct_of_peak"] is not None and row["tflops"] is not None
    if entry.get("backend"):  # an SDPA variant: the backend the capture saw run
        assert row["implementation"] == f"sdpa_{entry['backend']}"
    if facts.get("nested"):
        # Variable-length: the longest sequence, all tokens, FLOPs an upper bound.
        assert (row["batch"], row["seq_q"], row["tokens_q"]) == (
            facts["batch"], facts["seq_q"], facts["tokens"],
        )  # fmt: skip
        assert row["flops_per_call"] == facts["flops_dense"]
        assert row["flops_note"] and "upper bound" in row["flops_note"]
        return
    assert {k: row[k] for k in SHAPES} == {k: facts[k] for k in SHAPES}
    assert row["mask"] == facts["mask"]
    every = row["implementation"] in ("sdpa_math", "composed", "composed_compiled", "flex")
    halved = facts["causal"] and not every and facts["seq_q"] == facts["seq_kv"]
    assert row["flops_per_call"] == facts["flops_dense"] // (2 if halved else 1)


DISPATCHED = [e for e in ENTRIES if e[2].get("dispatch")]


@pytest.mark.parametrize(("folder", "name", "entry"), DISPATCHED, ids=[e[1] for e in DISPATCHED])
def test_why_not_agrees_with_pytorch(folder: Path, name: str, entry: dict[str, Any]) -> None:
    """Each backend the row names as refused, PyTorch refused too; each it calls eligible,
    PyTorch accepted (the variant was forced elsewhere)."""
    row = _forward_row(folder, name)
    verdicts = entry["dispatch"]
    for backend in row["refused_backends"] or []:
        assert verdicts[backend]["ok"] is False, (backend, row["why_not"], verdicts[backend])
    for backend in row["eligible_backends"] or []:
        assert verdicts[backend]["ok"] is True, (backend, row["why_not"], verdicts[backend])
