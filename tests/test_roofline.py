"""`roofline`: attribution to the innermost modelled op, the roofline arithmetic, waves, peaks,
verdicts; micro traces with exact expected values and real traces with shapes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl
import pytest

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from tests.micro import annotation, call, kernel, load, op, span
from traceanalyze.analyses.iterations import classify_iterations
from traceanalyze.analyses.roofline.formulas import NO_SHAPES
from traceanalyze.analyses.roofline.model import ROOFLINE_COLUMNS, UNMODELLED_COLUMNS, roofline
from traceanalyze.analyses.roofline.ops import COMPOSITE, NO_MODEL
from traceanalyze.analyses.waves import wave_table
from traceanalyze.hardware.peaks import PEAKS, PeakOverride, device_peaks, peaks_table
from traceanalyze.render.perf import ROOFLINE

Event = dict[str, Any]
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)"
CAT = "void at::native::CatArrayBatchedCopy<float, unsigned int, 2, 64, 64>(...)"
DTOD = "Memcpy DtoD (Device -> Device)"
BF16 = "c10::BFloat16"


def shaped(name: str, ts: float, dur: float, dims: list[Any], types: list[str],
           concrete: list[str] | None = None) -> Event:  # fmt: skip
    args: dict[str, Any] = {"Input Dims": dims, "Input type": types}
    if concrete is not None:
        args["Concrete Inputs"] = concrete
    return span("cpu_op", name, ts, dur, **args)


def footprint(grid: int, registers: int = 255, threads: int = 128) -> dict[str, Any]:
    return {"grid": [grid, 1, 1], "block": [threads, 1, 1], "registers per thread": registers,
            "shared memory": 0}  # fmt: skip


def step(offset: float, index: int, *, shapes: bool = True) -> list[Event]:
    """One profiler step: linear -> addmm (one GEMM kernel, 10 µs); SDPA -> flash SDPA ->
    _flash_attention_forward (one kernel, 20 µs); copy_ (a 1 µs DtoD copy); cat (5 µs, no
    model)."""
    t, c = offset, 10 * index

    def ops(name: str, ts: float, dur: float, dims: list[Any], types: list[str],
            concrete: list[str] | None = None) -> Event:  # fmt: skip
        return shaped(name, ts, dur, dims, types, concrete) if shapes else op(name, ts, dur)

    return [
        annotation(f"ProfilerStep#{index}", t, 1000),
        ops("aten::linear", t + 10, 100, [[64, 128], [256, 128], [256]], [BF16] * 3),
        op("aten::t", t + 12, 2),
        ops("aten::addmm", t + 20, 50, [[256], [64, 128], [128, 256], [], []],
            [BF16, BF16, BF16, "Scalar", "Scalar"], ["", "", "", "1", "1"]),
        call("cudaLaunchKernel", t + 22, 5, c + 1),
        kernel(GEMM, t + 200, 10, c + 1, **footprint(300)),
        op("aten::scaled_dot_product_attention", t + 120, 100),
        ops("aten::_scaled_dot_product_flash_attention", t + 125, 90,
            [[1, 2, 128, 64]] * 3 + [[], [], [], []], [BF16] * 3 + ["Scalar"] * 4,
            ["", "", "", "0.", "True", "False", ""]),
        op("aten::_flash_attention_forward", t + 130, 80),
        call("cudaLaunchKernel", t + 135, 5, c + 2),
        kernel(FLASH, t + 300, 20, c + 2, **footprint(6)),
        ops("aten::copy_", t + 230, 20, [[1024, 1024], [1024, 1024], []], [BF16, BF16, "Scalar"],
            ["", "", "False"]),
        call("cudaMemcpyAsync", t + 232, 3, c + 3),
        kernel(DTOD, t + 330, 1, c + 3, cat="gpu_memcpy", bytes=2 * 1024 * 1024),
        ops("aten::cat", t + 260, 10, [[[8, 8], [8, 8]], []], ["TensorList", "Scalar"]),
        call("cudaLaunchKernel", t + 262, 3, c + 4),
        kernel(CAT, t + 340, 5, c + 4, **footprint(132, 32, 256)),
    ]  # fmt: skip


@pytest.fixture
def micro(tmp_path: Path) -> traceanalyze.Trace:
    # Two steps, and a kernel launched before the profiling window (no runtime call): 20 µs,
    # 2% of step 1's window, below the 5% that makes a step `warm-up` (see the next test).
    events = [*step(0, 1), *step(1000, 2), kernel(GEMM, 5, 20, 999, **footprint(300))]
    return load(tmp_path, events)


def test_a_warm_up_step_is_left_out(tmp_path: Path) -> None:
    # The pre-window kernel runs 50 µs of step 1's 1000: 5%, so step 1 is `warm-up` (its GPU
    # time is not its own) and only step 2 counts: each op once, the same time per step, and
    # one counted step is too few for a verdict, so no CPU-bound note.
    events = [*step(0, 1), *step(1000, 2), kernel(GEMM, 5, 50, 999, **footprint(300))]
    trace = load(tmp_path, events)
    table = classify_iterations(trace)
    assert table.select("iteration", "kind", "counted").rows() == [
        (1, "warm-up", False),
        (2, "profiled", True),
    ]
    result = roofline(trace)
    assert result.ops.select("op_name", "count_in_iterations", "gpu_us_per_iter").rows() == [
        ("aten::_scaled_dot_product_flash_attention", 1, 20.0),
        ("aten::addmm", 1, 10.0),
        ("aten::copy_", 1, 1.0),
    ]
    assert result.gpu_activity_us_per_iter == 36.0
    assert not any(n.startswith("the steps are CPU-bound") for n in result.notes)


ADDMM_FLOPS = 2 * 64 * 256 * 128
ADDMM_BYTES = 2 * (256 + 64 * 128 + 128 * 256 + 64 * 256)
FLASH_FLOPS = 4 * 1 * 2 * 128 * 128 * 64 // 2
FLASH_BYTES = 2 * 4 * (1 * 2 * 128 * 64)
COPY_BYTES = 2 * 2 * 1024 * 1024


def test_rows_attribute_kernels_to_the_innermost_modelled_op(micro: traceanalyze.Trace) -> None:
    result = roofline(micro)
    ops = result.ops.select("op_name", "count_in_iterations", "count_per_iter", "flops", "bytes",
                            "gpu_us", "gpu_us_per_iter")  # fmt: skip
    assert ops.rows() == [
        # linear -> addmm counts once, at addmm; _flash_attention_forward's kernel at the SDPA op
        ("aten::_scaled_dot_product_flash_attention", 2, 1.0, FLASH_FLOPS, FLASH_BYTES, 20.0, 20.0),
        ("aten::addmm", 2, 1.0, ADDMM_FLOPS, ADDMM_BYTES, 10.0, 10.0),
        ("aten::copy_", 2, 1.0, None, COPY_BYTES, 1.0, 1.0),
    ]  # fmt: skip
    assert result.ops.columns == list(ROOFLINE_COLUMNS)
    assert result.unmodelled.columns == list(UNMODELLED_COLUMNS)
    assert result.unmodelled.rows() == [
        ("aten::cat", NO_MODEL, 1.0, 5.0, pytest.approx(5 / 36 * 100)),
    ]
    # The pre-window kernel counts nowhere; the modelled share is of the iterations' time.
    assert result.gpu_activity_us_per_iter == 36.0
    assert result.modelled_pct == pytest.approx(31 / 36 * 100)


def test_roofline_arithmetic_on_the_h200(micro: traceanalyze.Trace) -> None:
    rows = {r["op_name"]: r for r in roofline(micro).ops.to_dicts()}
    addmm = rows["aten::addmm"]
    assert addmm["tflops"] == pytest.approx(ADDMM_FLOPS / 10e-6 / 1e12)
    assert addmm["tbps"] == pytest.approx(ADDMM_BYTES / 10e-6 / 1e12)
    assert addmm["intensity"] == pytest.approx(ADDMM_FLOPS / ADDMM_BYTES)
    assert (addmm["peak_tflops"], addmm["peak_tbps"], addmm["peak_dtype"]) == (989.4, 4.8, "bf16")
    # Memory time (bytes / 4.8 TB/s) exceeds compute time (FLOPs / 989.4 TFLOP/s): memory-bound,
    # and the roofline time over the measured 10 µs is the percentage.
    assert addmm["bound"] == "memory"
    assert addmm["pct_of_roofline"] == pytest.approx(ADDMM_BYTES / 4.8e12 / 10e-6 * 100)
    copy = rows["aten::copy_"]
    assert (copy["flops"], copy["intensity"], copy["peak_tflops"], copy["bound"]) == (
        None, None, None, "memory",
    )  # fmt: skip
    assert copy["tbps"] == pytest.approx(COPY_BYTES / 1e-6 / 1e12)
    assert copy["pct_of_roofline"] == pytest.approx(COPY_BYTES / 4.8e12 / 1e-6 * 100)
    assert rows["aten::_scaled_dot_product_flash_attention"]["causal"] is True


def test_a_compute_bound_row(tmp_path: Path) -> None:
    # 2·4096³ FLOPs in 200 µs, intensity 1365 FLOP/byte: above the H200's ridge (206).
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        shaped("aten::mm", 10, 20, [[4096, 4096], [4096, 4096]], [BF16, BF16]),
        call("cudaLaunchKernel", 12, 5, 1),
        kernel(GEMM, 100, 200, 1, **footprint(264)),
    ]
    row = roofline(load(tmp_path, events)).ops.row(0, named=True)
    flops = 2 * 4096**3
    assert row["bound"] == "compute"
    assert row["tflops"] == pytest.approx(flops / 200e-6 / 1e12)
    assert row["pct_of_roofline"] == pytest.approx(flops / 989.4e12 / 200e-6 * 100)
    assert row["verdict"] == "compute-bound, 69% of the roofline; below it: low occupancy: " \
        "12.5% theoretical, limited by registers"  # fmt: skip


def test_waves_per_kernel(micro: traceanalyze.Trace) -> None:
    # 255 registers x 128 threads: 2 resident blocks per SM, 264 blocks per wave on 132 SMs.
    waves = wave_table(micro).select(
        "name", "grid_blocks", "active_blocks_per_sm", "blocks_per_wave", "waves",
        "last_wave_fill_pct", "wave_efficiency_pct", "wave_loss_pct",
    ).rows()  # fmt: skip
    gemm = (GEMM, 300, 2, 264, 300 / 264, (300 / 264 - 1) * 100, 300 / 264 / 2 * 100,
            100 - 300 / 264 / 2 * 100)  # fmt: skip
    flash = (FLASH, 6, 2, 264, 6 / 264, 6 / 264 * 100, 6 / 264 * 100, 100 - 6 / 264 * 100)
    assert dict((row[0], row) for row in waves)[GEMM] == pytest.approx(gemm)
    assert dict((row[0], row) for row in waves)[FLASH] == pytest.approx(flash)


def test_verdicts_name_the_evidence(micro: traceanalyze.Trace) -> None:
    rows = {r["op_name"]: r["verdict"] for r in roofline(micro).ops.to_dicts()}
    addmm = rows["aten::addmm"]
    assert addmm.startswith("memory-bound, 0.2% of the roofline; below it: tail wave:")
    assert (
        "1.14 waves, the last 14% full (43% of the launched SM slots idle)" in rows["aten::addmm"]
    )
    flash = rows["aten::_scaled_dot_product_flash_attention"]
    assert (
        "a small grid: its longest kernel's 6 blocks fill 2% of the 264 the GPU runs at once"
        in flash
    )
    assert "low occupancy: 12.5% theoretical, limited by registers" in flash
    assert rows["aten::copy_"] == "memory-bound, 87% of the roofline: near the roofline"


def test_fp32_gemms_get_the_fp32_or_tf32_peak_from_their_kernels(tmp_path: Path) -> None:
    def trace(name: str, folder: str) -> Any:
        path = tmp_path / folder
        path.mkdir()
        events = [
            annotation("ProfilerStep#1", 0, 1000),
            shaped("aten::mm", 10, 20, [[512, 512], [512, 512]], ["float", "float"]),
            call("cudaLaunchKernel", 12, 5, 1),
            kernel(name, 100, 50, 1, **footprint(64)),
        ]
        return roofline(load(path, events)).ops.row(0, named=True)

    simt = trace("ampere_sgemm_128x64_nn", "simt")
    assert (simt["peak_dtype"], simt["peak_tflops"]) == ("fp32", 67.0)
    assert "fp32 on the CUDA cores" in simt["verdict"]
    tf32 = trace("cutlass_80_tensorop_s1688gemm_128x128_32x3_nn_align4", "tf32")
    assert (tf32["peak_dtype"], tf32["peak_tflops"]) == ("tf32", 494.7)


def test_override_and_unknown_gpus(tmp_path: Path) -> None:
    events = step(0, 1)
    unknown = load(tmp_path, events, devices=None)
    result = roofline(unknown)
    assert result.ops["pct_of_roofline"].is_null().all()
    assert any("describes no GPU" in note for note in result.notes)
    assert (
        result.ops["verdict"][0] == "no peak known for this GPU: pass --peak-tflops and --peak-tbps"
    )
    given = roofline(unknown, PeakOverride(tflops=100.0, tbps=1.0)).ops
    addmm = given.filter(pl.col("op_name") == "aten::addmm").row(0, named=True)
    assert (addmm["peak_tflops"], addmm["peak_tbps"]) == (100.0, 1.0)
    assert addmm["pct_of_roofline"] == pytest.approx(ADDMM_BYTES / 1e12 / 10e-6 * 100)
    # An override replaces the table's figures on a known GPU too, and says so.
    (tmp_path / "h200").mkdir()
    known = roofline(load(tmp_path / "h200", events), PeakOverride(tbps=2.0))
    assert known.ops["peak_tbps"].unique().to_list() == [2.0]
    assert set(known.ops["peak_tflops"].drop_nulls()) == {989.4}
    assert known.devices["peak_source"][0].startswith("given on the command line: TB/s 2; NVIDIA")


def test_trace_without_shapes(tmp_path: Path) -> None:
    result = roofline(load(tmp_path, step(0, 1, shapes=False)))
    assert result.ops.height == 0 and not result.has_shapes
    assert result.notes[0].startswith("the trace has no recorded shapes")
    reasons = dict(zip(result.unmodelled["op_name"], result.unmodelled["reason"], strict=True))
    assert reasons["aten::addmm"] == reasons["aten::copy_"] == NO_SHAPES
    assert reasons["aten::_scaled_dot_product_flash_attention"] == NO_SHAPES
    assert result.modelled_pct == 0.0


def test_cpu_bound_iterations_are_noted(micro: traceanalyze.Trace) -> None:
    # 36 µs of GPU work in 1000 µs steps.
    assert any(n.startswith("the steps are CPU-bound") for n in roofline(micro).notes)


def test_trace_with_no_gpu_activity(tmp_path: Path) -> None:
    events = [annotation("ProfilerStep#1", 0, 100), op("aten::mm", 10, 20)]
    result = roofline(load(tmp_path, events))
    assert result.ops.height == 0 and result.unmodelled.height == 0
    assert result.gpu_activity_us_per_iter == 0.0 and result.modelled_pct == 0.0


# ---------------------------------------------------------------------------------------------
# Peaks


@pytest.mark.parametrize(
    ("name", "sms", "gpu", "bf16", "tbps"),
    [
        ("NVIDIA H200", 132, "H200 SXM", 989.4, 4.8),
        ("NVIDIA H100 80GB HBM3", 132, "H100 SXM", 989.4, 3.35),
        ("NVIDIA H100 PCIe", 114, "H100 PCIe", 756.5, 2.0),
        ("NVIDIA A100-SXM4-80GB", 108, "A100 80GB SXM", 312.0, 2.039),
        ("NVIDIA A100 80GB PCIe", 108, "A100 80GB PCIe", 312.0, 1.935),
        ("NVIDIA A100-PG509-200", 108, "A100 40GB", 312.0, 1.555),
        ("NVIDIA B200", 148, "B200", 2250.0, 8.0),
        ("Tesla V100-SXM2-32GB", 80, "V100 SXM2", None, 0.9),
        ("AMD Instinct MI300X VF", 304, "MI300X", 1307.4, 5.3),
        ("AMD Instinct MI250X", 110, "MI250X (one GCD)", 191.5, 1.6),
        ("AMD Instinct MI210", 104, "MI210", 181.0, 1.6),
        ("AMD Radeon Graphics", 104, "MI210 / MI250 GCD", 181.0, 1.6),
        ("AMD Radeon Graphics", 60, None, None, None),  # a generic name without a known size
        ("NVIDIA H200 NVL", 132, None, None, None),  # other clocks: not guessed from the SXM
        ("NVIDIA GeForce RTX 4090", 128, None, None, None),
    ],
)
def test_device_peaks(name: str, sms: int, gpu: str | None, bf16: float | None,
                      tbps: float | None) -> None:  # fmt: skip
    devices = pl.DataFrame({"rank": [0], "device": [0], "name": [name], "num_sms": [sms]},
                           schema={"rank": pl.Int32, "device": pl.Int32, "name": pl.String,
                                   "num_sms": pl.Int32})  # fmt: skip
    row = device_peaks(devices).row(0, named=True)
    assert (row["gpu"], row["peak_bf16_tflops"], row["peak_tbps"]) == (gpu, bf16, tbps)


def test_every_peak_row_names_its_source() -> None:
    assert peaks_table().height == len(PEAKS)
    assert all(p.source and p.hbm_tbps > 0 for p in PEAKS)


# ---------------------------------------------------------------------------------------------
# Real traces with recorded shapes


def public(name: str) -> Path:
    path = PUBLIC_TRACES / name
    if not path.exists():
        pytest.skip(f"{path} not found")
    return path


def test_h100_bert_small() -> None:
    result = roofline(traceanalyze.load(public("tl_h100_bert_small.json.gz")))
    top = result.ops.row(0, named=True)
    # 17 aten::addmm per step on [141, 512] x [512, 512] with a [512] bias (the attention
    # projections), 98.72 µs of kernels: 2·141·512·512 FLOPs each.
    assert (top["op_name"], top["shapes"], top["count_per_iter"]) == (
        "aten::addmm", "[[512],[141,512],[512,512]]", 17.0,
    )  # fmt: skip
    assert top["flops"] == 2 * 141 * 512 * 512
    assert top["gpu_us_per_iter"] == pytest.approx(98.72, abs=0.01)
    assert top["gpu"] == "H100 SXM" and top["bound"] == "memory"
    flash = result.ops.filter(pl.col("op_name") == "aten::_scaled_dot_product_flash_attention")
    assert flash["flops"].to_list() == [4 * 1 * 8 * 141 * 141 * 64]
    assert result.modelled_pct == pytest.approx(94.4, abs=0.1)
    assert set(result.unmodelled["op_name"]) == {
        "aten::index_select", "aten::all", "aten::_local_scalar_dense", "aten::eq",
    }  # fmt: skip


def test_mi300_bert_small_is_matched_to_the_mi300x_and_has_no_waves() -> None:
    result = roofline(traceanalyze.load(public("tl_mi300_bert_small.json.gz")))
    assert set(result.ops["gpu"]) == {"MI300X"}
    assert result.ops["pct_of_roofline"].is_not_null().all()
    # Occupancy (so waves) is not computed for AMD GPUs, and the verdict says so.
    assert result.ops["waves"].is_null().all() and result.waves["waves"].is_null().all()
    flash = result.ops.filter(pl.col("op_name") == "aten::_scaled_dot_product_flash_attention")
    assert flash["verdict"][0] == (
        "memory-bound, 0.4% of the roofline; no cause the trace can show (no occupancy or "
        "waves for this GPU)"
    )


def test_h100_convolution_trace() -> None:
    result = roofline(traceanalyze.load(public("tl_h100_falconsai_conv.json.gz")))
    conv = result.ops.filter(pl.col("op_name") == "aten::cudnn_convolution").row(0, named=True)
    assert conv["flops"] == 2 * 4 * 768 * 3 * 16 * 16 * 14 * 14
    assert conv["kernels_per_call"] == 4  # layout transforms, the GEMM, the output transform
    assert result.unmodelled["op_name"].to_list() == ["aten::cat"]


def test_every_public_trace_gives_a_roofline_and_valid_json(public_trace: Path) -> None:
    trace = traceanalyze.load(public_trace)
    result = roofline(trace)
    record = json.loads(ROOFLINE.render([(None, result)], "json"))
    assert set(record) >= {"ops", "unmodelled", "waves", "devices", "notes"}
    # Every GPU activity in the iterations is in a row or in the unmodelled list.
    rows = result.ops["gpu_us_per_iter"].sum() + result.unmodelled["gpu_us_per_iter"].sum()
    assert rows == pytest.approx(result.gpu_activity_us_per_iter, abs=1e-6)


def test_zero_length_kernels_give_no_infinite_throughput(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        shaped("aten::mm", 10, 20, [[64, 64], [64, 64]], [BF16, BF16]),
        call("cudaLaunchKernel", 12, 5, 1),
        kernel(GEMM, 50, 0, 1),
    ]
    result = roofline(load(tmp_path, events))
    row = result.ops.row(0, named=True)
    assert (row["tflops"], row["tbps"], row["pct_of_roofline"]) == (None, None, None)
    json.loads(ROOFLINE.render([(None, result)], "json"))


def test_activity_launched_outside_every_op_is_listed_as_such(tmp_path: Path) -> None:
    events = [
        annotation("ProfilerStep#1", 0, 100),
        call("cudaLaunchKernel", 12, 5, 1),  # a launch with no operator around it
        kernel(GEMM, 50, 10, 1),
    ]
    result = roofline(load(tmp_path, events))
    assert result.ops.height == 0
    assert result.unmodelled.select("op_name", "reason").rows() == [
        (None, "launched by no CPU op in the trace")
    ]


def test_a_composite_op_is_not_counted_again(tmp_path: Path) -> None:
    # Issue 19, as SDPA math's _safe_softmax: its child _softmax is modelled and has its
    # kernel; the composite's own guard kernel (isneginf) must not get a row with the whole
    # softmax's bytes (the _softmax row counts them), only a line among the unmodelled.
    x = [[8, 1024]]
    events = [
        annotation("ProfilerStep#1", 0, 1000),
        shaped("aten::_safe_softmax", 10, 100, [[8, 1024], [], []], ["float", "Scalar", ""],
               ["", "-1", ""]),
        shaped("aten::_softmax", 20, 30, [*x, [], []], ["float", "Scalar", "Scalar"],
               ["", "-1", "False"]),
        call("cudaLaunchKernel", 22, 5, 1),
        kernel("softmax_warp_forward", 200, 4, 1, **footprint(8)),
        op("aten::isneginf", 60, 20),
        call("cudaLaunchKernel", 62, 5, 2),
        kernel("isneginf_kernel", 210, 2, 2, **footprint(8)),
    ]  # fmt: skip
    result = roofline(load(tmp_path, events))
    softmax_bytes = 2 * 4 * 8 * 1024
    assert result.ops.select("op_name", "bytes", "gpu_us").rows() == [
        ("aten::_softmax", softmax_bytes, 4.0),
    ]
    assert result.unmodelled.select("op_name", "reason", "gpu_us_per_iter").rows() == [
        ("aten::_safe_softmax", COMPOSITE, 2.0),
    ]
    assert result.modelled_pct == pytest.approx(4 / 6 * 100)


def test_top_limits_every_format() -> None:
    # --top says "only the first N rows": the JSON's and CSV's rows too, not the markdown's
    # alone (they kept every op).
    math = Path(__file__).resolve().parents[1] / "sample_traces/h200_default/sdpa_math.json.gz"
    results = [(None, roofline(traceanalyze.load(math)))]
    assert results[0][1].ops.height > 2
    record = json.loads(ROOFLINE.render(results, "json", top=2))
    assert len(record["ops"]) == 2 and len(record["waves"]) <= 2
    assert len(ROOFLINE.render(results, "csv", top=2).splitlines()) == 1 + 2
    everything = json.loads(ROOFLINE.render(results, "json"))
    assert len(everything["ops"]) == results[0][1].ops.height


def test_equally_long_rows_come_in_the_order_of_their_keys() -> None:
    """Rows that differ only in dtype (this trace's `aten::copy_` of one shape from float and
    from int, equally long) in key order, not in whichever order the grouping produced them,
    which changed from run to run."""
    path = CORPUS_TRACES / "new_htadiff_control_a100_rank3.json.gz"
    skip_without(path)
    trace = traceanalyze.load(path, cache=False)
    ops = roofline(trace).ops
    ties = ops.filter(pl.struct("gpu_us_per_iter", "op_name", "shapes").is_duplicated())
    assert ties.height >= 2  # the rows that came in either order
    expected = ties.sort(
        ["gpu_us_per_iter", "op_name", "shapes", "dtype"],
        descending=[True, False, False, False],
        maintain_order=True,
    )
    assert ties["dtype"].to_list() == expected["dtype"].to_list()
