"""A root-owned store of computed values under ``/run/ocihook``, keyed by what they depend on.

Some answers cost more to compute than a container's start may spend: discovering the
NVIDIA driver's files (:mod:`ocihook.discovery.cache` builds its key) and parsing the
operator's TOML file (:mod:`ocihook.config.load`). :func:`lookup` and :func:`store` keep
such values (any :class:`~ocihook.core.records.Record` tree of str, int, float, bool,
``None``, tuples, lists, frozensets and mappings; :func:`encode`) in
``<directory>/<prefix>-<digest>.entry``, each a :mod:`marshal` dump of
``(format, key text, directories, value)`` holding plain data only (strings, numbers and
tuples: the store never keeps, and :func:`decode` never accepts, anything else):

* the **key** is a JSON value the caller builds from everything the value depends on;
  the file name is a checksum of its compact JSON text (:func:`digest`), and the entry
  holds that text, compared in full on every lookup (a checksum collision is a miss);
* an entry also lists the **directories** its value was read from with their identity
  (device, inode, mtime_ns; :func:`dir_identities`): a file added, removed or renamed in
  one of them, or a file system mounted on one, makes the entry stale;
* an entry is used only when the directory and the file are owned by this process's user
  (root on a host) and writable by no one else (:func:`owned_and_private`); anything
  unreadable, corrupt, foreign or stale means "compute again" (a debug log line says why),
  never an error;
* writes are atomic (a temporary file in the directory, ``fsync``-free: a lost entry is
  computed again, ``os.replace``), mode 0600, and the directory keeps at most
  :data:`MAX_ENTRIES` entries of each prefix (the oldest are removed).

The default directory is :data:`DEFAULT_DIR` (``/run/ocihook``: a tmpfs, emptied at boot);
``ocihook cdi generate --warm-cache`` (run by the boot unit) creates it and warms it. It
is root's: an unprivileged user's processes, and those of root in a user namespace (a
rootless engine's), use their user's own store instead, under the login session's
runtime directory (:func:`store_dir`).
"""

from __future__ import annotations

import os
import stat

from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

#: Where the store lives by default (a tmpfs on systemd hosts).
DEFAULT_DIR = "/run/ocihook"
#: The login sessions' runtime directories, ``<this>/<uid>`` (systemd-logind's
#: ``XDG_RUNTIME_DIR``: a tmpfs directory owned by the user, mode 0700).
USER_RUNTIME_DIR = "/run/user"
#: Most entries of one prefix kept in the directory.
MAX_ENTRIES = 16
#: Largest entry read back, in bytes.
MAX_ENTRY_BYTES = 4 << 20
#: The entries' file-name suffix.
SUFFIX = ".entry"
#: The first item of every entry: the version of this layout (a different one is a miss).
ENTRY_FORMAT = "ocihook-cachestore-2"


# -- encoding (exact round trip) ------------------------------------------------------------

#: The tags of :func:`encode`'s containers (the first item of each tagged tuple).
_RECORD, _TUPLE, _LIST, _SET, _MAP = range(5)


def encode(value: object) -> object:
    """A form of ``value`` made of ``None``, ``bool``, ``int``, finite ``float``, ``str``
    and tuples only (what :mod:`marshal` writes and reads back exactly), that
    :func:`decode` turns back into an equal value of the same types. Every tuple in it is a
    tagged container: a record ``(0, class name, (fields...))``, a tuple ``(1, (items...))``,
    a list ``(2, (items...))``, a frozenset ``(3, (items...))`` (in ``repr`` order, so
    that equal sets encode alike), a mapping ``(4, ((key, value)...))``. Raises
    ``TypeError`` for anything else (a non-finite float, a set, bytes, a subclass of a
    scalar type such as an enum member, another class)."""
    kind = type(value)
    if value is None or kind is bool or kind is str or kind is int:
        return value
    if kind is float:
        if value != value or value in (float("inf"), float("-inf")):
            raise TypeError("non-finite float")
        return value
    if isinstance(value, Record):
        fields = tuple(encode(getattr(value, n)) for n in value.__fields__)
        return (_RECORD, kind.__name__, fields)
    if kind is tuple and isinstance(value, tuple):
        return (_TUPLE, tuple(encode(v) for v in value))
    if kind is list and isinstance(value, list):
        return (_LIST, tuple(encode(v) for v in value))
    if kind is frozenset and isinstance(value, frozenset):
        return (_SET, tuple(encode(v) for v in sorted(value, key=repr)))
    if kind is dict and isinstance(value, dict):
        return (_MAP, tuple((encode(k), encode(v)) for k, v in value.items()))
    raise TypeError(f"cannot cache a {kind.__name__}")


_SCALARS = (str, int, float, bool, type(None))


def decode(data: object, types: Mapping[str, type[Record]], budget: int | None = None) -> Any:
    """The value :func:`encode` made ``data`` from; records of the classes in ``types``
    (by name), built as their constructor builds them from every field in order
    (``__post_init__`` included). ``budget``: the most values (scalars and containers)
    it builds; :func:`lookup` gives the entry's size in bytes, since every value
    :func:`encode` writes takes at least one byte of it, so that an entry whose
    containers refer to each other many times over (what :mod:`marshal` can express in a
    few hundred bytes) is refused, not expanded.

    Raises:
        ValueError: anything malformed: an unknown tag or class, a container of the wrong
            shape, a type :func:`encode` never writes (a non-finite float included), a
            record its class refuses, or more values than ``budget``.
    """
    left = [budget if budget is not None else -1]

    def value(data: object) -> Any:
        left[0] -= 1
        if left[0] == -1 and budget is not None:
            raise ValueError("more values than its size allows")
        kind = type(data)
        if kind is not tuple or not isinstance(data, tuple):
            if kind is float and not (data == data and data not in (_INF, -_INF)):
                raise ValueError("non-finite float")
            if kind in _SCALARS:
                return data
            raise ValueError(f"malformed cache value of type {kind.__name__}")
        if len(data) not in (2, 3) or type(data[0]) is not int:
            raise ValueError("malformed container")
        tag = data[0]
        if tag == _RECORD:
            if len(data) != 3:
                raise ValueError("malformed record")
            name, fields = data[1], data[2]
            cls = types.get(name) if type(name) is str else None
            if cls is None or type(fields) is not tuple or len(fields) != len(cls.__fields__):
                raise ValueError(f"unknown record {name!r}")
            args = [value(f) for f in fields]
            try:
                return cls(*args)
            except Exception as e:  # its __post_init__ refuses the fields
                raise ValueError(f"malformed {name} record: {e}") from None
        items = data[1]
        if len(data) != 2 or type(items) is not tuple:
            raise ValueError("malformed container")
        if tag == _TUPLE:
            return tuple([value(v) for v in items])
        if tag == _LIST:
            return [value(v) for v in items]
        if tag == _SET:
            return frozenset([value(v) for v in items])
        if tag == _MAP:
            out = {}
            for pair in items:
                if type(pair) is not tuple or len(pair) != 2:
                    raise ValueError("malformed mapping item")
                out[value(pair[0])] = value(pair[1])
            return out
        raise ValueError(f"malformed cache value: unknown tag {tag!r}")

    try:
        return value(data)
    except TypeError as e:  # an unhashable key, a set of them
        raise ValueError(f"malformed cache value: {e}") from None


_INF = float("inf")


# -- the store --------------------------------------------------------------------------------


def _key_text(key: Mapping[str, object]) -> str:
    """``key``'s compact JSON text, keys in the caller's order (as built: ``host_key``)."""
    from ..core import jsonfast as json

    return json.dumps(key)


def digest(key: Mapping[str, object]) -> str:
    """The file-name part of ``key``'s entry: 16 hex digits (CRC-32 and Adler-32 of the
    key's compact JSON text, keys in the caller's order). Only a name: :func:`lookup`
    compares the entry's key text in full."""
    return _digest_text(_key_text(key))


def _digest_text(text: str) -> str:
    import zlib

    data = text.encode()
    return f"{zlib.crc32(data):08x}{zlib.adler32(data):08x}"


def dir_identities(dirs: Iterable[str]) -> tuple[tuple[object, ...], ...]:
    """``(path, device, inode, mtime_ns)`` of each of ``dirs`` (sorted, without
    duplicates), ``(path, None, None, None)`` for one that cannot be ``stat``-ed: what an
    entry records to tell, at lookup, that a file was added, removed or renamed in one of
    them, or that another file system was mounted there (whose root may have the same
    inode number)."""
    out: list[tuple[object, ...]] = []
    for d in sorted(set(dirs)):
        try:
            st = os.stat(d)
        except OSError:
            out.append((d, None, None, None))
            continue
        out.append((d, st.st_dev, st.st_ino, st.st_mtime_ns))
    return tuple(out)


def owned_and_private(st: os.stat_result) -> bool:
    """Whether a file or directory of status ``st`` is owned by this process's effective
    user and writable by neither its group nor others (mode bits ``0o022`` clear)."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def host_uid(euid: int, uid_map: bytes) -> int | None:
    """The id the parent user namespace sees for ``euid`` (the host's, one level down), by
    the user namespace's ``uid_map`` (``/proc/self/uid_map``: lines ``INSIDE OUTSIDE
    COUNT``, user_namespaces(7); a group id by ``gid_map`` alike); ``None`` when ``euid``
    is not mapped."""
    for line in uid_map.split(b"\n"):
        fields = line.split()
        if len(fields) != 3 or not all(f.isdigit() for f in fields):
            continue
        inside, outside, count = (int(f) for f in fields)
        if inside <= euid < inside + count:
            return outside + euid - inside
    return None


_USER_STORE: list[str | None] = []  # store_dir()'s user store (None: none), once found


#: ``NS_GET_OWNER_UID`` (linux/nsfs.h: ``_IO(0xb7, 0x4)``): the user id, as this process's
#: user namespace sees it, of the user that created a user namespace (ioctl_ns(2)).
NS_GET_OWNER_UID = 0xB704


def only_the_users_privileges(
    status: str = "/proc/self/status",
    overflow_dir: str = "/proc/sys/kernel",
    uid_map: str = "/proc/self/uid_map",
    gid_map: str = "/proc/self/gid_map",
) -> bool:
    """Whether this process can do no more than its effective user could alone, so that
    what that user wrote (their own store: entries that shape a container's edit, and the
    module image, code) may be used. All of:

    * the real, effective, saved and file-system user ids alike, and the group ids alike
      (``Uid:``/``Gid:`` of ``status``, proc(5); Python requires the first three of its
      user site directory);
    * none of them, and no supplementary group, the overflow id (``overflowuid``,
      ``overflowgid`` in ``overflow_dir``, user_namespaces(7)): an id this namespace does
      not map can be anyone's, the host's root included;
    * every group the process holds (its group id and the supplementary ones), as the
      parent namespace sees it (``gid_map``), one the group database lists the user in
      (:func:`os.getgrouplist` of the user's name and primary group, the user as
      ``uid_map`` names it): a group id or a group kept from a privileged caller
      (``setpriv --regid``, ``subprocess.run(user=..., group=...)``, a service's
      ``Group=``) is not the user's;
    * either the process is in a user namespace its effective user created
      (``NS_GET_OWNER_UID`` of ``/proc/self/ns/user`` is its effective user id,
      ioctl_ns(2): a rootless engine's runtime and hooks, whose capabilities reach only
      what that user mapped into it), or it has no capability permitted, inheritable or
      ambient (``CapPrm``, ``CapInh``, ``CapAmb`` in ``status``).

    Root of the host lowered to another user's ids, a setgid context, capabilities, a
    privileged caller's groups, or a process of another user (root included) that joined
    the user's namespace make it ``False``. What a caller that runs ocihook as the user
    still hands it (open descriptors, its terminal) is not seen: as with any program a
    privileged caller runs as a user, whose files then decide what runs. Never raises:
    what cannot be read or looked up is ``False``."""
    uids, gids = os.getresuid(), os.getresgid()
    if len(set(uids)) != 1 or len(set(gids)) != 1:
        return False
    euid, egid = uids[0], gids[0]
    held = set(os.getgroups()) | {egid}
    try:
        with open(os.path.join(overflow_dir, "overflowuid"), "rb") as f:
            overflow_uid = int(f.read(32))
        with open(os.path.join(overflow_dir, "overflowgid"), "rb") as f:
            overflow_gid = int(f.read(32))
        with open(status, "rb") as f:
            lines = f.read(1 << 16).splitlines()
        with open(uid_map, "rb") as f:
            users = f.read(1 << 16)
        with open(gid_map, "rb") as f:
            groups = f.read(1 << 16)
        caps = 0
        ids: dict[bytes, list[int]] = {}
        for line in lines:
            key, _, value = line.partition(b":")
            if key in (b"CapPrm", b"CapInh", b"CapAmb"):
                caps |= int(value.split()[0], 16)
            elif key in (b"Uid", b"Gid"):
                ids[key] = [int(v) for v in value.split()]
    except (OSError, IndexError, ValueError):
        return False
    if set(ids.get(b"Uid", ())) != {euid} or set(ids.get(b"Gid", ())) != {egid}:
        return False  # a file-system id of another (setfsuid, setfsgid)
    if euid == overflow_uid or overflow_gid in held:
        return False
    if caps and not _in_own_namespace(euid):
        return False
    user = host_uid(euid, users)
    outside = {host_uid(g, groups) for g in held}
    if user is None or None in outside:
        return False
    import pwd

    try:
        entry = pwd.getpwuid(user)
        member_of = set(os.getgrouplist(entry.pw_name, entry.pw_gid))
    except (KeyError, OSError):
        return False
    return outside <= member_of


def _in_own_namespace(euid: int) -> bool:
    """Whether this process's user namespace was created by its effective user
    (``NS_GET_OWNER_UID``, as this namespace sees the owner; the initial namespace's
    owner is root). ``False`` where it cannot be asked."""
    import fcntl
    import sys

    try:
        fd = os.open("/proc/self/ns/user", os.O_RDONLY | os.O_CLOEXEC)
        try:
            owner = bytearray(4)
            fcntl.ioctl(fd, NS_GET_OWNER_UID, owner, True)
        finally:
            os.close(fd)
    except OSError:
        return False
    return int.from_bytes(owner, sys.byteorder) == euid


def store_dir(
    *,
    uid_map: str = "/proc/self/uid_map",
    runtime_dir: str = USER_RUNTIME_DIR,
    status: str = "/proc/self/status",
) -> str:
    """The store this process keeps its entries in.

    * Root of the host (the effective user id the parent user namespace sees is 0):
      :data:`DEFAULT_DIR`, which the boot unit makes and warms.
    * Anyone else — an unprivileged user, or root of a user namespace (a rootless
      podman's or Docker's runtime and hooks), to whom root's store is foreign: the user's
      own ``<runtime_dir>/<host uid>/ocihook`` (made, mode 0700, at the first call; a
      file or a link at that path turns it off), when ``<runtime_dir>/<host uid>`` (the
      login session's runtime directory) is a directory owned by this process's
      effective user with no group or other access, and the process has no privilege
      that user lacks (:func:`only_the_users_privileges` of ``status``). Without one,
      :data:`DEFAULT_DIR`,
      where :func:`lookup` finds nothing usable and :func:`store` writes nothing: values
      are computed on every start, as without a store.

    The "host uid" is the effective user as the parent user namespace sees it, from
    ``uid_map`` (user_namespaces(7); the host's view for a rootless engine's namespace,
    one level down; a process without procfs is taken to be in the initial namespace),
    never from the environment. In a namespace nested deeper it names the parent's user,
    whose directory this process's user does not own: no store. For the default
    arguments, whether there is a user store, and which, is found once per process.
    Never raises.
    """
    default = (uid_map, runtime_dir, status) == (
        "/proc/self/uid_map",
        USER_RUNTIME_DIR,
        "/proc/self/status",
    )
    if default and _USER_STORE:
        return _USER_STORE[0] or DEFAULT_DIR
    euid = os.geteuid()
    uid = _parent_uid(uid_map)
    found: str | None = None
    if uid is not None and uid != 0 and only_the_users_privileges(status):
        parent = os.path.join(runtime_dir, str(uid))
        try:
            st = os.stat(parent)
            if stat.S_ISDIR(st.st_mode) and st.st_uid == euid and not st.st_mode & 0o077:
                directory = os.path.join(parent, "ocihook")
                try:  # noqa: SIM105 (contextlib is not imported on this path)
                    os.mkdir(directory, 0o700)
                except FileExistsError:
                    pass
                # a link or a file there (``touch`` turns the store off): no store
                if stat.S_ISDIR(os.lstat(directory).st_mode):
                    found = directory
        except OSError:
            pass
    if default:
        _USER_STORE.append(found)
    return found or DEFAULT_DIR


def _parent_uid(uid_map: str) -> int | None:
    """This process's effective user as the parent user namespace sees it
    (:func:`host_uid` of ``uid_map``; the effective user itself without procfs)."""
    euid = os.geteuid()
    try:
        with open(uid_map, "rb") as f:
            return host_uid(euid, f.read(1 << 16))
    except OSError:
        return euid


def own_store(
    *,
    uid_map: str = "/proc/self/uid_map",
    runtime_dir: str = USER_RUNTIME_DIR,
    status: str = "/proc/self/status",
) -> str | None:
    """The store this process fills (``ocihook cdi generate --warm-cache``): for root of
    the host (effective user 0 and the identity ``uid_map``) :data:`DEFAULT_DIR`, for
    anyone else the user's own store (:func:`store_dir`, same arguments), ``None`` when
    there is none (root of a namespace nested in a rootless one included). Never
    raises."""
    from ..core.modimage import host_root

    directory = store_dir(uid_map=uid_map, runtime_dir=runtime_dir, status=status)
    if directory != DEFAULT_DIR:
        return directory
    return DEFAULT_DIR if host_root(uid_map) else None


def install_user_module_image() -> bool:
    """Install the start path's module image (:func:`ocihook.core.modimage.install`) from
    the user's own store (:func:`store_dir`): for a process to which root's image is
    foreign (an unprivileged user, root of a rootless engine's user namespace), after
    ``ocihook cdi generate --warm-cache`` run as that user wrote one. The one-shot
    programs call it when root's image was not installed and the process is not root
    of the host (:func:`ocihook.core.modimage.host_root`). Returns whether an image was
    installed; never raises."""
    from ..core import modimage

    directory = store_dir()
    return directory != DEFAULT_DIR and modimage.install(directory)


def _debug(message: str, **fields: object) -> None:
    from ..core import log

    log.debug(message, **fields)


def _entry_path(directory: str, prefix: str, key_text: str) -> str:
    return os.path.join(directory, f"{prefix}-{_digest_text(key_text)}{SUFFIX}")


def lookup(
    key: Mapping[str, object],
    types: Mapping[str, type[Record]],
    directory: str = DEFAULT_DIR,
    *,
    prefix: str,
) -> Any:
    """The value stored for ``key`` (a JSON value: see the module docstring) under
    ``prefix`` in ``directory``, decoded with the record classes ``types`` (by class
    name), or ``None`` when there is none usable (missing, unreadable, corrupt, foreign,
    stale: a debug log line says which). Never raises for the cache's state."""
    import marshal

    key_text = _key_text(key)
    path = _entry_path(directory, prefix, key_text)
    try:
        dir_st = os.stat(directory)
        if not owned_and_private(dir_st):
            _debug(f"{prefix} cache not used: the directory is not private", path=directory)
            return None
        # non-blocking: a FIFO put there is not waited on (it is no regular file: refused)
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and owned_and_private(st)):
            _debug(
                f"{prefix} cache not used: not owned by this user or writable by others", path=path
            )
            return None
        # the size fstat gave, not the limit: a read of n bytes allocates n first
        raw = os.read(fd, min(st.st_size, MAX_ENTRY_BYTES) + 1)
    except OSError as e:
        _debug(f"{prefix} cache unreadable; computing again", path=path, error=e.strerror)
        return None
    finally:
        os.close(fd)
    try:
        if len(raw) > MAX_ENTRY_BYTES:
            raise ValueError("too large")
        entry = marshal.loads(raw)
        if type(entry) is not tuple or len(entry) != 4 or entry[0] != ENTRY_FORMAT:
            raise ValueError("not an entry of this format")
        _format, stored_key, dirs, value = entry
        if stored_key != key_text:
            _debug(f"{prefix} cache entry is for another key; computing again", path=path)
            return None
        if type(dirs) is not tuple or dir_identities(d[0] for d in dirs) != dirs:
            _debug(f"{prefix} cache entry is stale (a source directory changed)", path=path)
            return None
        return decode(value, types, budget=len(raw))
    except Exception as e:  # marshal's errors, MemoryError, RecursionError: all a miss
        _debug(f"{prefix} cache entry is corrupt; computing again", path=path, error=str(e))
        return None


def store(
    key: Mapping[str, object],
    value: object,
    dirs: Iterable[str],
    directory: str = DEFAULT_DIR,
    *,
    create: bool = False,
    prefix: str,
    max_entries: int = MAX_ENTRIES,
) -> bool:
    """Store ``value`` (see :func:`encode`) for ``key`` under ``prefix`` in ``directory``,
    stale once any of ``dirs`` (host paths of the directories the value was read from)
    changes. The directory is created (mode 0755) only when ``create``; it keeps at most
    ``max_entries`` entries of ``prefix`` (the oldest go). Returns whether it was written;
    never raises for the cache's state (a debug line says why it was not written).
    Entries over :data:`MAX_ENTRY_BYTES` are not written."""
    import marshal

    try:
        key_text = _key_text(key)
        entry: Any = (ENTRY_FORMAT, key_text, dir_identities(dirs), encode(value))
        data = marshal.dumps(entry)  # plain data only (encode): never a code object
    except (TypeError, ValueError, RecursionError) as e:
        _debug(f"{prefix} value not cached", error=str(e))
        return False
    if len(data) > MAX_ENTRY_BYTES:
        return False
    path = _entry_path(directory, prefix, key_text)
    tmp = f"{path}.{os.getpid()}.tmp"
    try:
        if create:
            os.makedirs(directory, mode=0o755, exist_ok=True)
        if not owned_and_private(os.stat(directory)):
            return False
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(data)
            while view:  # a full file system writes part, then refuses (ENOSPC)
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(tmp, path)
        _prune(directory, prefix, keep=path, max_entries=max_entries)
    except OSError as e:
        _debug(f"{prefix} cache not written", path=path, error=e.strerror)
        _unlink(tmp)
        return False
    return True


def _prune(directory: str, prefix: str, keep: str, max_entries: int = MAX_ENTRIES) -> None:
    """Remove the oldest entries of ``prefix`` (``<prefix>-<16 hex digits>`` :data:`SUFFIX`)
    beyond ``max_entries``, every ``<prefix>-<16 hex digits>.json`` (the entries of the
    earlier JSON layout, never read), and the temporary files of writers no longer
    running. Names of another prefix that starts with this one (``runtime-version-...``
    for ``runtime``) are never taken for this one's."""
    entries: list[tuple[int, str]] = []
    for name in os.listdir(directory):
        if not name.startswith(prefix + "-"):
            continue
        digest, dot, suffix = name[len(prefix) + 1 :].partition(".")
        if len(digest) != 16 or not all(c in "0123456789abcdef" for c in digest):
            continue
        p = os.path.join(directory, name)
        if dot + suffix == ".json":
            _unlink(p)
        elif suffix.startswith(SUFFIX[1:] + ".") and suffix.endswith(".tmp"):
            _unlink_if_writer_gone(p, suffix[len(SUFFIX) : -len(".tmp")])
        elif dot + suffix == SUFFIX:
            try:
                entries.append((os.lstat(p).st_mtime_ns, p))
            except OSError:
                continue
    entries.sort()
    for _mtime, p in entries[: max(0, len(entries) - max_entries)]:
        if p != keep:
            _unlink(p)


def _unlink_if_writer_gone(path: str, pid: str) -> None:
    """Remove the temporary file ``path`` of :func:`store` whose writer was process ``pid``
    when no such process runs any more (a writer killed between its write and its rename);
    a live one's is left to it."""
    if pid.isdigit() and int(pid) != os.getpid() and not os.path.exists(f"/proc/{pid}"):
        _unlink(path)


def _unlink(path: str) -> None:
    try:  # noqa: SIM105 (contextlib is not imported on a container's start path)
        os.unlink(path)
    except OSError:
        pass
