"""The procfs GPU backend: NVIDIA GPUs and their MIG devices from the driver's procfs.

Reads ``<proc>/driver/nvidia/gpus/<bus id>/information`` (one directory per GPU; the index
is the PCI bus order, as NVML and ``nvidia-smi`` number GPUs), ``<proc>/driver/nvidia/version``,
and for MIG the capability files (:mod:`ocihook.discovery.mig`). Brand, architecture, CUDA
version and MIG UUIDs are unknown (``None``). The NVML backend is
:mod:`ocihook.discovery.nvml`; :func:`ocihook.discovery.nvidia.enumerate_gpus` chooses
between them. Both give the same ``index``, ``minor``, ``uuid``, ``bus_id``, ``model`` and
``proc_dir`` for the same host.

This module is on the path of every container start: it imports neither ``pynvml`` nor
``typing``, ``dataclasses`` or ``re``.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.hostroot import HostRoot, read_text
from ..core.vocab import is_gpu_uuid, parse_gpu_information
from .mig import MigContext
from .procfs import canonical_bus_id, decimal, parse_driver_version
from .records import Gpu, GpuInventory

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = ["enumerate_procfs", "read_gpus"]

# -- enumeration ----------------------------------------------------------------------------


def read_gpus(root: HostRoot) -> tuple[tuple[Gpu, ...], list[str]]:
    """The GPUs of ``<proc>/driver/nvidia/gpus`` in PCI bus order, without MIG devices.

    Directories whose ``information`` says ``GPU Excluded: Yes`` (older drivers:
    ``Blacklisted: Yes``) are skipped with a warning; a missing ``gpus`` directory means
    no GPUs (with a warning).

    Returns:
        ``(gpus, warnings)``.

    Raises:
        DiscoveryError: the directory cannot be listed, or an ``information`` file is
            unreadable or has a malformed bus id, device minor or GPU UUID.
    """
    gpus_dir = root.proc("driver/nvidia/gpus")
    warnings: list[str] = []
    try:
        names = os.listdir(gpus_dir)
    except FileNotFoundError:
        return (), [f"{gpus_dir} does not exist: no GPUs"]
    except OSError as e:
        raise DiscoveryError(f"cannot list GPUs: {e.strerror}", path=gpus_dir) from None
    found: list[tuple[tuple[int, int, int, int], str, dict[str, str], str]] = []
    for name in names:
        info_path = os.path.join(gpus_dir, name, "information")
        text = read_text(info_path, what="GPU information file")
        info = parse_gpu_information(text, path=info_path)
        excluded = info.get("GPU Excluded", info.get("Blacklisted", "No"))
        if excluded.strip().lower() == "yes":
            warnings.append(f"GPU {name} is excluded by the driver; skipped")
            continue
        bus_id, key = canonical_bus_id(info.get("Bus Location", name), path=info_path)
        found.append((key, bus_id, info, info_path))
    found.sort(key=lambda t: t[0])
    gpus = []
    for index, (_key, bus_id, info, info_path) in enumerate(found):
        minor_text = info.get("Device Minor")
        if minor_text is None or decimal(minor_text) is None:
            raise DiscoveryError(
                "missing or malformed device minor",
                path=info_path,
                field="Device Minor",
                value=minor_text,
            )
        uuid = info.get("GPU UUID", "")
        if not is_gpu_uuid(uuid):
            raise DiscoveryError(
                "missing or malformed GPU UUID", path=info_path, field="GPU UUID", value=uuid
            )
        gpus.append(
            Gpu(
                index=index,
                minor=int(minor_text),
                uuid=uuid,
                bus_id=bus_id,
                model=info.get("Model", "unknown"),
                proc_dir=os.path.dirname(info_path),
            )
        )
    return tuple(gpus), warnings


def _replace_gpu(gpu: Gpu, **changes: object) -> Gpu:
    values = {name: getattr(gpu, name) for name in Gpu.__fields__}
    values.update(changes)
    return Gpu(**values)


def procfs_driver_version(root: HostRoot, warnings: list[str]) -> str | None:
    """The NVIDIA kernel driver version (``"550.127.05"``) from
    ``/proc/driver/nvidia/version`` under ``root`` (the ``NVRM version:`` line the
    nvidia.ko module prints, :func:`ocihook.discovery.procfs.parse_driver_version`), or
    ``None`` with a warning appended to ``warnings`` when the file is missing, unreadable
    or has no version. Raises nothing."""
    path = root.proc("driver/nvidia/version")
    try:
        return parse_driver_version(read_text(path, what="NVIDIA driver version file"), path=path)
    except DiscoveryError as e:
        warnings.append(f"no driver version: {e}")
        return None


def enumerate_procfs(root: HostRoot, majors: Mapping[str, int]) -> GpuInventory:
    warnings: list[str] = []
    driver_version = procfs_driver_version(root, warnings)
    gpus, gpu_warnings = read_gpus(root)
    warnings.extend(gpu_warnings)
    ctx = MigContext(root, majors, warnings)
    with_mig = tuple(
        _replace_gpu(gpu, mig_devices=mig) if (mig := ctx.procfs_mig_devices(gpu)) else gpu
        for gpu in gpus
    )
    return GpuInventory(
        gpus=with_mig,
        driver_version=driver_version,
        cuda_version=None,
        backend="procfs",
        warnings=tuple(warnings),
    )
