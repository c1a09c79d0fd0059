"""A root-owned cache of discovery results, keyed by the host's driver identity.

Discovering the NVIDIA driver's files costs more than the rest of a container's start
(hundreds of ``lstat`` calls through :func:`ocihook.linux.pathsafe.resolve_in_root`); the
answer only changes when the driver, the dynamic loader's cache, the device nodes or the
configuration change. :func:`lookup` and :func:`store` keep discovery records (any
:class:`~ocihook.core.records.Record` tree of str, int, float, bool, ``None``, tuples,
frozensets and mappings) in ``<directory>/discovery-<key>.json``:

* the **key** (:func:`host_key`) holds what the caller says the result depends on (the
  :class:`~ocihook.core.hostroot.HostRoot`, the arguments of discovery), the identity of
  the installed discovery package (an upgrade replaces its files), and what the host says:
  the bytes of ``<dev root>/proc/driver/nvidia/version`` and ``<dev root>/proc/devices``,
  the names under ``/proc/driver/nvidia/gpus`` and ``/proc/driver/nvidia-caps``, the
  identity (device, inode, size, mtime_ns) of the driver root's ``ld.so.cache``, the
  ``nvidia*`` nodes of ``<dev root>/dev`` with their device numbers and inodes. The file
  name is a checksum of the key; the entry holds the key itself, compared in full on every
  lookup;
* an entry also lists the **directories its files came from** with their identity
  (inode, mtime_ns): a file added, removed or renamed in one of them makes the entry stale;
* an entry is used only when the directory and the file are owned by this process's user
  (root on a host) and writable by no one else; anything unreadable, corrupt, foreign or
  stale means "rediscover" (a debug log line says why), never an error;
* writes are atomic (a temporary file in the directory, ``fsync``-free: a lost entry is
  rediscovered, ``os.replace``), mode 0600, and the directory keeps at most
  :data:`MAX_ENTRIES` entries (the oldest are removed).

The default directory is :data:`DEFAULT_DIR` (``/run/ocihook``: a tmpfs, emptied at boot);
``ocihook cdi generate --warm-cache`` (run by the boot unit) creates it and warms it.
"""

from __future__ import annotations

import os

from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence
    from typing import Any

    from ..core.hostroot import HostRoot

#: Where the cache lives by default (a tmpfs on systemd hosts).
DEFAULT_DIR = "/run/ocihook"
#: Most entries kept in the directory.
MAX_ENTRIES = 16
#: Largest entry read back, in bytes.
MAX_ENTRY_BYTES = 4 << 20
#: Version of the entry format.
FORMAT = 1


# -- encoding (exact round trip) ------------------------------------------------------------


def encode(value: object) -> object:
    """A JSON-able form of ``value`` that :func:`decode` turns back into an equal value of
    the same types: records as ``{"r": class name, "f": [fields...]}``, tuples as
    ``{"t": [...]}``, frozensets as ``{"s": [...]}``, mappings as ``{"m": [[k, v]...]}``,
    lists as ``{"l": [...]}``. Raises ``TypeError`` for anything else."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError("non-finite float")
        return {"x": value.hex()}
    if isinstance(value, Record):
        return {
            "r": type(value).__name__,
            "f": [encode(getattr(value, n)) for n in value.__fields__],
        }
    if isinstance(value, tuple):
        return {"t": [encode(v) for v in value]}
    if isinstance(value, list):
        return {"l": [encode(v) for v in value]}
    if isinstance(value, frozenset):
        return {"s": [encode(v) for v in sorted(value, key=repr)]}
    if isinstance(value, dict):
        return {"m": [[encode(k), encode(v)] for k, v in value.items()]}
    raise TypeError(f"cannot cache a {type(value).__name__}")


def decode(data: object, types: Mapping[str, type[Record]]) -> Any:
    """The value :func:`encode` made ``data`` from; records of the classes in ``types``
    (by name). Raises ``ValueError`` for anything malformed."""
    if data is None or isinstance(data, (bool, str, int)):
        return data
    if isinstance(data, dict) and len(data) in (1, 2):
        if "r" in data:
            cls = types.get(data["r"]) if isinstance(data["r"], str) else None
            fields = data.get("f")
            if cls is None or not isinstance(fields, list) or len(fields) != len(cls.__fields__):
                raise ValueError(f"unknown record {data.get('r')!r}")
            return cls(*(decode(f, types) for f in fields))
        ((tag, items),) = data.items()
        if tag == "x" and isinstance(items, str):
            return float.fromhex(items)
        if isinstance(items, list):
            if tag == "t":
                return tuple(decode(v, types) for v in items)
            if tag == "l":
                return [decode(v, types) for v in items]
            if tag == "s":
                return frozenset(decode(v, types) for v in items)
            if tag == "m":
                out = {}
                for pair in items:
                    if not isinstance(pair, list) or len(pair) != 2:
                        raise ValueError("malformed mapping")
                    out[decode(pair[0], types)] = decode(pair[1], types)
                return out
    raise ValueError(f"malformed cache value {str(data)[:60]!r}")


# -- the key --------------------------------------------------------------------------------


def _read(path: str, limit: int = 1 << 16) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def _listdir(path: str) -> list[str] | None:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return None


def _identity(path: str) -> list[int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def host_key(root: HostRoot, params: Mapping[str, object]) -> dict[str, object]:
    """What a discovery result of ``root`` with ``params`` (the caller's arguments, JSON
    values) depends on, as read now (see the module docstring)."""
    dev_dir = root.dev("/dev")
    nodes = []
    for name in _listdir(dev_dir) or ():
        if name.startswith("nvidia"):
            try:
                st = os.lstat(os.path.join(dev_dir, name))
            except OSError:
                continue
            nodes.append([name, st.st_mode, st.st_rdev, st.st_ino])
    return {
        "format": FORMAT,
        # the code that discovered it: an upgrade replaces the package's files
        "code": _identity(os.path.dirname(os.path.abspath(__file__))),
        "root": [root.driver_root, root.dev_root, root.ldcache, list(root.library_dirs)],
        "params": dict(params),
        "version": _read(root.proc("driver/nvidia/version")),
        "devices": _read(root.proc("devices")),
        "gpus": _listdir(root.proc("driver/nvidia/gpus")),
        "caps": _listdir(root.proc("driver/nvidia-caps")),
        "ldcache": _identity(root.driver(root.ldcache)),
        "nodes": nodes,
    }


def _digest(key: Mapping[str, object]) -> str:
    import zlib

    from ..core import jsonfast as json

    # only a file name: the entry's key is compared in full (a collision is a miss)
    data = json.dumps(key).encode()  # keys in a fixed order (host_key)
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def _dir_identities(dirs: Iterable[str]) -> list[list[object]]:
    out: list[list[object]] = []
    for d in sorted(set(dirs)):
        try:
            st = os.stat(d)
        except OSError:
            out.append([d, None, None])
            continue
        out.append([d, st.st_ino, st.st_mtime_ns])
    return out


def _safe(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _debug(message: str, **fields: object) -> None:
    from ..core import log

    log.debug(message, **fields)


def lookup(
    key: Mapping[str, object],
    types: Mapping[str, type[Record]],
    directory: str = DEFAULT_DIR,
    *,
    prefix: str = "discovery",
) -> Any:
    """The value stored for ``key`` (see :func:`host_key`) in ``directory``, or ``None``
    when there is none usable (missing, unreadable, corrupt, foreign, stale: a debug
    log line says which). Never raises for the cache's state."""
    from ..core import jsonfast as json

    path = os.path.join(directory, f"{prefix}-{_digest(key)}.json")
    try:
        dir_st = os.stat(directory)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (_safe(dir_st) and _safe(st)):
            _debug(
                "discovery cache not used: not owned by this user or writable by others", path=path
            )
            return None
        with os.fdopen(fd, "rb", closefd=False) as f:
            raw = f.read(MAX_ENTRY_BYTES + 1).decode("utf-8", "replace")
    except OSError as e:
        _debug("discovery cache unreadable; rediscovering", path=path, error=e.strerror)
        return None
    finally:
        os.close(fd)
    try:
        if len(raw) > MAX_ENTRY_BYTES:
            raise ValueError("too large")
        entry = json.loads(raw)
        if not isinstance(entry, dict) or entry.get("key") != json.loads(json.dumps(key)):
            _debug("discovery cache entry is for another key; rediscovering", path=path)
            return None
        dirs = entry.get("dirs")
        if not isinstance(dirs, list) or _dir_identities(d[0] for d in dirs) != dirs:
            _debug("discovery cache entry is stale (a driver directory changed)", path=path)
            return None
        return decode(entry.get("value"), types)
    except (ValueError, TypeError, KeyError, IndexError, RecursionError) as e:
        _debug("discovery cache entry is corrupt; rediscovering", path=path, error=str(e))
        return None


def store(
    key: Mapping[str, object],
    value: object,
    dirs: Iterable[str],
    directory: str = DEFAULT_DIR,
    *,
    create: bool = False,
    prefix: str = "discovery",
) -> bool:
    """Store ``value`` for ``key``, stale once any of ``dirs`` (host paths of the
    directories the result's files are in) changes. The directory is created (mode 0755)
    only when ``create``. Returns whether it was written; never raises for the cache's
    state (a debug line says why it was not written)."""
    from ..core import jsonfast as json

    try:
        text = json.dumps({"key": key, "dirs": _dir_identities(dirs), "value": encode(value)})
    except (TypeError, ValueError) as e:
        _debug("discovery result not cached", error=str(e))
        return False
    if len(text) > MAX_ENTRY_BYTES:
        return False
    path = os.path.join(directory, f"{prefix}-{_digest(key)}.json")
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if create:
            os.makedirs(directory, mode=0o755, exist_ok=True)
        if not _safe(os.stat(directory)):
            return False
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            os.write(fd, text.encode())
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _prune(directory, prefix, keep=path)
    except OSError as e:
        _debug("discovery cache not written", path=path, error=e.strerror)
        _unlink(tmp)
        return False
    return True


def _prune(directory: str, prefix: str, keep: str) -> None:
    """Remove the oldest entries named ``<prefix>-*.json`` beyond :data:`MAX_ENTRIES`."""
    entries: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        if name.startswith(prefix + "-") and name.endswith(".json"):
            p = os.path.join(directory, name)
            try:
                entries.append((os.lstat(p).st_mtime_ns, p))
            except OSError:
                continue
    entries.sort()
    for _mtime, p in entries[: max(0, len(entries) - MAX_ENTRIES)]:
        if p != keep:
            _unlink(p)


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 (contextlib is not imported on a container's start path)
        os.unlink(path)
    except OSError:
        pass


def source_dirs(paths: Sequence[str]) -> list[str]:
    """The parent directories of ``paths`` (host paths), without duplicates."""
    return sorted({os.path.dirname(p) for p in paths if p})
