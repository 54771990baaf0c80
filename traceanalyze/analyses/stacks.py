"""`stacks`: GPU and CPU time attributed to the user's own Python lines (``with_stack=True``).

Each GPU activity (through its launching op, linked at load time) and each outermost CPU
operator is attributed to its *user frame*: the innermost ``python_function`` frame around it
(time containment on its thread) whose file is not PyTorch's, the standard library's or an
installed package's (``NOT_USER``, rules as data). ``full_stack`` names the whole chain of user
frames instead, outermost first.

Autograd's backward thread runs no user code: an op with no user frame around it on its own
thread is looked up on its process's main Python thread (the one with the most frames), where
the user's code waits for it (``loss.backward()``). An activity launched outside any op (a
collective on its communication thread) is attributed through its runtime call instead.

Kineto writes a frame as ``"path/file.py(123): function"`` with the path relative to the
``sys.path`` entry that holds it, so an installed package (``transformers/...``) reads like the
user's own package: ``exclude`` adds path prefixes to leave out.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from traceanalyze.analyses.activities import activities, in_iterations, iteration_count
from traceanalyze.analyses.cputree import outermost_ops
from traceanalyze.analyses.graphs import with_captured_ops
from traceanalyze.analyses.iterations import on_counted
from traceanalyze.analyses.memcpy import known, transfers
from traceanalyze.display import Shown
from traceanalyze.link import RUNTIME_CATS, THREAD, nearest_ancestor, with_call_tree
from traceanalyze.trace import Trace

NO_FRAME = "(no Python frame)"
NO_STACKS = (
    "No Python stacks in this trace: record it with "
    "torch.profiler.profile(with_stack=True) to attribute time to your Python lines."
)
# "file.py(123): function"; "<built-in ...>" and "nn.Module: Linear_0" frames do not match.
FRAME_NAME = r"^(.+)\((\d+)\): (.*)$"
STACK_SEPARATOR = " -> "
# A user stack is rarely deeper than a few frames; this bounds the walk up the frames.
MAX_STACK_DEPTH = 64


@dataclass(frozen=True)
class Library:
    """Frames whose file path (as Kineto writes it) matches ``pattern`` are not the user's."""

    pattern: str
    what: str


# Standard library modules by their top-level name ("typing.py", "concurrent/futures/...").
_STDLIB = "|".join(sorted(re.escape(name) for name in sys.stdlib_module_names))
NOT_USER: tuple[Library, ...] = (
    Library(r"^<", "built-in, frozen or generated code (<frozen os>, <string>)"),
    Library(r"(?:^|/)(?:site|dist)-packages/", "an installed package written with its full path"),
    Library(r"(?:^|/)lib/python\d[\d.]*/", "the standard library written with its full path"),
    Library(
        r"^(?:torch|torchvision|torchaudio|torchtext|torchao|torchgen|functorch|triton)/",
        "PyTorch and its own libraries",
    ),
    Library(rf"^(?:{_STDLIB})(?:\.py$|/)", "the standard library"),
    Library(
        r"^(?:ipykernel|IPython|tornado|traitlets|zmq)/|^(?:colab_)?kernel_launcher\.py$"
        r"|^ipykernel_launcher\.py$",
        "the notebook kernel that runs a cell",
    ),
)
TABLE_COLUMNS = (
    "frame",
    "gpu_us_per_iter",
    "cpu_us_per_iter",
    "kernels_per_iter",
    "share_of_gpu_activity_pct",
)
COPY_COLUMNS = ("frame", "chain", "count_per_iter", "us_per_iter", "bytes_per_iter")


@dataclass(frozen=True, repr=False)  # Shown: a short repr, tables in Jupyter
class StacksResult(Shown):
    """What ``stacks`` shows: ``rows`` (``TABLE_COLUMNS``), the memory copies and sets by user
    frame and op chain (``COPY_COLUMNS``), and how many Python frames the trace holds (0: it
    was recorded without with_stack, and the frames are empty)."""

    rows: pl.DataFrame
    copies: pl.DataFrame
    python_frames: int

    @property
    def empty(self) -> bool:
        return self.python_frames == 0


@on_counted
def stacks(
    trace: Trace,
    *,
    full_stack: bool = False,
    category: str | None = None,
    exclude: Sequence[str] = (),
) -> StacksResult:
    """GPU activity, kernels and CPU operator time per iteration by user frame, and the memory
    copies by user frame (see the module docstring). ``category`` keeps only the GPU
    activities of one category (e.g. ``memcpy``)."""
    if not trace.python.height:
        return StacksResult(_empty_rows(), _empty_copies(), 0)
    gpu = in_iterations(with_captured_ops(trace, activities(trace)))
    if category is not None:
        gpu = gpu.filter(pl.col("category") == category)
    ops = outermost_ops(trace).filter(pl.col("iteration").is_not_null())
    copies = transfers(trace).filter(pl.col("in_iteration"))
    gpu, copies = _with_launcher(gpu, trace.cpu), _with_launcher(copies, trace.cpu)
    launching = pl.concat([gpu["op_id"], ops["op_id"], copies["op_id"]]).drop_nulls().unique()
    frames = frames_of_ops(trace, launching, full_stack=full_stack, exclude=exclude)
    n = iteration_count(trace)
    return StacksResult(
        _rows(_with_frame(gpu, frames), _with_frame(ops, frames), n),
        _copies(_with_frame(copies, frames), n),
        trace.python.height,
    )


def _with_launcher(gpu: pl.DataFrame, cpu: pl.DataFrame) -> pl.DataFrame:
    """``gpu`` with ``op_id`` the launching op, else the runtime or driver call that launched
    the activity outside any op (e.g. a collective launched by its communication thread)."""
    calls = cpu.filter(pl.col("cat").is_in(RUNTIME_CATS)).select(
        "rank",
        launch_tid="tid",
        launch_ts_ns="ts_ns",
        launch_dur_ns="dur_ns",
        call_id="op_id",
    )
    keys = ["rank", "launch_tid", "launch_ts_ns", "launch_dur_ns"]
    return (
        gpu.join(calls.unique(keys, keep="first"), on=keys, how="left", maintain_order="left")
        .with_columns(op_id=pl.coalesce("op_id", "call_id"))
        .drop("call_id")
    )


def _with_frame(frame: pl.DataFrame, frames: pl.DataFrame) -> pl.DataFrame:
    return frame.join(frames, on="op_id", how="left").with_columns(
        pl.col("frame").fill_null(NO_FRAME)
    )


def _rows(gpu: pl.DataFrame, ops: pl.DataFrame, n: int) -> pl.DataFrame:
    gpu_total_ns = gpu["dur_ns"].sum()
    by_gpu = gpu.group_by("frame").agg(
        gpu_ns=pl.col("dur_ns").sum(), kernels=(pl.col("kind") == "kernel").sum()
    )
    by_cpu = ops.group_by("frame").agg(cpu_ns=pl.col("dur_ns").sum())
    table = by_gpu.join(by_cpu, on="frame", how="full", coalesce=True).fill_null(0)
    share = pl.col("gpu_ns") * 100 / gpu_total_ns if gpu_total_ns else pl.lit(None)
    return (
        table.select(
            "frame",
            gpu_us_per_iter=pl.col("gpu_ns") / 1e3 / n,
            cpu_us_per_iter=pl.col("cpu_ns") / 1e3 / n,
            kernels_per_iter=pl.col("kernels") / n,
            share_of_gpu_activity_pct=share.cast(pl.Float64),
        )
        .cast({"gpu_us_per_iter": pl.Float64, "cpu_us_per_iter": pl.Float64})
        .sort(["gpu_us_per_iter", "cpu_us_per_iter", "frame"], descending=[True, True, False])
    )


def _copies(copies: pl.DataFrame, n: int) -> pl.DataFrame:
    return (
        copies.group_by("frame", "chain")
        .agg(
            count_per_iter=pl.len() / n,
            us_per_iter=pl.col("dur_ns").sum() / 1e3 / n,
            bytes_per_iter=known(pl.col("bytes"), pl.col("bytes").sum() / n),
        )
        .cast({"count_per_iter": pl.Float64, "us_per_iter": pl.Float64})
        .sort(["us_per_iter", "frame", "chain"], descending=[True, False, False])
    )


def _empty_rows() -> pl.DataFrame:
    return pl.DataFrame(schema={"frame": pl.String, **{c: pl.Float64 for c in TABLE_COLUMNS[1:]}})


def _empty_copies() -> pl.DataFrame:
    return pl.DataFrame(
        schema={"frame": pl.String, "chain": pl.String, **{c: pl.Float64 for c in COPY_COLUMNS[2:]}}
    )


def user_frames(python: pl.DataFrame, exclude: Sequence[str] = ()) -> pl.DataFrame:
    """The rows of the python frame that are user frames, with ``frame`` ("file:line
    function")."""
    parts = pl.col("name").str.extract_groups(FRAME_NAME)
    named = python.with_columns(
        file=parts.struct.field("1"), line=parts.struct.field("2"), function=parts.struct.field("3")
    )
    patterns = [rule.pattern for rule in NOT_USER] + [f"^{re.escape(p)}" for p in exclude]
    library = pl.any_horizontal(pl.col("file").str.contains(p) for p in patterns)
    return named.filter(pl.col("file").is_not_null() & ~library).select(
        *THREAD, "ts_ns", "dur_ns", frame=pl.format("{}:{} {}", "file", "line", "function")
    )


def frames_of_ops(
    trace: Trace, op_ids: pl.Series, *, full_stack: bool = False, exclude: Sequence[str] = ()
) -> pl.DataFrame:
    """``op_id`` -> ``frame``: the innermost user frame around each CPU interval of ``op_ids``
    (or the user stack), for those that have one: on its own thread, else on its process's main
    Python thread."""
    ops = trace.cpu.filter(pl.col("op_id").is_in(op_ids.implode())).select(
        *THREAD, "ts_ns", "dur_ns", target="op_id"
    )
    frames = user_frames(trace.python, exclude)
    own = _innermost(ops, frames, full_stack)
    main = _main_threads(trace.python)
    waiting = (
        ops.join(own, left_on="target", right_on="op_id", how="anti")
        .join(main, on=["rank", "pid"], how="inner")
        .filter(pl.col("tid") != pl.col("main_tid"))
        .with_columns(tid=pl.col("main_tid"))
        .drop("main_tid")
    )
    return pl.concat([own, _innermost(waiting, frames, full_stack)])


# How Kineto names a module's forward call (``with_stack=True`` or ``with_modules=True``).
MODULE_PREFIX = "nn.Module: "


def module_frames(python: pl.DataFrame) -> pl.DataFrame:
    """The ``nn.Module: X`` frames of the python frame, with ``frame`` the module's name as
    Kineto numbers it (``BertLayer_0``)."""
    return python.filter(pl.col("name").str.starts_with(MODULE_PREFIX)).select(
        *THREAD, "ts_ns", "dur_ns", frame=pl.col("name").str.strip_prefix(MODULE_PREFIX)
    )


def modules_of_ops(trace: Trace, op_ids: pl.Series, separator: str) -> pl.DataFrame:
    """``op_id`` -> ``frame``: the ``nn.Module`` calls open around each CPU interval of
    ``op_ids`` on its own thread, outermost first, joined by ``separator`` (ops outside every
    module, such as autograd's backward thread, have no row: module frames are the forward's)."""
    ops = trace.cpu.filter(pl.col("op_id").is_in(op_ids.drop_nulls().implode())).select(
        *THREAD, "ts_ns", "dur_ns", target="op_id"
    )
    return _innermost(ops, module_frames(trace.python), full_stack=True, separator=separator)


def _main_threads(python: pl.DataFrame) -> pl.DataFrame:
    """Per process, the thread with the most Python frames (``main_tid``)."""
    return (
        python.group_by(THREAD)
        .len()
        .sort(["len", "tid"], descending=[True, False])
        .group_by("rank", "pid", maintain_order=True)
        .first()
        .select("rank", "pid", main_tid="tid")
    )


def _innermost(
    ops: pl.DataFrame, frames: pl.DataFrame, full_stack: bool, separator: str = STACK_SEPARATOR
) -> pl.DataFrame:
    """``op_id`` (the ops' ``target``) -> ``frame`` for the ops inside one of ``frames``."""
    # Ranked like annotations: at an equal span a Python frame encloses the op it calls.
    intervals = pl.concat(
        [
            ops.with_columns(cat=pl.lit("cpu_op")),
            frames.with_columns(cat=pl.lit("user_annotation")),
        ],
        how="diagonal_relaxed",
    )
    tree = with_call_tree(intervals)
    is_frame = pl.col("target").is_null()
    targets = tree.filter(~is_frame)
    innermost = nearest_ancestor(tree, targets["op_id"], is_frame)
    labels = tree["frame"]
    frame = (
        _stacks(tree, innermost, labels, is_frame, separator)
        if full_stack
        else labels.gather(innermost)
    )
    return pl.DataFrame(
        {"op_id": targets["target"], "frame": frame}, schema={"op_id": pl.Int64, "frame": pl.String}
    ).filter(pl.col("frame").is_not_null())


def _stacks(
    tree: pl.DataFrame, innermost: pl.Series, labels: pl.Series, is_frame: pl.Expr, separator: str
) -> pl.Series:
    """For each innermost frame row, the labels of it and its enclosing user frames joined
    outermost first."""
    rows = innermost.unique().drop_nulls()
    chain = pl.DataFrame({"row": rows, "label": labels.gather(rows)}).select(
        "row", chain=pl.concat_list("label")
    )
    cursor = rows
    for _ in range(MAX_STACK_DEPTH):
        cursor = nearest_ancestor(tree, cursor, is_frame)
        if cursor.is_null().all():
            break
        parent = pl.lit(labels.gather(cursor))
        chain = chain.with_columns(
            chain=pl.when(parent.is_not_null())
            .then(pl.concat_list(parent, "chain"))
            .otherwise("chain")
        )
    joined = chain.select("row", frame=pl.col("chain").list.join(separator))
    return (
        pl.DataFrame({"row": innermost})
        .join(joined, on="row", how="left", maintain_order="left")
        .get_column("frame")
    )
