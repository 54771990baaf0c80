"""Builds the optional C extensions of the loader (the scanner, and linking's call tree);
without a compiler the package still installs and loads traces with its pure-Python paths
(msgspec, and Polars joins)."""

from __future__ import annotations

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext


class OptionalBuildExt(build_ext):
    """A failed compile is a warning: the loader falls back to msgspec."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            print(f"warning: the C extensions were not built ({exc}); using the Python paths")

    def build_extension(self, ext: Extension) -> None:
        try:
            super().build_extension(ext)
        except Exception as exc:
            print(f"warning: {ext.name} was not built ({exc}); using its Python path")


# Added after the interpreter's own flags, which carry -fwrapv (CPython's C relies on signed
# overflow wrapping; ours does not, and the sanitizer run checks it): without it the scanner
# runs about 7% faster (a feed of the 175 MB bench trace 222 -> 207 ms; bench/RESULTS.md).
_FLAGS = ["-O3", "-fno-wrapv", "-std=c99", "-Wall"]

setup(
    ext_modules=[
        Extension(
            "traceanalyze.load._scan",
            ["traceanalyze/load/_scan.c"],
            # generated from traceanalyze/load/scan_tables.py by scripts/gen_scan_tables.py
            depends=["traceanalyze/load/_scan_tables.h"],
            extra_compile_args=[*_FLAGS, "-Wno-missing-field-initializers"],
            optional=True,
        ),
        # linking's call tree in one pass (traceanalyze/link.py keeps the Polars reference)
        Extension(
            "traceanalyze._tree",
            ["traceanalyze/_tree.c"],
            extra_compile_args=_FLAGS,
            optional=True,
        ),
    ],
    cmdclass={"build_ext": OptionalBuildExt},
)
