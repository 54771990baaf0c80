"""FLOPs and bytes of op calls from their recorded shapes, columnar (see :mod:`.ops`).

Input: one row per call (``call``: the cpu row id, ``name``, and the raw JSON columns
``input_dims``, ``input_types``, ``concrete_inputs``). The JSON is decoded with explicit
types only where a strict pattern says it has that shape, so odd text leaves one call
unmodelled (with its reason) instead of failing the column.
"""

from __future__ import annotations

import polars as pl

from traceanalyze.analyses.roofline.ops import (
    ATTENTION,
    ATTENTION_BACKWARD,
    CONV,
    ELEMENT_TYPES,
    GEMM,
    MEMORY,
    op_table,
)

_INT = r"-?\d{1,18}"
_INTS = rf"(?:{_INT}\s*(?:,\s*{_INT}\s*)*)?"
_INT_LIST = rf"\[\s*{_INTS}\]"
# A JSON list of flat integer lists ("Input Dims" of ops without TensorList arguments).
SHAPES_PATTERN = rf"^\s*\[\s*(?:{_INT_LIST}\s*(?:,\s*{_INT_LIST}\s*)*)?\]\s*$"
_STR = r'"[^"\\]*"'
# A JSON list of plain strings ("Input type", "Concrete Inputs").
STRINGS_PATTERN = rf"^\s*\[\s*(?:{_STR}\s*(?:,\s*{_STR}\s*)*)?\]\s*$"
INT_LIST_PATTERN = rf"^\s*{_INT_LIST}\s*$"
INT_PATTERN = rf"^\s*{_INT}\s*$"

NO_SHAPES = "no shapes recorded (profiled without record_shapes)"
UNREADABLE = "recorded shapes not readable as tensor shapes"
NO_CONCRETE = (
    "no Concrete Inputs recorded (older PyTorch): the arguments the model needs are unknown"
)
NOT_FITTING = "recorded shapes do not fit the model"
INNER_MISMATCH = "operand shapes do not multiply (inner dimensions differ)"
BATCH_BROADCAST = "batch dimensions broadcast (not modelled)"
CAUSAL_UNEQUAL = "causal attention with Sq != Sk (the mask's alignment depends on the backend)"
NOT_BROADCASTABLE = "inputs do not broadcast to one shape"

_SIZES = {name: size for name, (_, size) in ELEMENT_TYPES.items()}
_DTYPES = {name: short for name, (short, _) in ELEMENT_TYPES.items()}
MODEL_COLUMNS = (
    "call", "family", "dtype", "shapes", "causal", "flops", "bytes", "reason", "gemm_m",
    "gemm_n", "gemm_k",
)  # fmt: skip


SIGNATURE = ("name", "input_dims", "input_types", "concrete_inputs")


def model_calls(calls: pl.DataFrame) -> pl.DataFrame:
    """Per call: ``family``, ``dtype`` (its main operand's), ``shapes`` (compact Input Dims),
    ``causal`` (attention), ``flops`` and ``bytes`` (null where unmodelled) and ``reason``
    (why unmodelled, else null). Calls of ops without a model are dropped.

    Each distinct signature (op name and recorded inputs) is modelled once: a training trace
    repeats a few dozen of them thousands of times."""
    signatures = (
        calls.cast({column: pl.String for column in SIGNATURE})
        .join(op_table().select("name"), on="name", how="semi")
        .group_by(SIGNATURE)
        .agg("call")
        .with_row_index("signature")
    )
    models = _model_signatures(
        signatures.lazy().select(pl.col("signature").cast(pl.Int64).alias("call"), *SIGNATURE)
    )
    return (
        signatures.select(pl.col("signature").cast(pl.Int64), "call")
        .explode("call")
        .join(models.rename({"call": "signature"}), on="signature", how="left")
        .select(MODEL_COLUMNS)
    )


def _model_signatures(calls: pl.LazyFrame) -> pl.DataFrame:
    """The models of the distinct signatures (a few dozen rows, so the cost is the number of
    steps: the byte sums run as one lazy plan over the decoded frames)."""
    frame = _decoded(calls.join(op_table().lazy(), on="name", how="inner")).collect().lazy()
    args = _arguments(frame).collect().lazy()
    sized = (
        frame.join(_read_bytes(frame, args), on="call", how="left")
        .join(_written_like(frame, args, "like", sized=True), on="call", how="left")
        .join(_written_like(frame, args, "masks", sized=False), on="call", how="left")
        .join(_broadcast(frame, args), on="call", how="left")
        .join(_first_tensor(args), on="call", how="left")
        .collect()
    )
    modelled = _with_family_columns(sized).with_columns(*_common_columns())
    return modelled.with_columns(_reason()).select(
        "call",
        "family",
        "dtype",
        pl.col("input_dims").str.replace_all(r"\s+", "").str.replace(r"(,\[\])+\]$", "]")
        .alias("shapes"),
        "causal",
        pl.when(pl.col("_reason").is_null()).then("_flops").alias("flops"),
        pl.when(pl.col("_reason").is_null()).then("_bytes").alias("bytes"),
        pl.col("_reason").alias("reason"),
        *_gemm_dims(),
    )  # fmt: skip


def _decoded(frame: pl.LazyFrame) -> pl.LazyFrame:
    """``dims`` (List[List[Int64]]), ``types`` and ``concrete`` (List[String]), decoded only
    where the text has that shape; ``readable`` where dims and types agree in length."""
    dims_ok = pl.col("input_dims").str.contains(SHAPES_PATTERN)
    types_ok = pl.col("input_types").str.contains(STRINGS_PATTERN)
    concrete_ok = pl.col("concrete_inputs").str.contains(STRINGS_PATTERN)
    decoded = frame.with_columns(
        dims=pl.when(dims_ok & types_ok)
        .then(pl.col("input_dims"))
        .str.json_decode(pl.List(pl.List(pl.Int64))),
        types=pl.when(dims_ok & types_ok)
        .then(pl.col("input_types"))
        .str.json_decode(pl.List(pl.String)),
        concrete=pl.when(concrete_ok)
        .then(pl.col("concrete_inputs"))
        .str.json_decode(pl.List(pl.String)),
    )
    return decoded.with_columns(
        readable=(pl.col("dims").list.len() == pl.col("types").list.len()).fill_null(False)
    ).with_columns(dims=pl.when("readable").then("dims"), types=pl.when("readable").then("types"))


def _arguments(frame: pl.LazyFrame) -> pl.LazyFrame:
    """One row per (call, input position) of the readable calls: dims, numel, element size
    (null for arguments that are not tensors) and dtype."""
    readable = frame.filter("readable").select("call", "dims", "types")
    return (
        readable.explode(["dims", "types"])
        .with_columns(pos=pl.int_range(pl.len(), dtype=pl.Int64).over("call"))
        .with_columns(
            numel=pl.col("dims").list.eval(pl.element().product()).list.first(),
            elsize=pl.col("types").replace_strict(_SIZES, default=None, return_dtype=pl.Int64),
            dtype=pl.col("types").replace_strict(_DTYPES, default=None, return_dtype=pl.String),
        )
    )


def _positions(frame: pl.LazyFrame, column: str) -> pl.LazyFrame:
    """(call, pos) for each position listed in ``column``."""
    return frame.select("call", pl.col(column).alias("pos")).explode("pos").drop_nulls("pos")


def _read_tensors(frame: pl.LazyFrame, args: pl.LazyFrame) -> pl.LazyFrame:
    """The tensor arguments each call reads: the listed ``reads``, or every tensor of the
    functional schema (an ``out=`` tensor past its ``arity`` is written, not read)."""
    listed = _positions(frame.filter(pl.col("reads").is_not_null()), "reads").join(
        args, on=["call", "pos"], how="inner"
    )
    every = args.join(
        frame.filter(pl.col("reads").is_null()).select("call", "arity"), on="call"
    ).filter(pl.col("arity").is_null() | (pl.col("pos") < pl.col("arity")))
    return pl.concat([listed, every], how="diagonal_relaxed").filter(pl.col("elsize").is_not_null())


def _read_bytes(frame: pl.LazyFrame, args: pl.LazyFrame) -> pl.LazyFrame:
    read = _read_tensors(frame, args)
    # Type promotion: tensors with dimensions outrank 0-d ones (a float tensor minus a double
    # scalar tensor stays float); only 0-d inputs promote among themselves. A bool tensor is a
    # lower category than any number: where(bool mask, 0-d float, 0-d float) writes floats.
    dimensioned = pl.col("dims").list.len() > 0
    number = pl.col("types") != "bool"
    return read.group_by("call").agg(
        _read_bytes=(pl.col("numel") * pl.col("elsize")).sum(),
        _widest=pl.coalesce(
            pl.col("elsize").filter(dimensioned & number).max(),
            pl.col("elsize").filter(number).max(),
            pl.col("elsize").max(),
        ),
    )


def _written_like(
    frame: pl.LazyFrame, args: pl.LazyFrame, column: str, *, sized: bool
) -> pl.LazyFrame:
    """Bytes of outputs shaped like the inputs listed in ``column`` (one byte per element
    unless ``sized``)."""
    written = _positions(frame, column).join(args, on=["call", "pos"], how="inner")
    per_element = pl.col("elsize") if sized else pl.lit(1, pl.Int64)
    return written.group_by("call").agg(
        (pl.col("numel") * per_element).sum().alias(f"_{column}_bytes")
    )


def _broadcast(frame: pl.LazyFrame, args: pl.LazyFrame) -> pl.LazyFrame:
    """For calls with ``broadcast``: the element count of the read tensors' broadcast shape
    (``_broadcast_numel``) and whether they broadcast at all (``_broadcastable``)."""
    tensors = _read_tensors(frame.filter("broadcast"), args)
    # Align dimensions from the right, as broadcasting does: 0 = the last dimension.
    aligned = (
        tensors.select("call", "pos", size=pl.col("dims").list.reverse())
        .with_columns(axis=pl.int_ranges(pl.col("size").list.len()))
        .explode(["size", "axis"])
        .drop_nulls("size")
    )
    per_axis = aligned.group_by("call", "axis").agg(
        size=pl.when(pl.col("size").min() == 0).then(0).otherwise(pl.col("size").max()),
        fits=((pl.col("size") == pl.col("size").max()) | (pl.col("size") == 1)).all(),
    )
    shaped = per_axis.group_by("call").agg(
        _broadcast_numel=pl.col("size").product(), _broadcastable=pl.col("fits").all()
    )
    # Calls whose tensors are all 0-d have no axis: one element.
    return (
        tensors.select("call")
        .unique()
        .join(shaped, on="call", how="left")
        .with_columns(
            pl.col("_broadcast_numel").fill_null(1), pl.col("_broadcastable").fill_null(True)
        )
    )


def _first_tensor(args: pl.LazyFrame) -> pl.LazyFrame:
    """The dtype of each call's first tensor argument (the main operand of memory ops), a
    bool mask only where every tensor is one (``where(mask, a, b)`` computes in a's dtype)."""
    return (
        args.filter(pl.col("elsize").is_not_null())
        .group_by("call")
        .agg(_first_dtype=pl.col("dtype").sort_by(pl.col("dtype") == "bool", "pos").first())
    )


# Accessors over the wide frame: a role column holds the input position the role reads.
def _dims(role: str) -> pl.Expr:
    return pl.col("dims").list.get(pl.col(role), null_on_oob=True)


def _dim(role: str, index: int) -> pl.Expr:
    return _dims(role).list.get(index, null_on_oob=True)


def _ndim(role: str) -> pl.Expr:
    return _dims(role).list.len()


def _numel(role: str) -> pl.Expr:
    return _dims(role).list.eval(pl.element().product()).list.first()


def _elsize(role: str) -> pl.Expr:
    kind = pl.col("types").list.get(pl.col(role), null_on_oob=True)
    return kind.replace_strict(_SIZES, default=None, return_dtype=pl.Int64)


def _dtype(role: str) -> pl.Expr:
    kind = pl.col("types").list.get(pl.col(role), null_on_oob=True)
    return kind.replace_strict(_DTYPES, default=None, return_dtype=pl.String)


def _concrete(role: str) -> pl.Expr:
    return pl.col("concrete").list.get(pl.col(role), null_on_oob=True)


def _with_family_columns(frame: pl.DataFrame) -> pl.DataFrame:
    """``_flops``, ``_out_bytes`` (the family's own output) and ``_family_reason`` from each
    family's formulas, on that family's rows only (one small expression set per family)."""
    parts = [
        rows.with_columns(
            (columns := formulas())[0].alias("_flops"),
            columns[1].alias("_family_reason"),
            columns[2].alias("_out_bytes"),
        )
        for family, formulas in _FAMILIES.items()
        if (rows := frame.filter(pl.col("family") == family)).height
    ]
    if not parts:  # no signature at all
        return frame.with_columns(
            _flops=pl.lit(None, pl.Int64),
            _family_reason=pl.lit(None, pl.String),
            _out_bytes=pl.lit(None, pl.Int64),
        )
    return pl.concat(parts, how="diagonal_relaxed")


def _common_columns() -> list[pl.Expr]:
    """``_bytes`` (every read and write), ``causal`` and ``dtype``."""
    family = pl.col("family")
    broadcast = pl.when("broadcast").then(pl.col("_broadcast_numel") * pl.col("_widest"))
    written = pl.sum_horizontal(
        "_out_bytes", pl.col("_like_bytes").fill_null(0), pl.col("_masks_bytes").fill_null(0),
        broadcast.fill_null(0),
    )  # fmt: skip
    fits = pl.col("_out_bytes").is_not_null() & (~pl.col("broadcast") | broadcast.is_not_null())
    return [
        pl.when(fits).then(pl.col("_read_bytes").fill_null(0) + written).alias("_bytes"),
        pl.when(family.is_in([ATTENTION, ATTENTION_BACKWARD]))
        .then(_concrete("causal") == "True")
        .alias("causal"),
        pl.coalesce(_dtype("a"), _dtype("q"), _dtype("input"), "_first_dtype").alias("dtype"),
    ]


def _attention_backward() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """2.5x the forward's FLOPs (see ops.py; exact: the forward's FLOPs are even); its
    outputs, the three gradients, are ``like`` writes."""
    flops, reason, _ = _attention()
    return flops * 5 // 2, reason, pl.lit(0, pl.Int64)


def _memory() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """No FLOPs; its writes are ``like``, ``masks`` and ``broadcast``."""
    unbroadcastable = pl.col("broadcast") & ~pl.col("_broadcastable").fill_null(True)
    reason = pl.when(unbroadcastable).then(pl.lit(NOT_BROADCASTABLE))
    return pl.lit(None, pl.Int64), reason, pl.lit(0, pl.Int64)


def _gemm() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """FLOPs ``2·numel(A)·N``, why not, and the output's bytes ``numel(A)/K·N`` elements."""
    nk = pl.col("b_is_nk")
    k_of_a = _dim("a", -1)
    k_of_b = (
        pl.when(nk).then(_dim("b", -1)).when(_ndim("b") >= 2).then(_dim("b", -2))
        .otherwise(_dim("b", 0))
    )  # fmt: skip
    n = pl.when(nk).then(_dim("b", 0)).when(_ndim("b") >= 2).then(_dim("b", -1)).otherwise(1)
    same_batch = _dims("a").list.slice(0, _ndim("a") - 2) == _dims("b").list.slice(
        0, _ndim("b") - 2
    )
    batch_ok = nk | (_ndim("b") <= 2) | ((_ndim("a") == _ndim("b")) & same_batch)
    fits = (k_of_a == k_of_b) & (k_of_a > 0) & batch_ok
    reason = (
        pl.when(k_of_a != k_of_b)
        .then(pl.lit(INNER_MISMATCH))
        .when(~batch_ok)
        .then(pl.lit(BATCH_BROADCAST))
        .when(~fits.fill_null(False))
        .then(pl.lit(NOT_FITTING))
    )
    flops = pl.when(fits).then(2 * _numel("a") * n)
    out = pl.when(fits).then(_numel("a") // k_of_a * n * _elsize("a"))
    return flops, reason, out


def _gemm_dims() -> list[pl.Expr]:
    """A modelled GEMM's ``gemm_m``, ``gemm_n`` and ``gemm_k``: ``C[M, N] = A[M, K] @ B[K, N]``
    per batch element, ``M`` with any batch dimensions of A that B does not have folded in
    (``linear`` and ``matmul`` by a matrix run one GEMM over them); null for other calls.
    N and K are the leading dimensions of the row-major operands (A's rows are K long, B's and
    C's N long), so they are the ones a tensor-core kernel needs aligned."""
    nk = pl.col("b_is_nk")
    k = _dim("a", -1)
    n = pl.when(nk).then(_dim("b", 0)).when(_ndim("b") >= 2).then(_dim("b", -1)).otherwise(1)
    batch_of_b = _numel("b") // (k * n)
    gemm = (pl.col("family") == GEMM) & pl.col("_reason").is_null() & (k > 0) & (n > 0)
    return [
        pl.when(gemm & (batch_of_b > 0)).then(_numel("a") // k // batch_of_b).alias("gemm_m"),
        pl.when(gemm).then(n).alias("gemm_n"),
        pl.when(gemm).then(k).alias("gemm_k"),
    ]


def _attention() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """Forward FLOPs ``2·B·H·Sq·Sk·(D + Dv)``, halved when causal; the output ``B·H·Sq·Dv``."""
    batch, heads, sq, d = (_dim("q", i) for i in range(4))
    sk, dv = _dim("k", 2), _dim("v", 3)
    four_d = (_ndim("q") == 4) & (_ndim("k") == 4) & (_ndim("v") == 4)
    causal = _concrete("causal") == "True"
    full = 2 * batch * heads * sq * sk * (d + dv)
    unequal = causal & (sq != sk)
    fits = four_d & ~unequal
    reason = (
        pl.when(~four_d.fill_null(False))
        .then(pl.lit(NOT_FITTING))
        .when(unequal)
        .then(pl.lit(CAUSAL_UNEQUAL))
        .when(causal.is_null())
        .then(pl.lit(NOT_FITTING))
    )
    flops = pl.when(fits & causal.is_not_null()).then(
        pl.when(causal).then(full // 2).otherwise(full)
    )
    out = pl.when(four_d).then(batch * heads * sq * dv * _elsize("q"))
    return flops, reason, out


def _int_list(role: str) -> pl.Expr:
    text = _concrete(role)
    return (
        pl.when(text.str.contains(INT_LIST_PATTERN)).then(text).str.json_decode(pl.List(pl.Int64))
    )


def _conv() -> tuple[pl.Expr, pl.Expr, pl.Expr]:
    """2-D convolution FLOPs ``2·N·numel(weight)·P·Q`` and the output ``N·K·P·Q``."""
    n, c, height, width = (_dim("input", i) for i in range(4))
    k, c_per_group, r, s = (_dim("weight", i) for i in range(4))
    stride, padding, dilation = _int_list("stride"), _int_list("padding"), _int_list("dilation")
    groups_text = _concrete("groups")
    groups = pl.when(groups_text.str.contains(INT_PATTERN)).then(groups_text).cast(pl.Int64)

    def out_size(size: pl.Expr, kernel: pl.Expr, axis: int) -> pl.Expr:
        reach = dilation.list.get(axis, null_on_oob=True) * (kernel - 1) + 1
        padded = size + 2 * padding.list.get(axis, null_on_oob=True)
        return (padded - reach) // stride.list.get(axis, null_on_oob=True) + 1

    p, q = out_size(height, r, 0), out_size(width, s, 1)
    fits = (
        (_ndim("input") == 4)
        & (_ndim("weight") == 4)
        & (c == c_per_group * groups)
        & (stride.list.len() == 2)
        & (padding.list.len() == 2)
        & (dilation.list.len() == 2)
        & (p > 0)
        & (q > 0)
    ).fill_null(False)
    reason = pl.when(~fits).then(pl.lit(NOT_FITTING))
    flops = pl.when(fits).then(2 * n * _numel("weight") * p * q)
    out = pl.when(fits).then(n * k * p * q * _elsize("input"))
    return flops, reason, out


# Each family's formulas: (FLOPs, why not, bytes of its own output).
_FAMILIES = {
    GEMM: _gemm,
    ATTENTION: _attention,
    ATTENTION_BACKWARD: _attention_backward,
    CONV: _conv,
    MEMORY: _memory,
}


def _reason() -> pl.Expr:
    """Why a call is unmodelled, the first that applies; null when it is modelled."""
    requirement_met = (
        pl.col("require_position").is_null()
        | (pl.col("concrete").list.get(pl.col("require_position"), null_on_oob=True)
           == pl.col("require_value"))
    ).fill_null(False)  # fmt: skip
    compute = pl.col("family") != MEMORY
    needs_concrete = (
        pl.col("family").is_in([ATTENTION, ATTENTION_BACKWARD, CONV])
        | pl.col("require_position").is_not_null()
    )
    return (
        pl.when(pl.col("input_dims").is_null())
        .then(pl.lit(NO_SHAPES))
        .when(~pl.col("readable"))
        .then(pl.lit(UNREADABLE))
        .when(needs_concrete & pl.col("concrete_inputs").is_null())
        .then(pl.lit(NO_CONCRETE))
        .when(needs_concrete & pl.col("concrete").is_null())
        .then(pl.lit(UNREADABLE))
        .when(~requirement_met)
        .then("require_reason")
        .when(pl.col("_family_reason").is_not_null())
        .then("_family_reason")
        .when((compute & pl.col("_flops").is_null()) | pl.col("_bytes").is_null())
        .then(pl.lit(NOT_FITTING))
        .alias("_reason")
    )
