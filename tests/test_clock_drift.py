"""A GPU clock that drifts from the CPU's (skeptic 38d, finding 2): the shortest launch-to-start
delay over the whole trace is that of its earliest launches, so a drift from zero never reaches
the offset check's floor; the shortest delay of the launches onto an idle GPU, per step, moves
steadily. Micro traces with exact expectations, then the drift written into real one-stream
traces (skipped without ../shared), and the sweep over every real trace (silent on all)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from tests.micro import annotation, call, kernel, load
from traceanalyze.analyses.step.clock import window_drifts
from traceanalyze.analyses.step.model import step_model
from traceanalyze.cli import main

GEMM = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"
STEPS = 6
STEP_US = 1_000
LAUNCHES = 20


def _trace(
    tmp_path: Path, delays: list[float], extra: tuple[dict[str, object], ...] = ()
) -> object:
    """``STEPS`` steps of ``STEP_US``, each launching ``LAUNCHES`` 10 µs kernels 40 µs apart on
    one stream; step ``s``'s kernels start ``delays[s]`` µs after their launch call began."""
    events: list[dict[str, object]] = []
    correlation = 0
    for step, delay in enumerate(delays):
        base = step * STEP_US
        events.append(annotation(f"ProfilerStep#{step + 1}", base, STEP_US))
        for i in range(LAUNCHES):
            correlation += 1
            launch = base + 10 + i * 40
            events += [
                call("cudaLaunchKernel", launch, 3, correlation),
                kernel(GEMM, launch + delay, 10, correlation),
            ]
    return load(tmp_path, [*events, *extra])


def _drift(total_us: float) -> list[float]:
    """Each step's delay where the GPU's clock gains ``total_us`` over the steps, from 5 µs."""
    return [5 + total_us * step / (STEPS - 1) for step in range(STEPS)]


def test_a_drift_is_found_though_the_shortest_delay_is_on_time(tmp_path: Path) -> None:
    # 5, 65, 125, 185, 245, 305 µs: the whole trace's shortest delay is 5 µs (the check's
    # floor is 100), so only the per-step minima show the clocks part.
    model = step_model(_trace(tmp_path, _drift(300)))
    assert [(o.finding, o.min_delay_us) for o in model.clock] == [("drift", 5.0)]
    (found,) = model.clock
    assert found.drift_minima_us == (5.0, 65.0, 125.0, 185.0, 245.0, 305.0)
    assert found.drift_us == pytest.approx(300.0, abs=1.0)  # windows: the last ends later
    assert found.floor_us == 100.0
    assert model.verdict.bound == "cannot tell"
    assert "GPU clock drifts from its CPU clock" in model.verdict.note
    assert "per counted step: 5.0 / 65.0 / 125.0 / 185.0 / 245.0 / 305.0 µs" in model.verdict.note


def test_a_drift_backwards_is_found_too(tmp_path: Path) -> None:
    # The GPU's clock falls behind: 305 µs down to 5 µs.
    model = step_model(_trace(tmp_path, _drift(300)[::-1]))
    assert [(o.finding, o.drift_minima_us) for o in model.clock] == [
        ("drift", (305.0, 245.0, 185.0, 125.0, 65.0, 5.0))
    ]
    assert model.clock[0].drift_us < -100


def test_a_steady_trace_on_one_clock_is_silent(tmp_path: Path) -> None:
    assert step_model(_trace(tmp_path, [5.0] * STEPS)).clock == ()


def test_delays_that_vary_without_a_trend_are_silent(tmp_path: Path) -> None:
    # Minima 5 to 220 µs, up and down: no straight line explains them (R² far under 0.9).
    delays = [5.0, 150.0, 40.0, 220.0, 10.0, 120.0]
    trace = _trace(tmp_path, delays)
    assert step_model(trace).clock == ()
    steps = step_model(trace).steps.select("rank", "lo_ns", "hi_ns")
    assert window_drifts(trace, steps).height == 0  # type: ignore[arg-type]


def test_a_one_off_first_step_is_not_a_drift(tmp_path: Path) -> None:
    # A first step whose launches all wait 2 ms (a lazy load), then steady steps: one window
    # moves, not all of them.
    trace = _trace(tmp_path, [2_000.0] + [5.0] * (STEPS - 1))
    assert [o.finding for o in step_model(trace).clock if o.finding == "drift"] == []


def test_a_drift_under_the_floor_is_silent(tmp_path: Path) -> None:
    # +80 µs over the trace: steady, but under the one-stream floor of 100 µs.
    assert step_model(_trace(tmp_path, _drift(80))).clock == ()


def test_where_a_stream_waits_a_drift_is_found_alike(tmp_path: Path) -> None:
    # A stream waiting on an event: a queued kernel may wait on another stream's work, but the
    # launches onto an idle GPU waited on nothing: the drift's floor is 100 µs there too.
    wait = (call("cudaStreamWaitEvent", 3, 1, 99_999),)
    found = step_model(_trace(tmp_path, _drift(300), wait))
    assert [(o.finding, o.floor_us) for o in found.clock] == [("drift", 1_000.0)]
    (tmp_path / "under").mkdir()
    assert step_model(_trace(tmp_path / "under", _drift(80), wait)).clock == ()


def test_a_constant_offset_on_several_streams_is_found_from_the_idle_launches(
    tmp_path: Path,
) -> None:
    # +300 µs on every kernel where a stream waits on an event (the all-launch floor is
    # 1,000 µs): the 112 launches onto an idle GPU (the first 8 are launched before the GPU
    # records anything) all wait 305 µs, and the GPU idles with that work queued: an offset.
    # +90 µs stays under the 100 µs floor.
    wait = (call("cudaStreamWaitEvent", 3, 1, 99_999),)
    model = step_model(_trace(tmp_path, [305.0] * STEPS, wait))
    assert [(o.finding, o.idle_launches, o.idle_min_delay_us) for o in model.clock] == [
        ("offset", 112, 305.0)
    ]
    assert "launches onto an idle GPU" in model.verdict.note
    (tmp_path / "under").mkdir()
    assert step_model(_trace(tmp_path / "under", [90.0] * STEPS, wait)).clock == ()


def test_the_audit_reports_the_drift_with_each_windows_minimum(tmp_path: Path) -> None:
    trace = _trace(tmp_path, _drift(300))
    result = CliRunner().invoke(
        main,
        ["audit", str(trace.path), "--format", "json"],  # type: ignore[attr-defined]
    )
    rows = [r for r in json.loads(result.stdout)["checks"] if r["check"] == "gpu_clock_offset"]
    assert [(r["finding"], r["severity"], r["count"]) for r in rows] == [("drift", "warning", 120)]
    assert "5.0 / 65.0 / 125.0 / 185.0 / 245.0 / 305.0 µs" in rows[0]["detail"]


def test_the_waiting_note_names_no_other_stream_on_a_one_stream_trace(tmp_path: Path) -> None:
    # Every kernel waits 90 µs after its launch on one stream with no stream waits (an offset
    # under the floor): the GPU idles with work queued, which no other stream can explain.
    model = step_model(_trace(tmp_path, [90.0] * STEPS))
    assert model.clock == ()
    assert model.verdict.bound == "cannot tell"
    assert "no other stream's work holds it" in model.verdict.note
    assert "another stream's event" not in model.verdict.note
    # Where a stream waits on an event, another stream's work may hold it: the note says so.
    (tmp_path / "w").mkdir()
    wait = (call("cudaStreamWaitEvent", 3, 1, 99_999),)
    waits = step_model(_trace(tmp_path / "w", [90.0] * STEPS, wait))
    assert "another stream's event" in waits.verdict.note


def test_idle_words_the_queued_cause_from_the_streams(tmp_path: Path) -> None:
    # One stream, no stream waits: `queued` names no other stream; with a stream wait it may.
    path = _trace(tmp_path, [90.0] * STEPS).path  # type: ignore[attr-defined]
    shown = CliRunner().invoke(main, ["idle", str(path)]).stdout
    assert "so no other stream's work held it" in shown
    assert "another stream's work it depends on" not in shown
    (tmp_path / "w").mkdir()
    wait = (call("cudaStreamWaitEvent", 3, 1, 99_999),)
    waits = _trace(tmp_path / "w", [90.0] * STEPS, wait).path  # type: ignore[attr-defined]
    assert (
        "another stream's work it depends on"
        in CliRunner().invoke(main, ["idle", str(waits)]).stdout
    )


# ---------------------------------------------------------------------------------------------
# The drift written into real one-stream traces (skeptic 38d's drift.py: every GPU time, and the
# flow arrows' GPU ends, moved by 0 at the trace's first event to MAX at its last).

GPU_CATS = (
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "gpu_user_annotation",
    "Kernel",
    "Memcpy",
    "Memset",
)


def _drifted(source: Path, out: Path, total_us: float) -> Path:
    document = json.loads(gzip.decompress(source.read_bytes()))
    events = document["traceEvents"] if isinstance(document, dict) else document
    times = [e["ts"] for e in events if isinstance(e.get("ts"), (int, float))]
    first, last = min(times), max(times)
    for event in events:
        flow_end = event.get("ph") == "f" and event.get("cat") in (
            "ac2g",
            "async_cpu_to_gpu",
            "async",
        )
        if event.get("cat") in GPU_CATS or flow_end:
            event["ts"] += total_us * (event["ts"] - first) / (last - first)
    out.write_bytes(gzip.compress(json.dumps(document).encode(), mtime=0))
    return out


@pytest.mark.parametrize(
    "source",
    [
        CORPUS_TRACES / "kineto_tb_resnet50_legacy.json.gz",
        CORPUS_TRACES / "new_hta_gp100_gpu_user_annotation.json.gz",
        PUBLIC_TRACES / "tl_h100_falconsai_conv.json.gz",
    ],
    ids=lambda p: p.name.split(".")[0],
)
@pytest.mark.parametrize("total_us", [300.0, 1_000.0])
def test_a_drift_written_into_a_real_one_stream_trace_is_found(
    tmp_path: Path, source: Path, total_us: float
) -> None:
    skip_without(source)
    from traceanalyze.load import load as load_trace

    assert step_model(load_trace(source)).clock == ()  # as recorded: one clock
    model = step_model(load_trace(_drifted(source, tmp_path / source.name, total_us)))
    assert [o.finding for o in model.clock] == ["drift"]
    assert model.verdict.bound == "cannot tell"


# ---------------------------------------------------------------------------------------------
# Every real trace: the check stays silent where the clocks agree (`python
# scripts/clock_drift_sweep.py` prints the evidence behind each). The two ROCm vLLM graph traces
# are `unclear` (idle before the first recorded activity only), as before the drift test.

SAMPLE_TRACES = Path(__file__).resolve().parents[1] / "sample_traces"
UNCLEAR = {"tl_vllm_piecewise_hipgraph_mi300.json.gz", "new_tl_vllm_fullgraph_decode_mi300.json.gz"}
EMPTY = {"mlops_macos_empty_window.json.gz"}  # refused by the loader: nothing to check


@pytest.mark.parametrize(
    "folder", [SAMPLE_TRACES, PUBLIC_TRACES, CORPUS_TRACES], ids=lambda p: p.name
)
def test_the_clock_check_is_silent_on_every_real_trace(folder: Path) -> None:
    skip_without(folder)
    from traceanalyze.load import load as load_trace

    paths = [p for p in sorted(folder.rglob("*.json.gz")) if p.name not in EMPTY]
    assert paths
    found = {path.name: [o.finding for o in step_model(load_trace(path)).clock] for path in paths}
    assert {name: kinds for name, kinds in found.items() if kinds} == {
        name: ["unclear"] for name in UNCLEAR if name in found
    }
