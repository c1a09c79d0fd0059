"""Where a container's request is written in its ``config.json``: ``process.env``, the
bounding capabilities that make it privileged, and the device mounts under
:data:`VOLUME_MOUNT_DIR`. Reading them is pure: no file or host access.

The variable names and their precedence follow the NVIDIA Container Toolkit
(``internal/config/image``).
"""

from __future__ import annotations

from ..core.errors import RequestError
from ..core.vocab import VOLUME_MOUNT_DIR

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

__all__ = [
    "ENV_DRIVER_CAPABILITIES",
    "ENV_VISIBLE_DEVICES",
    "MAX_REQUEST_ENTRIES",
    "REQUEST_VARIABLES",
    "VOLUME_MOUNT_DIR",
    "devices_from_mounts",
    "env_from_spec",
    "is_privileged",
    "parse_env",
    "split_entries",
    "volume_mount_requests",
]

#: The most entries one request variable may list (``NVIDIA_VISIBLE_DEVICES``, the
#: swarm variables joined, ``NVIDIA_IMEX_CHANNELS``, ``AMD_VISIBLE_DEVICES``...): an image's
#: ``ENV`` chooses the value, and a host has far fewer devices. More is a
#: :class:`RequestError` naming the variable and the count. (ocihook's own bound; the
#: toolkit has none.)
MAX_REQUEST_ENTRIES = 4096


def split_entries(raw: str, *, field: str) -> list[str]:
    """The entries of a comma list (``raw``): blanks around each dropped, empty ones left
    out, in order, duplicates kept. Linear in ``len(raw)``.

    Raises:
        RequestError: more than :data:`MAX_REQUEST_ENTRIES` entries (``field`` names the
            variable; the value is the count, never the list).
    """
    items = [s for s in (part.strip() for part in raw.split(",")) if s]
    if len(items) > MAX_REQUEST_ENTRIES:
        raise RequestError(
            "too many entries",
            field=field,
            value=f"{len(items)} entries",
            hint=f"list at most {MAX_REQUEST_ENTRIES} devices",
        )
    return items


#: The variable that names a container's NVIDIA GPUs.
ENV_VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
#: The variable that names the driver capabilities a container gets.
ENV_DRIVER_CAPABILITIES = "NVIDIA_DRIVER_CAPABILITIES"

#: Every ``process.env`` variable that asks for devices (the swarm variables of the
#: policy come on top), in message order.
REQUEST_VARIABLES = (
    "NVIDIA_VISIBLE_DEVICES",
    "NVIDIA_MIG_CONFIG_DEVICES",
    "NVIDIA_MIG_MONITOR_DEVICES",
    "NVIDIA_IMEX_CHANNELS",
    "NVIDIA_GDS",
    "NVIDIA_MOFED",
    "NVIDIA_NVSWITCH",
    "NVIDIA_GDRCOPY",
    "AMD_VISIBLE_DEVICES",
    "INTEL_VISIBLE_DEVICES",
)


def parse_env(env: Iterable[str]) -> dict[str, str]:
    """Turn an OCI ``process.env`` list (``KEY=value`` strings) into a dict; last wins.

    Entries without ``=`` are ignored, as runc does.
    """
    out: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key:
            out[key] = value
    return out


def env_from_spec(config: Mapping[str, Any], *, path: str | None = None) -> dict[str, str]:
    """Return ``process.env`` of an OCI ``config.json`` document as a dict.

    Raises:
        SpecError: ``process`` or ``process.env`` has the wrong JSON type.
    """
    from ..core.errors import SpecError

    process = config.get("process")
    if process is None:
        return {}
    if not isinstance(process, dict):
        raise SpecError("process must be an object", path=path, field="process")
    env = process.get("env", [])
    if env is None:
        return {}
    if not isinstance(env, list) or not all(isinstance(e, str) for e in env):
        raise SpecError("process.env must be a list of strings", path=path, field="process.env")
    return parse_env(env)


def is_privileged(config: Mapping[str, Any]) -> bool:
    """Whether the container keeps ``CAP_SYS_ADMIN`` in its bounding set (the toolkit's
    test for a privileged container)."""
    process = config.get("process")
    caps = process.get("capabilities") if isinstance(process, dict) else None
    bounding = caps.get("bounding") if isinstance(caps, dict) else None
    return isinstance(bounding, list) and "CAP_SYS_ADMIN" in bounding


def volume_mount_requests(config: Mapping[str, Any]) -> list[str]:
    """The names under :data:`VOLUME_MOUNT_DIR` of the mounts that are device requests,
    in mount order: ``/dev/null`` mounted there (source and destination cleaned, as the
    toolkit does). Any other mount at that path — a tmpfs or emptyDir a user adds — is not
    a request: the mount source is what a cluster's device plugin controls and a user
    does not."""
    import posixpath

    out: list[str] = []
    mounts = config.get("mounts")
    if not isinstance(mounts, list):
        return out
    prefix = VOLUME_MOUNT_DIR + "/"
    for m in mounts:
        if not isinstance(m, dict):
            continue
        dest, source = m.get("destination"), m.get("source")
        if not isinstance(dest, str) or not isinstance(source, str):
            continue
        if "/" + posixpath.normpath(source).lstrip("/") != "/dev/null":
            continue
        dest = "/" + posixpath.normpath(dest).lstrip("/")  # normpath keeps a leading "//"
        if dest.startswith(prefix):
            out.append(dest[len(prefix) :])
    return out


def devices_from_mounts(config: Mapping[str, Any]) -> list[str]:
    """Device names requested as volume mounts (:func:`volume_mount_requests`), in mount
    order, each once. ``cdi/<vendor>/<class>/<name>`` becomes the CDI name
    ``vendor/class=name``; ``imex/<n>`` entries are IMEX channels and are left out here."""
    out: dict[str, None] = {}  # ordered, each once, linear
    for name in volume_mount_requests(config):
        if name.startswith("imex/"):
            continue
        if name.startswith("cdi/") and name.count("/") == 3:
            _cdi, vendor, cls, dev = name.split("/")
            name = f"{vendor}/{cls}={dev}"
        if name:
            out[name] = None
    return list(out)
