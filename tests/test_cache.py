"""The cache's housekeeping: the size limit and least-recently-used eviction, damaged entries
rebuilt, concurrent writers, and the `cache info` / `cache clear` commands."""

from __future__ import annotations

import json
import os
import time
import zlib
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

import traceanalyze
from tests.micro import kernel, one_step, write_trace
from traceanalyze.cli import main
from traceanalyze.errors import CacheSettingError
from traceanalyze.load import cache
from traceanalyze.load.cache import (
    MAX_ENV,
    cache_info,
    entry_for,
    evict,
    frame_file,
    parse_size,
    read_entry,
    write_entry,
)
from traceanalyze.schema import TRACE_FRAMES

STEP = one_step()


def _traces(folder: Path, count: int) -> list[Path]:
    return [write_trace(folder, STEP, name=f"t{i}.json") for i in range(count)]


def _used(entry: Path, seconds_ago: float) -> None:
    """Back-date an entry's last use (a coarse clock must not tie two loads)."""
    when = time.time() - seconds_ago
    os.utime(entry / "meta.json", (when, when))


@pytest.mark.parametrize(
    ("text", "size"),
    [("0", 0), ("4096", 4096), ("500M", 500 * 2**20), ("2G", 2 * 2**30), ("1.5g", 3 * 2**29),
     ("2GiB", 2 * 2**30), ("64KB", 64 * 1024), (" 1T ", 2**40)],
)  # fmt: skip
def test_cache_sizes_parse(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["abc", "-1G", "2X", "G", "nan"])
def test_a_bad_cache_size_is_one_line_exit_2(
    text: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(CacheSettingError, match=f"{MAX_ENV}="):
        parse_size(text)
    monkeypatch.setenv(MAX_ENV, text)
    result = CliRunner().invoke(main, ["summary", str(write_trace(tmp_path, STEP))])
    assert result.exit_code == 2
    assert result.output.startswith(f"traceanalyze: error: {MAX_ENV}=")
    assert "Traceback" not in result.output


def test_the_limit_evicts_the_least_recently_used_entry(
    tmp_path: Path, cache_dir: Path, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second, third = _traces(tmp_path, 3)
    traceanalyze.load(first)
    one_entry = cache_info(cache_dir).size_bytes
    # Room for two entries, not three.
    monkeypatch.setenv(MAX_ENV, str(int(one_entry * 2.5)))
    traceanalyze.load(second)
    _used(entry_for(first, cache_dir), 30)
    _used(entry_for(second, cache_dir), 20)
    traceanalyze.load(first)  # a hit: `first` is now the most recently used
    traceanalyze.load(third)  # over the limit: `second`, used longest ago, goes
    assert sorted(p.name[:2] for p in cache_dir.iterdir()) == ["t0", "t2"]
    assert cache_info(cache_dir).entries == 2
    traceanalyze.load(first)
    traceanalyze.load(second)
    assert parses == [first, second, third, second]


def test_an_entry_over_the_limit_is_not_kept(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(MAX_ENV, "1K")
    (path,) = _traces(tmp_path, 1)
    assert traceanalyze.load(path).kernels.height == 1
    assert list(cache_dir.iterdir()) == []


def test_a_limit_of_zero_is_no_cache(
    tmp_path: Path, cache_dir: Path, parses: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    (path,) = _traces(tmp_path, 1)
    traceanalyze.load(path)  # cached while the limit allows it
    monkeypatch.setenv(MAX_ENV, "0")
    traceanalyze.load(path)
    traceanalyze.load_each([path])
    assert parses == [path, path, path]  # the entry there is not read either


def test_evict_removes_oldest_first_and_abandoned_staging(tmp_path: Path, cache_dir: Path) -> None:
    paths = _traces(tmp_path, 3)
    for age, path in zip((10, 30, 20), paths, strict=True):
        traceanalyze.load(path)
        _used(entry_for(path, cache_dir), age)
    abandoned = cache_dir / ".tmp-dead-writer"
    abandoned.mkdir()
    old = time.time() - 7200
    os.utime(abandoned, (old, old))
    fresh = cache_dir / ".tmp-live-writer"
    fresh.mkdir()
    size = cache_info(cache_dir).size_bytes // 3
    removed = evict(cache_dir, size + size // 2)
    assert removed == [entry_for(paths[1], cache_dir), entry_for(paths[2], cache_dir)]
    kept = entry_for(paths[0], cache_dir).name
    assert sorted(p.name for p in cache_dir.iterdir()) == [".tmp-live-writer", kept]


@pytest.mark.parametrize("kept", [0.5, 0.0, "schema"])
def test_a_truncated_frame_file_is_rebuilt_not_trusted(
    tmp_path: Path, cache_dir: Path, parses: list[Path], kept: float | str
) -> None:
    (path,) = _traces(tmp_path, 1)
    reference = traceanalyze.load(path)
    entry = entry_for(path, cache_dir)
    gpu = frame_file(entry, "gpu")
    if kept == "schema":  # a file of the schema alone, its checksum right: the row count tells
        reference.gpu.clear().write_parquet(gpu)
        _checksum_as_written(entry, "gpu")
    else:
        gpu.write_bytes(gpu.read_bytes()[: int(gpu.stat().st_size * float(kept))])
    assert read_entry(entry) is None
    assert not entry.exists()  # removed, so the rebuild replaces it
    rebuilt = traceanalyze.load(path)
    assert rebuilt.gpu.equals(reference.gpu)
    traceanalyze.load(path)  # the rebuilt entry is whole again: a hit
    assert parses == [path, path]


def test_an_entry_of_another_schema_is_rebuilt(tmp_path: Path, cache_dir: Path) -> None:
    (path,) = _traces(tmp_path, 1)
    reference = traceanalyze.load(path)
    entry = entry_for(path, cache_dir)
    # An entry an older release wrote under the same key: a column of another type.
    renamed = reference.gpu.with_columns(pl.col("name").cast(pl.Categorical))
    renamed.write_parquet(frame_file(entry, "gpu"))
    _checksum_as_written(entry, "gpu")  # whole, as that release wrote it: only the schema differs
    assert "name" in TRACE_FRAMES["gpu"]
    assert read_entry(entry) is None
    assert traceanalyze.load(path).gpu.equals(reference.gpu)


def _checksum_as_written(entry: Path, name: str) -> None:
    """The checksums in meta.json made right for ``name``'s file as it now is."""
    stored = json.loads((entry / "meta.json").read_text())
    del stored["checksum"]
    stored["checksums"][name] = zlib.crc32(frame_file(entry, name).read_bytes())
    stored["checksum"] = cache._meta_checksum(stored)
    (entry / "meta.json").write_text(json.dumps(stored))


@pytest.mark.parametrize("name", ["gpu", "cpu", "iterations", "devices", "meta.json"])
def test_a_changed_byte_in_an_entry_is_rebuilt_not_decoded(
    tmp_path: Path, cache_dir: Path, parses: list[Path], name: str
) -> None:
    # One byte changed in an Arrow stream can make Polars' decoder abort the process, panic or
    # read other numbers, and one in meta.json name another device: the checksums turn every
    # such entry away before its frames are decoded.
    (path,) = _traces(tmp_path, 1)
    reference = traceanalyze.load(path)
    entry = entry_for(path, cache_dir)
    damaged_file = entry / name if name == "meta.json" else frame_file(entry, name)
    original = damaged_file.read_bytes()
    flips = range(0, len(original), max(1, len(original) // 40))
    for at in flips:
        damaged = bytearray(original)
        damaged[at] ^= 0x10
        if not entry.exists():
            traceanalyze.load(path)  # the rebuild of the flip before
        damaged_file.write_bytes(bytes(damaged))
        assert read_entry(entry) is None, at
        assert not entry.exists()
    rebuilt = traceanalyze.load(path)
    assert all(getattr(rebuilt, f).equals(getattr(reference, f)) for f in TRACE_FRAMES)
    assert rebuilt.meta == reference.meta
    traceanalyze.load(path)  # whole again: a hit
    assert parses.count(path) == 1 + len(flips)  # the first load, and one rebuild per flip


def test_an_entry_without_its_meta_is_rebuilt_and_cleared(
    tmp_path: Path, cache_dir: Path, parses: list[Path]
) -> None:
    first, second = _traces(tmp_path, 2)
    traceanalyze.load(first)
    traceanalyze.load(second)
    for path in (first, second):
        (entry_for(path, cache_dir) / "meta.json").unlink()
    assert cache_info(cache_dir).entries == 2  # counted: under the limit, evicted first
    traceanalyze.load(first)  # removed and rebuilt (its folder blocked the rebuild's rename)
    traceanalyze.load(first)  # and then a hit
    assert parses.count(first) == 2
    cleared = traceanalyze.load.cache.clear_cache(cache_dir)
    assert cleared.entries == 2
    assert list(cache_dir.iterdir()) == []


def test_concurrent_writers_leave_one_whole_entry(tmp_path: Path, cache_dir: Path) -> None:
    (path,) = _traces(tmp_path, 1)
    trace = traceanalyze.load(path, cache=False)
    entry = entry_for(path, cache_dir)
    assert write_entry(entry, trace)
    assert write_entry(entry, trace)  # a second writer of the same key loses the race politely
    assert [p.name for p in cache_dir.iterdir()] == [entry.name]  # no staging left behind
    cached = read_entry(entry)
    assert cached is not None and cached.gpu.equals(trace.gpu)


def test_cache_info_and_clear_commands(tmp_path: Path, cache_dir: Path) -> None:
    for path in _traces(tmp_path, 2):
        traceanalyze.load(path)
    runner = CliRunner()
    info = json.loads(runner.invoke(main, ["cache", "info", "--format", "json"]).output)
    assert info == {
        "location": str(cache_dir),
        "entries": 2,
        "size_bytes": cache_info(cache_dir).size_bytes,
        "max_bytes": 2 * 2**30,
    }
    text = runner.invoke(main, ["cache", "info"]).output
    assert text.startswith(f"Cache at {cache_dir}: 2 entries in ")
    cleared = runner.invoke(main, ["cache", "clear"])
    assert cleared.exit_code == 0
    assert cleared.output.startswith("Removed 2 entries (") and str(cache_dir) in cleared.output
    assert list(cache_dir.iterdir()) == []
    chosen = tmp_path / "elsewhere"
    other = runner.invoke(main, ["cache", "info", "--cache-dir", str(chosen), "--format", "csv"])
    # One row under the declared header (issue 41: no more key,value text).
    assert other.stdout.splitlines() == [
        "location,entries,size_bytes,max_bytes",
        f"{chosen},0,0,{2 * 2**30}",
    ]


def _rank_folder(tmp_path: Path, ranks: int) -> tuple[Path, list[Path]]:
    folder = tmp_path / "job"
    folder.mkdir()
    return folder, [write_trace(folder, STEP, name=f"r{r}.json", rank=r) for r in range(ranks)]


def _counted_walks(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    from traceanalyze import engine
    from traceanalyze.load import cache

    walks: list[Path] = []
    real_evict = cache.evict

    def counted(folder: Path, max_bytes: int) -> list[Path]:
        walks.append(folder)
        return real_evict(folder, max_bytes)

    monkeypatch.setattr(cache, "evict", counted)
    monkeypatch.setattr(engine, "evict", counted)
    monkeypatch.setattr(cache, "_WRITES", cache._Writes())
    return walks


def _ranks_under_a_limit(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch, ranks: int, entries: float
) -> list[Path]:
    """`ranks` on a folder of ``ranks`` micro ranks with room for ``entries`` cache entries;
    the cache walks it made."""
    from traceanalyze import engine

    folder, paths = _rank_folder(tmp_path, ranks)
    traceanalyze.load(paths[0])
    one_entry = cache_info(cache_dir).size_bytes
    traceanalyze.load.cache.clear_cache(cache_dir)
    monkeypatch.setenv(MAX_ENV, str(int(one_entry * entries)))
    walks = _counted_walks(monkeypatch)
    engine.rank_folder(folder, workers=1, cache_dir=cache_dir)
    return walks


def test_a_rank_folder_walks_the_cache_a_few_times_not_once_per_rank(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A walk of the cache after each of N writes is N^2 visits: the ranks of a folder are
    # written with eviction deferred (a walk per tenth of the limit written), and the
    # folder's run walks once at the end.
    walks = _ranks_under_a_limit(tmp_path, cache_dir, monkeypatch, ranks=9, entries=25)
    assert len(walks) == 4  # after the 3rd, 6th and 9th write (4% each), and the end
    assert cache_info(cache_dir).entries == 9
    traceanalyze.load(tmp_path / "job" / "r0.json", cache_dir=tmp_path / "other")
    assert len(walks) == 5  # outside a folder's run, each write walks


def test_a_rank_folder_keeps_the_cache_within_its_limit(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    walks = _ranks_under_a_limit(tmp_path, cache_dir, monkeypatch, ranks=4, entries=2.5)
    assert len(walks) == 5  # each write is 40% of the limit: a walk after each, and the end
    assert cache_info(cache_dir).entries == 2


@pytest.mark.parametrize("how", ["renamed over", "rewritten in place"])
def test_a_file_replaced_during_its_load_is_not_cached_as_the_new_file(
    how: str, tmp_path: Path
) -> None:
    """The entry is keyed by the file the parse read: a file replaced after the read but
    before the entry is written must not leave the old trace under the new file's key."""
    path = write_trace(tmp_path, STEP, name="t.json")
    two_kernels = [*STEP, kernel("gemm2", 60, 10, 1)]
    newer = write_trace(tmp_path, two_kernels, name="new.json")
    folder = tmp_path / "cache"

    def replace_at_decode(stage: str) -> None:
        if stage != "decode":
            return
        if how == "renamed over":
            os.replace(newer, path)
        else:  # a profiler exporting again to the same path
            path.write_bytes(newer.read_bytes())
        later = time.time() + 5  # a coarse clock must not hide the change
        os.utime(path, (later, later))

    first = traceanalyze.load(path, cache_dir=folder, timer=replace_at_decode)
    assert first.gpu.height == 1  # what the parse read: the old file
    cached = traceanalyze.load(path, cache_dir=folder)
    assert cached.gpu.height == 2  # the file on disk now, not the old trace under its key
    assert cached.gpu.equals(traceanalyze.load(path, cache=False).gpu)


def test_an_unchanged_file_is_cached_under_the_key_of_the_file_read(tmp_path: Path) -> None:
    path = write_trace(tmp_path, STEP, name="t.json")
    folder = tmp_path / "cache"
    traceanalyze.load(path, cache_dir=folder)
    assert read_entry(entry_for(path, folder)) is not None


def test_a_ctrl_c_raised_twice_during_a_write_leaves_no_staging(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One Ctrl-C during a write: Polars' writer raises KeyboardInterrupt, then Python raises
    # a second one for the same signal on entry to the cleanup (before its own retry loop).
    trace = traceanalyze.load(write_trace(tmp_path, STEP), cache=False)
    folder = tmp_path / "cache"
    entry = entry_for(write_trace(tmp_path, STEP, name="u.json"), folder)

    def interrupted(frame: pl.DataFrame) -> bytes:
        raise KeyboardInterrupt

    real_discard = cache._discard
    calls: list[Path] = []

    def interrupted_on_entry(staging: Path) -> None:
        calls.append(staging)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the signal's own, raised before the removal began
        real_discard(staging)

    monkeypatch.setattr(cache, "_frame_bytes", interrupted)
    monkeypatch.setattr(cache, "_discard", interrupted_on_entry)
    with pytest.raises(KeyboardInterrupt):
        write_entry(entry, trace)
    assert len(calls) == 2
    assert list(folder.iterdir()) == []  # no entry, no staging folder
