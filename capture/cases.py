"""Attention cases that real models run, each with inputs of its own: a causal plus padding
mask, grouped-query attention, decode against a KV cache, nested jagged (variable-length)
inputs, flex with a sliding-window or a document mask, fp8 flex, and a mask with a head size
no fused SDPA backend takes (PyTorch falls back to its math backend).

A case builds its q, k, v, the function the step calls, a float64 reference, and the facts the
manifest records (``attention``): the shapes, dtype, mask, causality and dense FLOPs the trace
of the call should show, so ``traceanalyze attention`` can be checked against them. Builders
import torch when called (this module imports without it).
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# fp8 e4m3 keeps 3 mantissa bits: its attention differs from float64 by a few per cent.
FP8_TOLERANCE = 0.1
SLIDING_WINDOW = 256
# A head size no fused SDPA backend takes with a mask: not a multiple of 8.
ODD_HEAD_DIM = 60
# The block size flex uses (create_block_mask's default).
FLEX_BLOCK = 128
SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}


@dataclass(frozen=True)
class CaseSpec:
    """The sizes a case builds its inputs from (a capture configuration's), and no more:
    this module must not import the configuration, which imports the variants."""

    batch: int
    heads: int
    seq: int
    head_dim: int
    dtype: str  # torch's name: bfloat16, float16, float32
    seed: int = 0


@dataclass(frozen=True)
class Case:
    """One case's tensors, the call, its float64 answer and the manifest's facts."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    reference: Callable[[], torch.Tensor]  # float64, in the layout of `dense(output)`
    facts: dict[str, Any]
    dense: Callable[[torch.Tensor], torch.Tensor] = field(default=lambda out: out)
    tolerance: float | None = None  # None: the configuration's for its dtype
    # Where SDPA dispatches the call: q, k, v, attn_mask, dropout, is_causal, enable_gqa.
    sdpa_arguments: tuple[Any, ...] | None = None


CaseBuilder = Callable[[CaseSpec, "torch.device"], Case]


def dense_flops(batch: int, heads: int, seq_q: int, seq_kv: int, head_dim: int) -> int:
    """QK^T and PV over every score: 4·B·H·Sq·Skv·D."""
    return 4 * batch * heads * seq_q * seq_kv * head_dim


def facts(
    config: CaseSpec,
    *,
    heads_kv: int | None = None,
    seq_q: int | None = None,
    seq_kv: int | None = None,
    head_dim: int | None = None,
    dtype: str | None = None,
    causal: bool,
    mask: str,
    **more: Any,
) -> dict[str, Any]:
    """The manifest's ``attention`` facts of a case (defaults: the configuration's)."""
    seq_q = config.seq if seq_q is None else seq_q
    seq_kv = config.seq if seq_kv is None else seq_kv
    head_dim = config.head_dim if head_dim is None else head_dim
    return {
        "batch": config.batch,
        "heads_q": config.heads,
        "heads_kv": config.heads if heads_kv is None else heads_kv,
        "seq_q": seq_q,
        "seq_kv": seq_kv,
        "head_dim": head_dim,
        "dtype": SHORT_DTYPES.get(dtype or config.dtype, dtype or config.dtype),
        "causal": causal,
        "mask": mask,
        "dropout": 0.0,
        "flops_dense": dense_flops(config.batch, config.heads, seq_q, seq_kv, head_dim),
        **more,
    }


def _randn(config: CaseSpec, device: torch.device, *shape: int, seed_offset: int) -> torch.Tensor:
    import torch

    generator = torch.Generator(device=device).manual_seed(config.seed + seed_offset)
    return torch.randn(
        shape, generator=generator, device=device, dtype=getattr(torch, config.dtype)
    )


def _qkv(config: CaseSpec, device: torch.device, q_shape: tuple[int, ...],
         kv_shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    return (
        _randn(config, device, *q_shape, seed_offset=0),
        _randn(config, device, *kv_shape, seed_offset=1),
        _randn(config, device, *kv_shape, seed_offset=2),
    )


def reference_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Softmax attention in float64 on the CPU side of precision: ``allowed`` (bool,
    broadcastable to the scores) keeps the scores where true; k and v heads repeat for GQA."""
    q, k, v = (t.double() for t in (q, k, v))
    if k.shape[-3] != q.shape[-3]:
        repeat = q.shape[-3] // k.shape[-3]
        k, v = k.repeat_interleave(repeat, dim=-3), v.repeat_interleave(repeat, dim=-3)
    scores = q @ k.transpose(-2, -1) * (scale or 1.0 / math.sqrt(q.shape[-1]))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(-1) @ v


def _lengths(config: CaseSpec) -> list[int]:
    """Per batch element, the valid length: the full sequence down to a quarter of it."""
    step = max(config.seq // (2 * max(config.batch, 1)), 1)
    return [max(config.seq - i * step, 1) for i in range(config.batch)]


def causal_padded(config: CaseSpec, device: torch.device) -> Case:
    """SDPA with one bool mask that is causal and hides each sequence's padding keys."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    shape = (config.batch, config.heads, config.seq, config.head_dim)
    q, k, v = _qkv(config, device, shape, shape)
    positions = torch.arange(config.seq, device=device)
    lengths = torch.tensor(_lengths(config), device=device)
    causal = positions[:, None] >= positions[None, :]
    keys = positions[None, :] < lengths[:, None]  # [batch, seq]
    allowed = (causal[None] & keys[:, None, :])[:, None]  # [batch, 1, seq, seq]

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v, allowed),
        facts(config, causal=False, mask="bool", mask_shape=list(allowed.shape),
              valid_lengths=_lengths(config)),
        sdpa_arguments=(q, k, v, allowed, 0.0, False, False),
    )  # fmt: skip


def odd_head_mask(config: CaseSpec, device: torch.device) -> Case:
    """A padding mask with head size 60: flash takes no mask, memory-efficient attention and
    cuDNN want head sizes in multiples of 8, so PyTorch falls back to its math backend."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    shape = (config.batch, config.heads, config.seq, ODD_HEAD_DIM)
    q, k, v = _qkv(config, device, shape, shape)
    positions = torch.arange(config.seq, device=device)
    lengths = torch.tensor(_lengths(config), device=device)
    allowed = (positions[None, :] < lengths[:, None])[:, None, None, :]  # [batch, 1, 1, seq]

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v, allowed),
        facts(config, head_dim=ODD_HEAD_DIM, causal=False, mask="bool",
              mask_shape=list(allowed.shape)),
        sdpa_arguments=(q, k, v, allowed, 0.0, False, False),
    )  # fmt: skip


def _kv_heads(config: CaseSpec) -> int:
    """Grouped-query attention: a quarter of the query heads (at least one, a divisor)."""
    heads = max(config.heads // 4, 1)
    while config.heads % heads:
        heads -= 1
    return heads


def grouped_query(config: CaseSpec, device: torch.device) -> Case:
    """Causal GQA: a quarter of the query heads for keys and values, enable_gqa=True."""
    from torch.nn.functional import scaled_dot_product_attention

    kv_heads = _kv_heads(config)
    q, k, v = _qkv(
        config, device,
        (config.batch, config.heads, config.seq, config.head_dim),
        (config.batch, kv_heads, config.seq, config.head_dim),
    )  # fmt: skip

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    import torch

    causal = torch.ones(config.seq, config.seq, dtype=torch.bool, device=device).tril()
    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v, causal),
        facts(config, heads_kv=kv_heads, causal=True, mask="none"),
        sdpa_arguments=(q, k, v, None, 0.0, True, True),
    )  # fmt: skip


def decode(config: CaseSpec, device: torch.device) -> Case:
    """One new token per sequence against a KV cache of ``seq`` tokens (non-causal: the new
    token sees the whole cache)."""
    from torch.nn.functional import scaled_dot_product_attention

    q, k, v = _qkv(
        config, device,
        (config.batch, config.heads, 1, config.head_dim),
        (config.batch, config.heads, config.seq, config.head_dim),
    )  # fmt: skip

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v)

    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v),
        facts(config, seq_q=1, causal=False, mask="none"),
        sdpa_arguments=(q, k, v, None, 0.0, False, False),
    )  # fmt: skip


def nested_jagged(config: CaseSpec, device: torch.device) -> Case:
    """Nested jagged (variable-length) q, k, v: ``batch`` sequences of different lengths in one
    tensor, [batch, heads, j, head_dim]."""
    import torch
    from torch.nn.functional import scaled_dot_product_attention

    lengths = _lengths(config)
    parts = [
        [_randn(config, device, n, config.heads, config.head_dim, seed_offset=3 * i + j)
         for i, n in enumerate(lengths)]
        for j in range(3)
    ]  # fmt: skip
    q, k, v = (torch.nested.nested_tensor(p, layout=torch.jagged).transpose(1, 2) for p in parts)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return scaled_dot_product_attention(q, k, v)

    def reference() -> torch.Tensor:
        per_sequence = []
        for i in range(len(lengths)):
            q_i, k_i, v_i = (p[i].transpose(0, 1) for p in parts)  # [heads, length, dim]
            per_sequence.append(reference_attention(q_i, k_i, v_i).transpose(0, 1))
        return torch.cat(per_sequence)

    exact = sum(dense_flops(1, config.heads, n, n, config.head_dim) for n in lengths)
    longest = max(lengths)
    return Case(
        q, k, v, fn, reference,
        facts(config, seq_q=longest, seq_kv=longest, causal=False, mask="none",
              lengths=lengths, tokens=sum(lengths), flops_exact=exact, nested=True),
        dense=lambda out: out.transpose(1, 2).values(),
    )  # fmt: skip


def _flex(config: CaseSpec, device: torch.device, mask_mod: Any, *, fresh_mask: bool,
          dtype: str | None = None) -> tuple[Any, Any]:  # fmt: skip
    """The compiled flex_attention call with ``mask_mod``'s block mask, built once, or inside
    every call (``fresh_mask``: as a step that packs new documents does); and the mask."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def block_mask() -> Any:
        return create_block_mask(mask_mod, None, None, config.seq, config.seq, device=device)

    built = block_mask()
    compiled = torch.compile(flex_attention)

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = compiled(q, k, v, block_mask=block_mask() if fresh_mask else built)
        return out

    return fn, built


def _flex_case(config: CaseSpec, device: torch.device, mask_mod: Any, allowed: torch.Tensor,
               *, fresh_mask: bool, name: str) -> Case:  # fmt: skip
    shape = (config.batch, config.heads, config.seq, config.head_dim)
    q, k, v = _qkv(config, device, shape, shape)
    fn, built = _flex(config, device, mask_mod, fresh_mask=fresh_mask)
    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v, allowed),
        facts(config, causal=True, mask="block", flex_mask=name,
              block_sparsity_pct=float(built.sparsity()), block_size=FLEX_BLOCK,
              block_mask_in_step=fresh_mask),
    )  # fmt: skip


def sliding_window(config: CaseSpec, device: torch.device) -> Case:
    """flex_attention with a causal sliding window of ``SLIDING_WINDOW`` tokens."""
    import torch

    def mask_mod(_b: Any, _h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return (q_idx >= kv_idx) & (q_idx - kv_idx < SLIDING_WINDOW)

    positions = torch.arange(config.seq, device=device)
    allowed = mask_mod(None, None, positions[:, None], positions[None, :])
    return _flex_case(config, device, mask_mod, allowed, fresh_mask=False, name="sliding_window")


def _documents(config: CaseSpec, device: torch.device) -> torch.Tensor:
    """Each token's document: documents of 1/2, 1/4, 1/8 ... of the sequence packed in it."""
    import torch

    ids, start, doc = torch.empty(config.seq, dtype=torch.int64), 0, 0
    size = max(config.seq // 2, 1)
    while start < config.seq:
        ids[start : start + size] = doc
        start, doc, size = start + size, doc + 1, max(size // 2, 1)
    return ids.to(device)


def document(config: CaseSpec, device: torch.device) -> Case:
    """flex_attention with a causal document mask over packed documents, its block mask
    created inside every call (create_block_mask in the step)."""
    import torch

    documents = _documents(config, device)

    def mask_mod(_b: Any, _h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return (q_idx >= kv_idx) & (documents[q_idx] == documents[kv_idx])

    positions = torch.arange(config.seq, device=device)
    allowed = mask_mod(None, None, positions[:, None], positions[None, :])
    return _flex_case(config, device, mask_mod, allowed, fresh_mask=True, name="document")


def flex_fp8(config: CaseSpec, device: torch.device) -> Case:
    """Causal flex_attention on fp8 (e4m3) q, k, v: needs a GPU with fp8 (sm89 or newer)."""
    import torch

    from capture.errors import CaptureError

    if device.type != "cuda" or torch.cuda.get_device_capability(device) < (8, 9):
        raise CaptureError("No available kernel: fp8 attention needs an sm89+ GPU")

    def causal(_b: Any, _h: Any, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return q_idx >= kv_idx

    shape = (config.batch, config.heads, config.seq, config.head_dim)
    q, k, v = (t.to(torch.float8_e4m3fn) for t in _qkv(config, device, shape, shape))
    fn, built = _flex(config, device, causal, fresh_mask=False)
    positions = torch.arange(config.seq, device=device)
    allowed = positions[:, None] >= positions[None, :]
    return Case(
        q, k, v, fn,
        lambda: reference_attention(q, k, v, allowed),
        facts(config, dtype="float8_e4m3fn", causal=True, mask="block", flex_mask="causal",
              block_sparsity_pct=float(built.sparsity()), block_size=FLEX_BLOCK,
              block_mask_in_step=False),
        tolerance=FP8_TOLERANCE,
    )  # fmt: skip


# One C++ warning as c10 prints it: "[W... sdp_utils.cpp:255] Warning: <why> (function <f>)".
_CPP_WARNING = re.compile(r"Warning: (?P<why>.*?)(?: \(function \w+\))?$")


def dispatch(arguments: tuple[Any, ...]) -> dict[str, Any]:
    """PyTorch's own verdict on each fused SDPA backend for these arguments
    (``torch.backends.cuda.can_use_*`` with debug on): whether it can run, and the warnings
    that say why not. What `traceanalyze attention`'s why_not is checked against."""
    import torch

    checks = {
        "flash": getattr(torch.backends.cuda, "can_use_flash_attention", None),
        "efficient": getattr(torch.backends.cuda, "can_use_efficient_attention", None),
        "cudnn": getattr(torch.backends.cuda, "can_use_cudnn_attention", None),
    }
    params = torch.backends.cuda.SDPAParams(*arguments)
    verdicts: dict[str, Any] = {}
    for backend, check in checks.items():
        if check is not None:
            ok, why = said_while(functools.partial(check, params, True))
            verdicts[backend] = {"ok": bool(ok), "why": why}
    return verdicts


def said_while(check: Callable[[], Any]) -> tuple[Any, list[str]]:
    """``check()`` and the warnings it gave: Python's, and the C++ ones PyTorch's dispatch
    checks print to the process's stderr (file descriptor 2: on torch 2.11 they never reach
    Python's warnings, so a capture recorded no reasons), each once, in order."""
    import warnings

    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(sink.fileno(), 2)
        try:
            ok = check()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        sink.seek(0)
        printed = sink.read().decode("utf-8", "replace").splitlines()
    found = [m["why"].strip() for m in map(_CPP_WARNING.search, printed) if m]
    found += [str(w.message).strip() for w in caught]
    return ok, list(dict.fromkeys(found))
