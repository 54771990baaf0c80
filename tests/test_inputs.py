"""The input resolver: what a path is, decided once from file heads, before any parse."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import traceanalyze
from tests.micro import document, kernel, write, write_trace
from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError
from traceanalyze.load import Input, InputKind, SeparateTracesError, rank_files, resolve
from traceanalyze.trace import Skipped

EVENTS = [kernel("k", 0, 5, 1)]


def damaged(folder: Path, name: str, rank: int | None) -> Path:
    """A trace whose head is whole (and states ``rank``) but whose events are cut off: any
    parse fails, so a decision that needs no parse is seen to need none."""
    text = json.dumps(document(EVENTS, rank=rank))
    return write(folder, name, text[: text.index('"traceEvents": [') + 20].encode())


def test_a_trace_file(tmp_path: Path) -> None:
    path = write_trace(tmp_path, EVENTS)
    assert resolve(path) == Input(path, InputKind.TRACE, (path,))


def test_a_trace_file_in_a_capture_folder_names_its_manifest(tmp_path: Path) -> None:
    path = write_trace(tmp_path, EVENTS, name="naive.json")
    write(tmp_path, "manifest.json", {"variants": {}})
    assert resolve(path).manifest == tmp_path / "manifest.json"


def test_a_capture_folder_is_variants_before_any_parse(tmp_path: Path) -> None:
    # Two traces that claim ranks 0 and 1: the manifest decides, and no trace is parsed
    # (both are cut off, so a parse would raise a TraceFormatError).
    first, second = damaged(tmp_path, "a.json", 0), damaged(tmp_path, "b.json", 1)
    write(tmp_path, "manifest.json", {"variants": {}})
    assert resolve(tmp_path) == Input(
        tmp_path, InputKind.VARIANT_SET, (first, second), manifest=tmp_path / "manifest.json"
    )
    with pytest.raises(SeparateTracesError, match=r"is a capture folder \(manifest\.json\)"):
        traceanalyze.load(tmp_path)
    with pytest.raises(SeparateTracesError):
        rank_files(tmp_path)


def test_heads_that_state_distinct_ranks_are_a_rank_folder(tmp_path: Path) -> None:
    first = write_trace(tmp_path, EVENTS, name="r0.json", rank=0)
    second = write(
        tmp_path, "r1.json.gz", gzip.compress(json.dumps(document(EVENTS, rank=1)).encode())
    )
    assert resolve(tmp_path) == Input(
        tmp_path, InputKind.RANK_FOLDER, (first, second), ranks=(0, 1)
    )
    assert traceanalyze.load(tmp_path, cache=False).gpu["rank"].to_list() == [0, 1]


def test_heads_that_repeat_a_rank_are_variants_before_any_parse(tmp_path: Path) -> None:
    first, second = damaged(tmp_path, "a.json", 0), damaged(tmp_path, "b.json", 0)
    found = resolve(tmp_path)
    assert (found.kind, found.files, found.ranks) == (
        InputKind.VARIANT_SET,
        (first, second),
        (0, 0),
    )
    with pytest.raises(SeparateTracesError, match=r"b\.json and a\.json are both rank 0"):
        traceanalyze.load(tmp_path)


def test_a_rank_stated_after_the_events_is_confirmed_by_the_parse(tmp_path: Path) -> None:
    # Older Kineto writes distributedInfo after traceEvents: the heads say nothing, the
    # folder stays a rank folder, and loading confirms it (here it refuses: both rank 0).
    for name in ("a.json", "b.json"):
        doc = document(EVENTS)
        write(tmp_path, name, {**doc, "distributedInfo": {"rank": 0}})
    found = resolve(tmp_path)
    assert (found.kind, found.ranks, found.ranks_known) == (
        InputKind.RANK_FOLDER, (None, None), False,
    )  # fmt: skip
    with pytest.raises(SeparateTracesError, match="both rank 0"):
        traceanalyze.load(tmp_path, cache=False)


def test_files_that_are_not_traces_are_skipped_with_why(tmp_path: Path) -> None:
    trace = write_trace(tmp_path, EVENTS)
    write(tmp_path, "notes.txt", b"hello")
    write(tmp_path, "results.json", {"loss": [0.5]})
    assert resolve(tmp_path) == Input(
        tmp_path,
        InputKind.RANK_FOLDER,
        (trace,),
        (
            Skipped(tmp_path / "notes.txt", "is not valid JSON (JSON is malformed: invalid "
                    "character (byte 0))"),
            Skipped(tmp_path / "results.json",
                    "is JSON but not a Chrome trace: it has no traceEvents list"),
        ),
        ranks=(None,),
    )  # fmt: skip


def test_bad_inputs_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EmptyTraceError, match=r"no traces \(it is empty\)"):
        resolve(tmp_path)
    with pytest.raises(TraceReadError, match="no such file or folder"):
        resolve(tmp_path / "nothing")
    # A missing trace name is a trace: loading it names the problem precisely.
    assert resolve(tmp_path / "gone.json").kind is InputKind.TRACE


def test_a_manifest_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    write_trace(tmp_path, EVENTS, name="naive.json")
    write(tmp_path, "manifest.json", b"{not json")
    with pytest.raises(TraceFormatError, match="is not a readable capture manifest") as caught:
        traceanalyze.load_variants([tmp_path])
    assert "\n" not in str(caught.value)
