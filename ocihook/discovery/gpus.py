"""NVIDIA GPUs and their device nodes, as the kernel driver reports them.

The procfs backend reads ``<proc>/driver/nvidia/gpus/<bus id>/information`` (one directory
per GPU; the index is the PCI bus order, as NVML and ``nvidia-smi`` number GPUs) and checks
host device nodes under the dev root.
"""

from __future__ import annotations

import os
import stat

from .._record import Record
from ..errors import DiscoveryError
from ..hostroot import HostRoot, read_text

__all__ = [
    "Gpu",
    "HostDeviceNode",
    "canonical_bus_id",
    "device_node",
    "is_gpu_uuid",
    "parse_gpu_information",
    "read_gpus",
]


_HEX = frozenset("0123456789abcdefABCDEF")


def _is_hex(text: str, lengths: tuple[int, ...]) -> bool:
    return len(text) in lengths and set(text) <= _HEX


def is_gpu_uuid(text: str) -> bool:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (hex digits, any case)."""
    if not text.startswith("GPU-"):
        return False
    groups = text[4:].split("-")
    return len(groups) == 5 and all(
        _is_hex(g, (n,)) for g, n in zip(groups, (8, 4, 4, 4, 12), strict=True)
    )


class Gpu(Record):
    """One NVIDIA GPU as the kernel driver reports it.

    Attributes:
        index: position in PCI bus order (0-based), as ``nvidia-smi`` and NVML number them.
        minor: the ``N`` of ``/dev/nvidiaN`` ("Device Minor"); not necessarily ``index``.
        uuid: ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` as the driver prints it.
        bus_id: PCI address with an 8-digit domain, lowercase: ``00000000:3b:00.0``.
        model: marketing name ("NVIDIA H100 80GB HBM3").
        proc_dir: host path of the GPU's ``/proc/driver/nvidia/gpus/<bus id>`` directory.
    """

    index: int
    minor: int
    uuid: str
    bus_id: str
    model: str
    proc_dir: str

    @property
    def device_path(self) -> str:
        """Container path of the GPU's device node: ``/dev/nvidia<minor>``."""
        return f"/dev/nvidia{self.minor}"


class HostDeviceNode(Record):
    """A character device node the container may need.

    Attributes:
        path: path in ``/dev`` terms (``/dev/nvidiactl``), the same inside the container.
        host_path: host path under the dev root.
        major, minor: the device number the kernel driver defines.
        file_mode: permission bits (``0o666`` when the host node is missing).
        uid, gid: owner of the host node (0 when missing).
        present: whether the host node exists (and was checked to be this device).
    """

    path: str
    host_path: str
    major: int
    minor: int
    file_mode: int = 0o666
    uid: int = 0
    gid: int = 0
    present: bool = False


def parse_gpu_information(text: str, *, path: str | None = None) -> dict[str, str]:
    """Parse a ``/proc/driver/nvidia/gpus/<bus id>/information`` file into a dict.

    Lines are ``Key: <spaces or tabs> value``; each is split on its first ``:``. Lines
    without a colon are ignored. Keys keep their case (``"Device Minor"``).
    """
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            info[key.strip()] = value.strip()
    return info


def canonical_bus_id(raw: str, *, path: str) -> tuple[str, tuple[int, int, int, int]]:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` -> (``00000000:3b:00.0``, sort key)."""
    text = raw.strip()
    domain, _, rest = text.partition(":")
    bus, _, rest = rest.partition(":")
    dev, _, fn = rest.partition(".")
    if not (
        _is_hex(domain, (4, 8))
        and _is_hex(bus, (2,))
        and _is_hex(dev, (2,))
        and fn in ("0", "1", "2", "3", "4", "5", "6", "7")
    ):
        raise DiscoveryError("malformed PCI bus id", path=path, field="Bus Location", value=raw)
    key = (int(domain, 16), int(bus, 16), int(dev, 16), int(fn))
    return f"{key[0]:08x}:{key[1]:02x}:{key[2]:02x}.{key[3]:x}", key


def read_gpus(root: HostRoot) -> tuple[tuple[Gpu, ...], list[str]]:
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
        if minor_text is None or not minor_text.isdigit():
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


def device_node(root: HostRoot, path: str, major: int, minor: int) -> HostDeviceNode:
    """Describe ``path``; a host node that exists must be that very char device.

    Raises:
        DiscoveryError: the host node exists but is not a character device with
            ``major:minor`` (libnvidia-container refuses such nodes as "invalid device node").
    """
    host_path = root.dev(path)
    try:
        st = os.lstat(host_path)
    except FileNotFoundError:
        return HostDeviceNode(path=path, host_path=host_path, major=major, minor=minor)
    except OSError as e:
        raise DiscoveryError(f"cannot stat device node: {e.strerror}", path=host_path) from None
    if not stat.S_ISCHR(st.st_mode) or (os.major(st.st_rdev), os.minor(st.st_rdev)) != (
        major,
        minor,
    ):
        actual = (
            f"char {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
            if stat.S_ISCHR(st.st_mode)
            else "not a character device"
        )
        raise DiscoveryError(
            "invalid device node",
            path=host_path,
            value=actual,
            hint=f"expected char {major}:{minor}; fix or remove the node",
        )
    return HostDeviceNode(
        path=path,
        host_path=host_path,
        major=major,
        minor=minor,
        file_mode=stat.S_IMODE(st.st_mode),
        uid=st.st_uid,
        gid=st.st_gid,
        present=True,
    )
