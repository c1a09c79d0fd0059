"""A stand-in for nvidia-ml-py's ``pynvml`` module, driven by a host description.

It mirrors the surface ocihook's NVML backend uses, with the real module's behaviour
(nvidia-ml-py 13.x ``pynvml.py``; NVML API reference):

* ``NVMLError(value)`` maps to a subclass per code (``NVMLError_NotSupported``, ...) and
  keeps the code in ``.value``; the ``NVML_ERROR_*``, ``NVML_BRAND_*`` and
  ``NVML_DEVICE_MIG_*`` constants have nvml.h's values;
* every call before ``nvmlInit`` (or after the matching ``nvmlShutdown``) raises
  ``NVML_ERROR_UNINITIALIZED``; a C symbol the description lists as ``missing`` raises
  ``NVML_ERROR_FUNCTION_NOT_FOUND``, as ``_nvmlGetFunctionPointer`` does;
* strings come back as ``str`` (``convertStrBytes``), or ``bytes`` like nvidia-ml-py
  before 11.5 when the description says ``bytes_strings``; ``nvmlPciInfo_t.busId`` is
  ``bytes`` (a ctypes ``char[]`` field), upper-case hex with an 8-digit domain;
* handles are opaque; a handle index past the count is ``NVML_ERROR_INVALID_ARGUMENT``;
  MIG queries on a GPU without MIG are ``NVML_ERROR_NOT_SUPPORTED``; an empty MIG slot is
  ``NVML_ERROR_NOT_FOUND``; GPU/compute instance ids of a non-MIG handle are
  ``NVML_ERROR_INVALID_ARGUMENT``;
* memory: ``nvmlDeviceGetMemoryInfo`` (``.total``/``.free``/``.used`` in bytes) of a GPU
  or MIG handle whose description has ``memory_mib`` (else ``NVML_ERROR_NOT_SUPPORTED``);
  ``nvmlDeviceGetAttributes`` of a MIG handle (``.memorySizeMB``, slice counts; a GPU
  handle is ``NVML_ERROR_NOT_SUPPORTED``, as NVML supports only MIG handles there);
* GPU and compute instances: ``nvmlDeviceGetGpuInstanceById`` (``NVML_ERROR_NOT_FOUND``
  for an id no MIG device has), ``nvmlGpuInstanceGetInfo`` (``.id``, ``.profileId``),
  ``nvmlGpuInstanceGetComputeInstanceById``, ``nvmlComputeInstanceGetInfo``, and the
  profile tables ``nvmlDeviceGetGpuInstanceProfileInfo`` /
  ``nvmlGpuInstanceGetComputeInstanceProfileInfo``: an enum past the ``*_PROFILE_COUNT``
  of nvml.h is ``NVML_ERROR_INVALID_ARGUMENT``, a profile the GPU (or, for a compute
  instance profile, the GPU instance's size) does not offer ``NVML_ERROR_NOT_SUPPORTED``;
* events: ``nvmlEventSetCreate``, ``nvmlDeviceGetSupportedEventTypes`` (a GPU's
  ``events`` mask, default critical XID and both ECC types; a MIG handle answers its GPU's),
  ``nvmlDeviceRegisterEvents`` (a type the GPU does not support is
  ``NVML_ERROR_NOT_SUPPORTED``), ``nvmlEventSetWait_v2`` / ``nvmlEventSetWait`` (block up
  to the timeout in ms, then ``NVML_ERROR_TIMEOUT``; the description's ``wait_error``
  fails every wait with that code), ``nvmlEventSetFree``; the test calls :func:`deliver`
  to raise an event, which reaches each event set its GPU registered for that type, as
  ``c_nvmlEventData_t`` (``device``, ``eventType``, ``eventData``, ``gpuInstanceId``,
  ``computeInstanceId``); ``nvmlDeviceGetHandleByUUID`` finds GPUs and MIG devices.

A test calls :func:`load` with a description::

    {
        "init_error": None,                 # or an NVML_ERROR_* code nvmlInit fails with
        "driver_version": "550.127.05",
        "cuda_version": 12040,              # nvmlSystemGetCudaDriverVersion(_v2)
        "missing": ["nvmlSystemGetCudaDriverVersion_v2"],   # absent C symbols
        "bytes_strings": False,
        "gpus": [                           # NVML index order
            {
                "uuid": "GPU-...", "minor": 0, "bus_id": "00000000:07:00.0",
                "name": "NVIDIA A100-SXM4-80GB",
                "brand": NVML_BRAND_TESLA,          # absent: NOT_SUPPORTED
                "compute_capability": (8, 0),       # absent: NOT_SUPPORTED
                "memory_mib": 81920,                # absent: NOT_SUPPORTED
                "mig": {                            # absent: MIG not supported
                    "current": 1, "pending": 1, "max_devices": 7,
                    "devices": {0: {"gi": 1, "ci": 0, "uuid": "MIG-...",  # by slot
                                    "gi_profile_id": 19, "ci_profile_id": 0,
                                    "memory_mib": 9728}},
                    # NVML_GPU_INSTANCE_PROFILE_* / NVML_COMPUTE_INSTANCE_PROFILE_* ->
                    # the profile info NVML gives for it (absent: NOT_SUPPORTED)
                    "gi_profiles": {0: {"id": 19, "slices": 1, "memory_mib": 9728}},
                    "ci_profiles": {0: {"id": 0, "slices": 1}},
                },
                "events": 0xB,                      # supported nvmlEventType* bits
                "errors": {"nvmlDeviceGetBrand": NVML_ERROR_UNKNOWN},  # forced failures
            },
        ],
    }

:func:`history` returns the calls made, :func:`init_refcount` the init/shutdown balance.
"""

from __future__ import annotations

import string
import threading
import time
from typing import Any

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_UNKNOWN = 999

NVML_BRAND_UNKNOWN = 0
NVML_BRAND_QUADRO = 1
NVML_BRAND_TESLA = 2
NVML_BRAND_NVS = 3
NVML_BRAND_GRID = 4
NVML_BRAND_GEFORCE = 5
NVML_BRAND_TITAN = 6
NVML_BRAND_NVIDIA_VAPPS = 7
NVML_BRAND_NVIDIA_VPC = 8
NVML_BRAND_NVIDIA_VCS = 9
NVML_BRAND_NVIDIA_VWS = 10
NVML_BRAND_NVIDIA_CLOUD_GAMING = 11
NVML_BRAND_QUADRO_RTX = 12
NVML_BRAND_NVIDIA_RTX = 13
NVML_BRAND_NVIDIA = 14
NVML_BRAND_GEFORCE_RTX = 15
NVML_BRAND_TITAN_RTX = 16

nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
nvmlEventTypeNone = 0x0
nvmlEventTypeAll = 0x1F

NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1


class NVMLError(Exception):
    """An NVML return code other than success; ``value`` is the code."""

    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (as in pynvml)
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return nvmlErrorString(self.value)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NVMLError) and self.value == other.value

    __hash__ = Exception.__hash__


def _make_error_classes() -> None:
    """``NVML_ERROR_ALREADY_INITIALIZED`` -> ``NVMLError_AlreadyInitialized``, like pynvml."""
    namespace = globals()
    for name in [n for n in namespace if n.startswith("NVML_ERROR_")]:
        class_name = "NVMLError_" + string.capwords(name.replace("NVML_ERROR_", ""), "_").replace(
            "_", ""
        )
        code = namespace[name]

        def new(cls: type[NVMLError], *_args: object, _code: int = code) -> NVMLError:
            obj = Exception.__new__(cls)
            obj.value = _code
            return obj

        cls = type(class_name, (NVMLError,), {"__new__": new})
        cls.__module__ = __name__
        namespace[class_name] = cls
        NVMLError._valClassMapping[code] = cls


_make_error_classes()

_ERROR_STRINGS = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized",
    NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported",
    NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found",
    NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
    NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_TIMEOUT: "Timeout",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


def nvmlErrorString(result: int) -> str:
    return _ERROR_STRINGS.get(result, f"NVML Error with code {result}")


# -- state ----------------------------------------------------------------------------------

_description: dict[str, Any] = {"gpus": []}
_refcount = 0
_history: list[str] = []
_event_sets: list[_EventSet] = []


def load(description: dict[str, Any]) -> None:
    """Describe the machine NVML sees (see the module docstring) and reset all state."""
    global _description, _refcount
    _description = description
    _refcount = 0
    _history.clear()
    _event_sets.clear()


def history() -> list[str]:
    """The NVML functions called since :func:`load`, in order."""
    return list(_history)


def init_refcount() -> int:
    """``nvmlInit`` calls minus ``nvmlShutdown`` calls that succeeded."""
    return _refcount


class _Device:
    """An opaque ``nvmlDevice_t``: a GPU, or a MIG device of one."""

    def __init__(self, gpu: dict[str, Any], mig: dict[str, Any] | None = None) -> None:
        self._gpu = gpu
        self._mig = mig

    def __repr__(self) -> str:
        return f"<nvmlDevice_t at {id(self):#x}>"


class nvmlPciInfo_t:
    """The fields of ``nvmlPciInfo_t`` (v3) pynvml exposes; ``busId`` is ``bytes``."""

    def __init__(self, bus_id: str) -> None:
        domain, bus, rest = bus_id.split(":")
        device = rest.split(".")[0]
        self.domain = int(domain, 16)
        self.bus = int(bus, 16)
        self.device = int(device, 16)
        self.pciDeviceId = 0x20B210DE
        self.pciSubSystemId = 0x147F10DE
        self.busIdLegacy = f"{self.domain:04X}:{self.bus:02X}:{self.device:02X}.0".encode()
        self.busId = f"{self.domain:08X}:{self.bus:02X}:{self.device:02X}.0".encode()


def _enter(name: str, device: _Device | None = None) -> None:
    """Book-keeping and the checks every pynvml wrapper does before the C call."""
    _history.append(name)
    if name in _description.get("missing", ()):
        raise NVMLError(NVML_ERROR_FUNCTION_NOT_FOUND)
    if _refcount == 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    if device is not None:
        if not isinstance(device, _Device):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        described = device._mig if device._mig is not None else device._gpu
        code = described.get("errors", {}).get(name)
        if code is not None:
            raise NVMLError(code)


def _string(value: str) -> str | bytes:
    return value.encode() if _description.get("bytes_strings") else value


# -- functions ------------------------------------------------------------------------------


def nvmlInitWithFlags(flags: int) -> None:
    global _refcount
    _history.append("nvmlInitWithFlags")
    code = _description.get("init_error")
    if code is not None:
        raise NVMLError(code)
    _refcount += 1


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    global _refcount
    _enter("nvmlShutdown")
    _refcount -= 1


def nvmlSystemGetDriverVersion() -> str | bytes:
    _enter("nvmlSystemGetDriverVersion")
    return _string(_description["driver_version"])


def nvmlSystemGetCudaDriverVersion() -> int:
    _enter("nvmlSystemGetCudaDriverVersion")
    if _description.get("cuda_version") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(_description["cuda_version"])


def nvmlSystemGetCudaDriverVersion_v2() -> int:
    _enter("nvmlSystemGetCudaDriverVersion_v2")
    if _description.get("cuda_version") is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(_description["cuda_version"])


def nvmlDeviceGetCount() -> int:
    _enter("nvmlDeviceGetCount")
    return len(_description["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> _Device:
    _enter("nvmlDeviceGetHandleByIndex")
    gpus = _description["gpus"]
    if not 0 <= index < len(gpus):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    gpu = gpus[index]
    code = gpu.get("errors", {}).get("nvmlDeviceGetHandleByIndex")
    if code is not None:
        raise NVMLError(code)
    return _Device(gpu)


def nvmlDeviceGetUUID(handle: _Device) -> str | bytes:
    _enter("nvmlDeviceGetUUID", handle)
    if handle._mig is not None:
        return _string(handle._mig["uuid"])
    return _string(handle._gpu["uuid"])


def nvmlDeviceGetMinorNumber(handle: _Device) -> int:
    _enter("nvmlDeviceGetMinorNumber", handle)
    if handle._mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(handle._gpu["minor"])


def nvmlDeviceGetPciInfo_v3(handle: _Device) -> nvmlPciInfo_t:
    _enter("nvmlDeviceGetPciInfo_v3", handle)
    return nvmlPciInfo_t(handle._gpu["bus_id"])


def nvmlDeviceGetPciInfo(handle: _Device) -> nvmlPciInfo_t:
    return nvmlDeviceGetPciInfo_v3(handle)


def nvmlDeviceGetName(handle: _Device) -> str | bytes:
    _enter("nvmlDeviceGetName", handle)
    return _string(handle._gpu["name"])


def nvmlDeviceGetBrand(handle: _Device) -> int:
    _enter("nvmlDeviceGetBrand", handle)
    if "brand" not in handle._gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return int(handle._gpu["brand"])


def nvmlDeviceGetCudaComputeCapability(handle: _Device) -> tuple[int, int]:
    _enter("nvmlDeviceGetCudaComputeCapability", handle)
    if "compute_capability" not in handle._gpu:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    major, minor = handle._gpu["compute_capability"]
    return (int(major), int(minor))


def _mig_of(handle: _Device) -> dict[str, Any]:
    mig = handle._gpu.get("mig")
    if mig is None or handle._mig is not None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return dict(mig)


def nvmlDeviceGetMigMode(device: _Device) -> list[int]:
    _enter("nvmlDeviceGetMigMode", device)
    mig = _mig_of(device)
    return [int(mig["current"]), int(mig.get("pending", mig["current"]))]


def nvmlDeviceGetMaxMigDeviceCount(device: _Device) -> int:
    _enter("nvmlDeviceGetMaxMigDeviceCount", device)
    return int(_mig_of(device).get("max_devices", 7))


def nvmlDeviceGetMigDeviceHandleByIndex(device: _Device, index: int) -> _Device:
    _enter("nvmlDeviceGetMigDeviceHandleByIndex", device)
    mig = _mig_of(device)
    if not 0 <= index < int(mig.get("max_devices", 7)):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if mig["current"] != NVML_DEVICE_MIG_ENABLE:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    slot = mig.get("devices", {}).get(index)
    if slot is None:
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Device(device._gpu, slot)


def nvmlDeviceIsMigDeviceHandle(device: _Device) -> int:
    _enter("nvmlDeviceIsMigDeviceHandle", device)
    return int(device._mig is not None)


def nvmlDeviceGetGpuInstanceId(device: _Device) -> int:
    _enter("nvmlDeviceGetGpuInstanceId", device)
    if device._mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(device._mig["gi"])


def nvmlDeviceGetComputeInstanceId(device: _Device) -> int:
    _enter("nvmlDeviceGetComputeInstanceId", device)
    if device._mig is None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(device._mig["ci"])


# -- memory, GPU and compute instances --------------------------------------------------------


class _Struct:
    """A ctypes structure's fields as attributes (what pynvml returns)."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _GpuInstance:
    """An opaque ``nvmlGpuInstance_t``."""

    def __init__(self, gpu: dict[str, Any], gi: int) -> None:
        self._gpu = gpu
        self._gi = gi


class _ComputeInstance:
    """An opaque ``nvmlComputeInstance_t``."""

    def __init__(self, instance: _GpuInstance, mig: dict[str, Any]) -> None:
        self._instance = instance
        self._mig = mig


def _forced(name: str, described: dict[str, Any]) -> None:
    code = described.get("errors", {}).get(name)
    if code is not None:
        raise NVMLError(code)


def nvmlDeviceGetMemoryInfo(handle: _Device, version: int | None = None) -> _Struct:
    _enter("nvmlDeviceGetMemoryInfo", handle)
    described = handle._mig if handle._mig is not None else handle._gpu
    if "memory_mib" not in described:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    total = int(described["memory_mib"]) << 20
    return _Struct(total=total, free=total, used=0)


def nvmlDeviceGetAttributes(device: _Device) -> _Struct:
    _enter("nvmlDeviceGetAttributes", device)
    if device._mig is None or "memory_mib" not in device._mig:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    mig = _mig_of(_Device(device._gpu))
    gi = mig.get("gi_profiles", {}).values()
    slices = {p["id"]: p["slices"] for p in gi}
    ci = {p["id"]: p["slices"] for p in mig.get("ci_profiles", {}).values()}
    return _Struct(
        memorySizeMB=int(device._mig["memory_mib"]),
        gpuInstanceSliceCount=slices.get(device._mig.get("gi_profile_id"), 0),
        computeInstanceSliceCount=ci.get(device._mig.get("ci_profile_id"), 0),
    )


def _instance_devices(gpu: dict[str, Any], gi: int) -> list[dict[str, Any]]:
    return [m for m in gpu["mig"].get("devices", {}).values() if m["gi"] == gi]


def nvmlDeviceGetGpuInstanceById(device: _Device, gpuInstanceId: int) -> _GpuInstance:
    _enter("nvmlDeviceGetGpuInstanceById", device)
    if device._mig is not None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    mig = _mig_of(device)
    if mig["current"] != NVML_DEVICE_MIG_ENABLE:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    if not _instance_devices(device._gpu, gpuInstanceId):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _GpuInstance(device._gpu, gpuInstanceId)


def nvmlGpuInstanceGetInfo(gpuInstance: _GpuInstance) -> _Struct:
    _enter("nvmlGpuInstanceGetInfo")
    if not isinstance(gpuInstance, _GpuInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _forced("nvmlGpuInstanceGetInfo", gpuInstance._gpu)
    first = _instance_devices(gpuInstance._gpu, gpuInstance._gi)[0]
    return _Struct(
        device=_Device(gpuInstance._gpu), id=gpuInstance._gi, profileId=first["gi_profile_id"]
    )


def nvmlDeviceGetGpuInstanceProfileInfo(device: _Device, profile: int, version: int = 2) -> _Struct:
    _enter("nvmlDeviceGetGpuInstanceProfileInfo", device)
    if not 0 <= profile < NVML_GPU_INSTANCE_PROFILE_COUNT or device._mig is not None:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    info = _mig_of(device).get("gi_profiles", {}).get(profile)
    if info is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Struct(id=info["id"], sliceCount=info["slices"], memorySizeMB=info.get("memory_mib", 0))


def nvmlGpuInstanceGetComputeInstanceById(
    gpuInstance: _GpuInstance, computeInstanceId: int
) -> _ComputeInstance:
    _enter("nvmlGpuInstanceGetComputeInstanceById")
    if not isinstance(gpuInstance, _GpuInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _forced("nvmlGpuInstanceGetComputeInstanceById", gpuInstance._gpu)
    for mig in _instance_devices(gpuInstance._gpu, gpuInstance._gi):
        if mig["ci"] == computeInstanceId:
            return _ComputeInstance(gpuInstance, mig)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlComputeInstanceGetInfo(computeInstance: _ComputeInstance) -> _Struct:
    _enter("nvmlComputeInstanceGetInfo")
    if not isinstance(computeInstance, _ComputeInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    _forced("nvmlComputeInstanceGetInfo", computeInstance._mig)
    return _Struct(id=computeInstance._mig["ci"], profileId=computeInstance._mig["ci_profile_id"])


def nvmlGpuInstanceGetComputeInstanceProfileInfo(
    gpuInstance: _GpuInstance, profile: int, engProfile: int, version: int = 2
) -> _Struct:
    _enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
    if not isinstance(gpuInstance, _GpuInstance):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    if not (
        0 <= profile < NVML_COMPUTE_INSTANCE_PROFILE_COUNT
        and 0 <= engProfile < NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT
    ):
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    mig = gpuInstance._gpu["mig"]
    info = mig.get("ci_profiles", {}).get(profile)
    gi_id = _instance_devices(gpuInstance._gpu, gpuInstance._gi)[0]["gi_profile_id"]
    gi_slices = {p["id"]: p["slices"] for p in mig.get("gi_profiles", {}).values()}.get(gi_id, 0)
    if info is None or info["slices"] > gi_slices:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return _Struct(id=info["id"], sliceCount=info["slices"])


# -- events -----------------------------------------------------------------------------------

_NO_INSTANCE = 0xFFFFFFFF
_DEFAULT_EVENTS = (
    nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError
)


class _EventSet:
    """An opaque ``nvmlEventSet_t``: the registrations (GPU identity -> event mask) and the
    events delivered, not yet waited for."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.registered: dict[int, int] = {}
        self.queue: list[_Struct] = []
        self.freed = False


def _check_set(eventSet: _EventSet) -> None:
    if not isinstance(eventSet, _EventSet) or eventSet.freed:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)


def nvmlEventSetCreate() -> _EventSet:
    _enter("nvmlEventSetCreate")
    es = _EventSet()
    _event_sets.append(es)
    return es


def nvmlDeviceGetSupportedEventTypes(handle: _Device) -> int:
    _enter("nvmlDeviceGetSupportedEventTypes", handle)
    return int(handle._gpu.get("events", _DEFAULT_EVENTS))


def nvmlDeviceRegisterEvents(handle: _Device, eventTypes: int, eventSet: _EventSet) -> None:
    _enter("nvmlDeviceRegisterEvents", handle)
    _check_set(eventSet)
    if eventTypes & ~int(handle._gpu.get("events", _DEFAULT_EVENTS)):
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    with eventSet.cond:
        key = id(handle._gpu)
        eventSet.registered[key] = eventSet.registered.get(key, 0) | eventTypes


def _wait(name: str, eventSet: _EventSet, timeoutms: int) -> _Struct:
    _enter(name)
    _check_set(eventSet)
    deadline = time.monotonic() + timeoutms / 1000
    with eventSet.cond:
        while True:
            code = _description.get("wait_error")
            if code is not None:
                raise NVMLError(code)
            if eventSet.queue:
                return eventSet.queue.pop(0)
            left = deadline - time.monotonic()
            if left <= 0:
                raise NVMLError(NVML_ERROR_TIMEOUT)
            eventSet.cond.wait(left)


def nvmlEventSetWait_v2(eventSet: _EventSet, timeoutms: int) -> _Struct:
    return _wait("nvmlEventSetWait_v2", eventSet, timeoutms)


def nvmlEventSetWait(eventSet: _EventSet, timeoutms: int) -> _Struct:
    return _wait("nvmlEventSetWait", eventSet, timeoutms)


def nvmlEventSetFree(eventSet: _EventSet) -> None:
    _enter("nvmlEventSetFree")
    _check_set(eventSet)
    eventSet.freed = True
    _event_sets.remove(eventSet)


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Device:
    _enter("nvmlDeviceGetHandleByUUID")
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for gpu in _description["gpus"]:
        if gpu["uuid"] == text:
            return _Device(gpu)
        for mig in gpu.get("mig", {}).get("devices", {}).values():
            if mig["uuid"] == text:
                return _Device(gpu, mig)
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def deliver(
    gpu_index: int,
    event_type: int,
    data: int = 0,
    gi: int = _NO_INSTANCE,
    ci: int = _NO_INSTANCE,
) -> int:
    """Raise an event of GPU ``gpu_index`` (``data``: the XID of a critical XID event;
    ``gi``/``ci``: the instance ids, ``0xFFFFFFFF`` for none); the number of event sets it
    reached (those the GPU registered for ``event_type``)."""
    gpu = _description["gpus"][gpu_index]
    reached = 0
    for es in list(_event_sets):
        with es.cond:
            if es.registered.get(id(gpu), 0) & event_type:
                es.queue.append(_Struct(
                    device=_Device(gpu), eventType=event_type, eventData=data,
                    gpuInstanceId=gi, computeInstanceId=ci,
                ))  # fmt: skip
                es.cond.notify_all()
                reached += 1
    return reached
