"""Pure parsers of the NVIDIA driver's procfs and of sysfs/``/proc`` text files: driver
version, character majors, GPU information, MIG minors and capability files, sysfs ``dev``
and ``/proc/misc``. They take text and return values; no file-system access."""

from __future__ import annotations

from ..core.errors import DiscoveryError
from ..core.vocab import parse_bus_id, parse_gpu_information, procfs_bus_id

#: Minors are 20 bits (``MINORBITS``, ``include/linux/kdev_t.h``).
MINOR_LIMIT = 1 << 20
#: Majors are 12 bits.
MAJOR_LIMIT = 1 << 12
_MINOR_LIMIT = MINOR_LIMIT
_MAJOR_LIMIT = MAJOR_LIMIT
#: The mode of a capability node whose file gives none (``DeviceFileMode`` absent).
DEFAULT_CAP_MODE = 0o444
_DEFAULT_CAP_MODE = DEFAULT_CAP_MODE


def decimal(text: str) -> int | None:
    """``text`` as a non-negative decimal integer (ASCII digits only, at most 18 of them:
    no unbounded ``int()``), else ``None``."""
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 18 else None


def canonical_decimal(text: str) -> int | None:
    """A canonical non-negative ASCII decimal as the kernel prints it (no sign, no leading
    zero, at most 19 digits), else ``None``."""
    if len(text) > 1 and text[0] == "0":
        return None
    return decimal(text) if text else None


def numbered(prefix: str, text: str) -> int | None:
    """The ``N`` of ``<prefix>N`` (``gi3`` -> 3), else ``None``."""
    return decimal(text[len(prefix) :]) if text.startswith(prefix) else None


def _is_version(token: str) -> bool:
    """``N.N`` or ``N.N.N`` with ASCII digits."""
    parts = token.split(".")
    return 2 <= len(parts) <= 3 and all(p.isascii() and p.isdigit() for p in parts)


def parse_driver_version(text: str, *, path: str | None = None) -> str:
    """Return the driver version from the contents of ``/proc/driver/nvidia/version``.

    The first line reads ``NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  <date>``
    (proprietary module) or ``NVRM version: NVIDIA UNIX Open Kernel Module for x86_64
    580.95.05  Release Build ...`` (open module); the version is the first whole token of
    the form ``N.N`` or ``N.N.N`` after ``NVRM version:``.

    Raises:
        DiscoveryError: no ``NVRM version:`` line or no version on it.
    """
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for token in line[len("NVRM version:") :].split():
                if _is_version(token):
                    return token
            break
    raise DiscoveryError(
        "no driver version in the NVRM version line",
        path=path,
        field="NVRM version",
        value=text.splitlines()[0] if text else "",
    )


def parse_char_majors(text: str) -> dict[str, tuple[int, ...]]:
    """Return *every* character major of a ``/proc/devices`` text, by driver name, in
    file order: a driver may register several regions under one name
    (``infiniband_verbs``: the fixed 231 and a dynamic one). Only the "Character
    devices:" section is read (block majors are a different number space)."""
    majors: dict[str, list[int]] = {}
    in_char = False
    for line in text.splitlines():
        s = line.strip()
        if s.endswith(":"):
            in_char = s == "Character devices:"
            continue
        if not in_char or not s:
            continue
        num, _, name = s.partition(" ")
        if num.isascii() and num.isdigit() and len(num) <= 18 and name.strip():
            found = majors.setdefault(name.strip(), [])
            if int(num) not in found:
                found.append(int(num))
    return {name: tuple(nums) for name, nums in majors.items()}


def parse_devices(text: str) -> dict[str, int]:
    """Return the character device majors of a ``/proc/devices`` text, by driver name;
    when one name has several, the first (see :func:`parse_char_majors`)."""
    return {name: nums[0] for name, nums in parse_char_majors(text).items()}


def canonical_bus_id(raw: str, *, path: str) -> tuple[str, tuple[int, int, int, int]]:
    """``0000:3b:00.0`` or ``00000000:3B:00.0`` -> (``00000000:3b:00.0``, sort key).

    Raises:
        DiscoveryError: ``raw`` is not ``domain:bus:device.function`` in hex with a 4- or
            8-digit domain (field ``Bus Location``).
    """
    key = parse_bus_id(raw.strip())
    if key is None:
        raise DiscoveryError("malformed PCI bus id", path=path, field="Bus Location", value=raw)
    return procfs_bus_id(key), key


def _is_mig_cap_name(name: str) -> bool:
    """``config``, ``monitor``, ``gpu<N>/gi<G>/access`` or ``gpu<N>/gi<G>/ci<C>/access``."""
    if name in ("config", "monitor"):
        return True
    parts = name.split("/")
    if len(parts) not in (3, 4) or parts[-1] != "access":
        return False
    if numbered("gpu", parts[0]) is None or numbered("gi", parts[1]) is None:
        return False
    return len(parts) == 3 or numbered("ci", parts[2]) is not None


def parse_mig_minors(text: str, *, path: str | None = None) -> tuple[dict[str, int], list[str]]:
    """Parse ``/proc/driver/nvidia-caps/mig-minors`` (module ``nvidia-caps``).

    Each line is ``<capability> <minor>``: ``config 1``, ``monitor 2``,
    ``gpu0/gi1/access 12``, ``gpu0/gi1/ci0/access 13``; ``gpuN`` is the GPU's device
    *minor*, not its index. The file lists every capability the driver could create, not
    only existing MIG devices.

    Args:
        text: the file's contents.
        path: the file, named in warnings.

    Returns:
        ``({capability: minor}, warnings)``. Blank lines are ignored; malformed lines
        (not two fields, an unknown capability name, a minor that is not a decimal below
        2**20) and repeated capabilities (the first wins) are skipped and summarised in
        at most two warnings. Never raises.
    """
    minors: dict[str, int] = {}
    malformed: list[str] = []
    repeated: list[str] = []
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        minor = decimal(fields[1]) if len(fields) == 2 else None
        if minor is None or minor >= _MINOR_LIMIT or not _is_mig_cap_name(fields[0]):
            malformed.append(line)
        elif fields[0] in minors:
            repeated.append(fields[0])
        else:
            minors[fields[0]] = minor
    where = path or "mig-minors"
    warnings = []
    if malformed:
        warnings.append(
            f"{where}: skipped {len(malformed)} malformed line(s), first {malformed[0][:80]!r}"
        )
    if repeated:
        warnings.append(
            f"{where}: {len(repeated)} capability(ies) listed twice, first {repeated[0]!r};"
            " the first minor was kept"
        )
    return minors, warnings


def parse_capability_file(text: str, *, path: str | None = None) -> tuple[int, int]:
    """Parse an NVIDIA capability file into ``(minor, mode)``.

    The files ``/proc/driver/nvidia/capabilities/mig/{config,monitor}`` and
    ``.../capabilities/gpu<minor>/mig/gi<G>[/ci<C>]/access`` read
    ``DeviceFileMinor: <n>``, ``DeviceFileMode: <decimal mode>``, ``DeviceFileModify: 0|1``
    (driver ``nv-caps.c``; nvidia-modprobe creates ``/dev/nvidia-caps/nvidia-cap<n>``
    from them). ``DeviceFileMode`` is decimal (``292`` = ``0o444``); when absent the
    mode is ``0o444``.

    Raises:
        DiscoveryError: ``DeviceFileMinor`` missing or not a decimal below 2**20, or
            ``DeviceFileMode`` not a decimal at most ``0o7777``.
    """
    info = parse_gpu_information(text)
    raw_minor = info.get("DeviceFileMinor")
    minor = decimal(raw_minor) if raw_minor is not None else None
    if minor is None or minor >= _MINOR_LIMIT:
        raise DiscoveryError(
            "missing or malformed capability minor",
            path=path,
            field="DeviceFileMinor",
            value=raw_minor,
        )
    raw_mode = info.get("DeviceFileMode")
    if raw_mode is None:
        return minor, _DEFAULT_CAP_MODE
    mode = decimal(raw_mode)
    if mode is None or mode > 0o7777:
        raise DiscoveryError(
            "malformed capability file mode", path=path, field="DeviceFileMode", value=raw_mode
        )
    return minor, mode


def parse_sysfs_dev(text: str, *, path: str | None = None) -> tuple[int, int]:
    """Parse a sysfs ``dev`` attribute (``"226:1\\n"``) into ``(major, minor)``.

    The kernel prints ``%u:%u`` and a newline (``drivers/base/core.c``, ``dev_show``); the
    major must fit 12 bits and the minor 20 (``include/linux/kdev_t.h``).

    Raises:
        DiscoveryError: anything else, naming ``path`` and the text found.
    """
    body = text[:-1] if text.endswith("\n") else text
    major_text, sep, minor_text = body.partition(":")
    major = canonical_decimal(major_text)
    minor = canonical_decimal(minor_text)
    if not sep or major is None or minor is None or major >= _MAJOR_LIMIT:
        raise DiscoveryError(
            "malformed device number in sysfs", path=path, value=text, hint="expected MAJOR:MINOR"
        )
    if minor >= _MINOR_LIMIT:
        raise DiscoveryError(
            "malformed device number in sysfs", path=path, value=text, hint="minor out of range"
        )
    return major, minor


def parse_misc(text: str) -> dict[str, int]:
    """Return the minors of a ``/proc/misc`` text by device name.

    Lines are ``"%3i %s"`` (``drivers/char/misc.c``, ``misc_seq_show``): minor, then name.
    Lines that are not a number and a name are ignored; the first minor of a name wins.
    """
    minors: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if (
            len(fields) == 2
            and fields[0].isascii()
            and fields[0].isdigit()
            and len(fields[0]) <= 18
        ):
            minors.setdefault(fields[1], int(fields[0]))
    return minors


#: ``(mode, uid, gid)`` nvidia.ko gives the device files it creates when its parameters
#: do not say (the module's defaults: ``0666``, root).
DEVICE_FILE_DEFAULTS = (0o666, 0, 0)


def parse_device_file_params(text: str) -> tuple[int, int, int] | None:
    """``(mode, uid, gid)`` of the device files the NVIDIA driver creates, from its
    ``/proc/driver/nvidia/params``: ``DeviceFileMode`` (decimal, ``438`` = ``0o666``),
    ``DeviceFileUID`` and ``DeviceFileGID`` (decimal; the nvidia.ko module parameters
    ``NVreg_DeviceFileMode`` / ``UID`` / ``GID``). A missing key keeps its default
    (:data:`DEVICE_FILE_DEFAULTS`); ``None`` when a value is not a decimal in range (mode
    at most ``0o7777``, ids below ``2**32``). Never raises."""
    info = parse_gpu_information(text)
    out = list(DEVICE_FILE_DEFAULTS)
    for i, (key, limit) in enumerate(
        (("DeviceFileMode", 0o7777), ("DeviceFileUID", 2**32 - 1), ("DeviceFileGID", 2**32 - 1))
    ):
        raw = info.get(key)
        if raw is None:
            continue
        value = decimal(raw) if len(raw) <= 10 else None
        if value is None or value > limit:
            return None
        out[i] = value
    return out[0], out[1], out[2]
