"""`explain`: the change in GPU span split into parts that add up exactly, on micro pairs and
on the H200 samples; the CPU side; the CLI of `roofline` and `explain` in every format."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import traceanalyze
from tests.conftest import PUBLIC_TRACES
from tests.micro import annotation, call, kernel, op, write_trace
from traceanalyze.analyses.variants.explain import IDLE, OVERLAP, PART_COLUMNS, explain
from traceanalyze.cli import main

Event = dict[str, Any]
SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_default"
SGEMM = "ampere_sgemm_128x64_nn"
SOFTMAX = "void (anonymous namespace)::softmax_warp_forward<float, float, float, 10>(float*)"
MUL = "void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>>(...)"
DTOD = "Memcpy DtoD (Device -> Device)"
CHAIN = "aten::masked_fill -> aten::clone -> aten::copy_ -> Memcpy DtoD (Device -> Device)"


def base_step(t: float, n: int) -> list[Event]:
    """GEMM 100 µs, then a masked_fill clone copy 50 µs, then softmax 30 µs, one stream:
    span 200, busy 180, idle 20."""
    c = 10 * n
    return [
        annotation(f"ProfilerStep#{n}", t, 1000),
        op("aten::mm", t + 50, 20),
        call("cudaLaunchKernel", t + 52, 5, c + 1),
        kernel(SGEMM, t + 100, 100, c + 1),
        op("aten::masked_fill", t + 71, 8),
        op("aten::clone", t + 72, 6),
        op("aten::copy_", t + 73, 4),
        call("cudaMemcpyAsync", t + 74, 2, c + 2),
        kernel(DTOD, t + 210, 50, c + 2, cat="gpu_memcpy", bytes=1 << 20),
        op("aten::_softmax", t + 80, 10),
        call("cudaLaunchKernel", t + 82, 5, c + 3),
        kernel(SOFTMAX, t + 270, 30, c + 3),
    ]


def new_step(t: float, n: int) -> list[Event]:
    """GEMM 90 µs; softmax 30 µs on a second stream inside it (overlap 30); a new mul 10 µs:
    span 110, busy 100, activity 130, idle 10."""
    c = 10 * n
    return [
        annotation(f"ProfilerStep#{n}", t, 1000),
        op("aten::mm", t + 50, 20),
        call("cudaLaunchKernel", t + 52, 5, c + 1),
        kernel(SGEMM, t + 100, 90, c + 1),
        op("aten::_softmax", t + 80, 10),
        call("cudaLaunchKernel", t + 82, 5, c + 3),
        kernel(SOFTMAX, t + 150, 30, c + 3, stream=8),
        op("aten::mul", t + 92, 6),
        call("cudaLaunchKernel", t + 93, 4, c + 4),
        kernel(MUL, t + 200, 10, c + 4),
    ]


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    base = write_trace(tmp_path, [*base_step(0, 1), *base_step(1000, 2)], "base.json")
    new = write_trace(tmp_path, [*new_step(0, 1), *new_step(1000, 2)], "new.json")
    return base, new


def test_micro_pair_parts_add_up_exactly(pair: tuple[Path, Path]) -> None:
    base, new = (traceanalyze.load(p, cache=False) for p in pair)
    result = explain(base, new, "base", "new")
    parts = result.parts.select("part", "kind", "status", "us_per_iter_delta").rows()
    assert parts == [
        (CHAIN, "memcpy", "removed", -50.0),
        ("aten::mm (gemm)", "kernel", "changed", -10.0),
        ("aten::mul (elementwise)", "kernel", "added", 10.0),
        # softmax did not change (0 < 1% of the 200 µs span): lumped
        ("other changed", "other", "changed", 0.0),
        (OVERLAP, OVERLAP, "changed", -30.0),
        (IDLE, IDLE, "changed", -10.0),
    ]
    assert result.parts.columns == list(PART_COLUMNS)
    assert result.total_us_per_iter_delta == -90.0 == result.parts["us_per_iter_delta"].sum()
    assert (result.busy_us_per_iter_delta, result.wall_us_per_iter_delta) == (-80.0, 0.0)
    assert result.base_figures["overlap_us_per_iter"] == 0.0
    assert result.new_figures["overlap_us_per_iter"] == 30.0
    what = dict(zip(result.parts["part"], result.parts["what"], strict=True))
    assert what[CHAIN] == f"gone: `{CHAIN}`: 1 → 0 per iteration, 1 MiB each, 50 → 0 µs"
    assert what["aten::mul (elementwise)"] == (
        "new: kernels launched by `aten::mul (elementwise)`: 0 → 1 per iteration, 0 → 10 µs"
    )
    assert result.sentence == (
        "GPU span per iteration 200.0 → 110.0 µs (-90.0 µs, -45.0%) against `base`, shorter: "
        f"gone: `{CHAIN}` (-50.0 µs); more stream overlap (-30.0 µs); kernels of "
        "`aten::mm (gemm)` (-10.0 µs); the other parts add up to +0.0 µs."
    )


def test_micro_pair_cpu_side(pair: tuple[Path, Path]) -> None:
    base, new = (traceanalyze.load(p, cache=False) for p in pair)
    cpu = explain(base, new).cpu
    rows = {r["figure"]: (r["base"], r["new"], r["delta"]) for r in cpu.to_dicts()}
    # Outermost ops: mm 20 + masked_fill 8 + softmax 10 | mm 20 + softmax 10 + mul 6.
    assert rows["cpu_op_us_per_iter"] == (38.0, 36.0, -2.0)
    assert rows["launch_us_per_iter"] == (12.0, 14.0, 2.0)
    # aten::mm's self time (20 µs minus its 5 µs launch): the cuBLAS CPU time.
    assert rows["cublas_cpu_us_per_iter"] == (15.0, 15.0, 0.0)
    assert rows["cudnn_cpu_us_per_iter"] == (0.0, 0.0, 0.0)


def test_identical_traces_explain_nothing(pair: tuple[Path, Path]) -> None:
    base = traceanalyze.load(pair[0], cache=False)
    result = explain(base, base)
    assert result.total_us_per_iter_delta == 0.0
    assert set(result.parts["us_per_iter_delta"]) == {0.0}
    assert result.sentence.endswith("no part changes by 1% of the span or more.")


def samples() -> tuple[traceanalyze.Trace, traceanalyze.Trace]:
    return (
        traceanalyze.load(SAMPLES / "naive.json.gz"),
        traceanalyze.load(SAMPLES / "naive_inplace.json.gz"),
    )


def test_naive_to_in_place_the_clone_copy_is_gone_and_the_rest_unchanged() -> None:
    result = explain(*samples(), "naive", "naive_inplace")
    # Exact values of the traces: ns totals over the 3 profiled steps, per iteration in µs.
    assert result.parts.select("part", "status").rows() == [
        (CHAIN, "removed"), ("other changed", "changed"), (OVERLAP, "changed"), (IDLE, "changed"),
    ]  # fmt: skip
    deltas = result.parts["us_per_iter_delta"].to_list()
    # The copy's 378,016 ns over the 3 steps (the sum of the trace's gpu_memcpy durations); the
    # kernels' own change; no overlap; the idle gaps, 9.1-9.9 µs a step in naive.
    assert deltas == pytest.approx([-378016 / 3e3, 1453 / 3e3, 0.0, -2626 / 3e3], abs=1e-6)
    assert result.total_us_per_iter_delta == pytest.approx(-379189 / 3e3, abs=1e-6)
    assert sum(deltas) == pytest.approx(result.total_us_per_iter_delta, abs=1e-9)
    other = result.parts.row(1, named=True)
    assert other["what"].startswith("5 smaller changed parts, each changing by under 1%")
    idle = result.parts.row(3, named=True)
    assert idle["what"].endswith("(one iteration's ranged 9.12-9.86 → 8.42-8.93 µs)")
    assert result.sentence == (
        "GPU span per iteration 1,072.3 → 945.9 µs (-126.4 µs, -11.8%; -128.5 to -124.8 µs with "
        "one step of each) against `naive`, "
        f"shorter: gone: `{CHAIN}` (-126.0 µs); the rest is unchanged within noise (-0.4 µs)."
    )


def test_every_sample_variant_against_naive_adds_up() -> None:
    naive = traceanalyze.load(SAMPLES / "naive.json.gz")
    for path in sorted(SAMPLES.glob("*.json.gz")):
        result = explain(naive, traceanalyze.load(path))
        total = result.parts["us_per_iter_delta"].sum()
        assert total == pytest.approx(result.total_us_per_iter_delta, abs=1e-9), path.name
        figures = result.new_figures
        assert figures["gpu_span_us_per_iter"] == pytest.approx(
            figures["gpu_activity_us_per_iter"] - figures["overlap_us_per_iter"]
            + figures["gpu_own_idle_us_per_iter"], abs=1e-9
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# CLI


def run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_explain_markdown_and_chart(pair: tuple[Path, Path], tmp_path: Path) -> None:
    out = tmp_path / "out" / "why.md"
    result = run("explain", *map(str, pair), "-o", str(out))
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.startswith("GPU span per iteration 200.0 → 110.0 µs")
    assert "![Waterfall of the GPU span's parts](why_waterfall.png)" in text
    assert (out.parent / "why_waterfall.png").read_bytes().startswith(b"\x89PNG")
    # The chart file is refused like the report's when it exists.
    again = CliRunner().invoke(main, ["explain", *map(str, pair), "-o", str(out)])
    assert again.exit_code == 2 and "exists" in again.output


def test_explain_json_and_csv(pair: tuple[Path, Path]) -> None:
    record = json.loads(run("explain", *map(str, pair), "--format", "json").stdout)
    assert {"total_us_per_iter_delta", "busy_us_per_iter_delta", "wall_us_per_iter_delta",
            "parts", "cpu", "summary"} <= set(record)  # fmt: skip
    assert (record["base"], record["new"], record["total_us_per_iter_delta"]) == (
        "base", "new", -90.0,
    )  # fmt: skip
    assert {"part", "us_per_iter_delta", "what"} <= set(record["parts"][0])
    csv = run("explain", *map(str, pair), "--format", "csv").stdout
    assert csv.splitlines()[0] == ",".join(PART_COLUMNS)


def test_roofline_every_format(tmp_path: Path) -> None:
    trace = PUBLIC_TRACES / "tl_h100_bert_small.json.gz"
    if not trace.exists():
        pytest.skip(f"{trace} not found")
    md = run("roofline", str(trace), "--top", "3").stdout
    assert md.startswith("Peaks: H100 SXM: bf16 989.4 TFLOP/s, fp32 67 TFLOP/s, 3.35 TB/s")
    assert "| op name | shapes | dtype | count/iter | GPU µs per call |" in md
    assert "**Verdicts** (the 3 ops with the most GPU time)" in md
    record = json.loads(run("roofline", str(trace), "--format", "json").stdout)
    keys = {"op_name", "shapes", "dtype", "count_in_iterations", "flops", "bytes", "gpu_us",
            "tflops", "tbps", "intensity", "peak_tflops", "peak_tbps", "pct_of_roofline",
            "bound"}  # fmt: skip
    assert keys <= set(record["ops"][0])
    assert {"devices", "unmodelled", "waves", "notes", "modelled_pct"} <= set(record)
    csv = run("roofline", str(trace), "--format", "csv").stdout
    assert csv.splitlines()[0].startswith("op_name,shapes,dtype,causal,count_in_iterations,")
    given = json.loads(
        run("roofline", str(trace), "--format", "json", "--peak-tflops", "500",
            "--peak-tbps", "2").stdout
    )  # fmt: skip
    assert {(r["peak_tflops"], r["peak_tbps"]) for r in given["ops"]} <= {(500.0, 2.0), (None, 2.0)}


def test_roofline_on_a_folder_of_variants() -> None:
    md = run("roofline", str(SAMPLES)).stdout
    assert md.startswith("## naive\n")
    records = json.loads(run("roofline", str(SAMPLES), "--format", "json").stdout)
    assert [r["variant"] for r in records][:2] == ["naive", "naive_inplace"]
    assert all(r["has_shapes"] for r in records)  # the capture records shapes by default
    flash = next(r for r in records if r["variant"] == "sdpa_flash")
    [attention] = [o for o in flash["ops"] if "flash_attention" in o["op_name"]]
    assert attention["flops"] == 4 * 8 * 16 * 1024 * 1024 * 64 // 2  # causal: half
    assert attention["bound"] == "compute"


def test_roofline_of_a_trace_without_shapes_says_so(tmp_path: Path) -> None:
    path = write_trace(
        tmp_path,
        [
            annotation("ProfilerStep#1", 0, 100),
            op("aten::mm", 10, 20),
            call("cudaLaunchKernel", 11, 2, 1),
            kernel("ampere_sgemm_128x64_nn", 30, 10, 1),
        ],
    )
    md = run("roofline", str(path)).stdout
    assert "- The trace has no recorded shapes (profiled without record_shapes=True)" in md
    [record] = [json.loads(run("roofline", str(path), "--format", "json").stdout)]
    assert record["ops"] == [] and not record["has_shapes"]


@pytest.mark.parametrize("command", ["roofline", "explain"])
def test_bad_input_is_one_line_and_exit_1(tmp_path: Path, command: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    args = [command, str(bad)] + ([str(bad)] if command == "explain" else [])
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "traceanalyze: error:" in result.output


@pytest.mark.parametrize("value", ["0", "-1", "fast"])
def test_bad_peak_is_a_usage_error(value: str) -> None:
    result = CliRunner().invoke(main, ["roofline", str(SAMPLES / "naive.json.gz"),
                                       "--peak-tbps", value])  # fmt: skip
    assert result.exit_code == 2


def test_inputs_are_never_modified(pair: tuple[Path, Path]) -> None:
    before = [p.read_bytes() for p in pair]
    run("explain", *map(str, pair), "--format", "json")
    run("roofline", str(pair[0]), "--format", "json")
    assert [p.read_bytes() for p in pair] == before


def test_every_public_trace_against_itself_and_a_cpu_only_base(public_trace: Path) -> None:
    trace = traceanalyze.load(public_trace)
    same = explain(trace, trace)
    assert same.total_us_per_iter_delta == 0.0
    cpu_only = PUBLIC_TRACES / "hta_cpu_only_rank34.pt.trace.json.gz"
    result = explain(traceanalyze.load(cpu_only), trace)
    total = result.parts["us_per_iter_delta"].sum()
    assert total == pytest.approx(result.total_us_per_iter_delta, abs=1e-6)
    json.dumps(result.to_record(), allow_nan=False)


def test_report_has_a_why_line_and_a_roofline_per_variant(tmp_path: Path) -> None:
    bert = PUBLIC_TRACES / "tl_h100_bert_small.json.gz"
    if not bert.exists():
        pytest.skip(f"{bert} not found")
    out = tmp_path / "report.md"
    result = run("report", str(SAMPLES / "naive.json.gz"), str(bert), "-o", str(out))
    assert result.exit_code == 0
    text = out.read_text()
    naive, other = text.split("## `tl_h100_bert_small`")
    assert "**Roofline**\n\nPeaks: H200 SXM" in naive
    assert "**Against the baseline**" not in naive  # the baseline itself
    assert "**Against the baseline**: GPU span per iteration 1,072.3 →" in other
    assert "**Roofline**\n\nPeaks: H100 SXM" in other
    assert "**Verdicts** (the 10 ops with the most GPU time)" in other
