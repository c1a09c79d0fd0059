"""Byte scanners for the no-GPU fast exit: what a hook or the wrapper runtime can tell from
the raw bytes of a state JSON and a ``config.json`` without importing :mod:`json`.

Stdlib-free (no imports at all): these run on every container start, before anything else.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Sequence

#: Byte strings of which at least one occurs in the config.json of any container that can
#: ask for a GPU: the request variables, the legacy CUDA image marker, Docker Swarm's
#: resource variables and the device-mount directory. A config.json
#: holding none of them (and no JSON ``\u`` escape that could spell one) asks for nothing.
REQUEST_MARKERS = (
    b"NVIDIA_",
    b"CUDA_VERSION",
    b"DOCKER_RESOURCE_",
    b"nvidia-container-devices",
    b"AMD_VISIBLE_DEVICES",
    b"INTEL_VISIBLE_DEVICES",
)


def state_string(stdin: bytes, key: bytes) -> str | None:
    """The value of ``"<key>": "<value>"`` in a state JSON, found without the json module,
    or ``None`` when the key does not occur exactly once with a plain string value (no
    escapes, UTF-8)."""
    quoted = b'"' + key + b'"'
    at = stdin.find(quoted)
    if at < 0 or stdin.find(quoted, at + 1) >= 0:
        return None
    rest = stdin[at + len(quoted) :].lstrip(b" \t\r\n")
    if not rest.startswith(b":"):
        return None
    rest = rest[1:].lstrip(b" \t\r\n")
    if not rest.startswith(b'"'):
        return None
    end = rest.find(b'"', 1)
    value = rest[1:end]
    if end < 0 or b"\\" in value:
        return None
    try:
        return value.decode()
    except UnicodeDecodeError:
        return None


def bundle_from_state(stdin: bytes) -> str | None:
    """The ``bundle`` of a state JSON, found without the json module, or ``None`` when
    the text is not plainly ``"bundle": "<absolute path without escapes>"`` exactly once."""
    bundle = state_string(stdin, b"bundle")
    return bundle if bundle is not None and bundle.startswith("/") else None


def config_arg(argv: Sequence[str]) -> str | None:
    """The ``--config`` of a hook command line, or ``None``."""
    path = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    return path
