"""`attention` on real traces: the H200 samples against their capture configuration, and the
corpus (every attention kernel in a call; composed attention found in eager models)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from traceanalyze.analyses.activities import classified_activities
from traceanalyze.analyses.attention import attention
from traceanalyze.analyses.attention.calls import find_calls
from traceanalyze.analyses.attention.dispatch import ELIGIBLE, ELIGIBLE_SHOWN
from traceanalyze.analyses.attention.model import attention_steps
from traceanalyze.api import attention as api_attention
from traceanalyze.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
DEFAULT = SAMPLES / "h200_default"
BACKWARD = SAMPLES / "h200_backward_large"
# What each variant of the seed's configuration runs and how many kernels a call launches
# (sample_traces/README.md: naive 5 kernels + a DtoD copy, math 20, the fused ones 1,
# compiled 3).
EXPECTED = {
    "naive": ("composed", 5),
    "naive_inplace": ("composed", 5),
    "sdpa_math": ("sdpa_math", 20),
    "sdpa_efficient": ("sdpa_efficient", 1),
    "sdpa_flash": ("sdpa_flash", 1),
    "sdpa_cudnn": ("sdpa_cudnn", 1),
    "sdpa_auto": ("sdpa_cudnn", 1),  # the manifest: PyTorch picked cuDNN
    "flex_attention": ("flex", 1),
    "compiled_naive": ("composed_compiled", 3),
}
# Implementations that compute every score (the causal mask does not halve their FLOPs).
EVERY_SCORE = ("composed", "composed_compiled", "sdpa_math", "flex")


def _config(folder: Path) -> dict[str, object]:
    config: dict[str, object] = json.loads((folder / "manifest.json").read_text())["config"]
    return config


def _forward_flops(config: dict[str, object], implementation: str) -> int:
    b, h, s, d = (int(config[k]) for k in ("batch", "heads", "seq", "head_dim"))  # type: ignore[call-overload]
    dense = 4 * b * h * s * s * d
    return dense if implementation in EVERY_SCORE or not config["causal"] else dense // 2


@pytest.mark.parametrize("variant", list(EXPECTED))
def test_default_samples_name_implementation_kernels_shapes_and_flops(variant: str) -> None:
    config = _config(DEFAULT)
    result = api_attention(DEFAULT / f"{variant}.json.gz")
    assert isinstance(result, traceanalyze.api.AttentionResult)
    (row,) = result.rows.to_dicts()
    implementation, kernels = EXPECTED[variant]
    assert (row["implementation"], row["direction"], row["kernels_per_call"]) == (
        implementation, "forward", kernels,
    )  # fmt: skip
    shapes = {k: row[k] for k in ("batch", "heads_q", "heads_kv", "seq_q", "seq_kv", "head_dim")}
    b, h, s, d = (config[k] for k in ("batch", "heads", "seq", "head_dim"))
    assert shapes == {"batch": b, "heads_q": h, "heads_kv": h, "seq_q": s, "seq_kv": s,
                      "head_dim": d}  # fmt: skip
    assert row["dtype"] == "bf16" and row["calls_per_iter"] == 1.0
    assert row["flops_per_call"] == _forward_flops(config, implementation)
    assert row["tflops"] == pytest.approx(row["flops_per_call"] / row["gpu_us_per_call"] / 1e6)
    assert row["pct_of_peak"] is not None and 0 < row["pct_of_peak"] < 100


def test_score_writes_of_the_composed_samples() -> None:
    scores = 8 * 16 * 1024 * 1024
    writes = {
        "naive": scores * 2 * 5,  # QK^T, scale, the fill's copy, the fill, softmax (bf16)
        "naive_inplace": scores * 2 * 4,
        "compiled_naive": scores * 2 * 2,  # the bmm's product, the fused softmax
        # fp32 QK^T, mask add, softmax, where; a bool isneginf; the bf16 cast of P.
        "sdpa_math": scores * (4 * 4 + 1 + 2),
        "sdpa_flash": 0,
    }
    for variant, expected in writes.items():
        (row,) = attention(traceanalyze.load(DEFAULT / f"{variant}.json.gz")).rows.to_dicts()
        assert row["scores_bytes"] == expected, variant


def test_math_says_why_not_faster() -> None:
    # torch 2.11 with cuDNN 9.19 (the manifest) on an H200: cuDNN is PyTorch's first choice;
    # the math sample was forced (sdpa_kernel, the manifest says), so every faster backend is
    # eligible by the rules; without the manifest the tool can only list the possible causes.
    forced = "the capture forced {} with sdpa_kernel (its manifest says so); without that: {}"
    (row,) = api_attention(DEFAULT / "sdpa_math.json.gz").rows.to_dicts()  # type: ignore[union-attr]
    assert row["why_not"] == forced.format("math", f"cudnn, flash, efficient: {ELIGIBLE_SHOWN}")
    (flash,) = api_attention(DEFAULT / "sdpa_flash.json.gz").rows.to_dicts()  # type: ignore[union-attr]
    assert flash["why_not"] == forced.format("flash", f"cudnn: {ELIGIBLE_SHOWN}")
    trace = traceanalyze.load(DEFAULT / "sdpa_math.json.gz")
    (bare,) = attention(trace, cudnn_version="9.19.0").rows.to_dicts()
    assert bare["why_not"] == f"cudnn, flash, efficient: {ELIGIBLE}"
    (auto,) = api_attention(DEFAULT / "sdpa_auto.json.gz").rows.to_dicts()  # type: ignore[union-attr]
    assert auto["why_not"] is None


@pytest.mark.parametrize(
    ("variant", "implementation"),
    [("naive", "composed"), ("sdpa_math", "sdpa_math"), ("sdpa_flash", "sdpa_flash"),
     ("sdpa_cudnn", "sdpa_cudnn"), ("sdpa_efficient", "sdpa_efficient"), ("flex_attention", "flex"),
     ("compiled_naive", "composed_compiled")],
)  # fmt: skip
def test_backward_samples_have_a_backward_row_at_two_and_a_half_times(
    variant: str, implementation: str
) -> None:
    result = attention(traceanalyze.load(BACKWARD / f"{variant}.json.gz"))
    rows = {r["direction"]: r for r in result.rows.to_dicts()}
    assert set(rows) == {"forward", "backward"}
    assert rows["backward"]["implementation"] == implementation
    assert rows["backward"]["flops_per_call"] * 2 == rows["forward"]["flops_per_call"] * 5
    for key in ("batch", "heads_q", "seq_q", "seq_kv", "head_dim", "dtype"):
        assert rows["backward"][key] == rows["forward"][key], key


CORPUS_WITH_ATTENTION = {
    # trace: (calls per iteration by implementation)
    "deepseek_h800_train_ep64.json.gz": {"flash_attn": 8},
    "kernelforge_gh200_transformer_stack.json.gz": {"composed": 1},
    "new_harryjmoss_a100_profile_memory.json.gz": {"composed": 10},
    "new_tl_sglang_prefilldecode_mi300x.json.gz": {"ck_aiter": 36},
    "new_tl_vllm_fullgraph_decode_mi300.json.gz": {"unified": 24},
    "new_tl_xdit_flux_sage_mi300x.json.gz": {"sage": 228, "composed": 24, "sdpa_flash": 13},
    "tl_b200_eager.json.gz": {"flashinfer": 36},
    "tl_h100_owlv2.json.gz": {"composed": 180},
    "tl_h100_qwen.json.gz": {"sdpa_flash": 24},
    "tl_mi300_qwen.json.gz": {"sdpa_flash": 24},
    "tl_sglang_decode.json.gz": {"paged": 36},
    "tl_sglang_graph_capture_bs32_mi300x.json.gz": {"paged": 36},
    "tl_vllm_piecewise_hipgraph_mi300.json.gz": {"unified": 24},
}


def _corpus(name: str) -> Path:
    path = CORPUS_TRACES / name
    skip_without(path)
    return path


@pytest.mark.parametrize("name", list(CORPUS_WITH_ATTENTION))
def test_corpus_calls_by_implementation(name: str) -> None:
    rows = attention(traceanalyze.load(_corpus(name))).rows
    found = rows.group_by("implementation").agg(pl.col("calls_per_iter").sum())
    assert dict(found.iter_rows()) == CORPUS_WITH_ATTENTION[name]


PUBLIC_WITH_ATTENTION = (
    "tl_h100_bert_small.json.gz",
    "tl_mi300_bert_small.json.gz",
    "tl_h100_falconsai_conv.json.gz",
    "tl_torch_compile_triton.json.gz",
)


@pytest.mark.parametrize("path", [
    *(CORPUS_TRACES / n for n in CORPUS_WITH_ATTENTION),
    *(PUBLIC_TRACES / n for n in PUBLIC_WITH_ATTENTION),
], ids=lambda p: p.name)  # fmt: skip
def test_every_attention_kernel_belongs_to_a_call(path: Path) -> None:
    skip_without(path)
    trace = attention_steps(traceanalyze.load(path))
    gpu = classified_activities(trace)
    found = find_calls(trace, gpu)
    fused = gpu.filter(pl.col("category") == "fused_attention")
    claimed = found.activities.filter(pl.col("category") == "fused_attention")
    assert claimed.height == fused.height
    assert claimed["call_id"].is_not_null().all()


def test_composed_owlv2_shapes_match_its_op_tree() -> None:
    # Checked by hand against the op tree: the vision tower's bmm [16, 5185, 64] x
    # [16, 64, 5185] -> softmax [16, 5185, 5185] -> bmm, 120 calls; the text tower's 60 calls
    # on [.., 5, 5] with an additive (float) mask; bmm merges batch and heads (16).
    rows = attention(traceanalyze.load(_corpus("tl_h100_owlv2.json.gz"))).rows
    vision = rows.filter(pl.col("seq_q") == 5185).row(0, named=True)
    assert (vision["calls_per_iter"], vision["head_dim"], vision["mask"]) == (120.0, 64, "none")
    assert vision["batch"] is None  # 3-D scores: batch and heads are merged
    assert vision["flops_per_call"] == 4 * 16 * 5185 * 5185 * 64
    assert vision["scores_bytes"] == 16 * 5185 * 5185 * 2 * 2  # QK^T and softmax, bf16
    text = rows.filter(pl.col("seq_q") == 5).row(0, named=True)
    assert (text["calls_per_iter"], text["mask"]) == (60.0, "float")


def test_attention_command_writes_markdown_json_and_csv(tmp_path: Path) -> None:
    runner = CliRunner()
    trace = str(DEFAULT / "naive.json.gz")
    markdown = runner.invoke(main, ["attention", trace])
    assert markdown.exit_code == 0, markdown.output
    assert markdown.stdout.startswith("- 1 attention call per iteration (composed 1)")
    assert "aten::matmul -> aten::softmax -> aten::matmul" in markdown.stdout
    out = tmp_path / "attention.json"
    written = runner.invoke(main, ["attention", trace, "-o", str(out)])
    assert written.exit_code == 0, written.output
    record = json.loads(out.read_text())
    assert set(record) == {"gpu_activity_us_per_iter", "attention_us_per_iter", "has_shapes",
                           "findings", "notes", "rows", "host"}  # fmt: skip
    assert record["rows"][0]["implementation"] == "composed"
    csv = runner.invoke(main, ["attention", trace, "--format", "csv"])
    assert csv.exit_code == 0 and csv.stdout.startswith("implementation,direction,call_site,")


def test_attention_command_on_a_folder_labels_each_variant() -> None:
    result = CliRunner().invoke(main, ["attention", str(DEFAULT), "--format", "json"])
    assert result.exit_code == 0, result.output
    records = json.loads(result.stdout)
    assert [r["variant"] for r in records] == list(EXPECTED)


def test_attention_command_on_a_missing_file_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["attention", str(tmp_path / "none.json")])
    assert result.exit_code != 0
    assert result.stderr.count("\n") == 1 and "none.json" in result.stderr


def test_report_has_an_attention_section_where_a_trace_holds_attention(tmp_path: Path) -> None:
    text = traceanalyze.api.report([DEFAULT / "naive.json.gz", DEFAULT / "sdpa_flash.json.gz"])
    markdown = text.markdown()
    section = markdown[markdown.index("## Attention\n") :]
    # Each trace's findings first, one bullet each, then one table of their rows.
    lines = section.split("\n")
    assert lines[2].startswith("- **naive**: 1 attention call per iteration (composed 1)")
    assert lines[3].startswith("- **sdpa_flash**: 1 attention call per iteration (sdpa_flash 1)")
    assert section.index("### Calls") > section.index("- **sdpa_flash**")


def test_report_without_attention_has_no_attention_section(public: Path) -> None:
    markdown = traceanalyze.api.report(public / "hta_alexnet_a100.json.gz").markdown()
    assert "## Attention" not in markdown


def test_the_docs_define_every_attention_figure_as_the_code_does() -> None:
    from traceanalyze.analyses.attention import DEFINITIONS

    # The attention section moved from the README into docs/what-ran.md (issue 41).
    readme = (Path(__file__).resolve().parents[1] / "docs" / "what-ran.md").read_text()
    for key, definition in DEFINITIONS.items():
        assert f"- `{key}`: {definition}." in readme, key
