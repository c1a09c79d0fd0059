"""``ocihook k8s install`` / ``uninstall``: put ocihook on a Kubernetes node from a
container, as NVIDIA's toolkit container does, and take it off again.

The installer runs in ocihook's image with the node's ``/`` mounted at a *host root*
(``/host``). It copies a self-contained ocihook -- the image's own Python interpreter,
its dynamic loader and libraries, the standard library and the pure-Python packages
ocihook runs with, listed in a *payload list* written when the image was built
(``packaging/kubernetes/host-payload``) -- under a fixed *prefix* of the host
(:data:`PREFIX`, ``/usr/local/ocihook``): the commands ``bin/ocihook``,
``bin/ocihook-runtime`` and ``bin/nvidia-container-runtime-hook`` (the Debian package's
scripts, which run the ``python3`` beside them), and writes that ``bin/python3``: an
``sh`` launcher that starts the copied interpreter (``libexec/python3``) through the
copied loader and libraries, so the node needs no Python of its own. It registers
``bin/ocihook-runtime`` with the node's engine (:func:`detect_engine`: containerd or
CRI-O, from the host's files) as ``ocihook runtime configure --cdi`` does. What it did is
recorded in ``<prefix>/share/ocihook/install-record.json``: the files, the engine's file
and its bytes before and after. :func:`plan_uninstall` reads that record back: the
engine's file is restored (removed, if it did not exist) when it still holds what the
install wrote, the files are removed, then the directories left empty.

Planning (:func:`plan_install`, :func:`plan_uninstall`) reads and never writes; the
appliers (:func:`apply_install`, :func:`apply_uninstall`) write only inside the host root,
through descriptors that never follow a link out of it (:mod:`ocihook.linux.pathsafe`),
each file replaced atomically. Installing twice is a no-op (identical files are not
rewritten); installing another version replaces the files and removes those the new one
no longer has. Every refusal is an :class:`~ocihook.core.errors.EngineConfigError`
(exit 13), one line naming the path.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
from collections.abc import Iterable

from ..core.errors import ApplyError, DiscoveryError, EngineConfigError
from ..core.records import Record
from .common import Change, read_file

#: Where ocihook goes on the host.
PREFIX = "/usr/local/ocihook"
#: The payload list in ocihook's image (written by ``packaging/kubernetes/host-payload``).
PAYLOAD_LIST = "/usr/share/ocihook/host-payload.list"
#: The install record, relative to the prefix.
RECORD = "share/ocihook/install-record.json"
#: What the payload must hold (relative to the prefix): the interpreter, the loader that
#: starts it, the commands' Python scripts.
REQUIRED = (
    "libexec/python3",
    "lib/ld.so",
    "bin/ocihook",
    "bin/ocihook-runtime",
    "bin/nvidia-container-runtime-hook",
)
#: The launcher the installer writes (the commands run the ``python3`` beside them).
LAUNCHER_PATH = "bin/python3"
#: Engines the installer configures, and the host files that tell each is there, most
#: telling first: its sockets (it runs), its configuration files, its programs.
ENGINE_SIGNS = {
    "containerd": (
        ("/run/containerd/containerd.sock",),
        ("/etc/containerd/config.toml",),
        ("/usr/bin/containerd", "/usr/local/bin/containerd"),
    ),
    "crio": (
        ("/run/crio/crio.sock", "/var/run/crio/crio.sock"),
        ("/etc/crio/crio.conf", "/etc/crio/crio.conf.d"),
        ("/usr/bin/crio", "/usr/local/bin/crio"),
    ),
}
#: The configuration file written for each engine (a host path).
ENGINE_FILES = {
    "containerd": "/etc/containerd/config.toml",
    "crio": "/etc/crio/crio.conf.d/99-ocihook.conf",
}
#: The largest payload file copied (the interpreter and libcrypto are a few MB).
MAX_PAYLOAD_FILE = 64 << 20

LAUNCHER = """\
#!/bin/sh
# python3: written by `ocihook k8s install`; removed by `ocihook k8s uninstall`.
# Runs ocihook's own Python interpreter through its own loader and libraries (the node
# needs no Python); as its argv[0] this file, so sys.executable is this launcher.
p={prefix}
exec "$p/lib/ld.so" --argv0 "$p/bin/python3" --library-path "$p/lib" "$p/libexec/python3" "$@"
"""


class FileStep(Record):
    """One file of the install: ``path`` relative to the prefix, its bytes, its mode,
    its modification time (kept so that copied ``.pyc`` files stay valid; ``None``:
    now)."""

    path: str
    data: bytes
    mode: int
    mtime: float | None = None


class InstallPlan(Record):
    """What :func:`apply_install` does: ``writes`` (the files whose bytes differ from the
    host's), ``keeps`` (those already right), ``removes`` (files of an earlier install that
    this one lacks), the engine's ``change`` (``None``: no engine), and the ``record``
    written last (JSON bytes)."""

    host_root: str
    prefix: str
    writes: tuple[FileStep, ...]
    keeps: tuple[str, ...]
    removes: tuple[str, ...]
    change: Change | None
    record: bytes


class UninstallPlan(Record):
    """What :func:`apply_uninstall` does: restore the engine's file (``restore``: its host
    path and the bytes to write, ``None`` bytes: remove it) and remove ``removes`` (paths
    relative to the prefix, the record last), then the directories left empty.
    ``engine``: the engine whose file is restored (``containerd``, ``crio``), else
    ``None``."""

    host_root: str
    prefix: str
    restore: tuple[str, bytes | None] | None
    removes: tuple[str, ...]
    engine: str | None = None


def _refuse(message: str, path: str, hint: str | None = None) -> EngineConfigError:
    return EngineConfigError(message, path=path, hint=hint)


def check_relative(path: str, where: str) -> str:
    """``path`` if it is a plain relative path (no ``..``, ``.``, empty or absolute
    parts), else :class:`EngineConfigError` naming ``where`` (the list it came from)."""
    parts = path.split("/")
    if not path or path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _refuse(f"unsafe payload path {path!r}", where, "payload paths are relative")
    return path


def read_payload_list(list_path: str) -> tuple[tuple[str, str], ...]:
    """The payload list: one ``DEST<TAB>SOURCE`` line per file (``DEST`` relative to the
    prefix, ``SOURCE`` an absolute path in this container); blank lines and ``#`` lines
    skipped. Each of :data:`REQUIRED` must be a ``DEST``, and no ``DEST`` twice.

    Raises:
        EngineConfigError: the list is missing or malformed.
    """
    data = read_file(list_path)
    if data is None:
        raise _refuse(
            "no payload list: this is not ocihook's image",
            list_path,
            "run the installer in ocihook's Kubernetes image, or pass --payload",
        )
    entries: dict[str, str] = {}
    for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        dest, sep, source = line.partition("\t")
        if not sep or not source.startswith("/"):
            raise _refuse(f"line {number} is not DEST<TAB>/SOURCE", list_path)
        check_relative(dest, list_path)
        reserved = dest in (RECORD, LAUNCHER_PATH)
        if dest in entries or reserved:
            raise _refuse(f"line {number}: {dest!r} is named twice or reserved", list_path)
        entries[dest] = source
    missing = [r for r in REQUIRED if r not in entries]
    if missing:
        raise _refuse(f"the payload lacks {', '.join(missing)}", list_path)
    return tuple(entries.items())


def _read_source(source: str) -> tuple[bytes, int, float]:
    try:
        st = os.stat(source)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_PAYLOAD_FILE:
            raise _refuse("payload source is not a regular file of at most 64 MiB", source)
        with open(source, "rb") as f:
            data = f.read(MAX_PAYLOAD_FILE + 1)
    except OSError as e:
        raise _refuse(f"cannot read the payload source: {e.strerror}", source) from None
    mode = 0o755 if st.st_mode & 0o111 else 0o644
    return data, mode, st.st_mtime


def launcher(prefix: str = PREFIX) -> bytes:
    """The ``sh`` script ``<prefix>/bin/python3``."""
    return LAUNCHER.format(prefix=prefix).encode()


def _host_path(host_root: str, path: str) -> str:
    """``path`` (a host path) as this process reaches it, resolved inside ``host_root``
    (links followed there, never out of it)."""
    from ..linux.pathsafe import resolve_in_root

    try:
        return resolve_in_root(host_root, path)
    except DiscoveryError as e:
        raise _refuse(f"cannot resolve {path} in the host root: {e}", host_root) from None


def detect_engine(host_root: str) -> str:
    """The engine the host runs, from its files under ``host_root``
    (:data:`ENGINE_SIGNS`): the one with the most telling sign (a socket before a
    configuration file before a program).

    Raises:
        EngineConfigError: neither engine is there, or both are equally (pass
            ``--runtime``).
    """
    best: list[tuple[int, str]] = []
    for engine, signs in ENGINE_SIGNS.items():
        for rank, paths in enumerate(signs):
            if any(os.path.lexists(_host_path(host_root, p)) for p in paths):
                best.append((rank, engine))
                break
    best.sort()
    if not best:
        raise _refuse(
            "no container engine found on the host (containerd or CRI-O)",
            host_root,
            "pass --runtime containerd|crio|none",
        )
    if len(best) > 1 and best[0][0] == best[1][0]:
        raise _refuse("both containerd and CRI-O are on the host", host_root, "pass --runtime")
    return best[0][1]


def read_record(host_root: str, prefix: str = PREFIX) -> dict[str, object] | None:
    """The install record on the host, ``None`` when there is none.

    Raises:
        EngineConfigError: it is there but not a record.
    """
    path = _host_path(host_root, os.path.join(prefix, RECORD))
    data = read_file(path)
    if data is None:
        return None
    try:
        record = json.loads(data)
        if not isinstance(record, dict) or not isinstance(record.get("files"), list):
            raise ValueError
    except ValueError:
        raise _refuse("the install record is not ocihook's", path) from None
    return record


def _digest(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _same(host_file: str, data: bytes, mode: int) -> bool:
    try:
        st = os.lstat(host_file)
        if not stat.S_ISREG(st.st_mode) or st.st_size != len(data):
            return False
        if stat.S_IMODE(st.st_mode) != mode:
            return False
        with open(host_file, "rb") as f:
            return f.read() == data
    except OSError:
        return False


def plan_install(
    host_root: str,
    *,
    prefix: str = PREFIX,
    payload_list: str = PAYLOAD_LIST,
    engine: str = "auto",
    set_as_default: bool = False,
) -> InstallPlan:
    """Plan the install into ``host_root`` (nothing is written).

    Args:
        host_root: where this process sees the host's ``/``.
        prefix: the host directory ocihook goes in (absolute).
        payload_list: the payload list (:func:`read_payload_list`).
        engine: ``containerd``, ``crio``, ``none`` (register nothing) or ``auto``
            (:func:`detect_engine`).
        set_as_default: make ocihook the engine's default runtime.

    Raises:
        EngineConfigError: a bad prefix, payload or engine file; an engine file changed
            since an earlier install registered ocihook in it.
    """
    from . import configure

    if not prefix.startswith("/") or any(p in (".", "..") for p in prefix.split("/")):
        raise _refuse("the prefix must be an absolute path without . or ..", prefix)
    if not os.path.isdir(host_root):
        raise _refuse("the host root is not a directory", host_root, "mount the host's / there")
    files: list[FileStep] = []
    for dest, source in read_payload_list(payload_list):
        data, mode, mtime = _read_source(source)
        files.append(FileStep(dest, data, mode, mtime))
    files.append(FileStep(LAUNCHER_PATH, launcher(prefix), 0o755))
    old = read_record(host_root, prefix)
    change = None
    if engine == "auto":
        engine = detect_engine(host_root)
    if engine != "none":
        if engine not in ENGINE_FILES:
            raise _refuse(f"unknown engine {engine!r}", host_root, "containerd, crio or none")
        path = _host_path(host_root, ENGINE_FILES[engine])
        try:
            change = configure(
                engine,
                path=path,
                runtime_path=os.path.join(prefix, "bin/ocihook-runtime"),
                set_as_default=set_as_default,
                cdi=True,
            )
        except ValueError as e:
            raise _refuse(str(e), path) from None
    before: bytes | None = change.before if change else None
    # an earlier install's change: keep the bytes from before ocihook, unless the file no
    # longer holds what that install wrote (then the current file is the original)
    if (
        old is not None
        and change is not None
        and old.get("engine") == engine
        and _digest(change.before) == old.get("after-sha256")
    ):
        saved = old.get("before")
        before = None if saved is None else bytes.fromhex(str(saved))
    record = {
        "version": 1,
        "prefix": prefix,
        "files": sorted(f.path for f in files),
        "engine": engine if change else None,
        "engine-file": ENGINE_FILES[engine] if change else None,
        "before": None if before is None else before.hex(),
        "after-sha256": _digest(change.after) if change else None,
    }
    writes, keeps = [], []
    base = _host_path(host_root, prefix)
    for step in files:
        if _same(os.path.join(base, step.path), step.data, step.mode):
            keeps.append(step.path)
        else:
            writes.append(step)
    new = {f.path for f in files}
    removes = tuple(
        sorted(
            check_relative(str(p), RECORD)
            for p in (old or {}).get("files", [])  # type: ignore[attr-defined]
            if p not in new
        )
    )
    return InstallPlan(
        host_root,
        prefix,
        tuple(writes),
        tuple(keeps),
        removes,
        change,
        json.dumps(record, indent=1, sort_keys=True).encode() + b"\n",
    )


def plan_uninstall(
    host_root: str, *, prefix: str = PREFIX, keep_engine_config: bool = False
) -> UninstallPlan:
    """Plan taking ocihook off ``host_root``; nothing recorded: nothing to do. With
    ``keep_engine_config`` the engine's file is left as it is.

    Raises:
        EngineConfigError: the engine's file changed since the install (someone else
            edited it: restoring the old bytes would lose that; nothing is done), or the
            record is malformed.
    """
    record = read_record(host_root, prefix)
    if record is None:
        return UninstallPlan(host_root, prefix, None, ())
    restore: tuple[str, bytes | None] | None = None
    engine_file = record.get("engine-file")
    if isinstance(engine_file, str) and not keep_engine_config:
        path = _host_path(host_root, engine_file)
        now = read_file(path)
        if _digest(now) != record.get("after-sha256"):
            raise _refuse(
                "the engine's file changed since ocihook was installed; not restored",
                path,
                "remove ocihook's runtime from it by hand, then run uninstall with "
                "--keep-engine-config",
            )
        saved = record.get("before")
        restore = (engine_file, None if saved is None else bytes.fromhex(str(saved)))
    files = [check_relative(str(p), RECORD) for p in record["files"]]  # type: ignore[attr-defined]
    engine = record.get("engine")
    return UninstallPlan(
        host_root,
        prefix,
        restore,
        (*sorted(files), RECORD),
        str(engine) if restore is not None and engine in ENGINE_FILES else None,
    )


def _root_fd(host_root: str) -> int:
    from ..linux.pathsafe import open_root

    try:
        return open_root(host_root)
    except ApplyError as e:
        raise _refuse(f"cannot open the host root: {e}", host_root) from None


def _write(
    root_fd: int,
    path: str,
    data: bytes,
    mode: int,
    mtime: float | None,
    dirs: dict[str, int] | None = None,
) -> None:
    """Write the file ``path`` in the root: a new one straight (``O_CREAT|O_EXCL|
    O_NOFOLLOW`` in its parent's descriptor; a cut-short install is finished by the next,
    which rewrites every file that differs), an existing one replaced atomically (a hook
    may be running it). ``dirs`` caches the parents' descriptors (closed by the caller)."""
    from ..linux import pathsafe

    parent = os.path.dirname(path)
    try:
        if dirs is None or parent not in dirs:
            fd = pathsafe.makedirs_in_root(root_fd, parent)
            if dirs is None:
                try:
                    return _write_at(root_fd, fd, path, data, mode, mtime)
                finally:
                    os.close(fd)
            dirs[parent] = fd
        _write_at(root_fd, dirs[parent], path, data, mode, mtime)
    except (ApplyError, OSError) as e:
        raise _refuse(f"cannot write: {e}", path) from None


def _write_at(
    root_fd: int, parent_fd: int, path: str, data: bytes, mode: int, mtime: float | None
) -> None:
    from ..linux import pathsafe

    name = os.path.basename(path)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(name, flags, 0o600, dir_fd=parent_fd)
    except FileExistsError:
        pathsafe.write_file_in_root(root_fd, path, data, mode)
    else:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fchmod(fd, mode)
        finally:
            os.close(fd)
    if mtime is not None:
        os.utime(name, (mtime, mtime), dir_fd=parent_fd, follow_symlinks=False)


def _prune(root_fd: int, prefix: str, paths: Iterable[str]) -> None:
    """Remove the directories of ``paths`` (relative to ``prefix``) left empty, deepest
    first, the prefix last; a directory that still holds something stays."""
    from ..linux.pathsafe import remove_in_root

    dirs = {prefix}
    for p in paths:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add(os.path.join(prefix, *parts[:i]))
    for d in sorted(dirs, key=lambda d: (-d.count("/"), d)):
        for cache in ("__pycache__",):
            _remove_cache(root_fd, os.path.join(d, cache))
        with contextlib.suppress(ApplyError):  # not empty: something not ocihook's is there
            remove_in_root(root_fd, d)


def _remove_cache(root_fd: int, path: str) -> None:
    """Remove a ``__pycache__`` directory's ``.pyc`` files (made by the interpreter when a
    copied one was stale) and the directory."""
    from ..linux.pathsafe import open_in_root, remove_in_root

    try:
        fd = open_in_root(root_fd, path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except ApplyError:
        return
    try:
        names = [n for n in os.listdir(fd) if n.endswith(".pyc")]
    finally:
        os.close(fd)
    for name in names:
        with contextlib.suppress(ApplyError):
            remove_in_root(root_fd, os.path.join(path, name))
    with contextlib.suppress(ApplyError):  # not empty: not only .pyc files
        remove_in_root(root_fd, path)


def apply_install(plan: InstallPlan) -> None:
    """Write ``plan``: the files (the commands of ``bin/`` last, so that an upgrade cut
    short never runs new commands against the library it has not replaced yet), the
    engine's file, then the record (so that an install cut short is finished or undone by
    the next install or uninstall)."""
    from ..linux.pathsafe import close_quietly, remove_in_root
    from .common import write_change

    root_fd = _root_fd(plan.host_root)
    try:
        dirs: dict[str, int] = {}
        try:
            for step in sorted(plan.writes, key=lambda s: s.path.startswith("bin/")):
                path = os.path.join(plan.prefix, step.path)
                _write(root_fd, path, step.data, step.mode, step.mtime, dirs)
        finally:
            for fd in dirs.values():
                close_quietly(fd)
        for path in plan.removes:
            try:
                remove_in_root(root_fd, os.path.join(plan.prefix, path))
            except ApplyError as e:
                raise _refuse(f"cannot remove: {e}", path) from None
        if plan.change is not None:
            write_change(plan.change)
        _write(root_fd, os.path.join(plan.prefix, RECORD), plan.record, 0o644, None)
        if plan.removes:
            _prune(root_fd, plan.prefix, plan.removes)
    finally:
        close_quietly(root_fd)


def apply_uninstall(plan: UninstallPlan) -> None:
    """Carry ``plan`` out: the engine's file first, then the files (the record last), then
    the empty directories."""
    from ..linux.pathsafe import close_quietly, remove_in_root

    root_fd = _root_fd(plan.host_root)
    try:
        if plan.restore is not None:
            path, data = plan.restore
            if data is None:
                try:
                    remove_in_root(root_fd, path)
                except ApplyError as e:
                    raise _refuse(f"cannot remove: {e}", path) from None
            else:
                try:
                    mode = stat.S_IMODE(os.lstat(_host_path(plan.host_root, path)).st_mode)
                except OSError:
                    mode = 0o644
                _write(root_fd, path, data, mode, None)
        for path in plan.removes:
            try:
                remove_in_root(root_fd, os.path.join(plan.prefix, path))
            except ApplyError as e:
                raise _refuse(f"cannot remove: {e}", path) from None
        _prune(root_fd, plan.prefix, plan.removes)
    finally:
        close_quietly(root_fd)
