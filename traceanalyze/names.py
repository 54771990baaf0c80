"""Kernel names the way a person would write them.

``void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, ...>(...)``
becomes ``vectorized_elementwise_kernel [MulFunctor]``; ``void pytorch_flash::flash_fwd_kernel<
Flash_fwd_kernel_traits<...>>(...)`` becomes ``pytorch_flash::flash_fwd_kernel``.
"""

from __future__ import annotations

import polars as pl

# Namespaces that only add noise in a table.
_NOISE = r"^(void\s+)?((at::native::|at::cuda::|\(anonymous namespace\)::|cutlass::|cub::)*)"
# A functor or lambda-owning op inside the template arguments says what an elementwise kernel
# computes; the first one is usually the meaningful one.
_FUNCTOR = r"(\w*Functor\w*|\w+_kernel_cuda|\w+_kernel_impl|\w+Op(?:s)?)\b"
# Wrappers around the functor that says what is computed (AUnaryFunctor<..., MulFunctor>,
# gpu_kernel_impl<CUDAFunctor_add>): taken as "the first one" they named many ops the same.
_WRAPPER = r"\b(?:(?:[AB]?Unary|Binary)Functor|gpu_kernel_impl)\b"


def short_name_expr(column: str = "name", width: int = 72) -> pl.Expr:
    """A readable name: no leading void/namespaces, no template or parameter lists."""
    name = pl.col(column)
    base = name.str.replace(_NOISE, "").str.replace(r"[<(].*$", "").str.strip_chars()
    functor = name.str.replace_all(_WRAPPER, "").str.extract(_FUNCTOR, group_index=1)
    generic = base.str.contains(r"(elementwise|reduce|unrolled|vectorized)_?\w*kernel$")
    readable = (
        pl.when(generic & functor.is_not_null())
        .then(pl.format("{} [{}]", base, functor))
        .otherwise(base)
    )
    readable = pl.when(readable.str.len_chars() == 0).then(name).otherwise(readable)
    return (
        pl.when(readable.str.len_chars() > width)
        .then(readable.str.slice(0, width - 1) + pl.lit("…"))
        .otherwise(readable)
        .alias(column)
    )
