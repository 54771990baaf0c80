"""The engine's mapping logic with fake executors, errors across process boundaries, and the
`ranks` command's failures (each one line, the right exit status)."""

from __future__ import annotations

import os
import pickle
import sys
from collections.abc import Callable
from concurrent.futures import Executor, Future
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from tests.micro import annotation, call, kernel, op, write, write_trace
from traceanalyze.cli import main
from traceanalyze.engine import InProcess, RankTask, map_files, rank_folder
from traceanalyze.errors import TraceFormatError, UsageError

GEMM = "nvjet_sm90_tst_64x512_64x2_1x2_h_bz_coopB_NNT"
STEP = [
    annotation("ProfilerStep#1", 0, 50),
    op("aten::mm", 1, 5),
    call("cudaLaunchKernel", 2, 1, 1),
    kernel(GEMM, 10, 5, 1),
]


class Backwards(Executor):
    """Runs nothing until a result is asked for, then every task, the last submitted first (a
    cluster finishes tasks in any order)."""

    def __init__(self) -> None:
        self.submitted: list[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]]] = []

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        future = _OnDemand(self)
        self.submitted.append((future, fn, args))
        return future

    def run_all(self) -> None:
        for future, fn, args in reversed(self.submitted):
            if not future.done():
                future.set_result(fn(*args))


class _OnDemand(Future[Any]):
    def __init__(self, pool: Backwards) -> None:
        super().__init__()
        self._pool = pool

    def result(self, timeout: float | None = None) -> Any:
        self._pool.run_all()
        return super().result(timeout)


FILES = [Path("a.json"), Path("b.json"), Path("c.json")]


def rank_folder_of(tmp_path: Path, ranks: int) -> Path:
    """A folder of ``ranks`` micro traces, ranks 0, 1, ..."""
    folder = tmp_path / "job"
    folder.mkdir()
    for rank in range(ranks):
        write_trace(folder, STEP, name=f"r{rank}.json", rank=rank)
    return folder


def named(path: str) -> str | TraceFormatError:
    if path.endswith("b.json"):
        return TraceFormatError("is not a trace", path, "Pass a Kineto trace.")
    return Path(path).name


def test_results_come_in_file_order_with_absolute_paths() -> None:
    pool = Backwards()
    assert map_files(lambda path: Path(path).name, FILES, pool) == ["a.json", "b.json", "c.json"]
    assert [args[0] for _, _, args in pool.submitted] == [str(f.resolve()) for f in FILES]


def test_a_returned_error_is_raised_with_its_file() -> None:
    with pytest.raises(TraceFormatError, match=r"b\.json: is not a trace\. Pass a Kineto trace\."):
        map_files(named, FILES, Backwards())


def test_errors_keep_their_file_and_fix_through_pickling() -> None:
    error = TraceFormatError("is not a trace", Path("/x/r1.json"), "Pass a Kineto trace.")
    copy = pickle.loads(pickle.dumps(error))
    assert (type(copy), str(copy), copy.path, copy.fix) == (
        TraceFormatError,
        str(error),
        error.path,
        error.fix,
    )


def test_in_process_executor_delivers_exceptions_through_the_future() -> None:
    future = InProcess().submit(int, "x")
    with pytest.raises(ValueError, match="invalid literal"):
        future.result()


def test_rank_task_returns_its_error(tmp_path: Path) -> None:
    bad = write(tmp_path, "r1.json", b"{not json")
    outcome = RankTask(cache=False)(str(bad))
    assert isinstance(outcome, TraceFormatError) and outcome.path == bad


def test_fake_executor_gives_what_the_local_engine_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The folder path through a cluster-like executor (tasks run out of order): identical.
    folder = rank_folder_of(tmp_path, 3)
    local = rank_folder(folder, cache=False)
    from traceanalyze import engine

    monkeypatch.setattr(engine, "InProcess", Backwards)  # what a small folder runs on
    faked = rank_folder(folder, cache=False)
    assert faked.ranks.equals(local.ranks) and faked.collectives.equals(local.collectives)


# --- the command's failures -------------------------------------------------------------------


def ranks(*args: str) -> Any:
    return CliRunner().invoke(main, ["ranks", *args])


def test_a_bad_rank_names_its_file(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="r0.json", rank=0)
    write(tmp_path, "r1.json", b'{"traceEvents": [{"ph": "X", "cat": "kernel"')  # cut short
    result = ranks(str(tmp_path))
    assert result.exit_code == 1
    assert "r1.json" in result.stderr and "Traceback" not in result.stderr


def test_files_that_are_not_traces_are_skipped_with_a_warning(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="r0.json", rank=0)
    write_trace(tmp_path, STEP, name="r1.json", rank=1)
    write(tmp_path, "notes.json", b"{not json")
    (tmp_path / "README.md").write_text("how these were made\n")
    result = ranks(str(tmp_path))
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "warning: skipped" in line]
    assert len(warnings) == 2 and any("notes.json" in line for line in warnings)


def test_a_folder_of_separate_traces_is_refused(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="a.json", rank=0)
    write_trace(tmp_path, STEP, name="b.json", rank=0)
    result = ranks(str(tmp_path))
    assert result.exit_code == 1
    assert "b.json and a.json are both rank 0" in result.stderr


def test_one_trace_file_is_one_rank(tmp_path: Path) -> None:
    result = ranks(str(write_trace(tmp_path, STEP, rank=3)), "--format", "csv")
    assert result.exit_code == 0 and result.stdout.splitlines()[1].startswith("3,1,")


def test_address_needs_a_cluster_engine_and_its_own_workers(tmp_path: Path) -> None:
    trace = str(write_trace(tmp_path, STEP))
    result = ranks(trace, "--address", "tcp://host:8786")
    assert result.exit_code == 2 and "Add --engine dask" in result.stderr
    result = ranks(trace, "--engine", "dask", "--address", "tcp://host:8786", "--workers", "4")
    assert result.exit_code == 2 and "has its own workers" in result.stderr


def test_a_missing_path_is_one_line(tmp_path: Path) -> None:
    result = ranks(str(tmp_path / "nothing"))
    assert result.exit_code == 1
    assert "nothing" in result.stderr and "Traceback" not in result.stderr


def test_a_missing_engine_extra_says_how_to_install_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as if not installed
    result = ranks(str(write_trace(tmp_path, STEP)), "--engine", "dask")
    assert result.exit_code == 1
    assert "pip install 'traceanalyze[dask]'" in result.stderr


def test_an_unreachable_dask_scheduler_is_one_line(tmp_path: Path) -> None:
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "0.5s"}):
        result = ranks(str(write_trace(tmp_path, STEP)), "--engine", "dask", "--address",
                       "tcp://127.0.0.1:9")  # fmt: skip
    assert result.exit_code == 1
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in result.stderr


def test_unknown_engine_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="unknown engine 'spark'"):
        rank_folder(write_trace(tmp_path, STEP), engine="spark")


class Broken(InProcess):
    """A pool whose workers could not start (a script without a __main__ guard)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future[Any]:
        raise BrokenProcessPool("a child process terminated abruptly")


def test_a_broken_process_pool_falls_back_to_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from traceanalyze import engine

    folder = rank_folder_of(tmp_path, 2)
    monkeypatch.setattr(engine, "ProcessPoolExecutor", Broken)
    assert rank_folder(folder, cache=False, workers=2).ranks["rank"].to_list() == [0, 1]


def test_pool_workers_are_told_their_share_of_the_cores_explicitly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given to each worker by the pool's initializer: this process's environment is left alone
    from traceanalyze.load import parallel

    monkeypatch.delenv("TRACEANALYZE_THREADS", raising=False)
    before = dict(os.environ)
    settings = parallel.worker_settings(3)
    assert dict(os.environ) == before
    monkeypatch.setattr(parallel, "_WORKER", parallel._WorkerSettings())
    settings["initializer"](*settings["initargs"])  # as in a worker
    assert parallel.default_threads() == 3
    monkeypatch.setenv("TRACEANALYZE_THREADS", "5")  # the user's setting wins
    assert parallel.default_threads() == 5
