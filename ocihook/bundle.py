"""OCI bundles, their ``config.json``, and the container state JSON hooks receive.

* :func:`load_bundle` reads ``<bundle>/config.json`` (OCI runtime-spec ``bundle.md``,
  ``config.md``) and checks the few fields ocihook relies on;
* :func:`parse_state` reads the state JSON a runtime writes on a hook's stdin
  (runtime-spec ``runtime.md`` "State");
* :func:`write_json_atomic` replaces a file atomically (temporary file in the same
  directory, ``fsync``, ``rename``), keeping the original's mode, so a crash or an error
  never leaves a half-written ``config.json``.

Only ``json`` and ``os`` are imported here (no dataclasses, no typing at run time): this
module is on the path of every container start, including those that ask for no GPU.
"""

from __future__ import annotations

import json
import os

from ._record import Record
from .errors import SpecError, StateError

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any

__all__ = ["Bundle", "State", "load_bundle", "parse_state", "write_json_atomic"]

#: Largest config.json / state JSON read, in bytes (a sane bound, not a spec rule).
MAX_JSON_BYTES = 16 << 20


class Bundle(Record):
    """A bundle on disk.

    Attributes:
        path: absolute bundle directory.
        config_path: ``<path>/config.json``.
        raw: the file's bytes as read (to compare, or to restore).
        config: the parsed document.
        rootfs: absolute host path of ``root.path`` (relative paths are bundle-relative).
    """

    path: str
    config_path: str
    raw: bytes
    config: dict[str, Any]
    rootfs: str


class State(Record):
    """The container state a runtime passes to a hook on stdin.

    Attributes:
        id: container id.
        pid: process id of the container init, in the runtime's pid namespace (may be 0 or
            1 in ``createContainer`` with some runtimes; see ``oci-runtimes.md``).
        bundle: absolute bundle path.
        status: ``creating``, ``created``, ...
        annotations: the container's annotations.
    """

    id: str
    pid: int
    bundle: str
    status: str
    annotations: dict[str, str]


def _loads(data: bytes, *, path: str, err: type[SpecError] | type[StateError]) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:
        where = ""
        if isinstance(e, json.JSONDecodeError):
            where = f" at line {e.lineno} column {e.colno}"
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise err(f"malformed JSON{where}: {msg}", path=path) from None


def load_bundle(bundle: str, *, hint: str = "pass the bundle directory with --bundle") -> Bundle:
    """Read and check ``<bundle>/config.json``; ``hint`` is given when it does not exist.

    Raises:
        SpecError: the file is missing, unreadable, too large, not JSON, not an object, or
            ``root.path`` / ``process.env`` has the wrong type.
    """
    bundle = os.path.abspath(bundle)
    config_path = os.path.join(bundle, "config.json")
    try:
        with open(config_path, "rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
    except FileNotFoundError:
        raise SpecError("config.json not found", path=config_path, hint=hint) from None
    except OSError as e:
        raise SpecError(f"cannot read config.json: {e.strerror}", path=config_path) from None
    if len(raw) > MAX_JSON_BYTES:
        raise SpecError(f"config.json is larger than {MAX_JSON_BYTES} bytes", path=config_path)
    doc = _loads(raw, path=config_path, err=SpecError)
    if not isinstance(doc, dict):
        raise SpecError("config.json must hold a JSON object", path=config_path)
    root = doc.get("root")
    if not isinstance(root, dict) or not isinstance(root.get("path"), str) or not root["path"]:
        raise SpecError("root.path must be a non-empty string", path=config_path, field="root.path")
    rootfs = os.path.normpath(os.path.join(bundle, root["path"]))
    process = doc.get("process")
    if process is not None:
        if not isinstance(process, dict):
            raise SpecError("process must be an object", path=config_path, field="process")
        env = process.get("env")
        if env is not None and (
            not isinstance(env, list) or not all(isinstance(x, str) for x in env)
        ):
            raise SpecError(
                "process.env must be a list of strings", path=config_path, field="process.env"
            )
    return Bundle(path=bundle, config_path=config_path, raw=raw, config=doc, rootfs=rootfs)


def parse_state(data: bytes, *, source: str = "<stdin>") -> State:
    """Parse the state JSON a hook reads on stdin.

    Args:
        data: the bytes read.
        source: name of where they came from, for messages.

    Raises:
        StateError: empty input, malformed JSON, or a missing/mistyped ``id``, ``pid``,
            ``bundle`` (must be absolute) or ``annotations``.
    """
    if not data.strip():
        raise StateError(
            "no container state on stdin",
            path=source,
            hint="run this as an OCI hook; the runtime writes the state JSON on stdin",
        )
    if len(data) > MAX_JSON_BYTES:
        raise StateError("state JSON too large", path=source)
    doc = _loads(data, path=source, err=StateError)
    if not isinstance(doc, dict):
        raise StateError("state must be a JSON object", path=source)
    cid = doc.get("id")
    if not isinstance(cid, str) or not cid:
        raise StateError("id must be a non-empty string", path=source, field="id", value=cid)
    pid = doc.get("pid", 0)
    if not isinstance(pid, int) or isinstance(pid, bool) or pid < 0:
        raise StateError("pid must be a non-negative integer", path=source, field="pid", value=pid)
    bundle = doc.get("bundle")
    if not isinstance(bundle, str) or not os.path.isabs(bundle):
        raise StateError(
            "bundle must be an absolute path", path=source, field="bundle", value=bundle
        )
    annotations = doc.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise StateError(
            "annotations must map strings to strings", path=source, field="annotations"
        )
    status = doc.get("status", "")
    return State(
        id=cid,
        pid=pid,
        bundle=bundle,
        status=status if isinstance(status, str) else "",
        annotations=annotations,
    )


def write_json_atomic(path: str, doc: Any, *, indent: int | str | None = "\t") -> bytes:
    """Write ``doc`` as JSON to ``path`` atomically and return the bytes written.

    The new content goes to a temporary file in the same directory, is flushed with
    ``fsync``, gets the original file's permission bits, and replaces ``path`` with
    ``rename(2)``: readers see the old or the new file, never a mix.

    Raises:
        OSError: the directory is not writable (the original is left untouched).
    """
    data = (json.dumps(doc, indent=indent, ensure_ascii=False) + "\n").encode()
    directory = os.path.dirname(os.path.abspath(path))
    try:
        mode = os.stat(path).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o644
    # A new name of our own (O_EXCL), as tempfile.mkstemp would make, without importing
    # tempfile, shutil and random on the container start path.
    tmp = os.path.join(directory, f".{os.path.basename(path)}.{os.getpid()}.{os.urandom(6).hex()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return data
