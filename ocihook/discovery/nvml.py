"""The NVML backend of :func:`ocihook.discovery.nvidia.enumerate_gpus`.

Uses nvidia-ml-py's ``pynvml`` module (``pip install 'ocihook[nvml]'``), which loads the
host's ``libnvidia-ml.so.1``. It is imported only when this backend runs; importing this
module does not import it. Calls, in NVML's terms (NVML API reference, "Device Queries",
"Multi Instance GPU Management"):

* ``nvmlInit`` / ``nvmlShutdown`` (always paired);
* ``nvmlSystemGetDriverVersion``, ``nvmlSystemGetCudaDriverVersion_v2`` (or the v1
  function) — an int ``major * 1000 + minor * 10``, so ``12020`` is ``"12.2"``;
* per index ``0 .. nvmlDeviceGetCount() - 1`` (NVML index order, the PCI bus order):
  ``nvmlDeviceGetHandleByIndex``, ``nvmlDeviceGetUUID``, ``nvmlDeviceGetMinorNumber``,
  ``nvmlDeviceGetPciInfo_v3`` (``.busId``, ``00000000:3B:00.0``), ``nvmlDeviceGetName``,
  ``nvmlDeviceGetBrand`` (:data:`BRAND_NAMES`), ``nvmlDeviceGetCudaComputeCapability``;
* MIG, when ``nvmlDeviceGetMigMode`` says the current mode is enabled: for each
  ``j < nvmlDeviceGetMaxMigDeviceCount``, ``nvmlDeviceGetMigDeviceHandleByIndex`` (empty
  slots answer ``NVML_ERROR_NOT_FOUND``), then ``nvmlDeviceGetGpuInstanceId``,
  ``nvmlDeviceGetComputeInstanceId`` and ``nvmlDeviceGetUUID`` (``MIG-...``) of the MIG
  handle. NVML gives no capability minors: the MIG device nodes come from procfs.

Optional facts (brand, compute capability, CUDA version, driver version, MIG UUIDs) are
``None`` when NVML answers ``NVML_ERROR_NOT_SUPPORTED`` or ``NVML_ERROR_FUNCTION_NOT_FOUND``
(silently) or another error (with a warning). The facts a GPU cannot go without (count,
handle, UUID, minor, PCI bus id, name) raise :class:`NvmlError`.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.vocab import is_gpu_uuid
from .gpus import _procfs_driver_version
from .mig import _MigContext
from .procfs import canonical_bus_id
from .records import Gpu, GpuInventory

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep imports cheap
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any

    from ..core.hostroot import HostRoot

__all__ = [
    "BRAND_NAMES",
    "NvmlError",
    "NvmlInitError",
    "NvmlMismatch",
    "NvmlNotInstalled",
    "cuda_version_string",
    "enumerate_nvml",
]

# nvmlReturn_t values used here (nvml.h; stable ABI).
ERROR_INVALID_ARGUMENT = 2
ERROR_NOT_SUPPORTED = 3
ERROR_NOT_FOUND = 6
ERROR_FUNCTION_NOT_FOUND = 13
#: ``NVML_DEVICE_MIG_ENABLE`` (nvml.h).
DEVICE_MIG_ENABLE = 1

#: ``nvmlBrandType_t`` (nvml.h) -> the brand name, lowercase, as go-nvlib's
#: ``GetBrandAsString`` (NVIDIA Container Toolkit) spells it; ``NVIDIA_REQUIRE_*`` compares
#: brands case-insensitively (libnvidia-container ``src/cli/dsl.c``). Values NVML adds
#: later map to ``"unknown"``, as libnvidia-container's ``driver.c`` does.
BRAND_NAMES: dict[int, str] = {
    0: "unknown",
    1: "quadro",
    2: "tesla",
    3: "nvs",
    4: "grid",
    5: "geforce",
    6: "titan",
    7: "nvidiavapps",
    8: "nvidiavpc",
    9: "nvidiavcs",
    10: "nvidiavws",
    11: "nvidiacloudgaming",
    12: "quadrortx",
    13: "nvidiartx",
    14: "nvidia",
    15: "geforcertx",
    16: "titanrtx",
}

_SILENT = (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND)


class NvmlError(DiscoveryError):
    """NVML is missing, failed, or answered something unusable.

    ``field`` names the NVML function, ``value`` the ``nvmlReturn_t`` code (``None`` when
    the failure was not an NVML return code). With ``backend="auto"``,
    :func:`~ocihook.discovery.nvidia.enumerate_gpus` falls back to procfs on any of these.
    """


class NvmlNotInstalled(NvmlError):
    """``import pynvml`` failed: nvidia-ml-py is not installed."""


class NvmlInitError(NvmlError):
    """``nvmlInit`` failed (no ``libnvidia-ml.so.1``, driver not loaded, ...)."""


class NvmlMismatch(NvmlError):
    """NVML lists a GPU that procfs under the host root does not: the root is not the
    machine NVML talks to (a simulated host, a copied tree)."""


def cuda_version_string(version: int) -> str:
    """NVML's CUDA driver version int -> ``"major.minor"``: ``12020`` -> ``"12.2"``
    (``NVML_CUDA_DRIVER_VERSION_MAJOR/MINOR`` of nvml.h)."""
    return f"{version // 1000}.{version % 1000 // 10}"


def _text(value: object) -> str:
    """A pynvml string result as ``str``: nvidia-ml-py >= 11.5 returns ``str``, older
    versions and ctypes ``char[]`` fields ``bytes``; trailing NULs are dropped."""
    if isinstance(value, bytes | bytearray):
        value = bytes(value).decode("utf-8", "replace")
    return str(value).rstrip("\x00").strip()


def _describe(err: BaseException) -> tuple[str, int | None]:
    code = getattr(err, "value", None)
    try:
        text = str(err)
    except Exception:  # pynvml's __str__ may call into NVML
        text = type(err).__name__
    return text, code if isinstance(code, int) else None


class _Session:
    """Calls into ``pynvml`` with errors turned into :class:`NvmlError` and warnings."""

    def __init__(self, nv: ModuleType) -> None:
        self.nv = nv
        self.warnings: list[str] = []

    def call(self, name: str, *args: object) -> Any:
        """``pynvml.<name>(*args)``.

        Raises:
            NvmlError: the function is missing from this pynvml (as
                ``NVML_ERROR_FUNCTION_NOT_FOUND``) or raised ``NVMLError``.
        """
        fn = getattr(self.nv, name, None)
        if fn is None:
            raise NvmlError(
                f"this pynvml has no {name}", field=name, value=ERROR_FUNCTION_NOT_FOUND
            )
        try:
            return fn(*args)
        except self.nv.NVMLError as e:
            text, code = _describe(e)
            raise NvmlError(f"{name} failed: {text}", field=name, value=code) from None

    def optional(self, name: str, *args: object, what: str) -> Any:
        """Like :meth:`call`, but ``None`` on failure (a warning unless not supported)."""
        try:
            return self.call(name, *args)
        except NvmlError as e:
            if e.value not in _SILENT:
                self.warnings.append(f"{what} unknown: {e.message} (NVML error {e.value})")
            return None


def _import_pynvml() -> ModuleType:
    import importlib  # lazy: only the NVML path pays for it

    try:
        return importlib.import_module("pynvml")
    except ImportError as e:
        raise NvmlNotInstalled(
            f"pynvml is not importable ({e})",
            hint="pip install 'ocihook[nvml]' (nvidia-ml-py), or use the procfs backend",
        ) from None


def _proc_dirs(root: HostRoot) -> dict[str, str]:
    """Canonical bus id -> host path of its ``<proc>/driver/nvidia/gpus/<bus id>`` dir."""
    gpus_dir = root.proc("driver/nvidia/gpus")
    try:
        names = os.listdir(gpus_dir)
    except OSError:
        return {}
    dirs = {}
    for name in names:
        try:
            bus_id, _key = canonical_bus_id(name, path=gpus_dir)
        except DiscoveryError:
            continue
        dirs[bus_id] = os.path.join(gpus_dir, name)
    return dirs


def _bus_id(session: _Session, handle: object, index: int) -> str:
    try:
        info = session.call("nvmlDeviceGetPciInfo_v3", handle)
    except NvmlError as e:
        if e.value != ERROR_FUNCTION_NOT_FOUND:
            raise
        info = session.call("nvmlDeviceGetPciInfo", handle)
    raw = _text(getattr(info, "busId", b""))
    if not raw:  # very old NVML: only the numeric fields (libnvidia-container driver.c)
        raw = f"{int(info.domain):08x}:{int(info.bus):02x}:{int(info.device):02x}.0"
    try:
        return canonical_bus_id(raw, path=f"NVML device {index}")[0]
    except DiscoveryError:
        raise NvmlError(
            "NVML gave a malformed PCI bus id", field="nvmlDeviceGetPciInfo_v3", value=raw
        ) from None


def _gpu(session: _Session, index: int, proc_dirs: dict[str, str], mig: _MigContext) -> Gpu:
    handle = session.call("nvmlDeviceGetHandleByIndex", index)
    uuid = _text(session.call("nvmlDeviceGetUUID", handle))
    minor = int(session.call("nvmlDeviceGetMinorNumber", handle))
    bus_id = _bus_id(session, handle, index)
    model = _text(session.call("nvmlDeviceGetName", handle))
    if not is_gpu_uuid(uuid):
        raise NvmlError("NVML gave a malformed GPU UUID", field="nvmlDeviceGetUUID", value=uuid)
    proc_dir = proc_dirs.get(bus_id)
    if proc_dir is None:
        raise NvmlMismatch(
            f"NVML GPU {index} ({bus_id}) is not in {mig.root.proc('driver/nvidia/gpus')}",
            hint="NVML describes the machine it runs on; use the procfs backend for "
            "another host root",
        )
    what = f"GPU {index}"
    brand_code = session.optional("nvmlDeviceGetBrand", handle, what=f"{what} brand")
    brand = None if brand_code is None else BRAND_NAMES.get(int(brand_code), "unknown")
    cc = session.optional(
        "nvmlDeviceGetCudaComputeCapability", handle, what=f"{what} compute capability"
    )
    architecture = None if cc is None else f"{int(cc[0])}.{int(cc[1])}"
    mode = session.optional("nvmlDeviceGetMigMode", handle, what=f"{what} MIG mode")
    mig_devices = []
    if mode is not None and int(mode[0]) == DEVICE_MIG_ENABLE:
        count = int(session.call("nvmlDeviceGetMaxMigDeviceCount", handle))
        for j in range(count):
            try:
                mig_handle = session.call("nvmlDeviceGetMigDeviceHandleByIndex", handle, j)
            except NvmlError as e:
                if e.value in (ERROR_NOT_FOUND, ERROR_INVALID_ARGUMENT):
                    continue  # an empty slot (go-nvlib VisitMigDevices does the same)
                raise
            gi = int(session.call("nvmlDeviceGetGpuInstanceId", mig_handle))
            ci = int(session.call("nvmlDeviceGetComputeInstanceId", mig_handle))
            mig_uuid = session.optional(
                "nvmlDeviceGetUUID", mig_handle, what=f"{what} MIG {j} UUID"
            )
            device = mig.mig_device(
                index,
                minor,
                gi,
                ci,
                uuid=None if mig_uuid is None else _text(mig_uuid),
                nvml_index=j,
            )
            if device is not None:
                mig_devices.append(device)
    return Gpu(
        index=index,
        minor=minor,
        uuid=uuid,
        bus_id=bus_id,
        model=model,
        proc_dir=proc_dir,
        brand=brand,
        architecture=architecture,
        mig_devices=tuple(sorted(mig_devices, key=lambda m: (m.gi, m.ci))),
    )


def _enumerate(session: _Session, root: HostRoot, majors: Mapping[str, int]) -> GpuInventory:
    warnings = session.warnings
    driver_version = session.optional("nvmlSystemGetDriverVersion", what="driver version")
    driver = _text(driver_version) if driver_version is not None else None
    if not driver:
        driver = _procfs_driver_version(root, warnings)
    cuda = session.optional("nvmlSystemGetCudaDriverVersion_v2", what="CUDA version")
    if cuda is None:
        cuda = session.optional("nvmlSystemGetCudaDriverVersion", what="CUDA version")
    count = int(session.call("nvmlDeviceGetCount"))
    proc_dirs = _proc_dirs(root)
    mig = _MigContext(root, majors, warnings)
    gpus = tuple(_gpu(session, index, proc_dirs, mig) for index in range(count))
    bus_ids = [g.bus_id for g in gpus]
    if bus_ids != sorted(bus_ids, key=lambda b: canonical_bus_id(b, path="")[1]):
        warnings.append("NVML index order is not PCI bus order; indices follow NVML")
    return GpuInventory(
        gpus=gpus,
        driver_version=driver,
        cuda_version=cuda_version_string(int(cuda)) if cuda else None,
        backend="nvml",
        warnings=tuple(warnings),
    )


def enumerate_nvml(root: HostRoot, majors: Mapping[str, int]) -> GpuInventory:
    """Enumerate GPUs through NVML (see the module docstring for the calls).

    Args:
        root: host root for procfs (GPU directories, MIG capability files) and device
            nodes; its GPUs must be the ones NVML sees.
        majors: character majors by driver name; ``nvidia-caps`` for MIG device nodes.

    Returns:
        A :class:`~ocihook.discovery.records.GpuInventory` with ``backend="nvml"``.

    Raises:
        NvmlNotInstalled: ``import pynvml`` failed.
        NvmlInitError: ``nvmlInit`` failed.
        NvmlMismatch: NVML lists a GPU that procfs under ``root`` does not.
        NvmlError: another NVML call a GPU needs failed.
        DiscoveryError: a host capability node is not the device it should be.
    """
    nv = _import_pynvml()
    try:
        nv.nvmlInit()
    except nv.NVMLError as e:
        text, code = _describe(e)
        raise NvmlInitError(f"nvmlInit failed: {text}", field="nvmlInit", value=code) from None
    try:
        return _enumerate(_Session(nv), root, majors)
    finally:
        import contextlib

        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
