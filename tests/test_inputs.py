"""The input resolver: what a path is, decided once from file heads, before any parse."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import traceanalyze
from capture.manifest import VariantResult
from tests.micro import document, kernel, write, write_trace
from traceanalyze.errors import EmptyTraceError, TraceFormatError, TraceReadError
from traceanalyze.load import Input, InputKind, SeparateTracesError, rank_files, resolve
from traceanalyze.load.variants import read_manifest
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


def test_a_folder_of_folders_names_them_rather_than_calling_itself_empty(tmp_path: Path) -> None:
    (tmp_path / "run1").mkdir()
    write_trace(tmp_path / "run1", EVENTS)
    with pytest.raises(EmptyTraceError) as raised:
        resolve(tmp_path)
    assert "folders, not searched: run1/" in str(raised.value)
    assert "it is empty" not in str(raised.value)
    assert f"Point at one of its folders (e.g. {tmp_path / 'run1'})" in str(raised.value)


def test_load_variants_takes_one_folder_alone(tmp_path: Path) -> None:
    # A str is a Sequence: its letters were read as paths ("s: no such file or folder").
    write_trace(tmp_path, EVENTS, name="a.json")
    write_trace(tmp_path, EVENTS, name="b.json")
    for given in (str(tmp_path), tmp_path):
        labels = [v.label for v in traceanalyze.load_variants(given, cache=False).variants]
        assert labels == ["a", "b"]


def test_a_manifest_that_is_not_json_is_one_line(tmp_path: Path) -> None:
    write_trace(tmp_path, EVENTS, name="naive.json")
    write(tmp_path, "manifest.json", b"{not json")
    with pytest.raises(TraceFormatError, match="is not a readable capture manifest") as caught:
        traceanalyze.load_variants([tmp_path])
    assert "\n" not in str(caught.value)


# ---------------------------------------------------------------------------------------------
# the manifest, read through capture's Manifest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces"
SAMPLE_MANIFESTS = sorted(SAMPLES.glob("*/manifest.json"))


@pytest.mark.parametrize("file", SAMPLE_MANIFESTS, ids=lambda f: f.parent.name)
def test_every_sample_manifest_reads_whole(file: Path) -> None:
    raw = json.loads(file.read_text())
    manifest = read_manifest(file)
    # Nothing dropped: every value the file states reads back the same (older samples lack
    # call1_ms_per_process, which reads as none).
    assert missing(raw, json.loads(json.dumps(manifest.to_dict()))) == []
    assert list(manifest.variants) == list(raw["variants"])


def missing(stated: object, read: object, where: str = "") -> list[str]:
    """Where ``read`` differs from what ``stated`` states (keys it adds are not counted)."""
    if isinstance(stated, dict) and isinstance(read, dict):
        return [
            fault
            for key, value in stated.items()
            for fault in missing(value, read.get(key, "<absent>"), f"{where}.{key}")
        ]
    if isinstance(stated, list) and isinstance(read, list) and len(stated) == len(read):
        return [
            f
            for i, (a, b) in enumerate(zip(stated, read, strict=True))
            for f in missing(a, b, f"{where}[{i}]")
        ]
    return [] if stated == read else [where]


def test_the_sample_manifests_say_what_the_analyses_use() -> None:
    cold = read_manifest(SAMPLES / "h200_cold" / "manifest.json")
    assert (cold.warm_up_calls, cold.call_seqs) == (0, (1024,) * 10)
    entry = cold.variants["sdpa_cudnn"]
    assert entry.cold is not None and entry.cold.cache_state == "empty"
    assert {p.role for p in entry.cold.processes} == {"profile", "time"}
    warm = read_manifest(SAMPLES / "h200_default" / "manifest.json")
    assert (warm.warm_up_calls, warm.call_seqs) == (1, None)
    assert warm.entry_for("sdpa_flash.json.gz") == ("sdpa_flash", warm.variants["sdpa_flash"])


def test_an_older_manifest_reads_with_what_it_states(tmp_path: Path) -> None:
    # No schema, created, command or environment; one warm-up described in `method.warm_up`;
    # a variant entry with a field this version does not know.
    file = write(
        tmp_path,
        "manifest.json",
        {
            "method": {"warm_up": "one untimed call"},
            "variants": {"naive": {"trace": "naive.json", "median_ms": 2.5, "gpu": "H100"}},
        },
    )
    manifest = read_manifest(file)
    assert (manifest.schema, manifest.created, manifest.warm_up_calls) == (0, None, 1)
    assert manifest.variants["naive"] == VariantResult("ok", "", trace="naive.json", median_ms=2.5)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ({"variants": []}, "is not a capture manifest (no 'variants' object)"),
        (
            {"variants": {"a": 3}},
            "is not a capture manifest (variant 'a': VariantResult is not an object)",
        ),
        (
            {"config": [], "variants": {}},
            "is not a capture manifest (Manifest.config is not an object)",
        ),
        ({"variants": {"a": {"cold": {"processes": 5}}}}, "variant 'a': processes is not a list"),
    ],
)
def test_a_manifest_that_is_not_one_is_one_line(
    tmp_path: Path, content: object, problem: str
) -> None:
    file = write(tmp_path, "manifest.json", content)
    with pytest.raises(TraceFormatError) as caught:
        read_manifest(file)
    assert problem in str(caught.value)
    assert str(caught.value).endswith(
        "Re-run the capture, or delete the manifest to compare the traces without it."
    )
