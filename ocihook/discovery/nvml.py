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
  handle. NVML gives no capability minors: the MIG device nodes come from procfs;
* memory: ``nvmlDeviceGetMemoryInfo`` of each GPU (``.total``, bytes);
* each MIG device's profile and memory, the way NVIDIA's go-nvlib finds them
  (``pkg/nvlib/device/mig_device.go`` ``GetProfile``): ``nvmlDeviceGetAttributes`` of the
  MIG handle (``.memorySizeMB``); ``nvmlDeviceGetGpuInstanceById`` and
  ``nvmlGpuInstanceGetInfo`` (``.profileId``), matched against the ``.id`` of
  ``nvmlDeviceGetGpuInstanceProfileInfo`` for each profile of :data:`GPU_INSTANCE_PROFILES`;
  ``nvmlGpuInstanceGetComputeInstanceById`` and ``nvmlComputeInstanceGetInfo``, matched
  against ``nvmlGpuInstanceGetComputeInstanceProfileInfo`` for each profile of
  :data:`COMPUTE_INSTANCE_PROFILES` (engine profile ``SHARED``); the name is
  :func:`mig_profile_name`.

Optional facts (brand, compute capability, CUDA version, driver version, memory, MIG
UUIDs, profiles and memory) are
``None`` when NVML answers ``NVML_ERROR_NOT_SUPPORTED`` or ``NVML_ERROR_FUNCTION_NOT_FOUND``
(silently) or another error (with a warning). The facts a GPU cannot go without (count,
handle, UUID, minor, PCI bus id, name) raise :class:`NvmlError`.
"""

from __future__ import annotations

import os

from ..core.errors import DiscoveryError
from ..core.vocab import is_gpu_uuid
from .gpus import procfs_driver_version
from .mig import MigContext
from .procfs import canonical_bus_id
from .records import Gpu, GpuInventory

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: keep imports cheap
if TYPE_CHECKING:
    from collections.abc import Collection, Mapping
    from types import ModuleType
    from typing import Any

    from ..core.hostroot import HostRoot

__all__ = [
    "BRAND_NAMES",
    "COMPUTE_INSTANCE_PROFILES",
    "GPU_INSTANCE_PROFILES",
    "NvmlError",
    "NvmlInitError",
    "NvmlMismatch",
    "NvmlNotInstalled",
    "cuda_version_string",
    "enumerate_nvml",
    "mig_memory_gb",
    "mig_profile_name",
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
MIB = 1 << 20

#: ``NVML_GPU_INSTANCE_PROFILE_*`` (nvml.h) -> (GPU slices, attribute suffix), as go-nvlib's
#: ``NewMigProfile`` names them (``pkg/nvlib/device/mig_profile.go``): the ``REV1``
#: profiles have the media extensions (``+me``), ``ALL_ME`` all of them (``+me.all``),
#: ``GFX`` graphics (``+gfx``), ``NO_ME`` none (``-me``); ``REV2`` is a plain profile
#: with more memory. Profiles NVML adds later are not named (the profile stays unknown).
GPU_INSTANCE_PROFILES: dict[int, tuple[int, str]] = {
    0x0: (1, ""),  # 1_SLICE
    0x1: (2, ""),  # 2_SLICE
    0x2: (3, ""),  # 3_SLICE
    0x3: (4, ""),  # 4_SLICE
    0x4: (7, ""),  # 7_SLICE
    0x5: (8, ""),  # 8_SLICE
    0x6: (6, ""),  # 6_SLICE
    0x7: (1, "+me"),  # 1_SLICE_REV1
    0x8: (2, "+me"),  # 2_SLICE_REV1
    0x9: (1, ""),  # 1_SLICE_REV2
    0xA: (1, "+gfx"),  # 1_SLICE_GFX
    0xB: (2, "+gfx"),  # 2_SLICE_GFX
    0xC: (4, "+gfx"),  # 4_SLICE_GFX
    0xD: (1, "-me"),  # 1_SLICE_NO_ME
    0xE: (2, "-me"),  # 2_SLICE_NO_ME
    0xF: (1, "+me.all"),  # 1_SLICE_ALL_ME
    0x10: (2, "+me.all"),  # 2_SLICE_ALL_ME
}
#: ``NVML_COMPUTE_INSTANCE_PROFILE_*`` (nvml.h) -> compute slices (go-nvlib
#: ``NewMigProfile``).
COMPUTE_INSTANCE_PROFILES: dict[int, int] = {
    0x0: 1,  # 1_SLICE
    0x1: 2,  # 2_SLICE
    0x2: 3,  # 3_SLICE
    0x3: 4,  # 4_SLICE
    0x4: 7,  # 7_SLICE
    0x5: 8,  # 8_SLICE
    0x6: 6,  # 6_SLICE
    0x7: 1,  # 1_SLICE_REV1
}
#: ``NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED``, the only engine profile (nvml.h).
COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0


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


def mig_memory_gb(gpu_memory_bytes: int, mig_memory_mib: int) -> int:
    """The ``<N>gb`` of a MIG profile's name, from the parent GPU's total memory (bytes,
    ``nvmlDeviceGetMemoryInfo``) and the MIG device's (MiB, ``nvmlDeviceGetAttributes``).

    Rule (go-nvlib ``getMigMemorySizeGB``, in the same IEEE double arithmetic so that the
    names agree with NVIDIA's device plugin): the MIG memory as a fraction of the GPU's,
    rounded up to eighths, times the GPU's memory in GiB rounded up, rounded to the
    nearest integer (halves away from zero). An A100 80GB (81920 MiB) and 9728 MiB give 10.

    Raises:
        ValueError: ``gpu_memory_bytes`` is not positive or ``mig_memory_mib`` negative.
    """
    import math

    if gpu_memory_bytes <= 0 or mig_memory_mib < 0:
        raise ValueError(f"no MIG memory size for {mig_memory_mib} MiB of {gpu_memory_bytes} B")
    fraction = float(mig_memory_mib) * MIB / float(gpu_memory_bytes)
    fraction = math.ceil(fraction * 8) / 8
    gib = float((gpu_memory_bytes + (1 << 30) - 1) // (1 << 30))
    value = fraction * gib
    whole = math.floor(value)
    return int(whole + 1 if value - whole >= 0.5 else whole)


def mig_profile_name(gi_profile: int, ci_profile: int, memory_gb: int) -> str | None:
    """The MIG profile name NVIDIA's tools use: ``<G>g.<GB>gb`` when the compute instance
    spans the GPU instance, else ``<C>c.<G>g.<GB>gb``, then the GPU instance profile's
    attribute suffix (``+me``, ``+me.all``, ``+gfx``, ``-me``): ``1g.10gb``,
    ``1c.3g.40gb``, ``1g.10gb+me`` (go-nvlib ``MigProfileInfo.String``).

    Args:
        gi_profile: an ``NVML_GPU_INSTANCE_PROFILE_*`` value (:data:`GPU_INSTANCE_PROFILES`).
        ci_profile: an ``NVML_COMPUTE_INSTANCE_PROFILE_*`` value
            (:data:`COMPUTE_INSTANCE_PROFILES`).
        memory_gb: :func:`mig_memory_gb`.

    Returns:
        The name, or ``None`` when either profile is not one ocihook knows.
    """
    gi = GPU_INSTANCE_PROFILES.get(gi_profile)
    ci = COMPUTE_INSTANCE_PROFILES.get(ci_profile)
    if gi is None or ci is None:
        return None
    g, suffix = gi
    base = f"{g}g.{memory_gb}gb" if ci == g else f"{ci}c.{g}g.{memory_gb}gb"
    return base + suffix


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


def _gpu(session: _Session, index: int, proc_dirs: dict[str, str], mig: MigContext) -> Gpu:
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
    memory = session.optional("nvmlDeviceGetMemoryInfo", handle, what=f"{what} memory")
    total = int(memory.total) if memory is not None and int(memory.total) > 0 else None
    try:
        mode = session.call("nvmlDeviceGetMigMode", handle)
        mig_capable: bool | None = True
    except NvmlError as e:
        mode = None
        mig_capable = False if e.value == ERROR_NOT_SUPPORTED else None
        if e.value not in _SILENT:
            session.warnings.append(f"{what} MIG mode unknown: {e.message} (NVML error {e.value})")
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
                facts = _mig_facts(session, handle, mig_handle, gi, ci, total, f"{what} MIG {j}")
                mig_devices.append(device.replace(profile=facts[0], memory_mib=facts[1]))
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
        memory_mib=None if total is None else total // MIB,
        mig_capable=mig_capable,
    )


def _profile_enum(
    session: _Session,
    function: str,
    args: tuple[object, ...],
    enums: Collection[int],
    profile_id: int,
    what: str,
) -> int | None:
    """The ``NVML_*_INSTANCE_PROFILE_*`` value among ``enums`` whose profile info (from
    ``function(*args[:1], enum, *args[1:])``) has ``.id == profile_id``, or ``None`` (with a
    warning unless NVML lacks the function)."""
    for enum in enums:
        try:
            info = session.call(function, *args[:1], enum, *args[1:])
        except NvmlError as e:
            if e.value in (ERROR_NOT_SUPPORTED, ERROR_INVALID_ARGUMENT):
                continue  # not a profile of this GPU / instance (go-nvlib skips them too)
            if e.value != ERROR_FUNCTION_NOT_FOUND:
                session.warnings.append(f"{what} unknown: {e.message} (NVML error {e.value})")
            return None
        if int(info.id) == profile_id:
            return enum
    session.warnings.append(
        f"{what} unknown: NVML's profile id {profile_id} is none ocihook can name"
    )
    return None


def _mig_facts(
    session: _Session,
    parent: object,
    mig: object,
    gi: int,
    ci: int,
    gpu_total: int | None,
    what: str,
) -> tuple[str | None, int | None]:
    """``(profile, memory in MiB)`` of the MIG device ``mig`` (GPU instance ``gi``, compute
    instance ``ci``) of GPU ``parent`` whose memory is ``gpu_total`` bytes (see the module
    docstring); each ``None`` when NVML cannot tell."""
    attributes = session.optional("nvmlDeviceGetAttributes", mig, what=f"{what} memory")
    memory = None if attributes is None else int(attributes.memorySizeMB)
    if memory is None or gpu_total is None:
        return None, memory
    profile = f"{what} profile"
    gi_handle = session.optional("nvmlDeviceGetGpuInstanceById", parent, gi, what=profile)
    gi_info = (
        None
        if gi_handle is None
        else session.optional("nvmlGpuInstanceGetInfo", gi_handle, what=profile)
    )
    if gi_info is None:
        return None, memory
    gi_enum = _profile_enum(
        session, "nvmlDeviceGetGpuInstanceProfileInfo", (parent,),
        GPU_INSTANCE_PROFILES, int(gi_info.profileId), profile,
    )  # fmt: skip
    if gi_enum is None:
        return None, memory
    ci_handle = session.optional(
        "nvmlGpuInstanceGetComputeInstanceById", gi_handle, ci, what=profile
    )
    ci_info = (
        None
        if ci_handle is None
        else session.optional("nvmlComputeInstanceGetInfo", ci_handle, what=profile)
    )
    if ci_info is None:
        return None, memory
    ci_enum = _profile_enum(
        session, "nvmlGpuInstanceGetComputeInstanceProfileInfo",
        (gi_handle, COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED),
        COMPUTE_INSTANCE_PROFILES, int(ci_info.profileId), profile,
    )  # fmt: skip
    if ci_enum is None:
        return None, memory
    return mig_profile_name(gi_enum, ci_enum, mig_memory_gb(gpu_total, memory)), memory


def _enumerate(session: _Session, root: HostRoot, majors: Mapping[str, int]) -> GpuInventory:
    warnings = session.warnings
    driver_version = session.optional("nvmlSystemGetDriverVersion", what="driver version")
    driver = _text(driver_version) if driver_version is not None else None
    if not driver:
        driver = procfs_driver_version(root, warnings)
    cuda = session.optional("nvmlSystemGetCudaDriverVersion_v2", what="CUDA version")
    if cuda is None:
        cuda = session.optional("nvmlSystemGetCudaDriverVersion", what="CUDA version")
    count = int(session.call("nvmlDeviceGetCount"))
    proc_dirs = _proc_dirs(root)
    mig = MigContext(root, majors, warnings)
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
