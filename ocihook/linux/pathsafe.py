"""Path safety: looking paths up *inside* a root directory without ever leaving it.

ocihook runs as root on the host and works on two kinds of trees it does not control: a
driver root (``/run/nvidia/driver``, filled by a driver container) and the container's root
file system, which comes from a possibly hostile image. In both, a path must mean what it
would mean to a process whose ``/`` is that root: an absolute symbolic link restarts at the
root, ``..`` stops at the root, and nothing the tree contains can make the lookup reach a host
file. Getting this wrong is how a crafted image made the NVIDIA Container Toolkit mount or
create files on the host (CVE-2024-0132, a time-of-check/time-of-use race on a symlinked
mount target; CVE-2024-0134, a link followed out of the rootfs while creating files;
nvidia.md §8).

Two halves:

1. :func:`resolve_in_root` -- a pure string walk (``lstat``/``readlink`` one component at a
   time) that returns the host path a path *would* reach. It is for reading host-side trees
   and for computing names; what it returns may change before it is used (there is a window
   between the check and the use), so it must not decide where to write.

2. File-descriptor operations for *writing* into a rootfs: every lookup starts from an
   ``O_PATH`` descriptor of the root and goes through ``openat2(RESOLVE_IN_ROOT |
   RESOLVE_NO_MAGICLINKS)`` (openat2(2)), which makes the kernel itself keep the walk inside
   the root; every change is an ``*at`` call on the descriptor of the parent directory with
   a final name that is never followed (``mkdirat``, ``O_CREAT|O_EXCL|O_NOFOLLOW``,
   ``symlinkat``, ``mknodat``, ``renameat``, ``unlinkat`` do not follow a final link). On a
   kernel without ``openat2`` (ENOSYS, before 5.6) the same semantics come from a walk in
   user space: one ``openat(O_PATH|O_NOFOLLOW)`` per component, links read with
   ``readlinkat`` and re-resolved from the root, ``..`` taken off a stack of descriptors
   already known to be inside (never asked of the kernel). As they only use descriptors,
   these functions work the same after ``setns`` into the container's mount namespace.

Paths given to this module are container paths: absolute or relative, both taken from the
root. Failures of the descriptor operations raise
:class:`~ocihook.core.errors.ApplyError` naming the container path, with the ``OSError`` chained
as ``__cause__`` (its ``errno`` tells ``ENOENT`` from ``ELOOP``); :func:`resolve_in_root`
raises :class:`~ocihook.core.errors.DiscoveryError`.
"""

from __future__ import annotations

import errno
import os
import stat
from _contextvars import ContextVar, Token  # contextvars is only this module's re-export

from ..core.errors import ApplyError, DiscoveryError
from . import atomicfile
from . import syscalls as _linux

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "MAX_LINKS",
    "RememberedResolutions",
    "close_quietly",
    "create_file_at",
    "create_file_in_root",
    "makedirs_in_root",
    "mknod_in_root",
    "open_in_root",
    "open_root",
    "remove_in_root",
    "resolve_in_root",
    "symlink_in_root",
    "symlinks_in_root",
    "write_file_in_root",
]

#: Symbolic links followed in one lookup before ``ELOOP``: the kernel's ``MAXSYMLINKS``
#: (``include/linux/namei.h``).
MAX_LINKS = 40

_RESOLVE = _linux.RESOLVE_IN_ROOT | _linux.RESOLVE_NO_MAGICLINKS
_DIR = os.O_PATH | os.O_DIRECTORY
#: openat2 returns EAGAIN when a rename or mount raced with a RESOLVE_IN_ROOT lookup.
_EAGAIN_TRIES = 32


def close_quietly(fd: int) -> None:
    """Close ``fd``, a descriptor opened read-only or ``O_PATH`` (a directory, a lookup, a
    mount target), ignoring an error: Linux releases the descriptor even when ``close``
    fails (``close(2)``: "the file descriptor is released before the error is reported"),
    and nothing was written through it, so an ``EIO`` or ``EINTR`` there loses nothing.
    Never use it for a descriptor whose writes must be known to have landed."""
    try:  # noqa: SIM105 (contextlib is not imported on the start path)
        os.close(fd)
    except OSError:
        pass


#: Set once openat2 answered ENOSYS; from then on the user-space walk is used.
_openat2_missing = False

_HINTS = {
    errno.ELOOP: (
        "the image has a symbolic-link loop, more than 40 links, or a /proc magic link on this path"
    ),
    errno.ENOTDIR: "the image has a non-directory where this path needs a directory",
    errno.EROFS: (
        "the container root file system is read-only at this point (root.readonly in "
        "config.json); give the devices through the OCI spec or CDI instead"
    ),
    errno.EACCES: (
        "ocihook needs write access to the container's root file system here: run it as "
        "root (as hooks and engines do) or as the owner of the rootfs"
    ),
    errno.EPERM: (
        "making device nodes and mounts needs root on the host (CAP_MKNOD, CAP_SYS_ADMIN)"
    ),
    errno.ENOSPC: "the file system holding the container root is full",
    errno.EBUSY: "something is mounted on this path; unmount it first",
}

_RESOLVE_HINTS = {
    errno.ELOOP: "the tree has a symbolic-link loop or more than 40 links on this path",
    errno.ENOTDIR: "the tree has a non-directory where this path needs a directory",
}


# --- helpers ----------------------------------------------------------------------------------


#: Stands for a trailing slash in :func:`_components`: a final name followed by it must be
#: a directory (and cannot be created by ``O_CREAT``: EISDIR, as in the kernel's
#: ``open_last_lookups``); otherwise it acts as ``.``. No real component contains "/".
_SLASH = "/"


def _components(path: str) -> list[str]:
    """Components of ``path`` in *reverse* order (ready for ``pop()``), empty ones dropped,
    a trailing slash kept as :data:`_SLASH`."""
    parts = [part for part in path.split("/") if part]
    if parts and path.endswith("/"):
        parts.append(_SLASH)
    parts.reverse()
    return parts


def _split(path: str) -> tuple[str, str]:
    """``(parent, name)`` of a container path; ``name`` is ``""`` for the root and for a
    path ending in a slash (which names a directory, as for the kernel)."""
    head, _, name = path.rpartition("/")
    return head or "/", name


def _join(parent: str, name: str) -> str:
    return parent.rstrip("/") + "/" + name


def _shown(path: str) -> str:
    """The container path as shown in errors: absolute, as given otherwise."""
    return "/" + path.lstrip("/")


def _error(action: str, path: str, err: OSError) -> ApplyError:
    return ApplyError(
        f"cannot {action} inside the container root: {err.strerror or err}",
        path=_shown(path),
        hint=_HINTS.get(err.errno or 0),
    )


def _refuse(what: str, path: str, hint: str) -> ApplyError:
    return ApplyError(f"refusing to {what} inside the container root", path=_shown(path), hint=hint)


def _check_name(name: str, path: str, action: str) -> None:
    if name in ("", ".", ".."):
        raise ApplyError(
            f"cannot {action} inside the container root: the path does not end in a name "
            "(it is empty, ends in a slash, '.' or '..')",
            path=_shown(path),
        )


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISDIR(mode):
        return "directory"
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISCHR(mode):
        return "character device"
    if stat.S_ISBLK(mode):
        return "block device"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    return "special file"


def _eloop(path: str) -> OSError:
    return OSError(errno.ELOOP, os.strerror(errno.ELOOP), path)


# --- 1. pure host-side resolution -----------------------------------------------------------


class RememberedResolutions:
    """Within ``with RememberedResolutions():``, :func:`resolve_in_root` in this thread
    (or task) walks each directory once: where a walk from a given point through given
    components led is remembered, so the next path of the same directory, or one whose
    link leads into a directory already walked (Debian's ``/etc/alternatives`` chains),
    walks only its last component. Discovery resolves 100-odd driver files in a handful
    of directories.

    For reading a tree that does not change meanwhile (discovery writes nothing): the
    answers, errors included, are those of the walk without it at the time each
    directory was first walked. Walks longer or nested deeper than :data:`_REMEMBER_MAX`
    go plainly. Nested scopes (the same instance too) share the outer one's memory, which
    goes with the outermost scope's end. A plain class
    rather than ``contextlib.contextmanager``: this module is imported on every container
    start.
    """

    def __init__(self) -> None:
        self._tokens: list[Token[_Memory | None] | None] = []  # one per open ``with``

    def __enter__(self) -> None:
        self._tokens.append(_REMEMBERED.set({}) if _REMEMBERED.get() is None else None)

    def __exit__(self, *_exc: object) -> None:
        token = self._tokens.pop()
        if token is not None:
            _REMEMBERED.reset(token)


#: What :func:`_walk` found in this scope: ``(root,)`` once the root was checked, and
#: ``(root, len(done), *done, *components walked, reversed)`` -> ``(components reached,
#: links followed, whether the last exists and is not a directory)``; ``None`` outside
#: :class:`RememberedResolutions`.
_Memory = dict[tuple[object, ...], tuple[tuple[str, ...], int, bool]]
_REMEMBERED: ContextVar[_Memory | None] = ContextVar("ocihook_pathsafe_remembered", default=None)

#: Walks longer than this, or nested deeper (each remembered prefix is walked by a nested
#: call), are not remembered: the recursion stays bounded and keys small whatever a
#: hostile tree's links hold (a link of 1,500 ``./`` components is legal).
_REMEMBER_MAX = 64


def resolve_in_root(root: str, path: str, *, max_links: int = MAX_LINKS) -> str:
    """Return the host path that ``path`` reaches inside the directory ``root``.

    ``path`` (absolute or relative, both from ``root``) is walked one component at a time
    with ``os.lstat``/``os.readlink`` -- not ``os.path.realpath``, which would follow links
    out of the root -- with the rules of ``openat2(2)`` ``RESOLVE_IN_ROOT``: a symbolic link
    with an absolute target restarts at ``root``, a relative one continues from the link's
    directory, ``..`` never goes above ``root``, and at most ``max_links`` links are followed
    (one more is ``ELOOP``, as ``MAXSYMLINKS`` in the kernel). A final link is followed.
    Missing components are allowed: the result is where the path would be once they exist
    (a ``..`` after a missing component undoes it, as creating it would).

    Returns ``os.path.join(root, *components)`` with ``root`` made absolute (``os.path.
    abspath``, its own links kept): always ``root`` or below it, whatever the tree holds, and
    free of links below ``root`` at the time of the walk.

    This is the pure-walk fallback for reading: between this walk and the use of its answer
    the tree can change (a time-of-check/time-of-use window, CVE-2024-0132), so anything that
    writes into a tree another party controls must use the descriptor functions below.
    Within :class:`RememberedResolutions`, a directory already walked is not walked again.

    Raises:
        DiscoveryError: ``root`` is not a directory; a link loop or too many links (ELOOP);
            a non-directory where a directory is needed (ENOTDIR); another ``OSError`` while
            walking (the path in the error is ``root`` joined with ``path``).
    """
    root = os.path.abspath(root)
    shown = os.path.join(root, path.lstrip("/"))
    memory = _REMEMBERED.get()
    if memory is None or (root,) not in memory:
        try:
            if not stat.S_ISDIR(os.stat(root).st_mode):
                raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), root)
        except OSError as err:
            raise DiscoveryError(
                f"cannot resolve a path inside {root}: the root is not a usable directory "
                f"({err.strerror})",
                path=root,
            ) from err
        if memory is not None:
            memory[(root,)] = ((), 0, False)
    try:
        done, _links, _nondir = _walk(root, [], _components(path), max_links, shown, memory)
    except OSError as err:
        raise DiscoveryError(
            f"cannot resolve {path!r} inside {root}: {err.strerror}",
            path=shown,
            hint=_RESOLVE_HINTS.get(err.errno or 0),
        ) from err
    return os.path.join(root, *done)


#: The walk's state: components reached below the root, links followed, whether the last
#: component reached exists and is not a directory.
_State = tuple[list[str], int, bool]


def _walk(
    root: str,
    done: list[str],
    pending: list[str],
    max_links: int,
    shown: str,
    memory: _Memory | None,
    depth: int = 0,
) -> _State:
    """The walk of :func:`resolve_in_root` from ``done`` (components below ``root``, each
    a real directory or missing) through ``pending`` (components, reversed; consumed),
    following at most ``max_links`` links. Raises ``OSError`` (ELOOP and ENOTDIR naming
    ``shown``, or what ``lstat``/``readlink`` raised).

    With ``memory`` (:class:`RememberedResolutions`), each time the walk starts afresh
    (here, and after a link) everything but the last component is walked once per scope:
    the state it reaches is remembered by where it started and what it walked, and used
    again when it fits in the links left; a walk that would need more links than are left
    is ELOOP, as it would be one component at a time."""
    links = 0
    nondir = False
    remember = memory is not None and depth < _REMEMBER_MAX
    fresh = remember  # at the start, and again after each link
    while pending:
        if fresh and not nondir and memory is not None and 1 < len(pending) <= _REMEMBER_MAX:
            fresh = False
            key = (root, len(done), *done, *pending[1:])
            known = memory.get(key)
            if known is None:
                reached, used, last = _walk(
                    root, list(done), pending[1:], max_links - links, shown, memory, depth + 1
                )
                known = memory[key] = (tuple(reached), used, last)
            if known[1] and links + known[1] > max_links:
                raise _eloop(shown)
            done, links, nondir = list(known[0]), links + known[1], known[2]
            del pending[1:]
        part = pending.pop()
        if nondir:
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), shown)
        if part in (".", _SLASH):
            continue
        if part == "..":
            if done:
                done.pop()
            continue
        here = os.path.join(root, *done, part)
        try:
            mode = os.lstat(here).st_mode
        except FileNotFoundError:
            done.append(part)  # missing: it would be created here
            continue
        if stat.S_ISLNK(mode):
            links += 1
            if links > max_links:
                raise _eloop(shown)
            target = os.readlink(here)
            if target.startswith("/"):
                done.clear()
            pending.extend(_components(target))
            fresh = remember
            continue
        done.append(part)
        nondir = not stat.S_ISDIR(mode)
    return done, links, nondir


# --- 2. descriptor operations ---------------------------------------------------------------


def _openat2(root_fd: int, path: str, flags: int, mode: int) -> int | None:
    """openat2 in the root, or ``None`` when the kernel lacks it."""
    global _openat2_missing
    for _ in range(_EAGAIN_TRIES):
        try:
            return _linux.openat2(root_fd, path or ".", flags, mode, _RESOLVE)
        except OSError as err:
            if err.errno == errno.EAGAIN:
                continue
            if err.errno == errno.ENOSYS:
                _openat2_missing = True
                return None
            raise
    raise OSError(errno.EAGAIN, "lookup kept racing with renames or mounts", path)


def _walk_open(root_fd: int, path: str, flags: int, mode: int) -> int:
    """User-space ``RESOLVE_IN_ROOT``: one ``openat(O_PATH|O_NOFOLLOW)`` per component,
    links read and their text resolved from here (absolute: from ``root_fd``), ``..`` taken
    off a stack of descriptors. Raises ``OSError`` like openat2 would."""
    creating = bool(flags & os.O_CREAT)
    follow_last = not flags & os.O_NOFOLLOW and not (creating and flags & os.O_EXCL)
    stack: list[int] = []  # descriptors of the directories below root_fd, in order
    pending = _components(path)
    links = 0

    def follow(target: str) -> None:
        nonlocal links
        links += 1
        if links > MAX_LINKS:
            raise _eloop(path)
        if target.startswith("/"):
            while stack:
                close_quietly(stack.pop())
        pending.extend(_components(target))

    try:
        while True:
            cur = stack[-1] if stack else root_fd
            if not pending:  # the root, or a path ending in ".", ".." or a slash
                return os.open(".", flags, mode, dir_fd=cur)
            part = pending.pop()
            if part in (".", _SLASH):
                continue
            if part == "..":
                if stack:
                    close_quietly(stack.pop())
                continue
            if creating and pending == [_SLASH]:
                raise OSError(errno.EISDIR, os.strerror(errno.EISDIR), path)
            if pending:  # a directory on the way
                fd = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=cur)
                try:
                    st_mode = os.fstat(fd).st_mode
                    if stat.S_ISDIR(st_mode):
                        stack.append(fd)
                        fd = -1
                        continue
                    if not stat.S_ISLNK(st_mode):
                        raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
                    target = os.readlink("", dir_fd=fd)
                finally:
                    if fd >= 0:
                        close_quietly(fd)
                follow(target)
                continue
            # The final component: opened with the caller's flags, but never followed by
            # the kernel; a link is read and resolved here, in the root.
            try:
                fd = os.open(part, flags | os.O_NOFOLLOW, mode, dir_fd=cur)
            except OSError as err:
                # ELOOP: a link opened without O_PATH; ENOTDIR: a link with O_DIRECTORY.
                if not follow_last or err.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
                try:
                    is_link = stat.S_ISLNK(os.lstat(part, dir_fd=cur).st_mode)
                except OSError:
                    is_link = False
                if not is_link:
                    raise
                follow(os.readlink(part, dir_fd=cur))
                continue
            if not (follow_last and flags & os.O_PATH):
                return fd
            # O_PATH|O_NOFOLLOW opens a final link itself: read it and go on.
            try:
                is_link = stat.S_ISLNK(os.fstat(fd).st_mode)
                target = os.readlink("", dir_fd=fd) if is_link else ""
            except BaseException:
                close_quietly(fd)
                raise
            if not is_link:
                return fd
            close_quietly(fd)
            follow(target)
    finally:
        for fd in stack:
            close_quietly(fd)


def _open(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """Open ``path`` inside ``root_fd``; raises ``OSError``."""
    flags |= os.O_CLOEXEC
    if not flags & os.O_CREAT and flags & os.O_TMPFILE != os.O_TMPFILE:
        mode = 0  # openat2 rejects a mode it would not use (O_TMPFILE includes O_DIRECTORY)
    if not _openat2_missing:
        fd = _openat2(root_fd, path, flags, mode)
        if fd is not None:
            return fd
    return _walk_open(root_fd, path, flags, mode)


def open_root(path: str) -> int:
    """Open the container root file system ``path`` (a host path, or a path in the current
    mount namespace after ``setns``) and return an ``O_PATH|O_DIRECTORY|O_CLOEXEC``
    descriptor for the other functions here. ``path`` itself comes from the runtime
    (``root.path`` of ``config.json``, OCI runtime-spec config.md "Root"), so links in it are
    followed; everything *below* it is looked up with :func:`open_in_root`. After ``setns``
    into the container's mount namespace open it again there: a descriptor from the host
    namespace still works for files, but not as a mount target (see
    :func:`ocihook.linux.syscalls.attach_mount`).

    Raises:
        ApplyError: ``path`` is missing or not a directory.
    """
    try:
        return os.open(path, _DIR | os.O_CLOEXEC)
    except OSError as err:
        raise ApplyError(
            f"cannot open the container root file system: {err.strerror}",
            path=path,
            hint="check root.path in the bundle's config.json",
        ) from err


def open_in_root(root_fd: int, path: str, flags: int, mode: int = 0) -> int:
    """Open the container path ``path`` inside the root ``root_fd`` and return a new
    close-on-exec descriptor.

    ``flags``/``mode`` are those of ``open(2)``; a final link is followed (in the root) unless
    ``flags`` has ``O_NOFOLLOW``. The lookup is ``openat2(2)`` with ``RESOLVE_IN_ROOT |
    RESOLVE_NO_MAGICLINKS``: absolute links restart at ``root_fd``, ``..`` stops there, and
    ``/proc`` magic links (``/proc/self/root``, ``/proc/<pid>/fd/<n>``) are refused with
    ELOOP. Without ``openat2`` (ENOSYS) a user-space walk with the same rules is used; it
    never asks the kernel to follow a link, and reads a magic link as the text it shows
    (resolved in the root) instead of refusing it. Why: CVE-2024-0132, CVE-2024-0134.

    Raises:
        ApplyError: the lookup failed (ENOENT, ELOOP, ENOTDIR, EACCES, ...); the
            ``OSError`` is the ``__cause__``.
    """
    try:
        return _open(root_fd, path, flags, mode)
    except OSError as err:
        raise _error("open the path", path, err) from err


def _open_dir_nofollow(root_fd: int, path: str) -> int:
    """Open the directory ``path`` in the root without following a final link; -1 when the
    final component is a link or not a directory (``O_DIRECTORY|O_NOFOLLOW`` on a link gives
    ENOTDIR, like a file)."""
    try:
        return _open(root_fd, path, _DIR | os.O_NOFOLLOW)
    except NotADirectoryError:
        return -1


def _mkdir(name: str, mode: int, dir_fd: int) -> bool:
    """``mkdirat``; ``False`` when something (a dangling link, a racing mkdir) is there."""
    try:
        os.mkdir(name, mode, dir_fd=dir_fd)
    except FileExistsError:
        return False
    return True


def _makedirs(root_fd: int, path: str, mode: int, created: list[str] | None) -> int:
    """:func:`makedirs_in_root` raising ``OSError``."""
    try:
        return _open(root_fd, path, _DIR)  # the usual case: it is there
    except FileNotFoundError:
        pass
    # Walk down from the root. ``expr`` is a container path expression for the directory
    # ``base`` refers to; lookups go through _open (openat2 in the root), changes through
    # *at calls on ``base``.
    expr = "/"
    base = _open(root_fd, expr, _DIR)
    pending = _components(path)
    links = 0
    try:
        while pending:
            part = pending.pop()
            if part == _SLASH:
                part = "."
            nxt = _join(expr, part)
            try:
                fd = _open_dir_nofollow(root_fd, nxt)
            except FileNotFoundError:
                if part in (".", ".."):
                    raise
                if _mkdir(part, mode, base) and created is not None:
                    created.append(nxt)
                fd = _open_dir_nofollow(root_fd, nxt)
            if fd < 0:  # a link (resolve it in the root) or a non-directory (refuse)
                if not stat.S_ISLNK(os.lstat(part, dir_fd=base).st_mode):
                    raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), nxt)
                target = os.readlink(part, dir_fd=base)
                links += 1
                if links > MAX_LINKS:
                    raise _eloop(path)
                if target.startswith("/"):
                    fd = _open(root_fd, "/", _DIR)
                    close_quietly(base)
                    base, expr = fd, "/"
                pending.extend(_components(target))
                continue
            close_quietly(base)
            base, expr = fd, nxt
        fd, base = base, -1
        return fd
    finally:
        if base >= 0:
            close_quietly(base)


def makedirs_in_root(
    root_fd: int, path: str, mode: int = 0o755, *, created: list[str] | None = None
) -> int:
    """Make the directory ``path`` and its missing parents inside the root ``root_fd`` and
    return an ``O_PATH|O_DIRECTORY`` descriptor of it (existing directories are fine).

    Each missing component is made with ``mkdirat`` on the descriptor of its parent (``mode``
    less the umask). A component that is a symbolic link, dangling or not, is resolved in the
    root (an absolute target restarts at ``root_fd``) and the directories it names are made
    there, never on the host (CVE-2024-0134). Every directory made is appended to
    ``created`` as a container path expression that :func:`remove_in_root` accepts, in the
    order made (remove them in reverse to roll back).

    Raises:
        ApplyError: a non-directory is in the way (ENOTDIR), a link loop (ELOOP), a
            read-only root (EROFS), ...; the ``OSError`` is the ``__cause__``.
    """
    try:
        return _makedirs(root_fd, path, mode, created)
    except OSError as err:
        raise _error("make the directory", path, err) from err


def create_file_in_root(
    root_fd: int, path: str, mode: int = 0o644, *, created: list[str] | None = None
) -> int:
    """Make sure ``path`` inside the root ``root_fd`` is a regular file, for use as a bind
    mount target, and return an ``O_PATH|O_NOFOLLOW`` descriptor of it (for
    :func:`ocihook.linux.syscalls.attach_mount`).

    Missing parents are made as by :func:`makedirs_in_root`. The file is made empty with
    ``O_CREAT|O_EXCL|O_NOFOLLOW`` on the parent's descriptor (``mode`` less the umask) when
    nothing is there; an existing regular file is used as it is (mounting over it changes
    nothing in it). Anything else at ``path`` -- above all a symbolic link, which on the
    host could lead the mount onto a host file (CVE-2024-0132, CVE-2024-0134) -- is refused.
    What was made is appended to ``created`` (see :func:`makedirs_in_root`).

    Raises:
        ApplyError: ``path`` is a symbolic link, directory, device or other non-regular
            file; or making it failed (the ``OSError`` is the ``__cause__``).
    """
    parent, name = _split(path)
    _check_name(name, path, "make the file")
    try:
        parent_fd = _makedirs(root_fd, parent, 0o755, created)
    except OSError as err:
        raise _error("make the file", path, err) from err
    try:
        return create_file_at(parent_fd, parent, name, mode, created=created)
    finally:
        close_quietly(parent_fd)


def create_file_at(
    parent_fd: int, parent: str, name: str, mode: int = 0o644, *, created: list[str] | None = None
) -> int:
    """:func:`create_file_in_root` for a parent directory already opened inside the root
    (a descriptor from :func:`makedirs_in_root`; ``parent`` is its container path, for
    messages and ``created``): many mount targets in one directory then cost one lookup.

    Raises:
        ApplyError: as :func:`create_file_in_root`.
    """
    path = _join(parent, name)
    _check_name(name, path, "make the file")
    try:
        try:
            fd = os.open(
                name,
                os.O_RDONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                mode,
                dir_fd=parent_fd,
            )
        except FileExistsError:
            pass
        else:
            if created is not None:  # recorded first: made, whatever close() says
                created.append(path)
            close_quietly(fd)
        fd = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
        st_mode = os.fstat(fd).st_mode
    except OSError as err:
        raise _error("make the file", path, err) from err
    if not stat.S_ISREG(st_mode):
        close_quietly(fd)
        raise _refuse(
            f"use an existing {_kind(st_mode)} as a bind-mount target",
            path,
            "the image has something other than a regular file at this path; remove it "
            "from the image",
        )
    return fd


def symlink_in_root(
    root_fd: int,
    link_path: str,
    target: str,
    *,
    replace_existing_link: bool = True,
    created: list[str] | None = None,
) -> str | None:
    """Make ``link_path`` inside the root ``root_fd`` a symbolic link to ``target``.

    The link is made with ``symlinkat`` on the parent's descriptor (missing parents made as
    by :func:`makedirs_in_root`); ``target`` is stored as given and only ever resolved by
    the container. An existing link is never written through: if it already points to
    ``target`` nothing happens; otherwise, with ``replace_existing_link``, a new link is made
    under a temporary name (``.ocihook-<16 hex>``, watched by a guardian that removes it
    should this process die: :func:`ocihook.linux.atomicfile.guard_name`) and ``renameat``
    over the old one (atomic), else it is refused.
    Any other existing file (regular file, directory, ...) is refused rather than replaced:
    it is the image's content (nvidia.md §8, "file exists"). A new link is appended to
    ``created``. Why links matter: CVE-2024-0134.

    Returns the previous target of a link that was replaced (to restore it on rollback), or
    ``None``.

    Raises:
        ApplyError: something other than a link is at ``link_path``, a different link is
            there and ``replace_existing_link`` is false, or making it failed.
    """
    parent, name = _split(link_path)
    _check_name(name, link_path, "make the symbolic link")
    try:
        parent_fd = _makedirs(root_fd, parent, 0o755, created)
        try:
            return _symlink_at(
                parent_fd, parent, name, link_path, target, replace_existing_link, created
            )
        finally:
            close_quietly(parent_fd)
    except OSError as err:
        raise _error("make the symbolic link", link_path, err) from err


def symlinks_in_root(
    root_fd: int,
    links: Sequence[tuple[str, str]],
    *,
    replace_existing_link: bool = True,
    created: list[str] | None = None,
    replaced: list[tuple[str, str]] | None = None,
) -> list[tuple[str, str]]:
    """:func:`symlink_in_root` for each ``(link_path, target)`` of ``links``, in order,
    with each parent directory resolved (and made) inside the root once rather than once
    per link: a driver's 50-odd soname links live in two or three directories. A link of
    the batch at (or above) a resolved parent makes that parent be resolved again, so the
    result is that of one :func:`symlink_in_root` per link.

    Returns:
        ``replaced`` (a new list when ``None``) with ``(link_path, previous target)``
        appended for each link replaced, as it is replaced.

    Raises:
        ApplyError: as :func:`symlink_in_root`, for the first link that fails; the links
            made and replaced before it stay, listed in ``created`` and ``replaced``.
    """
    parents: dict[str, int] = {}
    replaced = [] if replaced is None else replaced
    try:
        for link_path, target in links:
            parent, name = _split(link_path)
            _check_name(name, link_path, "make the symbolic link")
            try:
                parent_fd = parents.get(parent)
                if parent_fd is None:
                    parent_fd = parents[parent] = _makedirs(root_fd, parent, 0o755, created)
                old = _symlink_at(
                    parent_fd, parent, name, link_path, target, replace_existing_link, created
                )
            except OSError as err:
                raise _error("make the symbolic link", link_path, err) from err
            if old is not None:
                replaced.append((link_path, old))
            # a link that replaced one on the way to a later link's parent: resolve again
            for stale in [p for p in parents if p == link_path or p.startswith(link_path + "/")]:
                close_quietly(parents.pop(stale))
    finally:
        for fd in parents.values():
            close_quietly(fd)
    return replaced


def _symlink_at(
    parent_fd: int,
    parent: str,
    name: str,
    link_path: str,
    target: str,
    replace_existing_link: bool,
    created: list[str] | None,
) -> str | None:
    """The body of :func:`symlink_in_root` once the parent directory is open at
    ``parent_fd``. Raises :class:`ApplyError` or :class:`OSError`."""
    try:
        os.symlink(target, name, dir_fd=parent_fd)
    except FileExistsError:
        pass
    else:
        if created is not None:
            created.append(_join(parent, name))
        return None
    st_mode = os.lstat(name, dir_fd=parent_fd).st_mode
    if not stat.S_ISLNK(st_mode):
        raise _refuse(
            f"replace a {_kind(st_mode)} with a symbolic link",
            link_path,
            "the image already has a file at this path; remove it from the image",
        )
    old = os.readlink(name, dir_fd=parent_fd)
    if old == target:
        return None
    if not replace_existing_link:
        raise _refuse(
            f"replace the symbolic link to {old!r} with one to {target!r}",
            link_path,
            "the image already has a different link at this path",
        )
    tmp = f".ocihook-{os.urandom(8).hex()}"
    guard = atomicfile.guard_name(parent_fd, tmp)  # a kill leaves no .ocihook-*
    gone = True
    try:
        os.symlink(target, tmp, dir_fd=parent_fd)
        try:
            os.rename(tmp, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            gone = False
            os.unlink(tmp, dir_fd=parent_fd)
            gone = True
            raise
    finally:
        if guard is not None:
            guard.release(gone)
    return old


def mknod_in_root(
    root_fd: int,
    path: str,
    mode: int,
    major: int,
    minor: int,
    *,
    created: list[str] | None = None,
) -> None:
    """Make the device node ``path`` inside the root ``root_fd`` (``mknodat`` on the parent's
    descriptor; missing parents made as by :func:`makedirs_in_root`).

    ``mode`` is the file type (``stat.S_IFCHR`` or ``stat.S_IFBLK``) or'ed with the
    permission bits, which are applied exactly (the umask is set to 0 around the call; it is
    process-wide, so do not call this from several threads). Idempotent: an existing node of
    the same type, device number and permission bits is left alone; anything else at
    ``path`` (another node, a link, a file) is refused, never replaced nor followed. Owner
    and group are not compared. A new node is appended to ``created``. ``mknodat(2)`` never
    follows a final link (EEXIST), so a link planted at ``path`` cannot make the node appear
    elsewhere (CVE-2024-0134); oci-runtimes.md: nodes made on the container's ``/dev`` tmpfs
    disappear with it.

    Raises:
        ApplyError: ``mode`` is not a character or block device, something different exists
            at ``path``, or ``mknodat`` failed (EPERM without CAP_MKNOD, ...).
    """
    parent, name = _split(path)
    _check_name(name, path, "make the device node")
    kind = stat.S_IFMT(mode)
    if kind not in (stat.S_IFCHR, stat.S_IFBLK):
        raise ApplyError(
            "cannot make the device node inside the container root: the mode is not a "
            "character or block device",
            path=_shown(path),
            value=oct(mode),
        )
    want_rdev = os.makedev(major, minor)
    try:
        parent_fd = _makedirs(root_fd, parent, 0o755, created)
        try:
            old_umask = os.umask(0)
            try:
                os.mknod(name, mode, want_rdev, dir_fd=parent_fd)
            except FileExistsError:
                pass
            else:
                if created is not None:
                    created.append(_join(parent, name))
                return
            finally:
                os.umask(old_umask)
            st = os.lstat(name, dir_fd=parent_fd)
        finally:
            close_quietly(parent_fd)
    except OSError as err:
        raise _error("make the device node", path, err) from err
    if stat.S_IFMT(st.st_mode) != kind or st.st_rdev != want_rdev:
        found = _kind(st.st_mode)
        if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            found += f" {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
        raise _refuse(
            f"replace a {found} with a {_kind(mode)} {major}:{minor}",
            path,
            "the container already has a different file at this path",
        )
    if stat.S_IMODE(st.st_mode) != stat.S_IMODE(mode):
        raise _refuse(
            f"use an existing device node with mode {oct(stat.S_IMODE(st.st_mode))} "
            f"instead of {oct(stat.S_IMODE(mode))}",
            path,
            "the container already has this device node with other permissions",
        )


def write_file_in_root(
    root_fd: int,
    path: str,
    data: bytes,
    mode: int = 0o644,
    *,
    owner: tuple[int, int] | None = None,
    created: list[str] | None = None,
) -> None:
    """Replace (or make) the regular file ``path`` inside the root ``root_fd`` with ``data``,
    atomically, for example the container's ``/etc/ld.so.cache``.

    ``data`` goes to an anonymous ``O_TMPFILE`` file (where the filesystem has none, a new
    one made with ``O_CREAT|O_EXCL|O_NOFOLLOW``) in the parent's descriptor (missing
    parents made as by :func:`makedirs_in_root`), which gets ``mode`` exactly (``fchmod``)
    and, when given, ``owner`` ``(uid, gid)`` (``fchown``, before ``mode``: a change of
    owner clears the set-id bits) and is then ``renameat`` over ``path``
    (:func:`ocihook.linux.atomicfile.replace_at`):
    readers see the old file or the new one, never a mix, a killed writer leaves no
    temporary while the content is written (a temporary named from the start has a
    guardian; none is forked for the instant between ``linkat`` and ``rename``, after
    which a killed writer's temporary is removed by the next write: a container root
    whose edit was cut off is discarded anyway), and an existing link or hard link at
    ``path`` is replaced, never written through (CVE-2024-0134). Not flushed to disk (a
    container root does not outlive a crash). ``path`` is appended to ``created`` if
    nothing was there.

    Raises:
        ApplyError: ``path`` is a directory (EISDIR), a parent is not a directory, the root
            is read-only or full; the temporary file is removed first.
    """
    parent, name = _split(path)
    _check_name(name, path, "write the file")
    try:
        parent_fd = _makedirs(root_fd, parent, 0o755, created)
        try:
            try:
                os.lstat(name, dir_fd=parent_fd)
                existed = True
            except FileNotFoundError:
                existed = False
            # a container's root: no guardian for the instant before the rename
            late = atomicfile.replace_at(
                parent_fd, name, data, mode, owner=owner, durable=False, guard=False
            )
            if not existed and created is not None:
                created.append(_join(parent, name))
            atomicfile.report(late, path)
        finally:
            close_quietly(parent_fd)
    except OSError as err:
        raise _error("write the file", path, err) from err


def remove_in_root(root_fd: int, path: str) -> bool:
    """Remove ``path`` inside the root ``root_fd``, for rollback: a file, device node or
    symbolic link (the link itself, never its target) with ``unlinkat``, an empty directory
    with ``unlinkat(AT_REMOVEDIR)``. The parent is looked up in the root as by
    :func:`open_in_root`; nothing is made. ``unlinkat(2)`` removes a final link, never what
    it points to, so rolling back cannot delete a host file (CVE-2024-0134).

    Returns ``True`` if something was removed, ``False`` if nothing was there (so rolling
    back twice is harmless).

    Raises:
        ApplyError: a directory that is not empty (ENOTEMPTY), a mount point (EBUSY: unmount
            first), a parent that is not a directory, ...
    """
    parent, name = _split(path)
    _check_name(name, path, "remove the path")
    try:
        try:
            parent_fd = _open(root_fd, parent, _DIR)
        except FileNotFoundError:
            return False
        try:
            try:
                os.unlink(name, dir_fd=parent_fd)
            except IsADirectoryError:
                os.rmdir(name, dir_fd=parent_fd)
            except FileNotFoundError:
                return False
            return True
        finally:
            close_quietly(parent_fd)
    except FileNotFoundError:
        return False
    except OSError as err:
        raise _error("remove the path", path, err) from err
