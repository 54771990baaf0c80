"""The analysis commands through click's CliRunner: formats, -o, the JSON contract of
docs/architecture.md, check's exit status, and bad input."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from tests.micro import annotation, call, kernel, op, present, write_trace
from traceanalyze.cli import main

SAMPLES = Path(__file__).resolve().parents[1] / "sample_traces" / "h200_default"
FLASH = "void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128>>(Flash_fwd_params)"
COMMANDS = ("kernels", "summary", "occupancy", "cudnn", "memcpy")

# The CLI contract (docs/architecture.md): keys that `--format json` must always carry.
KERNELS_KEYS = {
    "name",
    "category",
    "count",
    "total_us",
    "mean_us",
    "theoretical_occupancy_pct",
    "achieved_occupancy_pct",
    "launch_op",
}
SUMMARY_KEYS = {
    "iterations",
    "kernels_per_iter",
    "memcpy_per_iter",
    "memset_per_iter",
    "gpu_activity_us_per_iter",
    "gpu_busy_us_per_iter",
    "gpu_kernel_us_per_iter",
    "cpu_op_us_per_iter",
    "wall_us_per_iter",
    "bound",
    "transpose_ops_per_iter",
    "graph_launches_per_iter",
    "cudnn_cpu_us_per_iter",
    "category_us",
    "launch_apis",
}

EVENTS = [
    annotation("ProfilerStep#1", 0, 100),
    op("aten::_flash_attention_forward", 10, 30),
    call("cudaLaunchKernel", 12, 4, 1),
    kernel(
        FLASH,
        40,
        50,
        1,
        **{
            "registers per thread": 255,
            "shared memory": 49152,
            "block": [128, 1, 1],
            "est. achieved occupancy %": 0,
        },
    ),
    op("aten::copy_", 45, 10),
    call("cudaMemcpyAsync", 46, 2, 2),
    kernel("Memcpy DtoD (Device -> Device)", 91, 5, 2, cat="gpu_memcpy", bytes=4096),
]


@pytest.fixture
def trace(tmp_path: Path) -> Path:
    return write_trace(tmp_path, EVENTS, name="run.json.gz")


def run(*args: str | Path) -> Result:
    return CliRunner().invoke(main, [str(a) for a in args])


def one_error_line(result: Result) -> str:
    """The single stderr line the CLI writes for an error (prefixed with the program's name)."""
    [line] = result.stderr.splitlines()
    assert line.startswith("traceanalyze: ")
    return line


def ok(result: Result) -> Result:
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def test_kernels_json_contract(trace: Path) -> None:
    rows = json.loads(ok(run("kernels", trace, "--format", "json")).stdout)
    assert [row["name"] for row in rows] == [FLASH, "Memcpy DtoD (Device -> Device)"]
    for row in rows:
        assert row.keys() >= KERNELS_KEYS
    flash = rows[0]
    assert {key: flash[key] for key in KERNELS_KEYS} == {
        "name": FLASH,
        "category": "fused_attention",
        "count": 1,
        "total_us": 50.0,
        "mean_us": 50.0,
        "theoretical_occupancy_pct": 12.5,
        "achieved_occupancy_pct": None,  # Kineto wrote 0: no estimate
        "launch_op": "aten::_flash_attention_forward",
    }
    assert rows[1]["theoretical_occupancy_pct"] is None  # a copy has no launch footprint


def test_summary_json_contract(trace: Path) -> None:
    record = json.loads(ok(run("summary", trace, "--format", "json")).stdout)
    assert record.keys() >= SUMMARY_KEYS
    record["category_us"] = present(record["category_us"])  # every category is listed, 0 or not
    assert {key: record[key] for key in SUMMARY_KEYS} == {
        "iterations": 1,
        "kernels_per_iter": 1.0,
        "memcpy_per_iter": 1.0,
        "memset_per_iter": 0.0,
        "gpu_activity_us_per_iter": 55.0,  # the kernel and the copy
        "gpu_busy_us_per_iter": 55.0,
        "gpu_kernel_us_per_iter": 50.0,
        "cpu_op_us_per_iter": 40.0,
        "wall_us_per_iter": 100.0,  # the step: longer than the GPU span [40, 96]
        "bound": "cannot tell",  # one step (GPU busy 55% of the wall time: CPU-bound alone)
        "transpose_ops_per_iter": 0.0,
        "graph_launches_per_iter": 0.0,
        "cudnn_cpu_us_per_iter": 0.0,
        "category_us": {"fused_attention": 50.0, "memcpy": 5.0},
        "launch_apis": {"cudaLaunchKernel": 1.0, "cudaMemcpyAsync": 1.0},
    }


def test_summary_json_on_a_sample_trace() -> None:
    path = SAMPLES / "sdpa_cudnn.json.gz"
    record = json.loads(ok(run("summary", path, "--format", "json")).stdout)
    assert record.keys() >= SUMMARY_KEYS
    assert record["launch_apis"] == {"cuLaunchKernelEx": 1.0, "cudaMemsetAsync": 1.0}
    rows = json.loads(ok(run("kernels", path, "--format", "json")).stdout)
    assert rows[0]["category"] == "fused_attention"
    assert rows[0]["achieved_occupancy_pct"] is None


def test_summary_csv_is_for_machines() -> None:
    path = SAMPLES / "naive.json.gz"
    text = ok(run("summary", path, "--format", "csv")).stdout
    [row] = list(csv.DictReader(io.StringIO(text)))
    record = json.loads(ok(run("summary", path, "--format", "json")).stdout)
    # One row, one column per figure (was key,value rows of text), each at full precision;
    # a fixed mapping is one column per key (category_us.mask), the launch APIs (whose keys
    # are data) a table of their own.
    assert f"{record['gpu_busy_us_per_iter']!r}" in text
    assert float(row["category_us.mask"]) == record["category_us"]["mask"]
    assert "launch_apis.cudaMemcpyAsync" not in row
    apis = ok(run("summary", path, "--format", "csv", "--table", "launch_apis")).stdout
    assert "cudaMemcpyAsync,1.0" in apis.splitlines()
    flat = {
        f"{k}.{sub}": v for k, d in record.items() if isinstance(d, dict) for sub, v in d.items()
    }
    flat |= {k: v for k, v in record.items() if not isinstance(v, dict)}
    flat = {k: v for k, v in flat.items() if not k.startswith("launch_apis.")}
    assert row.keys() == flat.keys()
    for key, value in flat.items():
        if isinstance(value, float):
            assert float(row[key]) == value, key
        elif value is None:
            assert row[key] == "", key  # missing is an empty field
        else:
            assert row[key] == str(value), key


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("fmt", ["md", "json", "csv"])
def test_every_command_in_every_format(trace: Path, command: str, fmt: str) -> None:
    text = ok(run(command, trace, "--format", fmt)).stdout
    if fmt == "json":
        json.loads(text)
    elif fmt == "csv":
        rows = list(csv.reader(io.StringIO(text)))
        assert len(rows) >= 1
        assert len({len(row) for row in rows}) == 1  # rectangular
    elif command == "cudnn":  # nothing calls cuDNN here: one line says so, no empty table
        assert text == "No ops that call cuDNN (or MIOpen) in this trace.\n"
    else:
        assert text.startswith("| ")


def test_markdown_shortens_names_unless_full_names(trace: Path) -> None:
    short = ok(run("kernels", trace)).stdout
    assert "| pytorch_flash::flash_fwd_kernel |" in short
    assert FLASH not in short
    assert FLASH in ok(run("kernels", trace, "--full-names")).stdout


def test_top(trace: Path) -> None:
    rows = json.loads(ok(run("kernels", trace, "--format", "json", "--top", "1")).stdout)
    assert [row["name"] for row in rows] == [FLASH]


@pytest.mark.parametrize(
    ("suffix", "check"),
    [
        (".json", lambda text: isinstance(json.loads(text), list)),
        (".csv", lambda text: text.startswith("name,category,")),
        (".md", lambda text: text.startswith("| name | category |")),
    ],
)
def test_output_file_format_from_suffix(trace: Path, tmp_path: Path, suffix: str, check) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / f"kernels{suffix}"
    result = ok(run("kernels", trace, "-o", out))
    assert result.stdout == ""
    assert result.stderr == f"wrote {out}\n"
    assert check(out.read_text())


def test_output_file_is_not_overwritten_without_force(trace: Path, tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    out.write_text("keep")
    result = run("summary", trace, "-o", out)
    assert result.exit_code == 2
    assert "--force" in result.stderr
    assert out.read_text() == "keep"
    ok(run("summary", trace, "-o", out, "--force"))
    assert json.loads(out.read_text()).keys() >= SUMMARY_KEYS


def test_output_file_may_not_be_the_input(tmp_path: Path) -> None:
    # A plain .json trace: a suffix -o writes (-o run.json.gz is refused for its suffix).
    plain = write_trace(tmp_path, EVENTS, name="run.json")
    before = plain.read_bytes()
    result = run("summary", plain, "-o", plain, "--force")
    assert result.exit_code == 2
    assert "is one of the inputs" in result.stderr
    assert plain.read_bytes() == before
    gz = run("summary", tmp_path / "x.json.gz", "-o", tmp_path / "x.json.gz", "--force")
    assert gz.exit_code == 2 and "writes no .gz files" in gz.stderr


# ---------------------------------------------------------------------------------------------
# check: 0 when every expectation holds, 1 when one is broken, 2 for an unreadable expectation


def test_check_all_held(trace: Path) -> None:
    result = ok(run("check", trace, "-e", "kernels_per_iter <= 1", "-e", "category:softmax == 0"))
    assert result.stdout.splitlines() == [
        "held    kernels_per_iter <= 1   (measured 1)",
        "held    category:softmax == 0   (measured 0)",
        "all expectations held",
    ]


def test_check_broken_exits_1(trace: Path) -> None:
    result = run("check", trace, "-e", "memcpy_per_iter == 0", "-e", "kernels_per_iter == 1")
    assert result.exit_code == 1
    assert result.stdout.splitlines()[0] == "BROKEN  memcpy_per_iter == 0   (measured 1)"
    assert one_error_line(result).endswith(f"{trace}: 1 of 2 expectations broken.")


def test_check_json_and_file(trace: Path, tmp_path: Path) -> None:
    expectations = tmp_path / "expect.txt"
    expectations.write_text("# flash\nkernels_per_iter == 1\nlaunch_api:cudaLaunchKernel >= 1\n")
    result = ok(run("check", trace, "-f", expectations, "--format", "json"))
    assert json.loads(result.stdout) == [
        {"expectation": "kernels_per_iter == 1", "measured": 1.0, "held": True},
        {"expectation": "launch_api:cudaLaunchKernel >= 1", "measured": 1.0, "held": True},
    ]


@pytest.mark.parametrize("expectation", ["kernels_per_iter <= x", "kernels_per_iter ~ 1", "1 == 1"])
def test_check_bad_syntax_exits_2(trace: Path, expectation: str) -> None:
    result = run("check", trace, "-e", expectation)
    assert result.exit_code == 2
    assert "--expect: cannot read the expectation" in one_error_line(result)


def test_check_unknown_metric_exits_2(trace: Path) -> None:
    result = run("check", trace, "-e", "kernels_per_itr == 1")
    assert result.exit_code == 2
    assert "unknown metric 'kernels_per_itr'. Use one of:" in one_error_line(result)


def test_check_without_expectations_is_a_usage_error(trace: Path) -> None:
    result = run("check", trace)
    assert result.exit_code == 2
    assert "give at least one expectation" in result.stderr


# ---------------------------------------------------------------------------------------------
# bad input: exit 1, one line on stderr naming the file, no traceback


@pytest.mark.parametrize("command", COMMANDS)
def test_not_a_trace(tmp_path: Path, command: str) -> None:
    path = tmp_path / "notes.json"
    path.write_text("this is not JSON")
    result = run(command, path)
    assert result.exit_code == 1
    assert result.stdout == ""
    assert f"{path}: " in one_error_line(result)
    assert "Traceback" not in result.output


def test_missing_file(tmp_path: Path) -> None:
    result = run("kernels", tmp_path / "absent.json.gz")
    assert result.exit_code == 1
    assert str(tmp_path / "absent.json.gz") in one_error_line(result)


def test_unknown_format_is_a_usage_error(trace: Path) -> None:
    assert run("kernels", trace, "--format", "xml").exit_code == 2


def test_occupancy_by_category_is_duration_weighted() -> None:
    # sdpa_math: the two fp32 GEMMs (25% over 417 us, 12.5% over 541 us a call) dominate "gemm".
    result = run("occupancy", SAMPLES / "sdpa_math.json.gz", "--by", "category", "--format", "json")
    assert result.exit_code == 0, result.output
    rows = {row["category"]: row for row in json.loads(result.stdout)}
    assert set(rows) == {"gemm", "elementwise", "mask", "softmax", "copy", "fill"}
    # softmax_warp_forward (62.5%, 282.6 us) and _safe_softmax's guard (isneginf, all, where:
    # 100%, 671.1 us a call), weighted by duration.
    softmax = (62.5 * 282.55 + 100 * (156.18 + 97.32 + 417.61)) / (282.55 + 156.18 + 97.32 + 417.61)
    assert rows["softmax"]["theoretical_occupancy_pct"] == pytest.approx(softmax, abs=0.05)
    assert 12.5 < rows["gemm"]["theoretical_occupancy_pct"] < 25.0


def test_by_is_hidden_where_there_is_one_view() -> None:
    assert "--by" not in run("cudnn", "--help").stdout
    assert "--by" in run("kernels", "--help").stdout  # kernel or op
