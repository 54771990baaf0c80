"""capture --cold: its configuration, the cache table, the orchestration (fake processes), the
worker (in this process, on the CPU) and one real run in fresh processes."""

from __future__ import annotations

import gzip
import json
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from capture import VARIANTS, CaptureConfig, CaptureError, ColdConfig, Variant
from capture.caches import CACHES, cache_states, cold_cost_env, fresh_cache_env
from capture.cli import capture
from capture.cold import PACKAGE_ROOT, ProcessOutcome, run_cold_variant, run_process

SMALL = CaptureConfig(
    batch=1, heads=2, seq=64, head_dim=16, dtype="float32", device="cpu", repeats=2
)


def test_call_seqs_and_steady_calls() -> None:
    cold = ColdConfig(SMALL, calls=7, new_shape_every=3)
    assert cold.call_seqs == (64, 64, 64, 128, 128, 128, 192)
    # calls 1, 4 and 7 are the first of their shape: planned, not steady
    assert cold.steady_calls == (2, 3, 5, 6)
    assert ColdConfig(SMALL, calls=3).call_seqs == (64, 64, 64)
    assert ColdConfig(SMALL, calls=3).steady_calls == (2, 3)


def test_cold_config_json() -> None:
    assert ColdConfig(SMALL, calls=4, new_shape_every=2, empty_caches=True).to_dict() == {
        "calls": 4,
        "call_seqs": [64, 64, 128, 128],
        "steady_calls": [2, 4],
        "new_shape_every": 2,
        "empty_caches": True,
        "cache_state": "empty",
        "process_timeout_s": 300.0,
        "timing_processes": 3,
    }
    assert ColdConfig(SMALL).cache_state == "as_found"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"calls": 1}, "calls must be at least 2: call 1 and a steady call (got 1)"),
        ({"new_shape_every": 1}, "new_shape_every must be at least 2"),
        ({"process_timeout_s": 0}, "process_timeout_s must be positive (got 0)"),
    ],
)
def test_cold_config_rejects(options: dict[str, Any], message: str) -> None:
    with pytest.raises(CaptureError, match="invalid cold capture configuration") as caught:
        ColdConfig(SMALL, **options)
    assert message in str(caught.value)


def test_cold_config_rejects_cuda_graphs() -> None:
    with pytest.raises(CaptureError, match="a cold capture runs eager calls; drop cuda_graph"):
        ColdConfig(CaptureConfig(cuda_graph="replay"))


def test_cache_table_names_the_variables() -> None:
    assert {c.name: c.env_var for c in CACHES} == {
        "cuda_jit": "CUDA_CACHE_PATH",
        "triton": "TRITON_CACHE_DIR",
        "inductor": "TORCHINDUCTOR_CACHE_DIR",
        "torch_kernels": "PYTORCH_KERNEL_CACHE_PATH",
    }


def test_cache_defaults_follow_the_environment(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    paths = {state.name: state.path for state in cache_states(env)}
    assert paths["cuda_jit"] == str(tmp_path / ".nv" / "ComputeCache")
    assert paths["triton"] == str(tmp_path / ".triton" / "cache")
    assert paths["torch_kernels"] == str(tmp_path / "xdg" / "torch" / "kernels")
    assert Path(paths["inductor"]).name.startswith("torchinductor_")
    triton_home = {**env, "TRITON_HOME": str(tmp_path / "th")}
    assert cache_states(triton_home)[1].path == str(tmp_path / "th" / ".triton" / "cache")


def test_cache_state_counts_files_and_bytes(tmp_path: Path) -> None:
    jit = tmp_path / "jit"
    (jit / "sub").mkdir(parents=True)
    (jit / "a").write_bytes(b"x" * 10)
    (jit / "sub" / "b").write_bytes(b"y" * 5)
    (jit / "link").symlink_to(jit / "a")  # not counted twice
    state = cache_states({"HOME": str(tmp_path), "CUDA_CACHE_PATH": str(jit)})[0]
    assert (state.source, state.exists, state.empty, state.files, state.bytes) == (
        "env",
        True,
        False,
        2,
        15,
    )
    missing = cache_states({"HOME": str(tmp_path)})[0]
    assert (missing.source, missing.exists, missing.empty, missing.files) == (
        "default",
        False,
        True,
        0,
    )


def test_fresh_caches_are_empty_folders(tmp_path: Path) -> None:
    env = {"HOME": str(tmp_path), **fresh_cache_env(tmp_path / "fresh")}
    states = cache_states(env, tmp_path / "fresh")
    assert [(s.source, s.exists, s.empty) for s in states] == [("fresh", True, True)] * 4
    assert all(Path(s.path).parent == tmp_path / "fresh" for s in states)


def test_cold_cost_env() -> None:
    env = cold_cost_env({"CUDA_MODULE_LOADING": "EAGER", "PATH": "/bin"})
    assert env["CUDA_MODULE_LOADING"] == "EAGER"
    assert env["CUDA_CACHE_DISABLE"] is None
    assert "PATH" not in env


class FakeWorkers:
    """Stands in for the worker processes: answers each request as ``answers[role]`` says."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, str]]] = []

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float, log: Path
    ) -> ProcessOutcome:
        assert list(argv[:3]) == [sys.executable, "-m", "capture.cold_worker"]
        request = json.loads(Path(argv[3]).read_text())
        role = request["role"]
        self.calls.append((role, dict(env)))
        answer = self.answers[role]
        if isinstance(answer, ProcessOutcome):
            log.write_text("Traceback (most recent call last):\nSegmentation fault\n")
            return answer
        if role == "profile" and answer.get("trace"):
            Path(request["trace"]).write_bytes(b"")
        Path(request["result"]).write_text(json.dumps(answer))
        return ProcessOutcome(0, False, 1.25)


PROFILED = {
    "status": "ok",
    "reason": None,
    "trace": "naive.json.gz",
    "relative_error": 1e-7,
    "grad_relative_error": None,
    "backend": None,
    "backend_source": None,
    "import_torch_ms": 900.0,
    "cuda_context_ms": None,
    "environment": {"device": "cpu", "torch": "2.13.0"},
}
TIMED = {
    "status": "ok",
    "reason": None,
    "call_wall_ms": [50.0, 2.0, 4.0, 3.0],
    "median_ms": 2.5,
    "repeats": 2,
    "relative_error": 1e-7,
    "import_torch_ms": 880.0,
    "cuda_context_ms": None,
}


def _run(workers: FakeWorkers, out: Path, **cold: Any) -> Any:
    config = ColdConfig(SMALL, **{"calls": 4, "timing_processes": 1, **cold})
    return run_cold_variant(VARIANTS["naive"], config, out, workers)


def test_both_processes_and_their_figures(tmp_path: Path) -> None:
    workers = FakeWorkers({"profile": PROFILED, "time": TIMED})
    result, environment = _run(workers, tmp_path, empty_caches=True)
    assert [role for role, _ in workers.calls] == ["profile", "time"]
    assert (result.status, result.trace, result.median_ms, result.repeats) == (
        "ok",
        "naive.json.gz",
        2.5,
        2,
    )
    assert result.relative_error == 1e-7
    cold = result.cold
    assert cold is not None
    assert (cold.cache_state, cold.call1_ms, cold.call_wall_ms) == ("empty", 50.0, (50, 2, 4, 3))
    assert cold.steady_median_ms == 3.0  # median of calls 2-4
    assert [p.role for p in cold.processes] == ["profile", "time"]
    assert [(p.returncode, p.timed_out, p.wall_s) for p in cold.processes] == [(0, False, 1.25)] * 2
    assert cold.processes[0].import_torch_ms == 900.0
    assert all(s.source == "fresh" and s.empty for p in cold.processes for s in p.caches_before)
    assert environment == {"device": "cpu", "torch": "2.13.0"}


class SpreadWorkers(FakeWorkers):
    """Timing processes whose first calls differ, as one-off costs do between processes."""

    def __init__(self, call1_ms: Sequence[float]) -> None:
        super().__init__({"profile": PROFILED, "time": TIMED})
        self.call1_ms = list(call1_ms)
        self.logs: list[str] = []

    def __call__(
        self, argv: Sequence[str], env: Mapping[str, str], timeout_s: float, log: Path
    ) -> ProcessOutcome:
        self.logs.append(log.name)
        if json.loads(Path(argv[3]).read_text())["role"] == "time":
            first = self.call1_ms.pop(0)
            self.answers["time"] = {**TIMED, "call_wall_ms": [first, 2.0, 4.0 + first / 100, 3.0]}
        return super().__call__(argv, env, timeout_s, log)


def test_several_timing_processes_give_the_median_and_the_spread(tmp_path: Path) -> None:
    workers = SpreadWorkers([50.0, 80.0, 40.0])
    result, _ = _run(workers, tmp_path, timing_processes=3)
    assert [role for role, _ in workers.calls] == ["profile", "time", "time", "time"]
    cold = result.cold
    assert cold.call1_ms_per_process == (50.0, 80.0, 40.0)
    assert cold.call1_ms == 50.0  # the median process, not the first
    assert cold.call_wall_ms == (50.0, 2.0, 4.5, 3.0)  # each call's median over the processes
    assert [p.role for p in cold.processes] == ["profile", "time", "time", "time"]
    assert workers.logs == [
        "naive.profile.log", "naive.time.log", "naive.time2.log", "naive.time3.log",
    ]  # fmt: skip


def test_empty_caches_give_each_process_its_own_folders(tmp_path: Path) -> None:
    workers = FakeWorkers({"profile": PROFILED, "time": TIMED})
    _run(workers, tmp_path, empty_caches=True)
    (_, profile_env), (_, time_env) = workers.calls
    for cache in CACHES:
        assert profile_env[cache.env_var] != time_env[cache.env_var]
        assert Path(profile_env[cache.env_var]).name == cache.name
        assert not Path(profile_env[cache.env_var]).exists()  # removed after the process
    assert profile_env["PYTHONPATH"].split(os.pathsep)[0] == str(PACKAGE_ROOT)


def test_caches_as_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    jit = tmp_path / "jit"
    jit.mkdir()
    (jit / "kernel.bin").write_bytes(b"z" * 7)
    monkeypatch.setenv("CUDA_CACHE_PATH", str(jit))
    workers = FakeWorkers({"profile": PROFILED, "time": TIMED})
    result, _ = _run(workers, tmp_path / "out")
    assert workers.calls[0][1]["CUDA_CACHE_PATH"] == str(jit)
    state = result.cold.processes[0].caches_before[0]
    assert (state.source, state.path, state.empty, state.files, state.bytes) == (
        "env",
        str(jit),
        False,
        1,
        7,
    )
    assert result.cold.cache_state == "as_found"


def test_new_shapes_leave_their_first_calls_out_of_steady(tmp_path: Path) -> None:
    timed = {**TIMED, "call_wall_ms": [50.0, 2.0, 30.0, 4.0]}
    workers = FakeWorkers({"profile": PROFILED, "time": timed})
    result, _ = _run(workers, tmp_path, new_shape_every=2)
    assert result.cold.steady_median_ms == 3.0  # calls 2 and 4; call 3 re-planned


def test_failing_variant_is_not_timed(tmp_path: Path) -> None:
    failed = {"status": "failed", "reason": "wrong result: output relative error 0.5"}
    workers = FakeWorkers({"profile": failed})
    result, environment = _run(workers, tmp_path)
    assert [role for role, _ in workers.calls] == ["profile"]
    assert (result.status, result.reason, result.trace) == ("failed", failed["reason"], None)
    assert environment is None


def test_crashed_process_fails_with_its_output(tmp_path: Path) -> None:
    workers = FakeWorkers({"profile": ProcessOutcome(-11, False, 3.0)})
    result, _ = _run(workers, tmp_path)
    assert result.status == "failed"
    assert result.reason == (
        "the profile process exited with status -11 and wrote no result; its output ends: "
        "Traceback (most recent call last): | Segmentation fault"
    )
    assert result.cold.processes[0].log == "logs/naive.profile.log"
    assert (tmp_path / "logs" / "naive.profile.log").is_file()


def test_hung_process_fails_with_the_timeout(tmp_path: Path) -> None:
    workers = FakeWorkers({"profile": ProcessOutcome(None, True, 5.0)})
    result, _ = _run(workers, tmp_path, process_timeout_s=5)
    assert (result.status, result.reason) == (
        "failed",
        "the profile process ran past the 5 s timeout and was killed",
    )
    assert result.cold.processes[0].timed_out


def test_timing_process_failure_fails_the_variant(tmp_path: Path) -> None:
    timed = {"status": "failed", "reason": "RuntimeError: CUDA error"}
    workers = FakeWorkers({"profile": PROFILED, "time": timed})
    result, _ = _run(workers, tmp_path)
    assert (result.status, result.reason) == ("failed", "timing process: RuntimeError: CUDA error")
    assert result.trace == "naive.json.gz"  # the trace was written and is kept


def test_cuda_variant_on_cpu_starts_no_process(tmp_path: Path) -> None:
    workers = FakeWorkers({})
    config = ColdConfig(SMALL, calls=2)
    result, _ = run_cold_variant(VARIANTS["sdpa_cudnn"], config, tmp_path, workers)
    assert (result.status, result.reason) == ("skipped", "needs CUDA; this capture runs on cpu")
    assert workers.calls == []


def test_run_process_writes_the_log(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import os; print(os.environ['MARK']); raise SystemExit(3)"]
    outcome = run_process(argv, {**os.environ, "MARK": "seen"}, 30, tmp_path / "log")
    assert (outcome.returncode, outcome.timed_out) == (3, False)
    assert (tmp_path / "log").read_text().strip() == "seen"


def test_run_process_kills_after_the_timeout(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(60)"]
    outcome = run_process(argv, dict(os.environ), 0.5, tmp_path / "log")
    assert (outcome.returncode, outcome.timed_out) == (None, True)
    assert outcome.wall_s < 30


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_worker_dies_with_its_parent(tmp_path: Path) -> None:
    code = (
        "import ctypes, os; from capture.cold_worker import die_with_parent; "
        "print(die_with_parent(os.getppid()), die_with_parent(os.getppid() + 1)); "
        "v = ctypes.c_int(); ctypes.CDLL(None).prctl(2, ctypes.byref(v)); print(v.value)"
    )  # prctl 2: PR_GET_PDEATHSIG
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    run_process([sys.executable, "-c", code], env, 30, tmp_path / "log")
    assert (tmp_path / "log").read_text().split() == ["True", "False", "9"]  # 9: SIGKILL


def test_worker_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from capture.cold_worker import main

    assert main([]) == 2
    assert "usage: python -m capture.cold_worker REQUEST.json" in capsys.readouterr().err


def test_broken_variant_reports_failure() -> None:
    pytest.importorskip("torch")
    from capture.cold_worker import run_role

    def broken(*_: object) -> object:
        raise ValueError("cannot build\nmore")

    response = run_role("time", Variant("x", "d", broken), ColdConfig(SMALL, calls=2), None)
    assert (response["status"], response["reason"]) == ("failed", "ValueError: cannot build")
    assert response["environment"]["device"] == "cpu"


def _events(path: Path) -> list[dict[str, Any]]:
    with gzip.open(path, "rt") as stream:
        events: list[dict[str, Any]] = json.load(stream)["traceEvents"]
    return sorted((e for e in events if e.get("ph") == "X"), key=lambda e: float(e["ts"]))


@pytest.fixture(scope="module")
def profiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """The profile role of naive in this process: 4 calls, a longer sequence from call 3."""
    pytest.importorskip("torch")
    from capture.cold_worker import run_role

    path = tmp_path_factory.mktemp("cold") / "naive.json.gz"
    cold = ColdConfig(SMALL, calls=4, new_shape_every=2)
    return run_role("profile", VARIANTS["naive"], cold, str(path)), path


@pytest.mark.torch
def test_profile_role_result(profiled: tuple[dict[str, Any], Path]) -> None:
    response, _ = profiled
    assert (response["status"], response["reason"], response["trace"]) == (
        "ok",
        None,
        "naive.json.gz",
    )
    assert response["relative_error"] < 1e-4
    assert response["environment"]["device"] == "cpu"


@pytest.mark.torch
def test_profile_role_trace_holds_every_call(profiled: tuple[dict[str, Any], Path]) -> None:
    events = _events(profiled[1])
    names = [e["name"] for e in events]
    assert [n for n in names if n.startswith("call")] == ["call1", "call2", "call3", "call4"]
    assert [n for n in names if n.startswith("ProfilerStep")] == [
        f"ProfilerStep#{i}" for i in (1, 2, 3, 4)
    ]
    assert names.count("attn_fwd") == 4
    # shapes recorded; calls 3-4 run the next sequence length (64 + 64)
    scores = [e["args"]["Input Dims"][0] for e in events if e["name"] == "aten::matmul"][::2]
    assert scores == [[1, 2, 64, 16], [1, 2, 64, 16], [1, 2, 128, 16], [1, 2, 128, 16]]


@pytest.mark.torch
def test_time_role_times_every_call() -> None:
    pytest.importorskip("torch")
    from capture.cold_worker import run_role

    response = run_role("time", VARIANTS["sdpa_math"], ColdConfig(SMALL, calls=3), None)
    assert response["status"] == "ok", response["reason"]
    assert len(response["call_wall_ms"]) == 3
    assert all(ms > 0 for ms in response["call_wall_ms"])
    assert response["median_ms"] > 0
    assert response["repeats"] == 2
    assert "trace" not in response


@pytest.mark.torch
def test_worker_main_writes_its_result(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from capture.cold_worker import main

    request = {
        "role": "time",
        "variant": "naive",
        "capture": SMALL.to_dict(),
        "cold": {"calls": 2},
        "trace": None,
        "result": str(tmp_path / "result.json"),
    }
    (tmp_path / "request.json").write_text(json.dumps(request))
    assert main([str(tmp_path / "request.json")]) == 0
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["status"] == "ok"
    assert result["import_torch_ms"] >= 0
    assert len(result["call_wall_ms"]) == 2


@pytest.mark.torch
def test_cold_capture_in_fresh_processes(tmp_path: Path) -> None:
    """The real thing on the CPU: two fresh processes for naive, none for a CUDA variant."""
    pytest.importorskip("torch")
    args = ["--cold", "--device", "cpu", "--variants", "naive,sdpa_flash", "--empty-caches"]
    args += ["--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "8", "--dtype", "fp32"]
    result = CliRunner().invoke(
        capture,
        [*args, "--cold-calls", "2", "--repeats", "1", "--timing-processes", "1", "--out",
         str(tmp_path)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = [line for line in result.output.splitlines() if not line.startswith("USDT")]
    assert lines[0].startswith("naive           ok")
    assert " call1 " in lines[0]
    assert lines[1] == "sdpa_flash      skipped  needs CUDA; this capture runs on cpu"
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert (manifest["method"]["warm_up_calls"], manifest["method"]["one_off_work_in_trace"]) == (
        0,
        True,
    )
    assert manifest["config"]["cold"]["cache_state"] == "empty"
    assert manifest["environment"]["device"] == "cpu"
    naive = manifest["variants"]["naive"]
    assert naive["status"] == "ok", naive["reason"]
    assert [(p["role"], p["returncode"]) for p in naive["cold"]["processes"]] == [
        ("profile", 0),
        ("time", 0),
    ]
    assert len(naive["cold"]["call_wall_ms"]) == 2
    names = [e["name"] for e in _events(tmp_path / "naive.json.gz")]
    assert [n for n in names if n.startswith("call")] == ["call1", "call2"]
