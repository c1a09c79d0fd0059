"""What the configuration file's bytes say without parsing TOML: for the start path.

Parsing the file imports :mod:`tomllib` (5-10 ms: ``typing``, ``datetime``), more than a
container that asks for no GPU costs in all. The functions here read no file; they look
at bytes already read (:func:`ocihook.config.load.read_config_bytes`) and answer only
what bytes can settle, saying so when they cannot (then the caller parses).
"""

from __future__ import annotations

from ..core.vocab import VOLUME_MOUNT_DIR

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "DEFAULT_ANNOTATION_PREFIXES",
    "DEFAULT_REQUEST_MARKERS",
    "REQUEST_DETECTION_KEYS",
    "bytes_may_set",
    "request_markers",
    "scan_debug_log_file",
]

#: Keys whose values change which containers ask for GPUs
#: (:func:`ocihook.config.load.config_may_set`).
REQUEST_DETECTION_KEYS = (
    "swarm-resource",
    "annotation-prefixes",
    "accept-nvidia-visible-devices-as-volume-mounts",
)

#: The default of ``annotation-prefixes`` (``specs/config.schema.json``).
DEFAULT_ANNOTATION_PREFIXES = ("cdi.k8s.io/",)


def request_markers(
    swarm_envvars: Iterable[str], annotation_prefixes: Iterable[str], volume_mounts: bool
) -> tuple[bytes, ...]:
    """Byte strings beyond ``NVIDIA_`` and ``CUDA_VERSION`` of which at least one occurs
    in the raw ``config.json`` of any container that asks for GPUs through what a
    configuration enables: the ``swarm-resource`` names (``swarm_envvars``), the longest
    ``/``-free part of each of ``annotation_prefixes`` (JSON may write ``/`` as ``\\/``),
    and ``nvidia-container-devices`` when requests may come as volume mounts
    (``volume_mounts``); each once, in that order. For a no-GPU fast exit that reads
    ``config.json`` as bytes; a file with a ``\\u`` escape must still be parsed (letters
    can be escaped only that way)."""
    markers: list[bytes] = [name.encode() for name in swarm_envvars]
    for prefix in annotation_prefixes:
        markers.append(max(prefix.split("/"), key=len).encode() or b"/")
    if volume_mounts:
        markers.append(VOLUME_MOUNT_DIR.rsplit("/", 1)[1].encode())
    return tuple(dict.fromkeys(markers))


#: :func:`request_markers` of the default configuration (no swarm names, the default
#: annotation prefixes, no volume mounts).
DEFAULT_REQUEST_MARKERS = request_markers((), DEFAULT_ANNOTATION_PREFIXES, False)


def bytes_may_set(keys: Iterable[str], data: bytes | None) -> bool:
    """Whether a configuration file of bytes ``data`` (``None``: no file) might set any
    of ``keys``, decided without parsing: ``False`` when certainly not (no file, or none
    of the key names and no backslash in the bytes: a quoted key can spell a name only
    with escapes), else ``True`` (:func:`ocihook.config.load.config_may_set` reads the
    file first)."""
    if data is None:
        return False
    return b"\\" in data or any(k.encode() in data for k in keys)


def scan_debug_log_file(data: bytes | None) -> str | None:
    """The ``log-file`` that receives debug records, decided from the file's bytes without
    parsing TOML (which costs more than a no-GPU hook start): ``""`` when certainly none
    (no file; no ``log-file`` key or no ``debug`` in the bytes; ``log-level`` not
    ``"debug"``; ``log-file`` empty), the path when the file sets both keys on plain lines
    (``log-file = "/var/log/ocihook.core.log"``, ``log-level = 'debug'``, comments allowed),
    ``None`` when the bytes are too unusual to tell (escapes, multi-line strings,
    sections, a key on another kind of line, a key twice, a path that is not absolute):
    then the caller calls :func:`ocihook.config.load.load_config`, which also reports
    what is wrong.

    For the no-GPU fast exit of ``ocihook hook``: it logs why a container got no GPU only
    when this says so, at no cost when logging is off.
    """
    if data is None:
        return ""
    if b"\\" in data:
        return None
    if b"debug" not in data or b"log-file" not in data:
        return ""
    if b"'''" in data or b'"""' in data:
        return None
    found: dict[bytes, bytes] = {}
    for line in data.splitlines():
        line = line.strip()
        if line.startswith(b"["):
            return None
        if (b"log-file" not in line and b"log-level" not in line) or line.startswith(b"#"):
            continue
        key, _eq, rest = line.partition(b"=")
        key, rest = key.strip(), rest.strip()
        quote = rest[:1]
        end = rest.find(quote, 1) if quote in (b'"', b"'") else -1
        tail = rest[end + 1 :].strip() if end > 0 else b""
        if end < 0 or key not in (b"log-file", b"log-level") or key in found:
            return None
        if tail and not tail.startswith(b"#"):
            return None
        value = rest[1:end]
        if any((c < 0x20 and c != 0x09) or c == 0x7F for c in value):
            return None
        found[key] = value
    if found.get(b"log-level", b"info") != b"debug":
        return ""
    path = found.get(b"log-file", b"")
    if not path:
        return ""
    if not path.startswith(b"/"):
        return None
    try:
        return path.decode()
    except UnicodeDecodeError:
        return None
