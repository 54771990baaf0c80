"""A real capture on the CPU (small fp32 shape): traces, operator names, skips and failures."""

from __future__ import annotations

import gzip
import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from capture import VARIANTS, CaptureConfig, Manifest, Variant, VariantResult, run_capture
from capture.cli import capture
from capture.run import run_variant
from capture.variants import AttentionSpec, naive_attention

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

SMALL = {
    "batch": 1,
    "heads": 2,
    "seq": 64,
    "head_dim": 16,
    "dtype": "float32",
    "device": "cpu",
    "repeats": 3,
}
CPU_VARIANTS = ("naive", "naive_inplace", "sdpa_math", "sdpa_cudnn")


@pytest.fixture(scope="module")
def forward(tmp_path_factory: pytest.TempPathFactory) -> tuple[Manifest, Path, list[str]]:
    out = tmp_path_factory.mktemp("forward")
    reported: list[str] = []
    manifest = run_capture(
        CaptureConfig(**SMALL, variants=CPU_VARIANTS),
        out,  # type: ignore[arg-type]
        progress=lambda name, _: reported.append(name),
    )
    return manifest, out, reported


def cpu_events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as stream:
        trace = json.load(stream)
    return [event for event in trace["traceEvents"] if event.get("ph") == "X"]


def op_counts(path: Path) -> Counter[str]:
    return Counter(str(event["name"]) for event in cpu_events(path))


def input_dims(path: Path, op: str) -> list[object]:
    return [e["args"].get("Input Dims") for e in cpu_events(path) if e["name"] == op]


def test_statuses_and_manifest_file(forward: tuple[Manifest, Path, list[str]]) -> None:
    manifest, out, reported = forward
    assert reported == list(CPU_VARIANTS)
    assert {n: r.status for n, r in manifest.variants.items()} == {
        "naive": "ok",
        "naive_inplace": "ok",
        "sdpa_math": "ok",
        "sdpa_cudnn": "skipped",
    }
    assert manifest.variants["sdpa_cudnn"].reason == "needs CUDA; this capture runs on cpu"
    assert json.loads((out / "manifest.json").read_text())["variants"]["naive"]["status"] == "ok"
    assert sorted(p.name for p in out.iterdir()) == [
        "manifest.json",
        "naive.json.gz",
        "naive_inplace.json.gz",
        "sdpa_math.json.gz",
    ]


def test_results_are_accurate_and_timed(forward: tuple[Manifest, Path, list[str]]) -> None:
    for name in ("naive", "naive_inplace", "sdpa_math"):
        result = forward[0].variants[name]
        assert result.relative_error is not None and result.relative_error < 1e-4
        assert result.median_ms is not None and result.median_ms > 0
        assert (result.repeats, result.trace, result.grad_relative_error) == (
            3,
            f"{name}.json.gz",
            None,
        )
    assert forward[0].variants["sdpa_math"].backend == "math"
    assert forward[0].variants["naive"].backend is None


def test_environment_and_config(forward: tuple[Manifest, Path, list[str]]) -> None:
    manifest = forward[0]
    assert manifest.environment["torch"] == torch.__version__
    assert manifest.environment["gpu"] is None
    assert manifest.config["seq"] == 64
    assert manifest.config["variants"] == list(CPU_VARIANTS)


@pytest.mark.parametrize(
    ("variant", "present", "absent"),
    [
        ("naive", {"aten::masked_fill", "attn_fwd"}, {"sdpa_fwd"}),
        ("naive_inplace", {"aten::masked_fill_", "attn_fwd"}, {"aten::masked_fill", "aten::clone"}),
        ("sdpa_math", {"sdpa_fwd", "aten::_scaled_dot_product_attention_math"}, {"attn_fwd"}),
    ],
)
def test_trace_operators(
    forward: tuple[Manifest, Path, list[str]], variant: str, present: set[str], absent: set[str]
) -> None:
    counts = op_counts(forward[1] / f"{variant}.json.gz")
    assert present <= set(counts)
    assert not absent & set(counts)
    assert counts["aten::softmax"] + counts["aten::_softmax"] > 0
    # schedule wait=1 warmup=1 active=3: the trace holds steps 2-4, one region each
    assert {n for n in counts if n.startswith("ProfilerStep#")} == {
        "ProfilerStep#2",
        "ProfilerStep#3",
        "ProfilerStep#4",
    }
    assert counts["attn_fwd"] + counts["sdpa_fwd"] == 3


def test_shapes_are_recorded_by_default(forward: tuple[Manifest, Path, list[str]]) -> None:
    # B1 H2 S64 D16: q @ k^T is [1, 2, 64, 16] x [1, 2, 16, 64], three active steps
    assert (
        input_dims(forward[1] / "naive.json.gz", "aten::matmul")[::2]
        == [[[1, 2, 64, 16], [1, 2, 16, 64]]] * 3
    )
    assert forward[0].config["record_shapes"] is True


def test_no_record_shapes(tmp_path: Path) -> None:
    config = CaptureConfig(**SMALL, record_shapes=False, variants=("naive",))  # type: ignore[arg-type]
    run_capture(config, tmp_path)
    assert input_dims(tmp_path / "naive.json.gz", "aten::matmul") == [None] * 6


def test_manifest_says_warm_up_ran_before_profiling(
    forward: tuple[Manifest, Path, list[str]],
) -> None:
    method = json.loads((forward[1] / "manifest.json").read_text())["method"]
    assert (method["warm_up_calls"], method["one_off_work_in_trace"]) == (1, False)


def test_backward_pass(tmp_path: Path) -> None:
    config = CaptureConfig(**SMALL, backward=True, variants=("naive", "sdpa_math"))  # type: ignore[arg-type]
    manifest = run_capture(config, tmp_path)
    for name, region in (("naive", "attn"), ("sdpa_math", "sdpa")):
        result = manifest.variants[name]
        assert result.status == "ok", result.reason
        assert result.grad_relative_error is not None and result.grad_relative_error < 1e-4
        counts = op_counts(tmp_path / f"{name}.json.gz")
        assert counts[f"{region}_fwd"] == counts[f"{region}_bwd"] == 3


def test_wrong_result_fails_loudly(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def wrong(*_: object) -> object:
        return lambda q, k, v: v

    monkeypatch.setitem(VARIANTS, "wrong", Variant("wrong", "returns v", wrong))
    result = CliRunner().invoke(
        capture,
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--variants",
            "naive,wrong",
            "--batch",
            "1",
            "--heads",
            "2",
            "--seq",
            "32",
            "--head-dim",
            "8",
            "--dtype",
            "fp32",
            "--repeats",
            "2",
        ],
    )
    assert result.exit_code == 1
    assert "1 variant(s) failed: wrong" in result.output
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["variants"]["naive"]["status"] == "ok"
    assert manifest["variants"]["wrong"]["status"] == "failed"
    assert manifest["variants"]["wrong"]["reason"].startswith("wrong result: output relative")


def test_unsupported_backend_error_is_a_skip(tmp_path: Path) -> None:
    def no_kernel(*_: object) -> None:
        warnings.warn("Flash attention requires q,k,v to be bf16 or fp16", stacklevel=1)
        raise RuntimeError("No available kernel. Aborting execution.")

    result = run_variant(
        Variant("x", "d", no_kernel),
        CaptureConfig(**SMALL),
        None,  # type: ignore[arg-type]
        tmp_path,
    )
    assert result.status == "skipped"
    assert result.reason is not None
    assert "No available kernel" in result.reason
    assert "Flash attention requires q,k,v to be bf16 or fp16" in result.reason


def test_other_error_is_a_failure(tmp_path: Path) -> None:
    def bug(*_: object) -> None:
        raise ValueError("shapes do not match\nsecond line")

    result = run_variant(
        Variant("x", "d", bug),
        CaptureConfig(**SMALL),
        None,  # type: ignore[arg-type]
        tmp_path,
    )
    assert (result.status, result.reason) == ("failed", "ValueError: shapes do not match")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variants", "sdpa_flash,flex_attention"], "every selected variant needs CUDA"),
        (["--variants", "naive", "--device", "cuda"], "CUDA is not available"),
    ],
)
def test_cannot_start_is_one_line(args: list[str], message: str, tmp_path: Path) -> None:
    if "cuda" in args and torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    result = CliRunner().invoke(capture, ["--out", str(tmp_path), "--device", "cpu", *args])
    assert result.exit_code == 1
    assert len(result.output.strip().splitlines()) == 1
    assert message in result.output


def test_unwritable_out_dir_is_one_line(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(
        capture, ["--out", str(blocker / "sub"), "--device", "cpu", "--variants", "naive"]
    )
    assert result.exit_code == 1
    expected = f"capture: error: {blocker / 'sub'}: cannot write the output folder"
    assert result.output.startswith(expected)


def test_progress_line_per_variant(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        capture,
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--variants",
            "naive,sdpa_flash",
            "--seq",
            "32",
            "--batch",
            "1",
            "--heads",
            "1",
            "--repeats",
            "1",
        ],
    )
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("USDT")]
    assert lines[0].startswith("naive           ok")
    assert lines[1] == "sdpa_flash      skipped  needs CUDA; this capture runs on cpu"
    assert lines[2] == f"wrote {tmp_path / 'manifest.json'}"


def test_result_type_is_exported() -> None:
    assert VariantResult("ok", "d").repeats == 0


def test_naive_mask_for_a_shorter_sequence_is_the_same_mask() -> None:
    """A variant built for several lengths slices its longest mask; the answer must not move."""
    q, k, v = (torch.randn(1, 2, 64, 16, dtype=torch.float64) for _ in range(3))
    spec = AttentionSpec(head_dim=16, causal=True, seqs=(64,))
    several = AttentionSpec(head_dim=16, causal=True, seqs=(64, 128, 192))
    device = torch.device("cpu")
    expected = naive_attention(spec, device)(q, k, v)
    assert torch.equal(naive_attention(several, device)(q, k, v), expected)
    assert torch.equal(naive_attention(several, device, in_place=True)(q, k, v), expected)


def test_cuda_graph_on_cpu_is_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        capture,
        [
            "--out",
            str(tmp_path),
            "--device",
            "cpu",
            "--variants",
            "naive",
            "--cuda-graph",
            "replay",
        ],
    )
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "capture: error: --cuda-graph replay needs CUDA; run on a GPU machine or drop --cuda-graph"
    ]


def test_manifest_is_on_disk_after_every_variant(tmp_path: Path) -> None:
    """A capture killed by a time limit keeps the variants it finished: the manifest is
    written whole before the first variant and after each one."""
    on_disk: list[list[str]] = []

    def progress(_name: str, _result: VariantResult) -> None:
        manifest = json.loads((tmp_path / "manifest.json").read_text())
        on_disk.append(list(manifest["variants"]))

    run_capture(CaptureConfig(**SMALL, variants=("naive", "sdpa_math")), tmp_path, progress)  # type: ignore[arg-type]
    assert on_disk == [[], ["naive"]]
    final = json.loads((tmp_path / "manifest.json").read_text())
    assert list(final["variants"]) == ["naive", "sdpa_math"]
    assert not list(tmp_path.glob("*.partial"))
