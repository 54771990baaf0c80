"""The package's own names: ``traceanalyze.load`` is both the module and the entry point, and
capture's error is the one CaptureError, shown as one line."""

from __future__ import annotations

import inspect
import subprocess
import sys
import types
from pathlib import Path

from click.testing import CliRunner

import capture
import traceanalyze
from traceanalyze.cli import main

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "sample_traces" / "h200_default" / "sdpa_flash.json.gz"


def test_load_is_the_module_and_the_function() -> None:
    import traceanalyze.load.fast  # the dotted form that a function used to shadow

    assert isinstance(traceanalyze.load, types.ModuleType)
    assert traceanalyze.load.fast is sys.modules["traceanalyze.load.fast"]
    assert sys.modules["traceanalyze.load"] is traceanalyze.load
    assert list(inspect.signature(traceanalyze.load).parameters)[:2] == ["path", "cache"]
    trace = traceanalyze.load(SAMPLE, cache=False)
    assert isinstance(trace, traceanalyze.Trace)
    from traceanalyze import load

    assert load(SAMPLE, cache=False).gpu.height == trace.gpu.height


def test_import_traceanalyze_load_in_a_fresh_interpreter() -> None:
    code = "import traceanalyze.load as m; print(type(m).__name__, callable(m))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=False
    )
    assert done.stdout == "_CallableModule True\n", done.stderr


def test_one_capture_error_shown_as_one_line(tmp_path: Path) -> None:
    assert traceanalyze.CaptureError is capture.CaptureError
    args = ["capture", "--out", str(tmp_path), "--device", "cpu", "--cuda-graph", "replay"]
    result = CliRunner().invoke(main, [*args, "--variants", "naive"], prog_name="traceanalyze")
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == [
        "traceanalyze: error: --cuda-graph replay needs CUDA; run on a GPU machine or drop "
        "--cuda-graph"
    ]
