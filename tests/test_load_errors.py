"""Bad inputs: each raises one specific error naming the file, the problem and the fix,
and the input is left exactly as it was."""

from __future__ import annotations

import errno
import gzip
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import traceanalyze
from tests.micro import annotation, call, document, kernel, op, write, write_trace
from traceanalyze.errors import (
    EmptyTraceError,
    NotATraceError,
    TraceAnalyzeError,
    TraceFormatError,
    TraceReadError,
)
from traceanalyze.load.parse import parse_file

STEP = [
    annotation("ProfilerStep#0", 0, 100),
    op("aten::mm", 10, 50),
    call("cudaLaunchKernel", 20, 5, 1),
    kernel("gemm", 30, 10, 1),
]
TRACE_JSON = json.dumps(document(STEP)).encode()


def corrupt_gzip(data: bytes) -> bytes:
    packed = bytearray(gzip.compress(data, mtime=0))
    middle = len(packed) // 2
    packed[middle : middle + 8] = b"\xff" * 8
    return bytes(packed)


NOT_A_TRACE = "not a Chrome trace"
# name -> (file name, content, expected error, words the message must contain)
BAD_FILES: dict[str, tuple[str, bytes, type[TraceAnalyzeError], str]] = {
    "truncated_json": ("t.json", TRACE_JSON[: len(TRACE_JSON) // 2], TraceFormatError, "truncated"),
    "empty_file": ("t.json", b"", EmptyTraceError, "empty"),
    "blank_file": ("t.json", b" \n\t\n", EmptyTraceError, "empty"),
    "not_json": ("t.json", b"hello, world\n", NotATraceError, "not valid JSON"),
    "binary": ("t.json", bytes(range(256)), NotATraceError, "not valid JSON"),
    "json_object": ("t.json", b'{"loss": 0.25}', NotATraceError, NOT_A_TRACE),
    "events_not_list": ("t.json", b'{"traceEvents": 5}', NotATraceError, NOT_A_TRACE),
    "array_not_events": ("t.json", b"[1, 2, 3]", NotATraceError, NOT_A_TRACE),
    "json_string": ("t.json", b'"trace"', NotATraceError, NOT_A_TRACE),
    "event_with_text_time": (
        "t.json", b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "ts": "soon"}]}',
        TraceFormatError, "traceEvents[0].ts",
    ),
    "no_events": ("t.json", b'{"traceEvents": []}', EmptyTraceError, "no events"),
    "corrupt_gzip": ("t.json.gz", corrupt_gzip(TRACE_JSON), TraceFormatError, "gzip"),
    "truncated_gzip": (
        "t.json.gz", gzip.compress(TRACE_JSON, mtime=0)[:-40], TraceFormatError, "truncated"
    ),
    # (a gzip stream cut in its trailer, after the whole JSON, loads: tests/test_load_gzip_cut.py)
    "gzip_cut_in_its_header": (
        "t.json.gz", gzip.compress(TRACE_JSON, mtime=0)[:5], TraceFormatError,
        "gzip stream is truncated",
    ),
    "gzip_of_truncated_json": (
        "t.json.gz", gzip.compress(TRACE_JSON[:-10], mtime=0), TraceFormatError, "truncated"
    ),
    "gzip_of_nothing": ("t.json.gz", gzip.compress(b"", mtime=0), EmptyTraceError, "empty"),
}  # fmt: skip


def snapshot(folder: Path) -> dict[str, tuple[bytes, int]]:
    return {
        str(p.relative_to(folder)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def raises(
    error: type[TraceAnalyzeError], load: Callable[[], object], names: Path, *words: str
) -> TraceAnalyzeError:
    """``load()`` raises exactly ``error``, naming ``names`` and giving a fix."""
    with pytest.raises(TraceAnalyzeError) as caught:
        load()
    assert type(caught.value) is error, caught.value
    message = str(caught.value)
    assert names.name in message
    assert caught.value.fix, f"no fix offered: {message}"
    assert message.endswith(caught.value.fix.rstrip(".") + ".")
    for word in words:
        assert word in message
    assert "\n" not in message
    return caught.value


@pytest.mark.parametrize("case", list(BAD_FILES))
def test_bad_file(tmp_path: Path, case: str) -> None:
    name, content, error, words = BAD_FILES[case]
    path = tmp_path / name
    path.write_bytes(content)
    before = snapshot(tmp_path)
    raises(error, lambda: traceanalyze.load(path), path, words)
    raises(error, lambda: traceanalyze.load(path, cache=False), path, words)
    assert snapshot(tmp_path) == before


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "missing.json.gz"
    raises(TraceReadError, lambda: traceanalyze.load(path), path, "no such file")
    assert list(tmp_path.iterdir()) == []


def test_folder_given_where_a_file_is_expected(tmp_path: Path) -> None:
    folder = tmp_path / "run.json"
    folder.mkdir()
    write_trace(folder, STEP)
    raises(TraceReadError, lambda: traceanalyze.load_each([folder]), folder, "folder")


@pytest.mark.skipif(os.geteuid() == 0, reason="root can read any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = write_trace(tmp_path, STEP)
    path.chmod(0)
    try:
        raises(TraceReadError, lambda: traceanalyze.load(path), path, "permission")
    finally:
        path.chmod(0o644)


_NO_DAC = "-dac_override,-dac_read_search,-fowner"


def _as_a_user(command: list[str]) -> list[str]:
    """``command`` run without the rights that let root pass permission checks."""
    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv reads any folder")
    return ["setpriv", "--bounding-set", _NO_DAC, "--inh-caps", _NO_DAC, *command]


def test_a_trace_in_a_folder_that_cannot_be_searched_is_one_line(tmp_path: Path) -> None:
    # Resolving the path stats it: in a folder without search permission that raised a
    # PermissionError (a 20-line traceback from the CLI, a raw OSError from load).
    folder = tmp_path / "locked"
    folder.mkdir()
    path = write_trace(folder, STEP, name="t.json")
    folder.chmod(0)
    code = (
        "import sys, traceanalyze\n"
        "try:\n"
        "    traceanalyze.load(sys.argv[1], cache=False)\n"
        "except Exception as error:\n"
        "    print(type(error).__name__)\n"
    )
    repo = Path(__file__).resolve().parent.parent
    try:
        library = subprocess.run(
            _as_a_user([sys.executable, "-c", code, str(path)]),
            capture_output=True,
            text=True,
            cwd=repo,
            check=False,
            timeout=60,
        )
        cli = subprocess.run(
            _as_a_user([sys.executable, "-m", "traceanalyze", "info", str(path), "--no-cache"]),
            capture_output=True,
            text=True,
            cwd=repo,
            check=False,
            timeout=60,
        )
    finally:
        folder.chmod(0o755)
    assert library.stdout.strip() == "TraceReadError", library.stderr
    assert cli.returncode == 1
    assert cli.stderr.strip().splitlines() == [
        f"traceanalyze: error: {path}: permission denied (a folder on its path cannot be "
        "searched). Make the folders on the path searchable for this user (chmod +x)."
    ]


def test_empty_folder(tmp_path: Path) -> None:
    raises(EmptyTraceError, lambda: traceanalyze.load(tmp_path), tmp_path, "no traces")


def test_folder_without_traces(tmp_path: Path) -> None:
    write(tmp_path, "manifest.json", {"variants": []})
    (tmp_path / "notes.txt").write_text("no traces here")
    write(tmp_path, "results.json", {"loss": [0.5, 0.25]})
    before = snapshot(tmp_path)
    error = raises(EmptyTraceError, lambda: traceanalyze.load(tmp_path), tmp_path, "no traces")
    # Each skipped file, and why, in the one line.
    assert "notes.txt: is not valid JSON" in str(error)
    assert "results.json: is JSON but not a Chrome trace" in str(error)
    assert snapshot(tmp_path) == before


def test_folder_mixing_a_trace_and_other_files(tmp_path: Path) -> None:
    # A trace, a README, a non-JSON file and an unrelated JSON: the trace loads, the rest is
    # skipped with a reason each; content decides (a trace named .bak loads too).
    write_trace(tmp_path, STEP, name="rank0.json")
    (tmp_path / "README.md").write_text("# run of 3 December\n")
    (tmp_path / "weights.bin").write_bytes(bytes(range(256)) * 4)
    write(tmp_path, "results.json", {"loss": [0.5, 0.25]})
    write(tmp_path, "bare.json", [1, 2, 3])
    before = snapshot(tmp_path)
    trace = traceanalyze.load(tmp_path)
    assert trace.cpu["name"].to_list() == ["ProfilerStep#0", "aten::mm", "cudaLaunchKernel"]
    reasons = {s.path.name: s.reason for s in trace.skipped}
    assert sorted(reasons) == ["README.md", "bare.json", "results.json", "weights.bin"]
    assert reasons["README.md"].startswith("is not valid JSON")
    assert reasons["weights.bin"].startswith("is not valid JSON")
    assert reasons["results.json"] == "is JSON but not a Chrome trace: it has no traceEvents list"
    assert reasons["bare.json"].startswith("is JSON but not a Chrome trace (Expected `object`")
    assert snapshot(tmp_path) == before


def test_folder_with_a_broken_rank(tmp_path: Path) -> None:
    write_trace(tmp_path, STEP, name="rank0.json", rank=0)
    broken = write(tmp_path, "rank1.json.gz", gzip.compress(TRACE_JSON, mtime=0)[:-40])
    before = snapshot(tmp_path)
    raises(TraceFormatError, lambda: traceanalyze.load(tmp_path), broken, "truncated")
    assert snapshot(tmp_path) == before


def test_load_each_names_the_bad_file(tmp_path: Path) -> None:
    good = write_trace(tmp_path, STEP, name="good.json")
    bad = write(tmp_path, "bad.json", TRACE_JSON[:-5])
    raises(TraceFormatError, lambda: traceanalyze.load_each([good, bad]), bad, "truncated")


def test_errors_share_one_tree() -> None:
    for error in (TraceReadError, TraceFormatError, EmptyTraceError):
        assert issubclass(error, TraceAnalyzeError)
        assert error.exit_code == 1


def os_error(error: OSError) -> Callable[..., object]:
    def fail(*_args: object, **_kwargs: object) -> object:
        raise error

    return fail


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (PermissionError(errno.EACCES, "Permission denied"), "permission denied"),
        (OSError(errno.EIO, "Input/output error"), "Input/output error"),
    ],
)
def test_read_failure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: OSError, words: str
) -> None:
    # Tests run as root, who can read a chmod 0 file: the failure is simulated instead.
    path = write_trace(tmp_path, STEP)
    monkeypatch.setattr(Path, "open", os_error(error))
    raises(TraceReadError, lambda: traceanalyze.load(path, cache=False), path, words)


def test_unlistable_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_trace(tmp_path, STEP)
    monkeypatch.setattr(Path, "iterdir", os_error(PermissionError(errno.EACCES, "denied")))
    raises(TraceReadError, lambda: traceanalyze.load(tmp_path), tmp_path, "cannot list")


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="no /proc")
@pytest.mark.parametrize("native", [True, False])
def test_a_pseudo_file_is_named_as_such(native: bool) -> None:
    # /proc files state a size of 0 and hold text: that was "changed while it was read"
    path = Path("/proc/self/status")
    raises(TraceReadError, lambda: parse_file(path, native=native), path, "pseudo-file")
