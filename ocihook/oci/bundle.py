"""OCI bundles, their ``config.json``, and the container state JSON hooks receive.

* :func:`load_bundle` reads ``<bundle>/config.json`` (OCI runtime-spec ``bundle.md``,
  ``config.md``) and checks the few fields ocihook relies on;
* :func:`parse_state` reads the state JSON a runtime writes on a hook's stdin
  (runtime-spec ``runtime.md`` "State");
* :func:`write_json_atomic` replaces a file atomically (anonymous temporary file in the
  same directory, ``fsync``, ``rename``, ``fsync`` of the directory), keeping the
  original's mode, so a crash, a kill or an error never leaves a half-written
  ``config.json`` nor a temporary file (:mod:`ocihook.linux.atomicfile`).

Only ``json`` and ``os`` are imported here (no dataclasses, no typing at run time): this
module is on the path of every container start, including those that ask for no GPU.
"""

from __future__ import annotations

import os

from ..core import jsonfast
from ..core.errors import SpecError, StateError
from ..core.readfile import MAX_JSON_BYTES, read_regular
from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "Bundle",
    "State",
    "dump_json",
    "load_bundle",
    "parse_state",
    "path_problem",
    "write_bytes_atomic",
    "write_json_atomic",
]


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


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _loads(data: bytes, *, path: str, err: type[SpecError] | type[StateError]) -> Any:
    """Parse JSON text that must be UTF-8 (RFC 8259 section 8.1; what runtimes read) and
    hold no ``NaN``/``Infinity``, which are not JSON."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise err(f"not UTF-8 text (byte offset {e.start})", path=path) from None
    if text.startswith("\ufeff"):
        raise err("a byte order mark is not allowed in JSON", path=path)
    try:
        return jsonfast.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as e:
        import json

        where = ""
        if isinstance(e, json.JSONDecodeError):
            where = f" at line {e.lineno} column {e.colno}"
        msg = e.msg if isinstance(e, json.JSONDecodeError) else str(e)
        raise err(f"malformed JSON{where}: {msg}", path=path) from None


def path_problem(path: str, *, from_json: bool = True) -> str | None:
    """Why ``path`` cannot name a file: ``"holds a NUL byte"`` (every system call refuses
    it; Python raises ``ValueError``) or ``"is not valid Unicode (a lone surrogate)"``,
    else ``None``. A string from JSON (``from_json``) must be valid UTF-8 text: a
    ``\\ud800`` escape spells no bytes (Python raises ``UnicodeEncodeError``) and the Go
    runtimes read any lone surrogate as U+FFFD, another name. A string from the command
    line or a directory listing (``from_json=False``) may hold the ``surrogateescape``
    characters that stand for bytes that are not UTF-8 (:func:`os.fsencode`)."""
    if "\0" in path:
        return "holds a NUL byte"
    try:
        if from_json:
            path.encode("utf-8")
        else:
            os.fsencode(path)
    except UnicodeEncodeError:
        return "is not valid Unicode (a lone surrogate)"
    return None


def load_bundle(bundle: str, *, hint: str = "pass the bundle directory with --bundle") -> Bundle:
    """Read and check ``<bundle>/config.json``; ``hint`` is given when it does not exist.

    Raises:
        SpecError: the bundle path cannot name a file (:func:`path_problem`), the file is
            missing, unreadable, too large, not JSON, not an object, or ``root.path`` /
            ``process.env`` has the wrong type or ``root.path`` cannot name a file.
    """
    problem = path_problem(bundle, from_json=False)
    if problem is not None:
        raise SpecError(f"the bundle path {problem}", path=ascii(bundle), hint=hint)
    bundle = os.path.abspath(bundle)
    config_path = os.path.join(bundle, "config.json")
    try:
        raw = read_regular(config_path, MAX_JSON_BYTES)
    except FileNotFoundError:
        raise SpecError("config.json not found", path=config_path, hint=hint) from None
    except OSError as e:
        raise SpecError(f"cannot read config.json: {e.strerror}", path=config_path) from None
    doc = _loads(raw, path=config_path, err=SpecError)
    if not isinstance(doc, dict):
        raise SpecError("config.json must hold a JSON object", path=config_path)
    root = doc.get("root")
    if not isinstance(root, dict) or not isinstance(root.get("path"), str) or not root["path"]:
        raise SpecError("root.path must be a non-empty string", path=config_path, field="root.path")
    problem = path_problem(root["path"])
    if problem is not None:
        raise SpecError(
            f"root.path {problem}", path=config_path, field="root.path", value=root["path"]
        )
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
            ``bundle`` (must be absolute and name a file: :func:`path_problem`) or
            ``annotations``.
    """
    if not data.strip():
        raise StateError(
            "no container state on stdin",
            path=source,
            hint="run this as an OCI hook; the runtime writes the state JSON on stdin",
        )
    if len(data) > MAX_JSON_BYTES:
        raise StateError(f"state JSON larger than {MAX_JSON_BYTES} bytes", path=source)
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
    problem = path_problem(bundle)
    if problem is not None:
        raise StateError(f"bundle {problem}", path=source, field="bundle", value=bundle)
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


def dump_json(doc: Any, *, indent: int | str | None = "\t") -> bytes:
    """``doc`` as UTF-8 JSON text with a final newline. Strings that cannot be UTF-8 (a lone
    surrogate, from a ``\\ud800`` escape in the input) are written as ``\\u`` escapes.

    ``indent=None``: compact (``","``, ``":"``), by the C encoder without importing
    :mod:`json` (:mod:`ocihook.core.jsonfast`) — for files no one reads, such as the
    ``config.json`` the wrapper runtime hands to runc; otherwise indented as
    :func:`json.dumps` does (:func:`ocihook.core.jsonfast.dumps_indented`)."""
    if indent is None:
        try:
            return (jsonfast.dumps(doc, ensure_ascii=False) + "\n").encode()
        except UnicodeEncodeError:
            return (jsonfast.dumps(doc, ensure_ascii=True) + "\n").encode()
    try:
        return (jsonfast.dumps_indented(doc, indent, ensure_ascii=False) + "\n").encode()
    except UnicodeEncodeError:
        return (jsonfast.dumps_indented(doc, indent, ensure_ascii=True) + "\n").encode()


def write_json_atomic(
    path: str, doc: Any, *, indent: int | str | None = "\t", durable: bool = True
) -> bytes:
    """Write ``doc`` as JSON to ``path`` atomically (:func:`write_bytes_atomic`, with
    ``durable``) and return the bytes written.

    Raises:
        OSError: the directory is not writable (the original is left untouched).
    """
    data = dump_json(doc, indent=indent)
    write_bytes_atomic(path, data, durable=durable)
    return data


def write_bytes_atomic(
    path: str,
    data: bytes,
    *,
    new_mode: int = 0o644,
    warnings: list[str] | None = None,
    durable: bool = True,
) -> None:
    """Replace ``path`` with ``data`` atomically and crash-safely
    (:func:`ocihook.linux.atomicfile.replace_at`).

    The new content goes to an anonymous ``O_TMPFILE`` file in the same directory (a
    named ``.<name>.<pid>.<hex>`` one where the filesystem has none), gets the original
    file's permission bits through its descriptor (``fchmod``: never by path, which a link
    swapped in by the directory's owner could redirect; set-id and sticky bits dropped), is
    flushed with ``fsync`` (when ``durable``), and replaces ``path`` with ``rename(2)``;
    then the directory is flushed. Readers see the old or the new file, never a mix; a
    writer killed midway leaves nothing (a named temporary is removed by the writer's
    guardian, or, when that died too, by the next write of ``path``). A new file gets
    ``new_mode``; the owner of a replaced file is kept when this process may set it
    (root).

    Args:
        path: the file to replace.
        data: its new content.
        new_mode: permission bits of a file that did not exist.
        durable: ``fsync`` the file and the directory, and fork a guardian for the
            instant before the rename (default); ``False`` for a file read at once and
            made again after a power loss or a failed start (a bundle's ``config.json``
            as the wrapper edits it), where the rename alone is enough: a writer killed
            between ``linkat`` and ``rename`` leaves its temporary there (about 1 ms of
            a container start saved; see :func:`~ocihook.linux.atomicfile.replace_at`).
        warnings: where to add what failed after the file was replaced (flushing the
            directory, closing); ``None``: print each on stderr and log it
            (:func:`ocihook.linux.atomicfile.report`).

    Raises:
        OSError: the file could not be replaced (the original is left untouched, no
            temporary is left).
    """
    from ..linux import atomicfile

    directory = os.path.dirname(os.path.abspath(path))
    name = os.path.basename(path)
    dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    done: list[str] = []
    try:
        owner = None
        try:
            st = os.stat(name, dir_fd=dir_fd)
            mode = st.st_mode & 0o777
            if os.geteuid() == 0 and (st.st_uid, st.st_gid) != (0, 0):
                owner = (st.st_uid, st.st_gid)
        except FileNotFoundError:
            mode = new_mode
        done = atomicfile.replace_at(
            dir_fd, name, data, mode, owner=owner, durable=durable, guard=durable
        )
    except BaseException:
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            os.close(dir_fd)
        except OSError:
            pass
        raise
    try:
        os.close(dir_fd)
    except OSError as e:
        done.append(f"{name} was replaced, but closing its directory failed: {e.strerror}")
    if warnings is not None:
        warnings.extend(done)
    else:
        atomicfile.report(done, path)
