"""Where a capture ran: GPU, driver and library versions for the manifest."""

from __future__ import annotations

import importlib.metadata
import platform
import shutil
import socket
import subprocess


def describe_environment(device: str) -> dict[str, object]:
    """Versions of the machine, driver and libraries (GPU fields are None on ``device='cpu'``)."""
    import torch

    environment: dict[str, object] = {
        "device": device,
        "gpu": None,
        "compute_capability": None,
        "driver": None,
        "cuda": torch.version.cuda,
        "cudnn": _cudnn_version(torch.backends.cudnn.version()),
        "torch": torch.__version__,
        "triton": _triton_version(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }
    if device == "cuda" and getattr(torch.version, "hip", None):
        # ROCm: torch.cuda is HIP, whose "capability" (9.4 on an MI300X) is no CUDA compute
        # capability; the gfx target says what the GPU is.
        arch = torch.cuda.get_device_properties(0).gcnArchName
        environment |= {
            "gpu": torch.cuda.get_device_name(),
            "gfx_arch": arch.split(":")[0],
            "hip": torch.version.hip,
        }
    elif device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        environment |= {
            "gpu": torch.cuda.get_device_name(),
            "compute_capability": f"{major}.{minor}",
            "driver": _nvidia_smi_driver() or _torch_driver_api(torch),
        }
    return environment


def _cudnn_version(raw: int | None) -> str | None:
    """cuDNN 9 encodes 9.19.0 as 91900; cuDNN 8 encoded 8.9.7 as 8907."""
    if raw is None:
        return None
    major, rest = divmod(raw, 10000) if raw >= 90000 else divmod(raw, 1000)
    return f"{major}.{rest // 100}.{rest % 100}"


def _triton_version() -> str | None:
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


def nvidia_smi(query: str, csv_format: str = "csv,noheader") -> str | None:
    """``nvidia-smi --query-gpu=<query>`` as text (None without nvidia-smi or on failure)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        done = subprocess.run(
            [smi, f"--query-gpu={query}", f"--format={csv_format}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip()


def _nvidia_smi_driver() -> str | None:
    lines = (nvidia_smi("driver_version") or "").splitlines()
    return lines[0].strip() if lines else None


def _torch_driver_api(torch: object) -> str | None:
    """Without nvidia-smi only the CUDA API version the driver supports is known."""
    get = getattr(getattr(torch, "_C", None), "_cuda_getDriverVersion", None)
    if get is None:
        return None
    major, rest = divmod(int(get()), 1000)
    return f"CUDA driver API {major}.{rest // 10} (nvidia-smi unavailable)"
