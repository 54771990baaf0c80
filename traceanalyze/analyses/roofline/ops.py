"""FLOP and byte models of ATen ops, as data.

One row per op: the formula family that models it and the positions, in the op's recorded
inputs (``Input Dims``, ``Input type`` and ``Concrete Inputs`` follow the op's schema order),
of the arguments the family reads. The arithmetic is in
:mod:`traceanalyze.analyses.roofline.formulas`.

Families:

* ``gemm``: ``C = A @ B``. FLOPs ``2·M·N·K`` per batch element, i.e. ``2·numel(A)·N``, with
  batch dimensions taken from A (``matmul`` only where B has at most two dimensions or both
  have the same batch dimensions: general broadcasting is not modelled). ``linear`` reads its
  weight as ``[N, K]``. The bias of ``addmm``/``baddbmm``/``linear`` is read, but its epilogue
  add (``M·N`` adds, under ``1/K`` of the product) is not counted as FLOPs.
* ``attention``: a fused scaled-dot-product attention forward. ``QKᵀ`` and ``PV`` are
  ``2·Sq·Sk·D`` FLOPs each per head: ``4·B·H·Sq·Sk·D`` (``2·B·H·Sq·Sk·(D + Dv)`` when the value
  head size differs), halved for ``is_causal``. H is the query's head count: grouped-query
  attention reads fewer key/value heads (bytes) but computes the same products. Causal
  attention with ``Sq != Sk`` is not modelled (where the mask's diagonal sits depends on the
  backend). The softmax's exponentials are not counted.
* ``attention_backward``: 2.5x the forward's FLOPs, FlashAttention's convention (the
  flash-attention repository's benchmark counts the backward as 2.5x the forward): five matrix
  products (``S = QKᵀ`` recomputed, ``dV``, ``dP``, ``dQ``, ``dK``) against the forward's two.
* ``conv``: 2-D convolution, ``2·N·K·(C/groups)·R·S·P·Q`` FLOPs = ``2·N·numel(weight)·P·Q``,
  the output size ``P x Q`` from the input size, stride, padding and dilation.
* ``memory``: bytes only, no FLOPs (elementwise math, copies, fills, softmax, normalisation,
  reductions): their time is set by memory traffic.

Bytes are a lower bound in every family: each input in ``reads`` read once, each output
written once (the family's product, plus inputs-shaped outputs in ``like``, one-byte masks in
``masks``, and for ``broadcast`` one output of the inputs' broadcast shape in the widest input
type), in the element size of the recorded type. Re-reads, caches and small side outputs
(logsumexp, normalisation statistics, reductions' outputs) are not counted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

import polars as pl

GEMM = "gemm"
ATTENTION = "attention"
ATTENTION_BACKWARD = "attention_backward"
CONV = "conv"
MEMORY = "memory"
COMPUTE_FAMILIES = (GEMM, ATTENTION, ATTENTION_BACKWARD, CONV)

# Argument roles a family reads, by name; each becomes an (Int64) column of the op table.
ROLES = ("a", "b", "q", "k", "v", "causal", "input", "weight", "stride", "padding", "dilation",
         "groups")  # fmt: skip

# `Input type` strings as the profiler writes them (c10 scalar type names): short name and
# element size in bytes. A type not listed here (Scalar, ScalarList, TensorList, "", ...) is
# not a tensor.
ELEMENT_TYPES: Mapping[str, tuple[str, int]] = MappingProxyType(
    {
        "c10::BFloat16": ("bf16", 2),
        "c10::Half": ("fp16", 2),
        "float": ("fp32", 4),
        "double": ("fp64", 8),
        "c10::Float8_e4m3fn": ("fp8", 1),
        "c10::Float8_e5m2": ("fp8", 1),
        "c10::Float8_e4m3fnuz": ("fp8", 1),
        "c10::Float8_e5m2fnuz": ("fp8", 1),
        "long int": ("int64", 8),
        "long": ("int64", 8),  # older profilers
        "int": ("int32", 4),
        "short int": ("int16", 2),
        "signed char": ("int8", 1),
        "unsigned char": ("uint8", 1),
        "bool": ("bool", 1),
        "c10::complex<float>": ("complex64", 8),
        "c10::complex<double>": ("complex128", 16),
    }
)


@dataclass(frozen=True)
class Requirement:
    """A ``Concrete Inputs`` value the model needs; other values leave the call unmodelled."""

    position: int
    value: str
    reason: str  # why the call is unmodelled otherwise


@dataclass(frozen=True)
class OpModel:
    name: str  # the ATen op, exactly as the trace names it
    family: str
    roles: Mapping[str, int] = field(default_factory=dict)  # role -> input position
    reads: tuple[int, ...] | None = None  # positions read once; None: every tensor input
    like: tuple[int, ...] = ()  # outputs shaped and typed like these inputs
    masks: tuple[int, ...] = ()  # one-byte outputs shaped like these inputs
    broadcast: bool = False  # one output of the read tensors' broadcast shape
    b_is_nk: bool = False  # gemm: B is stored [N, K] (linear's weight)
    require: Requirement | None = None
    # Arguments of the functional schema: a recorded tensor past them is an ``out=`` tensor
    # (``where(cond, self, other, out=...)``), written by the op, not read (None: no out=).
    arity: int | None = None


def _gemm(name: str, a: int, b: int, reads: tuple[int, ...], *, nk: bool = False) -> OpModel:
    return OpModel(name, GEMM, {"a": a, "b": b}, reads, b_is_nk=nk)


def _attention(name: str, causal: int, reads: tuple[int, ...]) -> OpModel:
    return OpModel(name, ATTENTION, {"q": 0, "k": 1, "v": 2, "causal": causal}, reads)


def _attention_backward(name: str, causal: int, reads: tuple[int, ...]) -> OpModel:
    # Writes the three input gradients, shaped like q, k and v.
    roles = {"q": 1, "k": 2, "v": 3, "causal": causal}
    return OpModel(name, ATTENTION_BACKWARD, roles, reads, like=(1, 2, 3))


def _conv(name: str, *, stride: int, padding: int, dilation: int, groups: int,
          reads: tuple[int, ...], transposed: int | None = None) -> OpModel:  # fmt: skip
    roles = {"input": 0, "weight": 1, "stride": stride, "padding": padding,
             "dilation": dilation, "groups": groups}  # fmt: skip
    require = (
        None
        if transposed is None
        else Requirement(transposed, "False", "a transposed convolution (not modelled)")
    )
    return OpModel(name, CONV, roles, reads, require=require)


def _pointwise(arities: Mapping[str, int]) -> tuple[OpModel, ...]:
    """Out-of-place elementwise ops: read every tensor input of the functional schema (its
    argument count given), write their broadcast shape (an ``out=`` tensor is that write)."""
    return tuple(
        OpModel(f"aten::{n}", MEMORY, broadcast=True, arity=arity) for n, arity in arities.items()
    )


# The functional schemas' argument counts (native_functions.yaml): add.Tensor(self, other,
# alpha), where.self(condition, self, other), clamp(self, min, max), gelu(self, approximate).
POINTWISE_ARITY: Mapping[str, int] = {
    **dict.fromkeys(("add", "sub", "where", "clamp", "threshold_backward", "gelu_backward"), 3),
    **dict.fromkeys(("native_dropout_backward",), 3),
    **dict.fromkeys(
        ("mul", "div", "pow", "gelu", "clamp_min", "clamp_max", "maximum", "minimum"), 2
    ),
    **dict.fromkeys(("silu_backward", "sigmoid_backward", "tanh_backward"), 2),
    **dict.fromkeys(
        ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "reciprocal", "sigmoid", "tanh", "relu"),
        1,
    ),
    **dict.fromkeys(("silu", "erf"), 1),
}


def _in_place(*names: str) -> tuple[OpModel, ...]:
    """In-place ops: read every tensor input (self included), write self."""
    return tuple(OpModel(f"aten::{n}", MEMORY, like=(0,)) for n in names)


# Positions follow each op's schema in native_functions.yaml; the is_causal positions were
# checked against recorded Concrete Inputs (tl_h100_bert_small: flash; the 175 MB bench trace:
# cuDNN forward and backward).
OP_MODELS: tuple[OpModel, ...] = (
    _gemm("aten::mm", 0, 1, (0, 1)),
    _gemm("aten::bmm", 0, 1, (0, 1)),
    _gemm("aten::addmm", 1, 2, (0, 1, 2)),
    _gemm("aten::baddbmm", 1, 2, (0, 1, 2)),
    _gemm("aten::matmul", 0, 1, (0, 1)),
    _gemm("aten::linear", 0, 1, (0, 1, 2), nk=True),
    # (query, key, value, dropout_p, is_causal, return_debug_mask, scale)
    _attention("aten::_scaled_dot_product_flash_attention", 4, (0, 1, 2)),
    # (query, key, value, attn_bias, compute_log_sumexp, dropout_p, is_causal, scale)
    _attention("aten::_scaled_dot_product_efficient_attention", 6, (0, 1, 2, 3)),
    _attention("aten::_scaled_dot_product_cudnn_attention", 6, (0, 1, 2, 3)),
    # (grad_out, query, key, value, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k,
    #  dropout_p, is_causal, philox_seed, philox_offset, scale)
    _attention_backward(
        "aten::_scaled_dot_product_flash_attention_backward", 11, (0, 1, 2, 3, 4, 5)
    ),
    # (grad_out, query, key, value, attn_bias, out, logsumexp, philox_seed, philox_offset,
    #  dropout_p, grad_input_mask, is_causal, scale)
    _attention_backward(
        "aten::_scaled_dot_product_efficient_attention_backward", 11, (0, 1, 2, 3, 4, 5, 6)
    ),
    # (grad_out, query, key, value, out, logsumexp, philox_seed, philox_offset, attn_bias,
    #  cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, scale)
    _attention_backward(
        "aten::_scaled_dot_product_cudnn_attention_backward", 14, (0, 1, 2, 3, 4, 5, 8)
    ),
    # (self, weight, padding, stride, dilation, groups, benchmark, deterministic, allow_tf32)
    _conv("aten::cudnn_convolution", padding=2, stride=3, dilation=4, groups=5, reads=(0, 1)),
    # (self, weight, bias, padding, stride, dilation, groups, benchmark, deterministic)
    _conv("aten::miopen_convolution", padding=3, stride=4, dilation=5, groups=6,
          reads=(0, 1, 2)),
    # (input, weight, bias, stride, padding, dilation, transposed, output_padding, groups, ...)
    _conv("aten::_convolution", stride=3, padding=4, dilation=5, groups=8, reads=(0, 1, 2),
          transposed=6),
    _conv("aten::convolution", stride=3, padding=4, dilation=5, groups=8, reads=(0, 1, 2),
          transposed=6),
    # (input, weight, bias, stride, padding, dilation, groups)
    _conv("aten::conv2d", stride=3, padding=4, dilation=5, groups=6, reads=(0, 1, 2)),
    *_pointwise(POINTWISE_ARITY),
    *_in_place(
        "add_", "sub_", "mul_", "div_", "neg_", "exp_", "sqrt_", "rsqrt_", "pow_", "sigmoid_",
        "tanh_", "relu_", "clamp_", "clamp_min_", "clamp_max_", "addcmul_", "addcdiv_", "lerp_",
        "masked_fill_", "threshold_",
    ),
    OpModel("aten::copy_", MEMORY, reads=(1,), like=(0,)),  # (self, src, non_blocking)
    OpModel("aten::fill_", MEMORY, reads=(), like=(0,)),
    OpModel("aten::zero_", MEMORY, reads=(), like=(0,)),
    # (input, p, train): the output and a one-byte keep-mask
    OpModel("aten::native_dropout", MEMORY, reads=(0,), like=(0,), masks=(0,)),
    # (self, dim, half_to_float)
    OpModel("aten::_softmax", MEMORY, reads=(0,), like=(0,),
            require=Requirement(2, "False", "half_to_float: the output type is not recorded")),
    OpModel("aten::_log_softmax", MEMORY, reads=(0,), like=(0,),
            require=Requirement(2, "False", "half_to_float: the output type is not recorded")),
    # (self, dim, dtype): a given dtype changes the output's type
    OpModel("aten::_safe_softmax", MEMORY, reads=(0,), like=(0,),
            require=Requirement(2, "", "an output dtype is given")),
    # (grad_output, output, dim, input_dtype)
    OpModel("aten::_softmax_backward_data", MEMORY, reads=(0, 1), like=(0,)),
    OpModel("aten::_log_softmax_backward_data", MEMORY, reads=(0, 1), like=(0,)),
    # (input, normalized_shape, weight, bias, eps)
    OpModel("aten::native_layer_norm", MEMORY, reads=(0, 2, 3), like=(0,)),
    # (grad_out, input, normalized_shape, mean, rstd, weight, bias, output_mask)
    OpModel("aten::native_layer_norm_backward", MEMORY, reads=(0, 1, 3, 4, 5, 6),
            like=(1, 5, 6),
            require=Requirement(7, "[True, True, True]", "not every gradient is requested")),
    OpModel("aten::native_batch_norm", MEMORY, like=(0,)),
    OpModel("aten::cudnn_batch_norm", MEMORY, like=(0,)),
    OpModel("aten::sum", MEMORY, reads=(0,)),
    OpModel("aten::mean", MEMORY, reads=(0,)),
)  # fmt: skip

# Why an op without a model has none, first match wins (regex over the op name).
UNMODELLED_REASONS: tuple[tuple[str, str], ...] = (
    (r"^aten::_foreach_", "a TensorList op: the trace records no shapes for its tensors"),
    (r"flex_attention", "flex attention: its block mask decides the FLOPs and is not in the trace"),
    (r"^triton_", "an Inductor-generated kernel: what it computes is not in the trace"),
)
NO_MODEL = "no FLOP/byte model for this op"
COMPOSITE = (
    "a composite op: its modelled children count its work, so the rest of its kernels are "
    "not modelled"
)
NO_OP = "launched by no CPU op in the trace"


def op_table() -> pl.DataFrame:
    """``OP_MODELS`` as one frame: name, family, one Int64 column per role, the byte lists,
    the flags and the requirement."""
    rows = [
        {
            "name": m.name,
            "family": m.family,
            **{role: m.roles.get(role) for role in ROLES},
            "reads": None if m.reads is None else list(m.reads),
            "like": list(m.like),
            "masks": list(m.masks),
            "broadcast": m.broadcast,
            "b_is_nk": m.b_is_nk,
            "require_position": None if m.require is None else m.require.position,
            "require_value": None if m.require is None else m.require.value,
            "require_reason": None if m.require is None else m.require.reason,
            "arity": m.arity,
        }
        for m in OP_MODELS
    ]
    schema: dict[str, pl.DataType] = {
        "name": pl.String(),
        "family": pl.String(),
        **{role: pl.Int64() for role in ROLES},
        "reads": pl.List(pl.Int64()),
        "like": pl.List(pl.Int64()),
        "masks": pl.List(pl.Int64()),
        "broadcast": pl.Boolean(),
        "b_is_nk": pl.Boolean(),
        "require_position": pl.Int64(),
        "require_value": pl.String(),
        "require_reason": pl.String(),
        "arity": pl.Int64(),
    }
    return pl.DataFrame(rows, schema=schema)


MODELLED_OPS = tuple(m.name for m in OP_MODELS)


def unmodelled_reason() -> pl.Expr:
    """Why the op in column ``op_name`` has no model (null names: launched by no op)."""
    name = pl.col("op_name")
    expr: pl.Expr = pl.lit(NO_MODEL)
    for pattern, reason in reversed(UNMODELLED_REASONS):
        expr = pl.when(name.str.contains(pattern)).then(pl.lit(reason)).otherwise(expr)
    return pl.when(name.is_null()).then(pl.lit(NO_OP)).otherwise(expr)
