"""The no-GPU fast exit of ``ocihook hook prestart|createRuntime``: most containers on a
host where ocihook is registered for all ask for no GPU, and this module — small, with no
JSON, TOML or argument parser — lets them go without importing the fast commands
(:mod:`ocihook.commands.fast`) at all."""

from __future__ import annotations

from ..core.errors import OcihookError
from ..core.fastexit import REQUEST_MARKERS, bundle_from_state, config_arg, state_string
from ..core.readfile import FileTooLarge, holds_any, read_regular, read_stdin

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Sequence

#: The hook stages that inject GPUs (the OCI runtime-spec's ``prestart``,
#: ``createRuntime`` and ``createContainer``).
INJECT_STAGES = ("prestart", "createRuntime", "createContainer")

__all__ = ["INJECT_STAGES", "void_hook_exit"]


def void_hook_exit(argv: Sequence[str]) -> tuple[int | None, bytes]:
    """The fast exit of ``ocihook hook prestart|createRuntime`` for containers that ask
    for no GPU — most containers on a host where ocihook is registered for all.

    Reads the state and ``<bundle>/config.json`` as bytes and returns ``(0, stdin)`` when
    the file contains none of :data:`REQUEST_MARKERS` (nor a ``\\u`` escape); importing
    json alone would double the cost of this path. Anything else returns ``(None,
    stdin)``: the full command then parses both files properly and decides.

    The operator's configuration file is read as bytes, once, and parsed only when it
    may widen the markers (:func:`_config_markers`) or when its bytes cannot tell whether
    debug logging is on (:func:`ocihook.config.scan.scan_debug_log_file`). With debug logging
    on, the fast exit leaves one line in the log saying why the container got no GPU;
    with it off, nothing is opened for logging.
    """
    if "-h" in argv or "--help" in argv:
        return None, b""
    stdin = read_stdin()
    bundle = bundle_from_state(stdin)
    if bundle is None:
        return None, stdin
    config_json = bundle.rstrip("/") + "/config.json"
    raw: bytes | None
    try:
        raw = read_regular(config_json)
    except FileTooLarge:
        raw = None  # larger than the full path reads: scanned in pieces, as runc reads it
    except OSError:
        return None, stdin
    if holds_any(config_json, raw, (b"\\u", *REQUEST_MARKERS)):
        return None, stdin
    from ..config.load import read_config_bytes

    path = config_arg(argv)
    try:
        data = read_config_bytes(path, environ={})
    except OcihookError:
        return None, stdin  # let the full command say what is wrong
    if _config_markers(path, data, config_json, raw):
        return None, stdin
    if data is not None:
        _log_fast_exit(path, data, stdin, bundle, argv[1])
    return 0, stdin


def _config_markers(
    path: str | None, data: bytes | None, config_json: str, raw: bytes | None
) -> bool:
    """Whether the operator's configuration (``data``, the bytes of the file at ``path``)
    makes more requests possible (swarm resource names, annotation prefixes, device
    mounts) and ``config.json`` (``raw``, see :func:`~ocihook.core.readfile.holds_any`)
    holds one of them. The file is parsed only when it can set those keys at all
    (:func:`ocihook.config.scan.bytes_may_set`); a broken file is reported by the full
    command."""
    from ..config.load import load_config
    from ..config.scan import REQUEST_DETECTION_KEYS, bytes_may_set

    if not bytes_may_set(REQUEST_DETECTION_KEYS, data):
        return False
    try:
        markers = load_config(path, environ={}).extra_request_markers()
    except OcihookError:
        return True  # let the full command say what is wrong
    return holds_any(config_json, raw, tuple(markers))


def _log_fast_exit(path: str | None, data: bytes, stdin: bytes, bundle: str, stage: str) -> None:
    """Log why a container took the no-GPU fast exit, when the configuration (``data``,
    the bytes of the file at ``path``) logs at debug level; otherwise do nothing (no file
    is opened). The configuration is parsed only when its bytes cannot tell."""
    from ..config.scan import scan_debug_log_file

    log_file = scan_debug_log_file(data)
    if log_file is None:
        from ..config.load import load_config

        try:
            cfg = load_config(path, environ={})
        except OcihookError:
            return  # the next container that asks for GPUs reports it
        log_file = cfg.log_file if cfg.log_level == "debug" else ""
    if not log_file:
        return
    from ..core import log

    log.configure(log_file, "debug", container=state_string(stdin, b"id") or "?")
    log.debug(
        "nothing requested",
        stage=stage,
        reason="NVIDIA_VISIBLE_DEVICES unset (config.json holds none of "
        + ", ".join(m.decode() for m in REQUEST_MARKERS)
        + ")",
        bundle=bundle,
    )
