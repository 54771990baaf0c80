"""Why an SDPA call did not run a faster backend: PyTorch's dispatch rules, as data.

Read from PyTorch's ``aten/src/ATen/native/transformers/cuda/sdp_utils.cpp`` and
``sdp_utils_cpp.h`` (main, commit 001f694a, the rules torch 2.11 ships; the sample captures
check them against ``torch.backends.cuda.can_use_*`` on the GPU, see the capture manifest's
``dispatch``). Each rule is one ``check_*`` filter of a backend's ``can_use_*``: where the
call's recorded inputs fail it, the backend could not run. Rules on what a trace does not
record (strides, storage alignment, deterministic mode, the cuDNN build, a runtime switch)
are not here: a backend that passes every rule below is *eligible*, and the call ran slower
because the caller forced its backend (``sdpa_kernel``), the faster one is not built, or one
of those unrecorded rules refused it.

The order of speed is PyTorch's own priority: cuDNN first on sm90/sm100 where PyTorch prefers
it (cuDNN newer than 9.15: ``cudnn_preferred``), then FlashAttention, memory-efficient, math;
elsewhere cuDNN comes last (not preferred), and ROCm has no cuDNN backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType

import polars as pl

# The backend each SDPA implementation is, by dispatch's name.
BACKENDS: MappingProxyType[str, str] = MappingProxyType(
    {
        "sdpa_cudnn": "cudnn",
        "sdpa_flash": "flash",
        "sdpa_efficient": "efficient",
        "sdpa_math": "math",
    }
)
# Speed order (0 fastest) by GPU family: "hopper" is sm90/sm100 (cuDNN preferred).
SPEED_ORDER: MappingProxyType[str, MappingProxyType[str, int]] = MappingProxyType(
    {
        "hopper": MappingProxyType({"cudnn": 0, "flash": 1, "efficient": 2, "math": 3}),
        # sm90/sm100 where the cuDNN version is not known: cuDNN and flash tie.
        "hopper_unknown": MappingProxyType({"cudnn": 0, "flash": 0, "efficient": 2, "math": 3}),
        "cuda": MappingProxyType({"flash": 0, "efficient": 1, "math": 2, "cudnn": 3}),
        "rocm": MappingProxyType({"flash": 0, "efficient": 1, "math": 2}),
    }
)
# The backend each SDPBackend member forces (sdpa_kernel), as a capture manifest names it.
FORCED: MappingProxyType[str, str] = MappingProxyType(
    {
        "CUDNN_ATTENTION": "cudnn",
        "FLASH_ATTENTION": "flash",
        "EFFICIENT_ATTENTION": "efficient",
        "MATH": "math",
    }
)
ELIGIBLE = (
    "eligible by every rule the trace shows: the caller forced this backend (sdpa_kernel), "
    "the faster one is not built, or a rule on what traces do not record refused it (strides, "
    "storage alignment, deterministic mode, the cuDNN version)"
)
# The same where the capture's manifest says which backend the caller forced.
ELIGIBLE_SHOWN = "eligible by every rule the trace shows"
FORCED_TEXT = "the capture forced {} with sdpa_kernel (its manifest says so); without that: {}"
NO_SHAPES = "the trace recorded no shapes for this call (record_shapes=False): cannot tell"


@dataclass(frozen=True)
class Refusal:
    """A backend refuses a call where ``refuses`` holds; ``why`` says so with the values."""

    backend: str
    source: str  # the sdp_utils check it reads
    refuses: Callable[[], pl.Expr]
    why: Callable[[], pl.Expr]


def _c(name: str) -> pl.Expr:
    return pl.col(name)


def _half() -> pl.Expr:
    return _c("dtype").is_in(["fp16", "bf16"])


def _sm(major: int, minor: int) -> pl.Expr:
    """The GPU's compute capability as major * 10 + minor, compared with ``major.minor``."""
    return _c("sm") >= major * 10 + minor


def _gqa() -> pl.Expr:
    return _c("heads_q") != _c("heads_kv")


def _alignment() -> pl.Expr:
    """Memory-efficient attention's head-size alignment (minimum_gemm_alignment): tensor
    cores (sm80+, or sm70+ for half) need 128 bits of elements, sm80+ at least 4."""
    tensor_cores = _sm(8, 0) | (_sm(7, 0) & _half())
    bits = pl.when(_half()).then(16).otherwise(32)
    base = pl.when(_sm(8, 0)).then(4).otherwise(1)
    rocm = pl.when(_half()).then(8).otherwise(4)
    cuda = pl.when(tensor_cores).then(pl.max_horizontal(base, 128 // bits)).otherwise(base)
    return pl.when(_c("rocm")).then(rocm).otherwise(cuda)


def _cudnn_head_limit() -> pl.Expr:
    """cuDNN's head-size limit: 256 on sm90/sm100 (cuDNN 9.22+ with a new frontend, assumed),
    else 128."""
    return pl.when(_c("family").str.starts_with("hopper")).then(256).otherwise(128)


def _training_head_dim_gap() -> pl.Expr:
    """Flash's backward on sm86/sm89/sm120/sm121 refuses head_dim in (192, 224], and in
    (224, 256] with dropout."""
    d = _c("head_dim")
    consumer = _c("sm").is_in([86, 87, 88, 89, 120, 121])
    gap = ((d > 192) & (d <= 224)) | ((d > 224) & (d <= 256) & (_c("dropout") > 0))
    return _c("training") & consumer & gap


REFUSALS: tuple[Refusal, ...] = (
    # FlashAttention (can_use_flash_attention).
    Refusal("flash", "check_for_attn_mask",
            lambda: _c("mask").is_in(["bool", "float"]),
            lambda: pl.format("an attn_mask is given ({} mask): flash takes none, is_causal only",
                              _c("mask"))),
    Refusal("flash", "check_dtypes_flash_attention",
            lambda: ~(pl.when(_sm(8, 0) | _c("rocm")).then(_half())
                      .otherwise(_c("dtype") == "fp16")),
            lambda: pl.format("{} inputs: flash takes fp16 or bf16", _c("dtype"))),
    Refusal("flash", "check_head_dim_size_flash",
            lambda: (_c("head_dim") != _c("head_dim_v"))
            | (_c("head_dim") > pl.when(_c("rocm")).then(512).otherwise(256)),
            lambda: pl.format("head sizes q {} / v {}: flash needs them equal and at most 256",
                              _c("head_dim"), _c("head_dim_v"))),
    Refusal("flash", "check_head_dim_size_flash_nested",
            lambda: _c("_nested") & (_c("head_dim") % 8 != 0),
            lambda: pl.format("nested inputs with head_dim {} (not a multiple of 8)",
                              _c("head_dim"))),
    Refusal("flash", "check_flash_causal_non_square_seqlens",
            lambda: _c("causal") & ~_c("_nested") & (_c("seq_q") != _c("seq_kv")),
            lambda: pl.format("is_causal with seq_q {} != seq_kv {}: flash's causal mask would "
                              "align differently", _c("seq_q"), _c("seq_kv"))),
    Refusal("flash", "check_batch_size_and_num_heads_dense",
            lambda: ~_c("_nested") & _gqa() & ~_c("enable_gqa").fill_null(False),
            lambda: pl.format("heads_q {} != heads_kv {} without enable_gqa=True",
                              _c("heads_q"), _c("heads_kv"))),
    Refusal("flash", "check_grouped_query_attention",
            lambda: _c("enable_gqa").fill_null(False) & (_c("heads_q") % _c("heads_kv") != 0),
            lambda: pl.format("heads_q {} is not a multiple of heads_kv {}", _c("heads_q"),
                              _c("heads_kv"))),
    Refusal("flash", "check_flash_attention_hardware_support",
            lambda: ~_c("rocm") & ((_c("sm") < 80) | (_c("sm") > 121)),
            lambda: pl.format("sm{}: flash runs on sm80 to sm121", _c("sm"))),
    Refusal("flash", "check_requires_grad_and_head_dim_gt192_constraints_on_sm86_89_or_120",
            _training_head_dim_gap,
            lambda: pl.format("training with head_dim {} on sm{}", _c("head_dim"), _c("sm"))),
    # Memory-efficient attention (can_use_mem_efficient_attention).
    Refusal("efficient", "check_mem_efficient_hardware_support",
            lambda: ~_c("rocm") & ((_c("sm") < 50) | (_c("sm") > 121)),
            lambda: pl.format("sm{}: memory-efficient attention runs on sm50 to sm121", _c("sm"))),
    Refusal("efficient", "check_head_dim_size_mem_efficient",
            lambda: (_c("head_dim") % _c("_align") != 0) | (_c("head_dim_v") % _c("_align") != 0),
            lambda: pl.format("head sizes q {} / v {} not multiples of {} ({} inputs)",
                              _c("head_dim"), _c("head_dim_v"), _c("_align"), _c("dtype"))),
    Refusal("efficient", "check_tensor_dtype",
            lambda: ~(pl.when(_sm(8, 0) | _c("rocm"))
                      .then(_c("dtype").is_in(["fp16", "bf16", "fp32"]))
                      .otherwise(_c("dtype").is_in(["fp16", "fp32"]))),
            lambda: pl.format("{} inputs: memory-efficient attention takes fp16, bf16 or fp32",
                              _c("dtype"))),
    Refusal("efficient", "check_requires_grad_and_nested",
            lambda: ~_c("rocm") & _c("_nested") & _c("training"),
            lambda: pl.lit("nested inputs in training")),
    Refusal("efficient", "check_batch_size_and_num_heads_dense",
            lambda: ~_c("_nested") & _gqa()
            & (~_c("enable_gqa").fill_null(False) | _c("rocm")),
            lambda: pl.format("heads_q {} != heads_kv {} without enable_gqa=True (ROCm: no GQA)",
                              _c("heads_q"), _c("heads_kv"))),
    # cuDNN (can_use_cudnn_attention).
    Refusal("cudnn", "USE_ROCM", lambda: _c("rocm"), lambda: pl.lit("ROCm has no cuDNN")),
    Refusal("cudnn", "check_for_nested_inputs", lambda: _c("_nested"),
            lambda: pl.lit("nested inputs: cuDNN takes them only with "
                           "TORCH_CUDNN_SDPA_NESTED_TENSOR_ENABLED=1, and nested-tensor SDPA "
                           "tries it last, after math")),
    Refusal("cudnn", "check_dtypes_low_precision", lambda: ~_half(),
            lambda: pl.format("{} inputs: cuDNN takes fp16 or bf16", _c("dtype"))),
    Refusal("cudnn", "check_cudnn_hardware_support", lambda: (_c("sm") < 80) | (_c("sm") > 121),
            lambda: pl.format("sm{}: cuDNN attention runs on sm80 to sm121", _c("sm"))),
    Refusal("cudnn", "check_attn_mask_shape",
            lambda: _c("mask_dims").is_not_null() & ~_c("mask_dims").list.len().is_in([2, 4]),
            lambda: pl.format("a {}-D attn_mask: cuDNN takes 2-D or 4-D masks",
                              _c("mask_dims").list.len())),
    Refusal("cudnn", "check_cudnn_dropout",
            lambda: (_c("dropout") * 16).floor() != _c("dropout") * 16,
            lambda: pl.format("dropout {} is not a multiple of 1/16", _c("dropout"))),
    Refusal("cudnn", "check_batch_size_and_num_heads_dense",
            lambda: _gqa() & ~_c("enable_gqa").fill_null(False),
            lambda: pl.format("heads_q {} != heads_kv {} without enable_gqa=True",
                              _c("heads_q"), _c("heads_kv"))),
    Refusal("cudnn", "check_cudnn_tensor_shapes",
            lambda: (_c("head_dim") > _c("_cudnn_limit")) | (_c("head_dim_v") > _c("_cudnn_limit"))
            | (_c("head_dim") % 8 != 0) | (_c("head_dim_v") % 8 != 0),
            lambda: pl.format("head sizes q {} / v {}: cuDNN takes multiples of 8 up to {}",
                              _c("head_dim"), _c("head_dim_v"), _c("_cudnn_limit"))),
    Refusal("cudnn", "check_cudnn_tensor_shapes", lambda: _c("seq_kv") == 1,
            lambda: pl.lit("seq_kv 1: cuDNN refuses a key/value sequence of length 1")),
    Refusal("cudnn", "check_cudnn_tensor_shapes",
            lambda: (_c("dropout") > 0) & (_c("seq_q") == 1),
            lambda: pl.lit("dropout with seq_q 1")),
    Refusal("cudnn", "check_cudnn_d256_bprop_head_dim",
            lambda: _c("training") & _c("family").str.starts_with("hopper")
            & ~(((_c("head_dim") <= 128) & (_c("head_dim_v") <= 128))
                | ((_c("head_dim") == 192) & (_c("head_dim_v") == 128))
                | ((_c("head_dim") == 256) & (_c("head_dim_v") == 256))),
            lambda: pl.format("training with head sizes q {} / v {}: cuDNN's backward takes "
                              "<= 128, 192/128 or 256/256", _c("head_dim"), _c("head_dim_v"))),
)  # fmt: skip
# The call columns the rules read (a call's dispatch is a function of these alone).
DISPATCH_INPUTS = (
    "implementation", "direction", "family", "sm", "rocm", "training", "shapes_recorded",
    "dtype", "head_dim", "head_dim_v", "heads_q", "heads_kv", "seq_q", "seq_kv", "causal",
    "mask", "mask_dims", "dropout", "enable_gqa", "nested", "varlen", "forced",
)  # fmt: skip
# Backends whose refusals are listed, in the order a why_not names them (cuDNN, where it is
# faster at all, is the fastest).
LISTED = ("cudnn", "flash", "efficient")


def family() -> pl.Expr:
    """The GPU family that sets the speed order, from ``rocm``, ``sm`` and
    ``cudnn_preferred`` (null: the cuDNN version is not known)."""
    hopper = _c("sm").is_in([90, 100, 103])
    preferred = _c("cudnn_preferred")
    return (
        pl.when(_c("rocm")).then(pl.lit("rocm"))
        .when(hopper & preferred.is_null()).then(pl.lit("hopper_unknown"))
        .when(hopper & preferred).then(pl.lit("hopper"))
        .otherwise(pl.lit("cuda"))
    )  # fmt: skip


def _ranks() -> dict[str, pl.Expr]:
    """``_rank_<backend>`` for each backend and ``_rank_ran`` (the one that ran), on the
    call's family (null: the backend is not in its family's order)."""
    ranks = {
        f"_rank_{backend}": _c("family").replace_strict(
            {name: order.get(backend) for name, order in SPEED_ORDER.items()},
            default=None,
            return_dtype=pl.Int32,
        )
        for backend in ("cudnn", "flash", "efficient", "math")
    }
    ran = _c("implementation").replace_strict(dict(BACKENDS), default=None)
    ranks["_ran"] = ran
    return ranks


def with_why_not(calls: pl.DataFrame) -> pl.DataFrame:
    """``calls`` plus ``why_not``: for an SDPA forward call, each faster backend and the
    rules its inputs fail, then the faster backends they fail none of (``ELIGIBLE``); null
    where the fastest backend ran or the call is no SDPA forward call; and the same as lists,
    ``refused_backends`` and ``eligible_backends``. Reads ``implementation``, ``direction``,
    ``family``, ``sm``, ``rocm``, the shape columns and ``forced`` (the backend the caller
    forced with sdpa_kernel, where a capture manifest says so: then why_not says that first).

    Built in stages of small expressions, each naming the columns of the last: one nested
    expression repeats its parts at every use, and Polars then spends seconds planning it."""
    columns = calls.columns
    if "forced" not in calls.columns:
        calls = calls.with_columns(forced=pl.lit(None, pl.String))
    # Nested inputs as the rules see them: a nested tensor recorded without dims, or an SDPA
    # backend op given packed [tokens, heads, dim] inputs with cumulative lengths, which is
    # how nested-tensor SDPA reaches it (no aten::scaled_dot_product_attention op is recorded).
    nested = [_c(c).fill_null(False) for c in ("nested", "varlen") if c in calls.columns]
    calls = calls.with_columns(_nested=pl.any_horizontal(nested or [pl.lit(False)]))
    staged = calls.with_columns(**_ranks(), _align=_alignment(), _cudnn_limit=_cudnn_head_limit())
    staged = staged.with_columns(
        _rank_of_ran=pl.coalesce(
            [
                pl.when(_c("_ran") == b).then(_c(f"_rank_{b}"))
                for b in ("cudnn", "flash", "efficient", "math")
            ]
        )
    )
    texts = {}
    for backend in LISTED:
        reasons = [
            pl.when(r.refuses().fill_null(False)).then(r.why())
            for r in REFUSALS
            if r.backend == backend
        ]
        texts[f"_text_{backend}"] = pl.concat_str(reasons, separator="; ", ignore_nulls=True)
        texts[f"_faster_{backend}"] = (_c(f"_rank_{backend}") < _c("_rank_of_ran")).fill_null(False)
    staged = staged.with_columns(**texts)
    parts = {}
    for backend in LISTED:
        text, faster = _c(f"_text_{backend}"), _c(f"_faster_{backend}")
        parts[f"_refused_{backend}"] = pl.when(faster & (text != "")).then(
            pl.format("{}: {}", pl.lit(backend), text)
        )
        parts[f"_eligible_{backend}"] = pl.when(faster & (text == "")).then(pl.lit(backend))
        parts[f"_refused_name_{backend}"] = pl.when(faster & (text != "")).then(pl.lit(backend))
    staged = staged.with_columns(**parts)
    names = pl.concat_str([_c(f"_eligible_{b}") for b in LISTED], separator=", ", ignore_nulls=True)
    forced = (_c("forced") == _c("_ran")).fill_null(False)
    eligible = pl.when(forced).then(pl.lit(ELIGIBLE_SHOWN)).otherwise(pl.lit(ELIGIBLE))
    staged = staged.with_columns(
        _tail=pl.when(names != "").then(pl.format("{}: {}", names, eligible)), _forced=forced
    )
    joined = pl.concat_str(
        [*(_c(f"_refused_{b}") for b in LISTED), _c("_tail")], separator=" | ", ignore_nulls=True
    )
    staged = staged.with_columns(_joined=joined)
    shapes_missing = ~_c("shapes_recorded").fill_null(False)
    sdpa_forward = (_c("direction") == "forward") & _c("_ran").is_not_null()
    judged_at_all = sdpa_forward & _c("sm").is_not_null() & ~shapes_missing

    def backends(kind: str) -> pl.Expr:
        listed = pl.concat_list([_c(f"_{kind}_{b}") for b in LISTED]).list.drop_nulls()
        return pl.when(judged_at_all).then(listed)

    judged = staged.with_columns(
        why_not=pl.when(_c("_ran").is_null() | (_c("direction") != "forward") | _c("sm").is_null())
        .then(pl.lit(None, pl.String))
        .when(_c("_joined") == "")
        .then(pl.lit(None, pl.String))
        .when(shapes_missing)
        .then(pl.lit(NO_SHAPES))
        .when(_c("_forced"))
        .then(pl.format(FORCED_TEXT, _c("_ran"), _c("_joined")))
        .otherwise(_c("_joined")),
        refused_backends=backends("refused_name"),
        eligible_backends=backends("eligible"),
    )
    return judged.select([*columns, "why_not", "refused_backends", "eligible_backends"])


def fastest() -> pl.Expr:
    """The fastest backend on the call's GPU family (``family`` given)."""
    return pl.coalesce(
        [
            pl.when(_c("family") == name).then(pl.lit(min(order, key=order.__getitem__)))
            for name, order in SPEED_ORDER.items()
        ]
    )
