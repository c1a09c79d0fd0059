"""The field's shared vocabulary, defined once: driver capabilities, GPU UUIDs, PCI bus ids,
version numbers, CDI vendor/class names, the toolkit's volume-mount directory, the IMEX
channel range, the driver's IPC paths and its procfs ``Key: value`` files.

Pure functions over strings; no imports (not even :mod:`re`: this module is on every
container start).
"""

from __future__ import annotations

#: Every driver capability name (NVIDIA Container Toolkit ``internal/config/image``,
#: ``capabilities.go``; libnvidia-container ``nvc_info.c``).
DRIVER_CAPABILITIES: frozenset[str] = frozenset(
    {"compat32", "compute", "display", "graphics", "ngx", "utility", "video"}
)
#: :data:`DRIVER_CAPABILITIES`, sorted: the order used in messages and configuration.
CAPABILITY_NAMES: tuple[str, ...] = tuple(sorted(DRIVER_CAPABILITIES))
#: Capabilities when ``NVIDIA_DRIVER_CAPABILITIES`` is unset (the toolkit's default).
DEFAULT_CAPABILITIES: frozenset[str] = frozenset({"utility", "compute"})
#: Capabilities whose libraries another capability brings as well (libnvidia-container:
#: video decoding needs the CUDA libraries, display the graphics ones).
IMPLIED_CAPABILITIES: dict[str, tuple[str, ...]] = {
    "video": ("compute",),
    "display": ("graphics",),
}

#: Where ``accept-nvidia-visible-devices-as-volume-mounts`` reads requests from (the
#: toolkit's ``/var/run/nvidia-container-devices/<device>`` mounts).
VOLUME_MOUNT_DIR = "/var/run/nvidia-container-devices"
#: IMEX channel numbers are minors of the ``nvidia-caps-imex-channels`` major: below
#: ``1 << MINORBITS`` (``include/linux/kdev_t.h``).
IMEX_CHANNEL_LIMIT = 1 << 20
#: IPC paths: (capability, path, kind) — sockets of the daemons, and the MPS pipe directory
#: (``$CUDA_MPS_PIPE_DIRECTORY`` of the host, default ``/tmp/nvidia-mps``); they come and go
#: with their daemons, so the discovery cache keys on them too (libnvidia-container:
#: ``nvc_info.c`` lists them, ``mount_ipc`` in ``nvc_mount.c`` mounts them).
IPC_PATHS: tuple[tuple[str, str, str], ...] = (
    ("utility", "/var/run/nvidia-persistenced/socket", "socket"),
    ("utility", "/var/run/nvidia-fabricmanager/socket", "socket"),
    ("compute", "/tmp/nvidia-mps", "directory"),
)

_HEX = frozenset("0123456789abcdefABCDEF")
_FUNCTIONS = ("0", "1", "2", "3", "4", "5", "6", "7")


def with_implied(capabilities: frozenset[str] | set[str]) -> set[str]:
    """``capabilities`` plus those they imply (:data:`IMPLIED_CAPABILITIES`)."""
    caps = set(capabilities)
    for cap, implied in IMPLIED_CAPABILITIES.items():
        if cap in caps:
            caps.update(implied)
    return caps


def is_hex(text: str, lengths: tuple[int, ...]) -> bool:
    """Whether ``text`` is ASCII hex digits (any case) of one of ``lengths``."""
    return len(text) in lengths and set(text) <= _HEX


def is_gpu_uuid(text: str, *, any_case_prefix: bool = False) -> bool:
    """``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`` (hex digits in any case), the form the
    driver prints in ``/proc/driver/nvidia/gpus/*/information`` and NVML returns.

    Args:
        any_case_prefix: also accept ``gpu-`` in any case, as ``NVIDIA_VISIBLE_DEVICES``
            entries are matched.
    """
    prefix, body = text[:4], text[4:]
    if prefix != "GPU-" and not (any_case_prefix and prefix.upper() == "GPU-"):
        return False
    groups = body.split("-")
    return len(groups) == 5 and all(
        is_hex(g, (n,)) for g, n in zip(groups, (8, 4, 4, 4, 12), strict=True)
    )


def parse_bus_id(text: str, *, short: bool = False) -> tuple[int, int, int, int] | None:
    """``(domain, bus, device, function)`` of a PCI address ``DDDD:BB:DD.F`` (a 4- or
    8-hex-digit domain, any case: sysfs writes ``%04x:%02x:%02x.%d``,
    ``drivers/pci/probe.c``; the driver's procfs and NVML 8 digits), or ``None``.

    Args:
        short: also accept ``BB:DD.F`` (domain 0), as ``NVIDIA_VISIBLE_DEVICES`` does.
    """
    parts = text.split(":")
    if short and len(parts) == 2:
        parts = ["0000", *parts]
    if len(parts) != 3:
        return None
    domain, bus, rest = parts
    dev, _, fn = rest.partition(".")
    if not (is_hex(domain, (4, 8)) and is_hex(bus, (2,)) and is_hex(dev, (2,))):
        return None
    if fn not in _FUNCTIONS:
        return None
    return int(domain, 16), int(bus, 16), int(dev, 16), int(fn)


def procfs_bus_id(key: tuple[int, int, int, int]) -> str:
    """The driver's spelling of a parsed bus id: ``00000000:3b:00.0``."""
    return f"{key[0]:08x}:{key[1]:02x}:{key[2]:02x}.{key[3]:x}"


def sysfs_bus_id(key: tuple[int, int, int, int]) -> str:
    """sysfs's spelling of a parsed bus id: ``0000:3b:00.0``."""
    return f"{key[0]:04x}:{key[1]:02x}:{key[2]:02x}.{key[3]:x}"


def is_sysfs_bus_id(text: str) -> bool:
    """Whether ``text`` is a PCI function's sysfs name exactly: ``DDDD:BB:DD.F`` in
    lowercase hex with at least 4 domain digits (``pci_setup_device``)."""
    domain, _, rest = text.partition(":")
    if not (len(domain) >= 4 and set(domain) <= _HEX and domain == domain.lower()):
        return False
    key = parse_bus_id("0000:" + rest)
    return key is not None and rest == rest.lower() and len(rest) == 7


def version_tuple(
    text: str, *, parts: tuple[int, ...] = (2, 3, 4), clamp: bool = False
) -> tuple[int, ...] | None:
    """``"550.127.05"`` -> ``(550, 127, 5)``; ``None`` unless ``text`` is dot-separated
    ASCII decimal numbers, as many as one of ``parts`` says (driver and CUDA versions have
    2 to 4; CDI's ``cdiVersion`` 3), at most 32 characters — or, with ``clamp``, of any
    length, a number of more than 9 digits counting as ``10**9`` (above every real version,
    as Go's semver compares it; never an unbounded ``int()``)."""
    fields = text.split(".")
    if len(fields) not in parts or (len(text) > 32 and not clamp):
        return None
    if not all(f.isascii() and f.isdigit() for f in fields):
        return None
    return tuple(int(f) if len(f) <= 9 else 10**9 for f in fields)


def is_cdi_vendor_or_class(text: str) -> bool:
    """The CDI rule for a kind's vendor and class (CDI ``SPEC.md``, ``kind``;
    ``parser.ValidateVendorName`` / ``ValidateClassName``): an ASCII letter first, then
    letters, digits, ``_``, ``.`` or ``-``, ending with a letter or digit."""
    if not text or not text.isascii() or not text[0].isalpha() or not text[-1].isalnum():
        return False
    return all(c.isalnum() or c in "_.-" for c in text)


def parse_gpu_information(text: str, *, path: str | None = None) -> dict[str, str]:
    """Parse a ``/proc/driver/nvidia/gpus/<bus id>/information`` file into a dict.

    Lines are ``Key: <spaces or tabs> value``; each is split on its first ``:``. Lines
    without a colon are ignored. Keys keep their case (``"Device Minor"``). Never raises.
    """
    info: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip():
            info[key.strip()] = value.strip()
    return info
