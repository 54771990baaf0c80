"""Kernel names the way a person would write them, and unique within the table they are shown in.

``void at::native::vectorized_elementwise_kernel<4, at::native::MulFunctor<float>, ...>(...)``
becomes ``vectorized_elementwise_kernel [MulFunctor]``; ``void pytorch_flash::flash_fwd_kernel<
Flash_fwd_kernel_traits<...>>(...)`` becomes ``pytorch_flash::flash_fwd_kernel``; CUTLASS's
device-side wrapper ``void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_..._tn_align8>(
...::Params)`` becomes the kernel it wraps, ``cutlass_80_tensorop_bf16_s16816gemm_..._tn_align8``;
Itanium-mangled names (``_ZN...``) are demangled first.

Two different kernels never share a readable name in one table: where the short forms of several
names are equal, those names get a longer form (the tile their template names, then the template
itself, then the whole name), until every name in the table reads differently. Names are never
cut in the middle; only a column that must stay narrow asks for a ``width`` and gets a trailing
``…`` (the full name stays in JSON and CSV).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import re
from collections.abc import Callable

import polars as pl


def _ascii(pattern: str) -> str:
    r"""``pattern`` with ASCII ``\w`` and ``\b``: kernel names' identifiers are ASCII, and Polars
    compiles a Unicode ``\w`` into a large automaton on every call (some 5 ms a pattern, most of
    the time a table's names took)."""
    return pattern.replace(r"\w", "[0-9A-Za-z_]").replace(r"\b", r"(?-u:\b)")


# Namespaces that only add noise in a table.
_NOISE = r"^(void\s+)?((at::native::|at::cuda::|\(anonymous namespace\)::|cutlass::|cub::)*)"
# Device-side wrappers whose template argument is the kernel: cutlass::Kernel<X>(X::Params),
# cutlass::Kernel2<X>, cutlass_cudnn_infer::Kernel<X>, cutlass__5x_cudnn::Kernel<X>, ... -> X.
_WRAPPED = _ascii(r"^(?:void\s+)?(?:\w*cutlass\w*::)+Kernel\d*<\s*((?:\w+::)*\w+)")
# A functor or lambda-owning op inside the template arguments says what an elementwise kernel
# computes; the first one is usually the meaningful one.
_FUNCTOR = _ascii(
    r"(\w*Functor\w*|\w+_functor|\w+_kernel_cuda|\w+_kernel_impl|\w+Op(?:s)?|\w+_kernel)\b"
)
# Wrappers around the functor that says what is computed (AUnaryFunctor<..., MulFunctor>,
# gpu_kernel_impl<CUDAFunctor_add>, ReduceOp<func_wrapper_t<sum_functor>>): taken as "the first
# one" they named many ops the same.
_WRAPPER = _ascii(
    r"\b(?:(?:[AB]?Unary|Binary)Functor|gpu_kernel_impl(?:_nocast)?|ReduceOp|func_wrapper_t)\b"
)
_GENERIC = _ascii(r"(elementwise|reduce|unrolled|vectorized)_?\w*kernel(_\w+)?$")
# Namespaces dropped inside a template when its arguments tell two kernels apart.
_INNER_NOISE = _ascii(
    r"\b(?:at::native::|at::cuda::|at::detail::|at::|c10::|cutlass::|cub::|binary_internal::)"
    r"|\(anonymous namespace\)::"
)
# Where a template names the kernel's tile, demangled or still mangled (CUTLASS's threadblock
# GemmShape comes first): what tells two instances of one CUTLASS template apart at a glance.
_TILES = (r"GemmShape<(\d+), (\d+), (\d+)>", r"GemmShapeILi(\d+)ELi(\d+)ELi(\d+)E")
# AMD Tensile's kernel names: the problem (index order of C, A, B) and data type, then tuning
# parameters, of which the macro tile (MT) and matrix instruction (MI) tell kernels apart.
_TENSILE_PROBLEM = r"^(Cijk_A[a-z]+_B[a-z]+_[A-Z]+)_"
_TENSILE_TILE = r"_MT(\d+x\d+x\d+)(?:_|$)"
_TENSILE_MI = r"_(MI\d+x\d+x\d+)(?:_|$)"


def readable_names(names: pl.Series, *, width: int | None = None) -> pl.Series:
    """Each of ``names`` (one table's column) as a person reads it, unique within ``names``.

    Equal inputs get equal outputs. With ``width``, a name longer than that ends in ``…`` unless
    the cut would make it read like another name of the column.
    """
    distinct = names.drop_nulls().unique(maintain_order=True)
    forms = _forms(distinct)
    shown = _first_unique(forms)
    if width is not None:
        shown = _shortened(shown, width)
    return names.replace_strict(distinct, shown, default=None, return_dtype=pl.String)


def with_readable_names(
    frame: pl.DataFrame, column: str = "name", *, width: int | None = None
) -> pl.DataFrame:
    """``frame`` with ``column`` replaced by :func:`readable_names` of it (if it has one)."""
    if column not in frame.columns:
        return frame
    return frame.with_columns(readable_names(frame[column], width=width).alias(column))


def _forms(distinct: pl.Series) -> pl.DataFrame:
    """Ever longer forms of each distinct name, shortest first, the raw name last."""
    # Demangling and bracket matching are Python per *distinct* name (a trace has millions of
    # kernel rows but some hundred names): regular expressions can do neither.
    full = [demangle(name) or name for name in distinct]
    outline = [
        _mangled_outline(name) if name.startswith("_Z") and demangle(name) is None else text
        for name, text in zip(distinct, full, strict=True)
    ]
    frame = pl.DataFrame(
        {
            "name": distinct,
            "full": full,
            "outline": outline,
            "template": [_without_parameters(text) for text in full],
        },
        schema={n: pl.String for n in ("name", "full", "outline", "template")},
    )
    short = _short_expr("outline")
    tile = pl.coalesce(
        pl.format("{}x{}x{}", *(pl.col("full").str.extract(pattern, i) for i in (1, 2, 3)))
        for pattern in _TILES
    )
    tensile, tensile_more = _tensile_forms("full")
    return frame.select(
        pl.coalesce(tensile, short).alias("form0"),
        pl.when(tensile_more.is_not_null()).then(tensile_more)
        .when(tile.is_not_null()).then(pl.format("{} [tile {}]", short, tile)).otherwise(short)
        .alias("form1"),
        pl.col("template").str.replace_all(_INNER_NOISE, "").str.replace_all(" >", ">")
        .alias("form2"),
        pl.col("template").alias("form3"),
        pl.col("full").alias("form4"),
        pl.col("name").alias("form5"),
    )  # fmt: skip


def _short_expr(column: str) -> pl.Expr:
    """The short form: the wrapped kernel, no leading void/namespaces, no template or parameter
    lists; a generic elementwise or reduction kernel tagged with the functor it runs."""
    name = pl.col(column)
    unwrapped = pl.coalesce(name.str.extract(_WRAPPED, 1), name)
    base = unwrapped.str.replace(_NOISE, "").str.replace(r"[<(].*$", "").str.strip_chars()
    arguments = unwrapped.str.replace(r"^[^<]*<", "")
    unwrapped_arguments = arguments.str.replace_all(_WRAPPER, "")
    # Else the function that owns the lambda a kernel runs (launch_clamp_scalar(...)::{lambda}).
    functor = pl.coalesce(
        unwrapped_arguments.str.extract(_FUNCTOR, 1),
        unwrapped_arguments.str.extract(_ascii(r"(\w+)\("), 1),
    )
    readable = (
        pl.when(base.str.contains(_GENERIC) & functor.is_not_null())
        .then(pl.format("{} [{}]", base, functor))
        .otherwise(base)
    )
    return pl.when(readable.str.len_chars() == 0).then(name).otherwise(readable)


def _tensile_forms(column: str) -> tuple[pl.Expr, pl.Expr]:
    """AMD Tensile's GEMM kernels (``Cijk_Alik_Bljk_B_BS_..._MT16x16x128_MI16x16x1_...``, some
    300 characters of tuning parameters) as their problem and data type with the macro tile,
    ``Cijk_Alik_Bljk_B [tile 16x16x128]``, as CUTLASS's read with theirs; then with the
    matrix instruction too. Null for any other name."""
    name = pl.col(column)
    problem = name.str.extract(_TENSILE_PROBLEM, 1)
    tile = name.str.extract(_TENSILE_TILE, 1)
    instruction = pl.coalesce(pl.format(", {}", name.str.extract(_TENSILE_MI, 1)), pl.lit(""))
    return (
        pl.format("{} [tile {}]", problem, tile),
        pl.format("{} [tile {}{}]", problem, tile, instruction),
    )


def _first_unique(forms: pl.DataFrame) -> pl.Series:
    """Per name, the shortest form that no other name of the table shares.

    Names whose forms collide move on to their next form together. The last form (the raw
    name) is unique, so this ends; in practice after one or two rounds."""
    last = forms.width - 1
    level = pl.Series("level", [0] * forms.height, dtype=pl.Int32)
    while True:
        shown = forms.select(pl.concat_list(pl.all()).list.get(pl.lit(level)))["form0"]
        colliding = shown.is_duplicated() & (level < last)
        if not colliding.any():
            return shown
        level = level + colliding.cast(pl.Int32)


def _shortened(shown: pl.Series, width: int) -> pl.Series:
    cut = pl.when(shown.str.len_chars() > width).then(shown.str.slice(0, width - 1) + pl.lit("…"))
    frame = pl.DataFrame({"shown": shown}).with_columns(cut=cut.otherwise(pl.col("shown")))
    # A cut that makes two names read the same is not made for either of them.
    return frame.select(
        pl.when(pl.col("cut").is_duplicated()).then(pl.col("shown")).otherwise(pl.col("cut"))
    ).to_series()


def _without_parameters(name: str) -> str:
    """``void ns::kernel<T, 4>(T*, int)`` -> ``ns::kernel<T, 4>``: a substring of the raw name,
    so still one to search for. The parameter list is the parenthesis matching the last one
    (lambdas inside the template have parentheses of their own)."""
    text = re.sub(r"^void\s+", "", name)
    if not text.endswith(")"):
        return text
    depth = 0
    for position in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[position], 0)
        if depth == 0:
            return text[:position].rstrip() or text
    return text


# ---------------------------------------------------------------------------------------------
# Demangling: the C++ runtime's own demangler, through ctypes (no new dependency).

_Demangler = Callable[[bytes], "str | None"]


@functools.cache
def _demangler() -> _Demangler | None:
    """``abi::__cxa_demangle`` from the C++ runtime (libstdc++ or libc++), or None without one."""
    for library in (None, ctypes.util.find_library("stdc++"), ctypes.util.find_library("c++")):
        try:
            runtime = ctypes.CDLL(library)
            libc = ctypes.CDLL(None)
        except (OSError, TypeError):  # TypeError: Windows cannot open the process itself
            continue
        function = getattr(runtime, "__cxa_demangle", None)
        if function is not None:
            break
    else:
        return None
    function.restype = ctypes.c_void_p
    function.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    free = libc.free
    free.argtypes = [ctypes.c_void_p]

    def demangled(mangled: bytes) -> str | None:
        status = ctypes.c_int()
        pointer = function(mangled, None, None, ctypes.byref(status))
        if not pointer:  # not a mangled name the runtime can read
            return None
        try:
            return ctypes.string_at(pointer).decode("utf-8", "replace")
        finally:
            free(pointer)  # __cxa_demangle returns malloc'ed memory

    return demangled


@functools.lru_cache(maxsize=4096)
def demangle(name: str) -> str | None:
    """The demangled form of an Itanium-mangled (``_Z...``) name, or None where ``name`` is not
    one, no C++ runtime is at hand, or the runtime cannot read it."""
    if not name.startswith("_Z"):
        return None
    demangler = _demangler()
    return demangler(name.encode()) if demangler is not None else None


def _mangled_outline(mangled: str) -> str:
    """The leading names of a mangled name the runtime cannot demangle, as demangled text:
    ``_ZN19cutlass_cudnn_train6KernelINS_4conv6kernel23ImplicitGemmConvolutionI...`` ->
    ``cutlass_cudnn_train::Kernel<cutlass_cudnn_train::conv::kernel::ImplicitGemmConvolution>``.

    libstdc++'s demangler (GCC 12) gives up on cuDNN's CUTLASS convolution kernels (1,700
    characters nested past its recursion limit; ``c++filt --no-recurse-limit`` reads them):
    their outer name and first template argument are enough to read. Only source names and
    prefix substitutions (``S_``, ``S0_``) are read; anything else ends the outline."""
    prefixes: list[str] = []
    outer, position = _qualified_name(mangled, 2, prefixes)
    if outer is None:
        return mangled
    if mangled.startswith("I", position):
        argument, _ = _qualified_name(mangled, position + 1, prefixes)
        if argument is not None:
            return f"{outer}<{argument}>"
    return outer


def _qualified_name(text: str, position: int, prefixes: list[str]) -> tuple[str | None, int]:
    nested = text.startswith("N", position)
    position += nested
    parts: list[str] = []
    while True:
        length = re.match(r"\d+", text[position:])
        substitution = re.match(r"S([0-9A-Z]*)_", text[position:])
        if length:
            start = position + len(length.group())
            parts.append(text[start : start + int(length.group())])
            prefixes.append("::".join(parts))
            position = start + int(length.group())
        elif substitution and not parts:
            index = int(substitution.group(1), 36) + 1 if substitution.group(1) else 0
            if index >= len(prefixes):
                break
            parts = prefixes[index].split("::")
            position += len(substitution.group())
        else:
            break
        if not nested:
            break
    return ("::".join(parts) or None), position
