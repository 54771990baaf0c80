"""capture/: registry, configuration, CLI, manifest, and a real CPU capture (marked torch)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from capture import (
    VARIANTS,
    CaptureConfig,
    CaptureError,
    ColdConfig,
    ColdResult,
    Manifest,
    ProcessRecord,
    VariantResult,
    read_manifest,
    write_manifest,
)
from capture.caches import CacheState
from capture.cli import capture
from capture.environment import describe_environment
from capture.run import capture_method, run_variant
from capture.variants import DEFAULT_VARIANTS

CASES = [
    "sdpa_causal_padded",
    "sdpa_odd_head_mask",
    "sdpa_gqa",
    "sdpa_decode",
    "sdpa_nested",
    "flex_sliding_window",
    "flex_document",
    "flex_fp8",
]


def test_registry_names_in_order() -> None:
    assert list(VARIANTS) == [
        "naive",
        "naive_inplace",
        "sdpa_math",
        "sdpa_efficient",
        "sdpa_flash",
        "sdpa_cudnn",
        "sdpa_auto",
        "flex_attention",
        "compiled_naive",
        *CASES,
    ]
    assert all(name == variant.name and variant.description for name, variant in VARIANTS.items())
    # The cases bring inputs of their own; the default is the variants sharing the seed's.
    assert [n for n, v in VARIANTS.items() if v.case is not None] == CASES
    assert tuple(n for n in VARIANTS if n not in CASES) == DEFAULT_VARIANTS


def test_registry_regions_and_backends() -> None:
    forced = {n: v.sdpa_backend for n, v in VARIANTS.items() if v.sdpa_backend}
    assert forced == {
        "sdpa_math": "MATH",
        "sdpa_efficient": "EFFICIENT_ATTENTION",
        "sdpa_flash": "FLASH_ATTENTION",
        "sdpa_cudnn": "CUDNN_ATTENTION",
    }
    sdpa_cases = {n for n in CASES if n.startswith("sdpa_")}
    assert {n for n, v in VARIANTS.items() if v.region == "sdpa"} == {
        *forced,
        "sdpa_auto",
        *sdpa_cases,
    }
    assert {n for n, v in VARIANTS.items() if v.needs_cuda} == {
        "sdpa_efficient",
        "sdpa_flash",
        "sdpa_cudnn",
        "flex_attention",
        "flex_sliding_window",
        "flex_document",
        "flex_fp8",
    }


def test_config_defaults_are_the_seed_article() -> None:
    config = CaptureConfig()
    assert (config.batch, config.heads, config.seq, config.head_dim) == (8, 16, 1024, 64)
    assert (config.dtype, config.causal, config.backward, config.device) == (
        "bfloat16",
        True,
        False,
        "cuda",
    )
    assert (config.wait, config.warmup, config.active, config.steps) == (1, 1, 3, 5)
    assert config.record_shapes  # Input Dims for roofline models (issue 12)
    assert not config.with_stack
    assert config.profile_memory  # [memory] events for the memory wall (issue 21)
    assert config.cuda_graph == "off"
    assert config.repeats == 20
    assert config.variants == DEFAULT_VARIANTS
    assert config.tolerance == 2e-2


def test_config_aliases_and_json() -> None:
    config = CaptureConfig(dtype="fp16", variants=["naive"])  # type: ignore[arg-type]
    assert config.dtype == "float16"
    assert config.tolerance == 5e-3
    assert json.loads(json.dumps(config.to_dict()))["variants"] == ["naive"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"steps": 4}, "steps (4) must cover wait + warmup + active (5)"),
        ({"variants": ("naive", "bogus")}, "unknown variant(s) bogus"),
        ({"dtype": "int8"}, "dtype 'int8' is not one of"),
        ({"seq": 0}, "seq must be positive"),
        ({"device": "mps"}, "device 'mps' is not one of"),
        ({"cuda_graph": "on"}, "cuda_graph 'on' is not one of off, replay, capture"),
        ({"cuda_graph": "replay", "backward": True}, "CUDA graph capture records the forward"),
        ({"variants": ("sdpa_gqa",), "backward": True}, "sdpa_gqa record the forward only"),
    ],
)
def test_config_rejects(options: dict[str, object], message: str) -> None:
    with pytest.raises(CaptureError, match="invalid capture configuration") as caught:
        CaptureConfig(**options)  # type: ignore[arg-type]
    assert message in str(caught.value)


ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False
    )


def test_import_does_not_load_torch() -> None:
    done = _python("import sys, capture, capture.cli; assert 'torch' not in sys.modules")
    assert done.returncode == 0, done.stderr


def test_help_runs_without_torch() -> None:
    done = _python(
        "import runpy, sys; sys.modules['torch'] = None; "
        "sys.argv = ['capture', '--help']; runpy.run_module('capture', "
        "run_name='__main__')"
    )
    assert done.returncode == 0, done.stderr
    assert "python -m capture --out" in done.stdout


def test_help_lists_variants_and_example() -> None:
    result = CliRunner().invoke(capture, ["--help"])
    assert result.exit_code == 0
    assert "Example" in result.output
    assert "sdpa_cudnn" in result.output


def test_cli_options_reach_the_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[CaptureConfig] = []

    def fake_run(config: CaptureConfig, out_dir: Path, **_: object) -> Manifest:
        seen.append(config)
        return Manifest("now", (), {}, {}, {}, {})

    monkeypatch.setattr("capture.run.run_capture", fake_run)
    result = CliRunner().invoke(
        capture,
        [
            "--out",
            str(tmp_path),
            "--variants",
            "naive,sdpa_flash",
            "--backward",
            "--batch",
            "4",
            "--heads",
            "32",
            "--seq",
            "2048",
            "--head-dim",
            "128",
            "--dtype",
            "fp16",
            "--no-causal",
            "--steps",
            "7",
            "--wait",
            "2",
            "--active",
            "4",
            "--repeats",
            "5",
            "--no-record-shapes",
            "--with-stack",
            "--profile-memory",
            "--device",
            "cpu",
            "--seed",
            "3",
        ],
    )
    assert result.exit_code == 0, result.output
    assert seen == [
        CaptureConfig(
            batch=4,
            heads=32,
            seq=2048,
            head_dim=128,
            dtype="float16",
            causal=False,
            backward=True,
            steps=7,
            wait=2,
            warmup=1,
            active=4,
            repeats=5,
            record_shapes=False,
            with_stack=True,
            profile_memory=True,
            variants=("naive", "sdpa_flash"),
            device="cpu",
            seed=3,
        )
    ]


def _fake_runs(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Replace both runners; each records what it was given."""
    seen: list[object] = []

    def fake_run(config: object, out_dir: Path, **_: object) -> Manifest:
        seen.append(config)
        return Manifest("now", (), {}, {}, {}, {})

    monkeypatch.setattr("capture.run.run_capture", fake_run)
    monkeypatch.setattr("capture.cold.run_cold", fake_run)
    return seen


def test_cli_defaults_record_shapes_and_graph_mode(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _fake_runs(monkeypatch)
    result = CliRunner().invoke(capture, ["--out", str(tmp_path), "--cuda-graph", "capture"])
    assert result.exit_code == 0, result.output
    assert seen == [CaptureConfig(record_shapes=True, cuda_graph="capture")]


def test_cli_cold_options_reach_the_cold_config(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen = _fake_runs(monkeypatch)
    args = ["--out", str(tmp_path), "--cold", "--variants", "sdpa_cudnn", "--seq", "512"]
    args += ["--cold-calls", "6", "--empty-caches", "--new-shape-every", "3"]
    result = CliRunner().invoke(capture, [*args, "--process-timeout", "90"])
    assert result.exit_code == 0, result.output
    assert seen == [
        ColdConfig(
            CaptureConfig(seq=512, variants=("sdpa_cudnn",)),
            calls=6,
            empty_caches=True,
            new_shape_every=3,
            process_timeout_s=90.0,
        )
    ]


def test_cli_cold_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen = _fake_runs(monkeypatch)
    result = CliRunner().invoke(capture, ["--out", str(tmp_path), "--cold"])
    assert result.exit_code == 0, result.output
    assert seen == [ColdConfig(CaptureConfig(), calls=10, process_timeout_s=300.0)]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--variants", "naive,nope"], "unknown variant(s) nope"),
        (["--dtype", "int8"], "'int8' is not one of"),
        (["--empty-caches"], "--empty-caches only apply with --cold"),
        (
            ["--cold-calls", "4", "--new-shape-every", "2"],
            "--cold-calls, --new-shape-every only apply with --cold",
        ),
        (["--cold", "--cuda-graph", "replay"], "--cold runs eager calls; drop --cuda-graph"),
        (["--cold", "--cold-calls", "1"], "1 is not in the range x>=2"),
        (["--cuda-graph", "sometimes"], "'sometimes' is not one of"),
    ],
)
def test_cli_usage_errors_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(capture, ["--out", str(tmp_path), *args])
    assert result.exit_code == 2
    assert message in result.output


def test_cli_without_torch_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    result = CliRunner().invoke(capture, ["--out", str(tmp_path), "--device", "cpu"])
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "capture: error: torch is not installed; capture needs it: install the capture extra "
        "(pip install 'traceanalyze[capture]')"
    ]


def _manifest() -> Manifest:
    return Manifest(
        created="2026-01-01T00:00:00+00:00",
        command=("python", "-m", "capture", "--out", "x"),
        environment={"gpu": "NVIDIA H200", "torch": "2.11.0"},
        config=CaptureConfig().to_dict(),
        method={"timing": "median"},
        variants={
            "naive": VariantResult(
                "ok", "naive", trace="naive.json.gz", relative_error=1e-3, median_ms=1.5, repeats=20
            ),
            "sdpa_auto": VariantResult(
                "ok",
                "auto",
                trace="sdpa_auto.json.gz",
                backend="flash",
                backend_source="ops",
                median_ms=0.2,
                repeats=20,
                relative_error=2e-3,
            ),
            "sdpa_cudnn": VariantResult("skipped", "cudnn", reason="no cuDNN"),
            "broken": VariantResult("failed", "b", reason="wrong result"),
        },
    )


def test_manifest_round_trip(tmp_path: Path) -> None:
    manifest = _manifest()
    write_manifest(manifest, tmp_path / "manifest.json")
    assert read_manifest(tmp_path / "manifest.json") == manifest
    assert manifest.failed == ["broken"]


def test_manifest_keys(tmp_path: Path) -> None:
    write_manifest(_manifest(), tmp_path / "manifest.json")
    data = json.loads((tmp_path / "manifest.json").read_text())
    assert list(data)[:6] == ["schema", "created", "command", "environment", "config", "method"]
    assert data["schema"] == 1
    assert set(data["variants"]["naive"]) == {
        "status",
        "reason",
        "trace",
        "relative_error",
        "grad_relative_error",
        "median_ms",
        "repeats",
        "backend",
        "backend_source",
        "description",
    }


def test_forced_backend_from_the_field_or_an_older_manifests_description() -> None:
    forced = VariantResult("ok", "anything", sdpa_forced="FLASH_ATTENTION")
    assert forced.forced_backend == "FLASH_ATTENTION"
    assert forced.to_dict()["sdpa_forced"] == "FLASH_ATTENTION"
    assert "sdpa_forced" not in VariantResult("ok", "naive").to_dict()
    # Manifests written before the field: the description capture.variants wrote says it.
    math = VARIANTS["sdpa_math"]
    assert VariantResult("ok", math.description).forced_backend == "MATH"
    assert VariantResult("ok", "F.scaled_dot_product_attention").forced_backend is None


def test_cuda_only_variant_is_skipped_on_cpu(tmp_path: Path) -> None:
    result = run_variant(
        VARIANTS["sdpa_flash"],
        CaptureConfig(device="cpu"),
        None,  # type: ignore[arg-type]
        tmp_path,
    )
    assert result.status == "skipped"
    assert result.reason == "needs CUDA; this capture runs on cpu"
    assert result.trace is None


def fake_torch(hip: str | None) -> types.SimpleNamespace:
    """Just what describe_environment asks of torch, on NVIDIA or on ROCm (HIP)."""
    return types.SimpleNamespace(
        __version__="2.7.0",
        version=types.SimpleNamespace(cuda=None if hip else "12.8", hip=hip),
        backends=types.SimpleNamespace(
            cudnn=types.SimpleNamespace(version=lambda: None if hip else 91900)
        ),
        cuda=types.SimpleNamespace(
            get_device_name=lambda: "AMD Instinct MI300X" if hip else "NVIDIA H200",
            get_device_capability=lambda: (9, 4) if hip else (9, 0),
            get_device_properties=lambda index: types.SimpleNamespace(
                gcnArchName="gfx942:sramecc+:xnack-"
            ),
        ),
    )


def test_environment_of_a_rocm_gpu_names_its_gfx_arch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(hip="6.4.43483"))
    environment = describe_environment("cuda")
    assert environment["gpu"] == "AMD Instinct MI300X"
    assert environment["gfx_arch"] == "gfx942"
    assert environment["hip"] == "6.4.43483"
    # HIP's 9.4 is no CUDA compute capability.
    assert environment["compute_capability"] is None


def test_environment_of_an_nvidia_gpu_has_its_compute_capability(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "torch", fake_torch(hip=None))
    monkeypatch.setattr("capture.environment._nvidia_smi_driver", lambda: "580.82")
    environment = describe_environment("cuda")
    assert (environment["compute_capability"], environment["driver"]) == ("9.0", "580.82")
    assert "gfx_arch" not in environment


def test_cuda_graph_mode_is_skipped_on_cpu(tmp_path: Path) -> None:
    result = run_variant(
        VARIANTS["naive"],
        CaptureConfig(device="cpu", cuda_graph="replay"),
        None,  # type: ignore[arg-type]
        tmp_path,
    )
    assert (result.status, result.reason) == (
        "skipped",
        "CUDA graphs need CUDA; this capture runs on cpu",
    )


def test_method_says_warm_up_ran_before_profiling() -> None:
    method = capture_method(CaptureConfig())
    assert (method["warm_up_calls"], method["one_off_work_in_trace"]) == (1, False)
    assert "cuda_graph" not in method
    graphed = capture_method(CaptureConfig(cuda_graph="capture"))
    assert (graphed["warm_up_calls"], graphed["one_off_work_in_trace"]) == (1, False)
    assert str(graphed["cuda_graph"]).startswith("one eager warm-up call on a side stream")


def _cold_result() -> VariantResult:
    state = CacheState("cuda_jit", "CUDA_CACHE_PATH", "/c", "fresh", True, True, 0, 0)
    process = ProcessRecord("time", 0, False, 4.5, 900.0, 80.0, (state,), (state,), None)
    cold = ColdResult("empty", 904.0, 0.14, (904.0, 0.15, 0.14), (process,))
    return VariantResult("ok", "cudnn", trace="sdpa_cudnn.json.gz", median_ms=0.13, cold=cold)


def test_manifest_round_trip_with_cold_results(tmp_path: Path) -> None:
    manifest = Manifest("now", (), {}, {}, {"warm_up_calls": 0}, {"sdpa_cudnn": _cold_result()})
    write_manifest(manifest, tmp_path / "manifest.json")
    assert read_manifest(tmp_path / "manifest.json") == manifest
    data = json.loads((tmp_path / "manifest.json").read_text())
    cold = data["variants"]["sdpa_cudnn"]["cold"]
    assert (cold["call1_ms"], cold["steady_median_ms"], cold["cache_state"]) == (
        904.0,
        0.14,
        "empty",
    )
    assert cold["processes"][0]["caches_before"][0]["empty"] is True
    assert data["method"] == {"warm_up_calls": 0}


CAPTURE = ROOT / "capture"


def _capture_imports(path: Path) -> set[str]:
    """capture modules ``path`` imports anywhere (TYPE_CHECKING blocks and functions too)."""
    tree = ast.parse(path.read_text())
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {name for name in found if name.startswith("capture.")}


def test_capture_modules_import_in_one_direction() -> None:
    """No import cycle among capture's modules (issue 11: config and variants imported each
    other), counting imports under TYPE_CHECKING and inside functions."""
    graph = {
        f"capture.{p.stem}": _capture_imports(p)
        for p in CAPTURE.glob("*.py")
        if p.stem != "__init__"
    }
    graph = {module: {d for d in deps if d in graph} for module, deps in graph.items()}
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle: {' -> '.join((*path, module))}"
        if module not in done:
            for dependency in sorted(graph[module]):
                visit(dependency, (*path, module))
            done.add(module)

    for module in sorted(graph):
        visit(module, ())
    assert "capture.config" not in graph["capture.variants"]
