"""The registry of attention variants: adding a variant is adding one `Variant` to `VARIANTS`.

The first nine share one set of inputs (the configuration's q, k, v) and are the default; the
cases after them (:mod:`capture.cases`) bring inputs of their own, as real models do (masks,
grouped-query attention, a KV cache, nested tensors, flex masks, fp8). Builders import torch
when called, so this module (and the CLI's help) loads without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from capture import cases
from capture.cases import CaseBuilder
from capture.errors import CaptureError

if TYPE_CHECKING:
    import torch

Attention = Callable[["torch.Tensor", "torch.Tensor", "torch.Tensor"], "torch.Tensor"]


@dataclass(frozen=True)
class AttentionSpec:
    """What a builder needs to know, and no more: the head size, whether attention is causal,
    and every sequence length the built function will be called with (masks are made for them
    when the variant is built, outside the calls that are timed or profiled)."""

    head_dim: int
    causal: bool
    seqs: tuple[int, ...]


Builder = Callable[[AttentionSpec, "torch.device"], Attention]


@dataclass(frozen=True)
class Variant:
    """One way to compute attention, and how to record it.

    ``region`` names the ``record_function`` around each step (``<region>_fwd`` / ``_bwd``).
    ``sdpa_backend`` is the ``SDPBackend`` member forced with ``sdpa_kernel`` (None: no forcing).
    ``detect_backend`` asks the run to name the SDPA backend that actually ran.
    ``case`` builds the variant's own inputs, call and reference (:mod:`capture.cases`):
    such a variant records the forward only, eager.
    """

    name: str
    description: str
    build: Builder
    region: str = "attn"
    needs_cuda: bool = False
    sdpa_backend: str | None = None
    detect_backend: bool = False
    case: CaseBuilder | None = None


def naive_attention(
    spec: AttentionSpec, device: torch.device, *, in_place: bool = False
) -> Attention:
    """q@k^T, scale, causal ``masked_fill`` with a bool triu mask built once, softmax, @v."""
    import torch

    scale = 1.0 / math.sqrt(spec.head_dim)
    longest = max(spec.seqs)
    mask = (
        torch.triu(torch.ones(longest, longest, dtype=torch.bool, device=device), 1)
        if spec.causal
        else None
    )

    def naive(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        scores = (q @ k.transpose(-2, -1)) * scale
        if mask is not None:
            # The top-left block of a triu mask is the triu mask of the shorter length; slice
            # only for a shorter sequence, so the usual one-length trace holds no slice ops.
            seq = scores.shape[-1]
            fitted = mask if seq == longest else mask[:seq, :seq]
            fill = scores.masked_fill_ if in_place else scores.masked_fill
            scores = fill(fitted, float("-inf"))
        return torch.softmax(scores, dim=-1) @ v

    return naive


def _sdpa(spec: AttentionSpec, device: torch.device) -> Attention:
    from torch.nn.functional import scaled_dot_product_attention

    def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, is_causal=spec.causal)

    return sdpa


def _causal(
    _b: torch.Tensor, _h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
) -> torch.Tensor:
    return q_idx >= kv_idx


def _flex(spec: AttentionSpec, device: torch.device) -> Attention:
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    block_masks = {
        seq: create_block_mask(_causal, None, None, seq, seq, device=device)
        if spec.causal
        else None
        for seq in spec.seqs
    }
    compiled = torch.compile(flex_attention)

    def flex(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = compiled(q, k, v, block_mask=block_masks[q.shape[-2]])
        return out

    return flex


def _compiled_naive(spec: AttentionSpec, device: torch.device) -> Attention:
    import torch

    compiled: Attention = torch.compile(naive_attention(spec, device))
    return compiled


def _forced(name: str, backend: str, what: str) -> Variant:
    return Variant(
        name,
        f"F.scaled_dot_product_attention forced to {what} with sdpa_kernel(SDPBackend.{backend})",
        _sdpa,
        region="sdpa",
        needs_cuda=backend != "MATH",
        sdpa_backend=backend,
        detect_backend=True,
    )


def _case_only(spec: AttentionSpec, device: torch.device) -> Attention:
    raise CaptureError("this variant brings its own inputs: run it through its case")


def _case(name: str, description: str, case: CaseBuilder, *, region: str = "sdpa",
          needs_cuda: bool = False) -> Variant:  # fmt: skip
    return Variant(
        name, description, _case_only, region=region, needs_cuda=needs_cuda,
        detect_backend=region == "sdpa", case=case,
    )  # fmt: skip


# The cases real models run, each with inputs of its own (not in the default selection).
CASES: tuple[Variant, ...] = (
    _case("sdpa_causal_padded", "F.scaled_dot_product_attention with one bool mask, causal "
          "and hiding each sequence's padding keys", cases.causal_padded),
    _case("sdpa_odd_head_mask", f"F.scaled_dot_product_attention with a padding mask and head "
          f"size {cases.ODD_HEAD_DIM} (no fused backend takes both: math)", cases.odd_head_mask),
    _case("sdpa_gqa", "causal F.scaled_dot_product_attention, a quarter of the query heads for "
          "keys and values, enable_gqa=True", cases.grouped_query),
    _case("sdpa_decode", "F.scaled_dot_product_attention of one new token per sequence against "
          "a KV cache of seq tokens", cases.decode),
    _case("sdpa_nested", "F.scaled_dot_product_attention on nested jagged (variable-length) "
          "q, k, v", cases.nested_jagged),
    _case("flex_sliding_window", f"torch.compile'd flex_attention, causal sliding window of "
          f"{cases.SLIDING_WINDOW} tokens", cases.sliding_window, region="attn", needs_cuda=True),
    _case("flex_document", "torch.compile'd flex_attention, causal document mask over packed "
          "documents, the block mask created in every call", cases.document, region="attn",
          needs_cuda=True),
    _case("flex_fp8", "torch.compile'd causal flex_attention on fp8 (e4m3) q, k, v (sm89+)",
          cases.flex_fp8, region="attn", needs_cuda=True),
)  # fmt: skip

VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant(
            "naive",
            "q@k^T * scale, out-of-place masked_fill with a bool triu mask, softmax, @v",
            naive_attention,
        ),
        Variant(
            "naive_inplace",
            "as naive but with in-place masked_fill_ (no copy of the scores)",
            partial(naive_attention, in_place=True),
        ),
        _forced("sdpa_math", "MATH", "the math (composite ATen) backend"),
        _forced("sdpa_efficient", "EFFICIENT_ATTENTION", "memory-efficient attention (cutlass)"),
        _forced("sdpa_flash", "FLASH_ATTENTION", "FlashAttention"),
        _forced("sdpa_cudnn", "CUDNN_ATTENTION", "cuDNN attention"),
        Variant(
            "sdpa_auto",
            "F.scaled_dot_product_attention with PyTorch's own backend choice",
            _sdpa,
            region="sdpa",
            detect_backend=True,
        ),
        Variant(
            "flex_attention",
            "torch.compile'd flex_attention with a causal block mask",
            _flex,
            needs_cuda=True,
        ),
        Variant("compiled_naive", "torch.compile of the naive variant", _compiled_naive),
        *CASES,
    )
}
# What a capture runs unless told otherwise: the variants that share the seed's inputs.
DEFAULT_VARIANTS: tuple[str, ...] = tuple(n for n, v in VARIANTS.items() if v.case is None)
