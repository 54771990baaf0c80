"""`sql` (issue 41): SQL over a trace's tables gives what the matching command gives on the
samples, and the README's three queries (the kernels under one module, the copies over 1 MiB,
time per stream per step) match sums computed by hand from the raw JSON of a corpus trace."""

from __future__ import annotations

import gzip
import io
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from click.testing import CliRunner
from polars.testing import assert_frame_equal

import traceanalyze
from tests.conftest import CORPUS_TRACES, PUBLIC_TRACES, skip_without
from traceanalyze import tables
from traceanalyze.cli import main

REPO = Path(__file__).resolve().parents[1]
NAIVE = REPO / "sample_traces" / "h200_default" / "naive.json.gz"
DDP = CORPUS_TRACES / "hta_nccl_a100_2rank_rank0.json.gz"
MIB = 1024 * 1024


def test_the_iterations_table_is_the_iterations_command() -> None:
    assert_frame_equal(
        traceanalyze.sql(NAIVE, "SELECT * FROM iterations"), traceanalyze.iterations(NAIVE)
    )


def test_kernels_by_name_are_the_kernels_commands_counts_and_totals() -> None:
    query = "SELECT name, count(*) AS count, sum(dur_us) AS total_us FROM gpu GROUP BY name"
    by_sql = traceanalyze.sql(NAIVE, query).sort("name")
    table = traceanalyze.kernels(NAIVE).select("name", "count", "total_us").sort("name")
    assert by_sql["name"].to_list() == table["name"].to_list()
    assert by_sql["count"].to_list() == table["count"].to_list()
    assert by_sql["total_us"].to_list() == pytest.approx(table["total_us"].to_list())


def test_the_copies_are_the_memcpy_commands() -> None:
    query = (
        "SELECT op_chain, count(*) AS n, sum(dur_us) AS us FROM gpu WHERE kind = 'memcpy' "
        "GROUP BY op_chain"
    )
    [row] = traceanalyze.sql(NAIVE, query).rows(named=True)
    [copy] = traceanalyze.memcpy(NAIVE).filter(pl.col("kind") == "memcpy").rows(named=True)
    assert copy["chain"].startswith(row["op_chain"].replace(" > ", " -> "))
    assert (row["n"], row["us"]) == (copy["count"], pytest.approx(copy["total_us"]))


def test_every_table_follows_its_declared_schema() -> None:
    for table in tables.TABLES.values():
        if table.option == tables.FROM:
            frame = traceanalyze.sql(NAIVE, f"SELECT * FROM {table.view}")
            assert frame.schema == table.schema, table.name


def test_a_folder_of_variants_adds_the_variant() -> None:
    query = "SELECT variant, count(*) AS kernels FROM kernels GROUP BY variant ORDER BY variant"
    frame = traceanalyze.sql("sample_traces/h200_graph_replay", query)
    assert frame["variant"].to_list() == ["naive", "sdpa_cudnn", "sdpa_flash"]


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("SELECT * FROM nosuch", 'no table "nosuch"; the tables are gpu, kernels, cpu_ops'),
        ("SELECT nosuch FROM kernels", 'no column "nosuch" in kernels (51 columns).'),
        ("SELECT strem FROM gpu", 'no column "strem" in gpu (51 columns); nearest: stream.'),
        (
            "SELECT k.name FROM kernels k JOIN cpu_ops c ON k.op_id = c.op_id WHERE c.bogus = 1",
            'no column "bogus" in kernels (51 columns), cpu_ops (19 columns).',
        ),
        ("SELECT * FROM kernels WHERE", "the query failed: sql parser error"),
        ("SELEC * FROM kernels", "only SELECT and WITH queries are run, not 'SELEC'"),
        ("SELECT name FROM kernels WHERE dur_us > 'a'", "cannot compare string with numeric"),
        ("  ", "the query is empty"),
    ],
)
def test_a_query_that_fails_is_one_short_line_and_exit_2(query: str, words: str) -> None:
    # Polars' own message runs to the whole column list and its plan ("Resolved plan until
    # failure ..."): the line names the problem and where to find the columns.
    result = CliRunner().invoke(main, ["sql", str(NAIVE), query])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert line.startswith("traceanalyze: error: ") and words in line
    assert line.endswith(
        "`traceanalyze schema sql` lists the tables and their columns (Polars' SQL dialect)."
    )
    assert "plan" not in line and "valid columns" not in line and len(line) < 260


def test_the_output_is_any_tables(tmp_path: Path) -> None:
    query = "SELECT category, count(*) AS n FROM kernels GROUP BY category ORDER BY category"
    text = CliRunner().invoke(main, ["sql", str(NAIVE), query, "--format", "csv"]).stdout
    assert text.splitlines()[:2] == ["category,n", "elementwise,3"]
    target = tmp_path / "q.parquet"
    assert CliRunner().invoke(main, ["sql", str(NAIVE), query, "-o", str(target)]).exit_code == 0
    assert pl.read_parquet(target).equals(pl.read_csv(io.StringIO(text)))


# One trace of each sample capture: each records something the others lack.
SAMPLES = [
    min(f.glob("*.json.gz")) for f in sorted((REPO / "sample_traces").iterdir()) if f.is_dir()
]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.parent.name for p in SAMPLES])
def test_gpu_time_per_launching_op_is_kernels_by_op(path: Path) -> None:
    query = (
        "SELECT op_name AS launch_op, count(*) AS n, sum(dur_ns) AS ns FROM gpu "
        "WHERE iteration IN (SELECT iteration FROM iterations WHERE counted) GROUP BY op_name"
    )
    by_sql = {r["launch_op"]: r for r in traceanalyze.sql(path, query).to_dicts()}
    table = traceanalyze.kernels(path, by="op")
    counted = traceanalyze.iterations(path).filter("counted").height
    assert set(by_sql) == set(table["launch_op"].to_list())
    for row in table.to_dicts():
        mine = by_sql[row["launch_op"]]
        assert mine["n"] / counted == pytest.approx(row["count_per_iter"]), row["launch_op"]
        assert mine["ns"] / 1e3 / counted == pytest.approx(row["us_per_iter"]), row["launch_op"]


@pytest.mark.parametrize("path", SAMPLES, ids=[p.parent.name for p in SAMPLES])
def test_the_tables_hold_what_info_and_kernels_count(path: Path) -> None:
    [info] = traceanalyze.info(path).to_dicts()
    kinds = dict(traceanalyze.sql(path, "SELECT kind, count(*) FROM gpu GROUP BY kind").rows())
    # The kinds as classified (a CUDA graph's memcpy node, a kernel in the file, is a copy),
    # as `kernels` counts them; info counts the file's own kinds: the totals agree.
    table = traceanalyze.kernels(path).group_by("kind").agg(pl.col("count").sum())
    assert kinds == dict(table.rows())
    assert sum(kinds.values()) == info["kernels"] + info["memcpy"] + info["memset"]
    assert traceanalyze.sql(path, "SELECT count(*) FROM kernels").item() == kinds["kernel"]
    assert traceanalyze.sql(path, "SELECT count(*) FROM cpu_ops").item() == info["cpu_ops"]
    assert traceanalyze.sql(path, "SELECT count(*) FROM runtime").item() == info["runtime_calls"]
    linked = traceanalyze.sql(path, "SELECT count(*) FROM gpu WHERE linked").item()
    assert linked == info["gpu_linked"]


def test_the_memory_table_holds_the_memory_commands_events() -> None:
    path = REPO / "sample_traces" / "h200_memory_check" / "memory_check.json.gz"
    events = traceanalyze.memory(path).events
    assert events > 0
    assert traceanalyze.sql(path, "SELECT count(*) FROM memory").item() == events


# --- the README's queries against hand computations on a corpus trace ----------------------


def _events() -> list[dict[str, Any]]:
    skip_without(DDP)
    with gzip.open(DDP, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    return events


def _launches(events: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each runtime launch call by its correlation id."""
    return {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})
    }


def _inside(call: dict[str, Any], spans: list[dict[str, Any]]) -> bool:
    return any(
        s["tid"] == call["tid"] and s["ts"] <= call["ts"] <= s["ts"] + s["dur"] for s in spans
    )


def test_the_kernels_under_one_module_by_hand() -> None:
    events = _events()
    module = [e for e in events if e.get("name") == "DistributedDataParallel.forward"]
    launches = _launches(events)
    expected: dict[str, list[float]] = defaultdict(list)
    for e in events:
        call = launches.get(e.get("args", {}).get("correlation", -1))
        if e.get("cat") == "kernel" and call is not None and _inside(call, module):
            expected[e["name"]].append(e["dur"])
    query = (
        "SELECT name, count(*) AS launches, sum(dur_us) AS us FROM kernels "
        "WHERE stack LIKE '%DistributedDataParallel.forward%' GROUP BY name"
    )
    got = {r["name"]: (r["launches"], r["us"]) for r in traceanalyze.sql(DDP, query).to_dicts()}
    assert got.keys() == expected.keys()
    for name, durations in expected.items():
        assert got[name] == (len(durations), pytest.approx(sum(durations), abs=1e-3)), name


def test_a_region_inside_the_launching_op_is_in_the_stack() -> None:
    # DLRM's all-to-all: `nccl:all_to_all` opens inside `record_param_comms`, the op that
    # launches the NCCL kernel; the stack is the launch call's, so the region is in it.
    path = CORPUS_TRACES / "new_htadiff_control_a100_rank3.json.gz"
    skip_without(path)
    with gzip.open(path, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    regions = [e for e in events if e.get("name") == "nccl:all_to_all" and e.get("ph") == "X"]
    launches = _launches(events)
    durations = [
        e["dur"]
        for e in events
        if e.get("cat") == "kernel"
        and (call := launches.get(e["args"].get("correlation", -1))) is not None
        and _inside(call, regions)
    ]
    query = "SELECT count(*), sum(dur_ns) FROM kernels WHERE stack LIKE '%nccl:all_to_all%'"
    [(count, ns)] = traceanalyze.sql(path, query).rows()
    assert (count, ns / 1e3) == (len(durations), pytest.approx(sum(durations)))
    assert count == 42


def test_the_copies_over_one_mib_by_hand() -> None:
    events = _events()
    expected = sorted(
        (e["args"]["bytes"], e["dur"])
        for e in events
        if e.get("cat") == "gpu_memcpy" and e["args"].get("bytes", 0) > MIB
    )
    query = "SELECT bytes, dur_us FROM gpu WHERE kind = 'memcpy' AND bytes > 1048576"
    got = sorted(traceanalyze.sql(DDP, query).rows())
    assert [b for b, _ in got] == [b for b, _ in expected]
    assert [d for _, d in got] == pytest.approx([d for _, d in expected], abs=1e-3)
    assert len(got) == 54


def test_time_per_stream_per_step_by_hand() -> None:
    events = _events()
    steps = {
        int(e["name"].removeprefix("ProfilerStep#")): e
        for e in events
        if e.get("name", "").startswith("ProfilerStep#") and e.get("ph") == "X"
    }
    launches = _launches(events)
    expected: dict[tuple[int, int], float] = defaultdict(float)
    for e in events:
        call = launches.get(e.get("args", {}).get("correlation", -1))
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset") or call is None:
            continue
        for number, step in steps.items():  # the step whose span holds the launch call
            if step["ts"] <= call["ts"] < step["ts"] + step["dur"]:
                expected[number, e["args"]["stream"]] += e["dur"]
    query = (
        "SELECT iteration, stream, sum(dur_us) AS us FROM gpu WHERE iteration IS NOT NULL "
        "GROUP BY iteration, stream ORDER BY iteration, stream"
    )
    got = {(i, s): us for i, s, us in traceanalyze.sql(DDP, query).rows()}
    assert got.keys() == expected.keys()
    assert list(got.values()) == pytest.approx([expected[k] for k in got], abs=1e-3)


# --- nn.Module frames (with_stack=True) and where each activity stands ----------------------

BERT = PUBLIC_TRACES / "tl_h100_bert_small.json.gz"


def test_the_kernels_under_one_nn_module_by_hand() -> None:
    # The docs' module query: the kernels whose launch call (runtime or driver) lies inside the
    # module's forward frame on the same thread, from the raw JSON.
    skip_without(BERT)
    with gzip.open(BERT, "rt") as handle:
        events: list[dict[str, Any]] = json.load(handle)["traceEvents"]
    launches = {
        e["args"]["correlation"]: e
        for e in events
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})
    }
    modules = sorted({e["name"] for e in events if e.get("name", "").startswith("nn.Module: ")})
    assert len(modules) > 20
    for module in ("nn.Module: BertLayer_1", "nn.Module: BertSdpaSelfAttention_3", *modules[:3]):
        frames = [e for e in events if e.get("name") == module]
        expected = sorted(
            (e["args"]["correlation"], e["dur"])
            for e in events
            if e.get("cat") == "kernel"
            and (call := launches.get(e["args"].get("correlation", -1))) is not None
            and _inside(call, frames)
        )
        name = module.removeprefix("nn.Module: ")
        query = (
            "SELECT correlation, dur_ns FROM kernels "
            f"WHERE array_contains(string_to_array(module_stack, ' > '), '{name}')"
        )
        got = sorted(traceanalyze.sql(BERT, query).rows())
        assert [c for c, _ in got] == [c for c, _ in expected], module
        assert [ns / 1e3 for _, ns in got] == pytest.approx([d for _, d in expected]), module
    layer = traceanalyze.sql(
        BERT,
        "SELECT count(*), sum(dur_ns) FROM kernels "
        "WHERE array_contains(string_to_array(module_stack, ' > '), 'BertLayer_1')",
    ).row(0)
    assert layer == (12, 58_431)  # the docs' figures: 12 kernels, 58.431 µs
    innermost = traceanalyze.sql(BERT, "SELECT module FROM kernels WHERE module = 'Linear_25'")
    assert innermost.height == 1


def test_the_docs_module_query_takes_that_module_only(tmp_path: Path) -> None:
    # docs/tools.md's idiom: the stack split at " > ", names compared whole. The LIKE
    # '%BertLayer_1%' it replaced also took BertLayer_10 (and, `_` being a wildcard,
    # BertLayerX1): issue 41's second newcomer pass.
    from tests.micro import annotation, call, kernel, op, span, write_trace

    events = [annotation("ProfilerStep#0", 0, 400)]
    frames = [("BertLayer_1", 10, 80), ("Linear_3", 20, 30), ("BertLayer_10", 100, 60)]
    frames += [("BertLayerX1", 200, 60), ("MyBertLayer_1", 300, 60)]
    for correlation, (module, ts, dur) in enumerate(frames, start=1):
        events += [
            span("python_function", f"nn.Module: {module}", ts, dur),
            op("aten::mm", ts + 1, 5),
            call("cudaLaunchKernel", ts + 2, 2, correlation),
            kernel(f"gemm_{module}", ts + 5, 1, correlation),
        ]
    trace = write_trace(tmp_path, events, "modules.json")
    docs = (REPO / "docs" / "tools.md").read_text(encoding="utf-8")
    where = "WHERE array_contains(string_to_array(module_stack, ' > '), 'BertLayer_1')"
    assert where in docs
    got = traceanalyze.sql(trace, f"SELECT name, module_stack FROM kernels {where} ORDER BY name")
    assert got.rows() == [
        ("gemm_BertLayer_1", "BertLayer_1"),
        ("gemm_Linear_3", "BertLayer_1 > Linear_3"),
    ]
    like = "SELECT name FROM kernels WHERE module_stack LIKE '%BertLayer_1%'"
    assert traceanalyze.sql(trace, like).height == 5  # what the old idiom took


def test_the_modules_table_is_the_nn_module_frames() -> None:
    skip_without(BERT)
    with gzip.open(BERT, "rt") as handle:
        frames = [
            e
            for e in json.load(handle)["traceEvents"]
            if e.get("name", "").startswith("nn.Module: ")
        ]
    table = traceanalyze.sql(BERT, "SELECT name, ts_ns, dur_us FROM modules ORDER BY ts_ns")
    assert table["name"].to_list() == [
        e["name"].removeprefix("nn.Module: ") for e in sorted(frames, key=lambda e: e["ts"])
    ]
    assert table["dur_us"].to_list() == pytest.approx(
        [e["dur"] for e in sorted(frames, key=lambda e: e["ts"])], abs=1e-3
    )


def test_a_trace_without_module_frames_has_none() -> None:
    assert traceanalyze.sql(NAIVE, "SELECT count(*) FROM modules").item() == 0
    assert traceanalyze.sql(NAIVE, "SELECT count(module_stack) FROM gpu").item() == 0


def test_placement_names_what_no_iteration_holds(tmp_path: Path) -> None:
    # naive's two activities without an iteration have no launch call in the trace: they are
    # `no_launch`, not work launched outside the steps; summary counts them apart.
    rows = traceanalyze.sql(
        NAIVE, "SELECT placement, count(*) AS n FROM gpu GROUP BY placement ORDER BY placement"
    ).rows()
    assert rows == [("iteration", 21), ("no_launch", 2)]
    unlinked = traceanalyze.sql(NAIVE, "SELECT count(*) FROM gpu WHERE NOT linked").item()
    assert unlinked == 2
    summary = traceanalyze.summary(NAIVE)
    assert summary.gpu_activities_without_launch_total == 2
    assert summary.gpu_activities_outside_iterations_total == 0


def test_markdown_keeps_the_querys_column_names_and_plain_numbers() -> None:
    # A query's own columns mean what the query says: `count(*) AS bytes` is a count and
    # `sum(dur_ns) AS total_us` nanoseconds, whatever the declared tables call those names.
    query = "SELECT count(*) AS bytes, sum(dur_ns) AS total_us, 0.5 AS share_pct FROM kernels"
    frame = traceanalyze.sql(NAIVE, query)
    text = CliRunner().invoke(main, ["sql", str(NAIVE), query]).stdout
    header, _, row = text.splitlines()
    assert header == "| bytes | total_us | share_pct |"
    # 0.5, not a share's fixed 0.50: nothing is read into the name `share_pct` either.
    assert row == f"| {frame['bytes'][0]:,} | {frame['total_us'][0]:,} | 0.5 |"
    assert frame["bytes"][0] == 17  # the sample's 17 kernels, not "17 B"


@pytest.mark.parametrize(
    "statement", ["DROP TABLE kernels", "SHOW TABLES", "CREATE TABLE k AS SELECT * FROM kernels"]
)
def test_only_queries_are_run(statement: str) -> None:
    result = CliRunner().invoke(main, ["sql", str(NAIVE), statement])
    assert result.exit_code == 2, result.output
    [line] = result.stderr.splitlines()
    assert "only SELECT and WITH queries are run" in line and not result.stdout


def test_a_query_may_open_with_a_comment_a_parenthesis_or_with() -> None:
    plain = "SELECT count(*) AS n FROM kernels WHERE category = 'softmax'"
    [softmaxes] = traceanalyze.sql(NAIVE, plain)["n"].to_list()
    assert softmaxes > 0
    for query in (
        "-- the softmaxes\n(SELECT count(*) AS n FROM kernels WHERE category = 'softmax')",
        "WITH s AS (SELECT * FROM kernels WHERE category = 'softmax') SELECT count(*) AS n FROM s",
    ):
        assert traceanalyze.sql(NAIVE, query)["n"].to_list() == [softmaxes], query


def test_the_help_example_sums_integer_nanoseconds() -> None:
    text = CliRunner().invoke(main, ["sql", "--help"]).stdout
    assert "sum(dur_ns)" in text and "sum(dur_us)" not in text
