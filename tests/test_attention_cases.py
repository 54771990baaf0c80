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
        # Variable-length: the longest sequence, all tokens; FLOPs exact from the manifest's
        # per-sequence lengths (the trace holds only their count, total and longest).
        assert (row["batch"], row["seq_q"], row["tokens_q"]) == (
            facts["batch"], facts["seq_q"], facts["tokens"],
        )  # fmt: skip
        assert row["nested"] is True  # as its why_not says (nested inputs), where it says one
        assert not row["why_not"] or "nested inputs" in row["why_not"]
        assert row["flops_per_call"] == facts["flops_exact"]
        assert row["flops_note"] and "capture manifest's per-sequence lengths" in row["flops_note"]
        return
    assert {k: row[k] for k in SHAPES} == {k: facts[k] for k in SHAPES}
    assert row["mask"] == facts["mask"]
    assert row["nested"] is False
    every = row["implementation"] in ("sdpa_math", "composed", "composed_compiled", "flex")
    halved = facts["causal"] and not every and facts["seq_q"] == facts["seq_kv"]
    dense = facts["flops_dense"] // (2 if halved else 1)
    if facts.get("block_sparsity_pct") is not None:
        # flex: the blocks its block mask computes, from the manifest's sparsity.
        computed = round(facts["flops_dense"] * (100 - facts["block_sparsity_pct"]) / 100)
        assert row["flops_per_call"] == computed < dense
        assert "from the capture manifest" in row["flops_note"]
        return
    assert row["flops_per_call"] == dense


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


MATH_CASES = [e for e in ENTRIES if e[2].get("backend") == "math"]


@pytest.mark.parametrize(("folder", "name", "entry"), MATH_CASES, ids=[e[1] for e in MATH_CASES])
def test_math_row_says_why_flash_did_not_run(
    folder: Path, name: str, entry: dict[str, Any]
) -> None:
    """The math fallback names each fused backend and the rule its inputs fail; PyTorch's own
    reasons, printed by its dispatch checks in the capture's log, say the same."""
    row = _forward_row(folder, name)
    d = entry["attention"]["head_dim"]
    assert row["implementation"] == "sdpa_math"
    assert sorted(row["refused_backends"]) == ["cudnn", "efficient", "flash"]
    assert row["why_not"] == (
        f"cudnn: head sizes q {d} / v {d}: cuDNN takes multiples of 8 up to 256 | "
        "flash: an attn_mask is given (bool mask): flash takes none, is_causal only | "
        f"efficient: head sizes q {d} / v {d} not multiples of 8 (bf16 inputs)"
    )
    log = folder / "capture.log"
    if log.exists():  # the capture's output, where PyTorch printed its reasons
        said = log.read_text()
        for pytorch_reason in (
            "Flash Attention does not support non-null attn_mask",
            "Mem efficient attention requires last dimension of inputs to be divisible by 8",
            "head_dim should be a multiple of 8",
        ):
            assert pytorch_reason in said


GPT2 = sorted(SAMPLES.glob("*_gpt2"))


@pytest.mark.parametrize("folder", GPT2, ids=[f.name for f in GPT2])
def test_gpt2_training_steps_match_their_facts(folder: Path) -> None:
    """GPT-2 small's training steps (scripts/record_gpt2_gpu.py): eager attention is found
    composed in the op tree, SDPA as its backend, each layer once forward and once backward
    per step, with the model's shapes and FLOPs (4·B·H·S²·D forward; causal SDPA halves it;
    backward 2.5x)."""
    facts = json.loads((folder / "facts.json").read_text())
    b, h, s, d = (facts[k] for k in ("batch", "heads", "seq", "head_dim"))
    dense = facts["flops_dense_forward_per_call"]
    assert dense == 4 * b * h * s * s * d
    for trace, halved in (("gpt2_eager.json.gz", False), ("gpt2_sdpa.json.gz", True)):
        result = attention(folder / trace)
        assert isinstance(result, traceanalyze.api.AttentionResult)
        rows = {r["direction"]: r for r in result.rows.to_dicts()}
        assert set(rows) == {"forward", "backward"}, trace
        forward = dense // 2 if halved else dense
        for direction, flops in (("forward", forward), ("backward", forward * 5 // 2)):
            row = rows[direction]
            assert row["calls_per_iter"] == facts["attention_calls_per_step"][direction]
            assert (row["batch"], row["heads_q"], row["heads_kv"], row["seq_q"], row["seq_kv"],
                    row["head_dim"], row["dtype"]) == (b, h, h, s, s, d, "bf16")  # fmt: skip
            assert row["dropout"] == facts["attention_dropout"]
            assert row["flops_per_call"] == flops, (trace, direction)
            assert row["pct_of_peak"] is not None
        if halved:
            assert rows["forward"]["implementation"].startswith("sdpa_")
            assert rows["forward"]["scores_bytes"] == 0
        else:
            assert rows["forward"]["implementation"] == "composed"
            # At least QK^T and softmax write the [b, h, s, s] scores in bf16.
            assert rows["forward"]["scores_bytes"] >= 2 * b * h * s * s * 2
