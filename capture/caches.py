"""Caches that outlive a process and change what a first call costs, as data, and their state.

A first call in a fresh process can cost an order of magnitude more with these empty than with
them filled by an earlier process (cuDNN's first SDPA call: ~0.9 s vs ~70 ms measured on an
H200), so a cold-start figure means nothing without the state it was measured in.
"""

from __future__ import annotations

import getpass
import os
import stat
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


def _home(env: Mapping[str, str]) -> Path:
    return Path(env.get("HOME") or Path.home())


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid_{os.getuid()}"


@dataclass(frozen=True)
class PersistentCache:
    """One cache folder: the variable that moves it, and where it is when that is unset."""

    name: str
    env_var: str
    holds: str
    default: Callable[[Mapping[str, str]], Path]


CACHES: tuple[PersistentCache, ...] = (
    PersistentCache(
        "cuda_jit",
        "CUDA_CACHE_PATH",
        "the CUDA driver's JIT cache: SASS compiled from PTX at load time",
        lambda env: _home(env) / ".nv" / "ComputeCache",
    ),
    PersistentCache(
        "triton",
        "TRITON_CACHE_DIR",
        "Triton's compiled kernels (Inductor's own go here too when this variable is set)",
        lambda env: Path(env.get("TRITON_HOME") or _home(env)) / ".triton" / "cache",
    ),
    PersistentCache(
        "inductor",
        "TORCHINDUCTOR_CACHE_DIR",
        "Inductor's FX graph, AOTAutograd and autotuning caches and its generated kernels",
        lambda env: Path(tempfile.gettempdir()) / f"torchinductor_{_user()}",
    ),
    PersistentCache(
        "torch_kernels",
        "PYTORCH_KERNEL_CACHE_PATH",
        "PyTorch's cache of jiterator kernels compiled with NVRTC",
        lambda env: Path(env.get("XDG_CACHE_HOME") or _home(env) / ".cache") / "torch" / "kernels",
    ),
)

# Variables that change cold cost without being a cache folder (recorded as found).
COLD_COST_ENV = (
    "CUDA_CACHE_DISABLE",
    "CUDA_CACHE_MAXSIZE",
    "CUDA_MODULE_LOADING",
    "TORCHINDUCTOR_FX_GRAPH_CACHE",
    "TORCHINDUCTOR_AUTOGRAD_CACHE",
    "TORCHINDUCTOR_FORCE_DISABLE_CACHES",
    "TORCHINDUCTOR_COMPILE_THREADS",
    "TRITON_HOME",
)
NOT_CONTROLLED = (
    "the OS page cache (a library read from disk for the first time since boot loads slower) "
    "and GPU clocks are neither controlled nor recorded"
)


@dataclass(frozen=True)
class CacheState:
    """One cache folder as a process found it."""

    name: str
    env_var: str
    path: str
    source: str  # "env" (the variable is set), "default", or "fresh" (an empty folder made for it)
    exists: bool
    empty: bool
    files: int
    bytes: int


def cache_states(env: Mapping[str, str], fresh_root: Path | None = None) -> tuple[CacheState, ...]:
    """The state of every cache in `CACHES` for a process started with ``env``; folders under
    ``fresh_root`` are the empty ones made for it."""
    return tuple(_state(cache, env, fresh_root) for cache in CACHES)


def fresh_cache_env(root: Path) -> dict[str, str]:
    """Make one empty folder per cache under ``root``; the variables that point a process at
    them."""
    env = {}
    for cache in CACHES:
        folder = root / cache.name
        folder.mkdir(parents=True, exist_ok=True)
        env[cache.env_var] = str(folder)
    return env


def cold_cost_env(env: Mapping[str, str]) -> dict[str, str | None]:
    """The values of `COLD_COST_ENV` in ``env`` (None: unset)."""
    return {name: env.get(name) for name in COLD_COST_ENV}


def _state(cache: PersistentCache, env: Mapping[str, str], fresh_root: Path | None) -> CacheState:
    path = Path(env[cache.env_var]) if env.get(cache.env_var) else cache.default(env)
    if fresh_root is not None and path.is_relative_to(fresh_root):
        source = "fresh"
    else:
        source = "env" if env.get(cache.env_var) else "default"
    files, size = _du(path)
    return CacheState(
        cache.name, cache.env_var, str(path), source, path.is_dir(), files == 0, files, size
    )


def _du(folder: Path) -> tuple[int, int]:
    """Regular files under ``folder`` and their total bytes (links not followed)."""
    files = size = 0
    for parent, _dirs, names in os.walk(folder):
        for name in names:
            try:
                info = os.lstat(os.path.join(parent, name))
            except OSError:  # removed while we walk (another process cleaning up)
                continue
            if stat.S_ISREG(info.st_mode):
                files, size = files + 1, size + info.st_size
    return files, size
