"""Crash-safe replacement of one file in a directory (``config.json``, CDI specs, engine
configurations, a container's ``ld.so.cache``).

:func:`replace_at` writes the new content where no reader can see it, then renames it over
the old file (``rename(2)`` is atomic: readers see the old or the new file, never a mix):

1. The content goes to an anonymous file, ``open(dir, O_TMPFILE)``, which has no name: a
   process killed while writing it leaves nothing behind. It gets a name
   (``linkat(2)`` of ``/proc/self/fd/N``, ``.<name>.<pid>.<12 hex>``) only after it is
   complete and flushed, and that name is renamed over the file at once. Where the
   filesystem has no ``O_TMPFILE`` (``EOPNOTSUPP``: overlayfs on old kernels, NFS, FUSE)
   or ``/proc`` is missing, the temporary file is made under that name from the start.
2. While the name exists, a *guardian* watches it (:func:`guard_name`): a child forked
   just before the name is made, which waits on a pipe whose other end only the writer
   holds. The writer tells it when the name is gone (renamed, or removed after an error);
   if the writer dies first — ``SIGKILL`` at any instant, between ``linkat`` and
   ``rename`` included — the pipe reads end-of-file and the guardian removes the name,
   then exits. It keeps the writer's standard output and error open until then, so a
   process that waits for the writer's output (a runtime running a hook, a test) finds
   the directory clean once it sees end-of-file. No single process can do better: Linux
   has no call that links an anonymous file *over* an existing name (``linkat`` fails
   with ``EEXIST``), so a complete new file must have a name of its own before the
   ``rename``, and a process killed with ``SIGKILL`` runs no code of its own. No guardian
   is forked in a process with several threads (forking one is unsafe: the k8s plugins'
   gRPC threads) or where ``fork`` fails (``EAGAIN`` under a pids limit), nor for an
   anonymous file the caller writes with ``guard=False``: a container's root file system
   and the ``config.json`` the wrapper edits, which their owner discards after a failed
   start (the guardian costs about 1 ms; the rest of such an edit is not undone after
   ``SIGKILL`` either).
3. Every writer holds an exclusive ``flock(2)`` on its temporary file until the rename is
   done (where the filesystem has locks: NFS without them answers ``ENOLCK``, and the
   writer goes on). Where the guardian died too (the whole cgroup or process tree killed
   at once, a power loss) or there was none, a later :func:`replace_at` of the same file
   removes the temporaries left (:func:`remove_stale`): a sibling named
   ``.<name>.<pid>.<hex>`` whose ``pid`` is not alive here and whose lock can be taken
   (the kernel drops a dead process's locks, also for a writer in another pid namespace).
4. With ``durable`` the file is ``fsync``-ed before the rename and the directory after
   it, so that after a power loss the name points at complete content.

Errors before the rename leave the old file as it was and no temporary behind, and are
raised. Errors after it (``fsync`` of the directory, closing a descriptor) cannot undo
the replacement: they are returned as warnings, so that a caller never says "cannot
replace" about a file that was replaced.

Only :mod:`os`, :mod:`stat` and :mod:`fcntl` are used (this is on every container start),
imported with the module: a hook runs :func:`replace_at` inside the container's mount
namespace, where no more modules can be loaded from the host. The guardian costs one
``fork`` per replaced file (about 1 ms on the 2-core test machine).
"""

from __future__ import annotations

# Everything is imported with the module, not lazily: a hook calls replace_at inside the
# container's mount namespace, where the interpreter's lib-dynload may not be visible.
import errno
import fcntl
import os
import stat
import sys

from ..core import log

__all__ = [
    "TEMP_MARK",
    "Guard",
    "guard_name",
    "is_temporary_of",
    "remove_stale",
    "replace_at",
    "report",
    "temporary_name",
]

#: ``O_TMPFILE`` errors that mean "not here" (open(2): the filesystem or kernel lacks
#: it); anything else is a real error of the directory.
_NO_TMPFILE = {errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL, errno.ENOENT, errno.ENOTSUP}
#: What temporary names look like: ``.<name>.<pid>.<12 lowercase hex digits>``.
TEMP_MARK = 12


def temporary_name(name: str) -> str:
    """A fresh temporary name for replacing ``name``: ``.<name>.<pid>.<12 hex>`` (as
    :func:`tempfile.mkstemp` would make one, without importing it)."""
    return f".{name}.{os.getpid()}.{os.urandom(TEMP_MARK // 2).hex()}"


def is_temporary_of(entry: str, name: str) -> int | None:
    """The writer's pid when ``entry`` is a temporary name of ``name``
    (:func:`temporary_name`), else ``None``."""
    prefix = f".{name}."
    if not entry.startswith(prefix):
        return None
    pid, dot, mark = entry[len(prefix) :].partition(".")
    if not dot or len(mark) != TEMP_MARK or not set(mark) <= set("0123456789abcdef"):
        return None
    if not (pid.isascii() and pid.isdigit() and len(pid) <= 10):
        return None
    return int(pid)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists
        return True
    return True


def remove_stale(dir_fd: int, name: str) -> list[str]:
    """Remove the temporaries of ``name`` in the directory ``dir_fd`` that killed writers
    left: regular files named by :func:`temporary_name` whose pid is not alive and whose
    ``flock`` can be taken without waiting. Returns the names removed. Never raises: a
    directory that cannot be listed, or an entry that cannot be opened, is left alone."""
    removed: list[str] = []
    try:  # a listable descriptor: dir_fd may be O_PATH (ocihook.linux.pathsafe)
        list_fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return removed
    try:
        entries = os.listdir(list_fd)
    except OSError:
        return removed
    finally:
        os.close(list_fd)
    for entry in entries:
        pid = is_temporary_of(entry, name)
        if pid is None or _alive(pid):
            continue
        try:
            fd = os.open(
                entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd
            )
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.unlink(entry, dir_fd=dir_fd)
            removed.append(entry)
        except OSError:
            continue  # locked by a live writer, or gone already
        finally:
            os.close(fd)
    return removed


def report(warnings: list[str], path: str) -> None:
    """Say each of :func:`replace_at`'s warnings about ``path``: one
    ``ocihook: warning: <path>: ...`` line on stderr each, and in the log."""
    if not warnings:
        return
    for w in warnings:
        print(f"ocihook: warning: {path}: {w}", file=sys.stderr)
        log.warning("replaced with a warning", path=path, text=w)


def _single_threaded() -> bool:
    """Whether this process has one thread (``/proc/self/task``; without ``/proc``, the
    :mod:`threading` module's count, when it is loaded)."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        threading = sys.modules.get("threading")
        return threading is None or threading.active_count() == 1


class Guard:
    """The writer's end of a guardian (:func:`guard_name`)."""

    __slots__ = ("_fd", "_pid")

    def __init__(self, pid: int, fd: int) -> None:
        self._pid = pid
        self._fd = fd

    def release(self, gone: bool = True) -> None:
        """Settle the guarded name and reap the guardian: ``gone`` — the writer renamed or
        removed the name, the guardian exits; not ``gone`` — the writer could not remove
        it, the guardian removes it. Waits for the guardian to exit; never raises
        :class:`OSError`; a second call does nothing."""
        fd, self._fd = self._fd, -1
        if fd < 0:
            return
        if gone:
            try:  # noqa: SIM105 (contextlib is not imported on the start path)
                os.write(fd, b"\x01")
            except OSError:
                pass  # EPIPE: the guardian is gone already
        try:  # noqa: SIM105
            os.close(fd)
        except OSError:
            pass
        try:  # noqa: SIM105
            os.waitpid(self._pid, 0)
        except OSError:
            pass  # ECHILD: SIGCHLD ignored, reaped by the kernel


def _watch(read_fd: int, write_fd: int, dir_fd: int, name: str) -> None:
    """The guardian's body, in the forked child: wait until the writer says the name is
    settled or dies (end-of-file), remove ``name`` in the second case, exit. Never
    returns."""
    try:
        os.close(write_fd)
        try:  # noqa: SIM105
            os.setsid()  # a signal to the writer's process group (a closed terminal) spares it
        except OSError:
            pass
        said = b""
        while True:
            try:
                said = os.read(read_fd, 1)
            except KeyboardInterrupt:
                continue  # a SIGINT meant for the writer: keep watching
            except OSError:
                pass
            break
        if not said:
            try:  # noqa: SIM105
                os.unlink(name, dir_fd=dir_fd)
            except OSError:
                pass  # never made, renamed, or removed by the next writer's sweep
    finally:
        os._exit(0)


def guard_name(dir_fd: int, name: str) -> Guard | None:
    """Fork a guardian that removes the entry ``name`` of the directory ``dir_fd`` if this
    process dies before it calls :meth:`Guard.release` (see the module docstring). Call it
    just before making the name; release it once the name is renamed or removed.

    The guardian leaves the writer's process group (``setsid``), so a signal to that
    group spares it, but not a kill of the whole cgroup. It inherits the writer's
    descriptors (standard output and error included) and closes them when it exits,
    right after the writer is gone.

    Returns:
        The writer's end, or ``None`` when there is no guardian: this process has another
        thread (forking it would copy locks other threads hold), or ``pipe``/``fork``
        failed (EMFILE, EAGAIN under a pids limit). The caller then relies on
        :func:`remove_stale`.
    """
    if not _single_threaded():
        return None
    try:
        read_fd, write_fd = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    pid = -1
    try:
        pid = os.fork()
        if pid == 0:
            _watch(read_fd, write_fd, dir_fd, name)
    except OSError:
        pid = -1
    finally:
        if os.getpid() != parent:  # the child never runs the writer's code
            os._exit(0)
    try:  # noqa: SIM105
        os.close(read_fd)
    except OSError:
        pass
    if pid < 0:
        try:  # noqa: SIM105
            os.close(write_fd)
        except OSError:
            pass
        return None
    return Guard(pid, write_fd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _open_anonymous(dir_fd: int) -> int | None:
    """An ``O_TMPFILE`` descriptor in ``dir_fd``, or ``None`` where there is none.

    Raises:
        OSError: the directory refuses it for another reason (EACCES, EROFS, ENOSPC...).
    """
    flag = getattr(os, "O_TMPFILE", 0)
    if not flag:
        return None
    try:
        return os.open(".", flag | os.O_WRONLY | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    except OSError as e:
        if e.errno in _NO_TMPFILE:
            return None
        raise


def replace_at(
    dir_fd: int,
    name: str,
    data: bytes,
    mode: int,
    *,
    owner: tuple[int, int] | None = None,
    durable: bool = True,
    tmpfile: bool = True,
    guard: bool = True,
) -> list[str]:
    """Replace (or make) the file ``name`` in the directory ``dir_fd`` with ``data`` (see
    the module docstring), with permission bits ``mode`` and, when given, ``owner``
    ``(uid, gid)`` (both set through the descriptor). While the temporary has a name, a
    guardian (:func:`guard_name`) removes it should this process die.

    Args:
        dir_fd: an open descriptor of the directory (not closed here).
        name: a file name in it (no ``/``).
        data: the new content.
        mode: permission bits (``fchmod``).
        owner: ``(uid, gid)`` to give the file (``fchown``), or ``None``.
        durable: ``fsync`` the file before the rename and the directory after it.
        tmpfile: use ``O_TMPFILE`` where the filesystem has it (tests turn it off to
            exercise the named temporary).
        guard: fork a guardian for the two calls between ``linkat`` and ``rename`` of an
            anonymous file (default). ``False`` for a file whose owner discards it after
            a failed run (a container's root file system, the ``config.json`` the wrapper
            edits just before the runtime reads it): a writer killed in that instant
            leaves its temporary, which the next write of the file removes; the rest of
            such an edit (links, mount targets) is not undone after ``SIGKILL`` either. A
            temporary named from the start is always guarded (it is named while the
            content is written).

    Returns:
        Warnings about steps after the rename that failed (the file was replaced).

    Raises:
        OSError: the file could not be replaced; the old one is untouched and no temporary
            is left (one this process could not remove, its guardian removes).
    """
    remove_stale(dir_fd, name)
    tmp = temporary_name(name)
    fd = _open_anonymous(dir_fd) if tmpfile else None
    named = fd is None
    guardian = None
    if fd is None:
        guardian = guard_name(dir_fd, tmp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dir_fd)
        except BaseException:
            if guardian is not None:
                guardian.release()  # nothing was made
            raise
    linked = named
    renamed = False
    try:
        try:  # noqa: SIM105 (contextlib is not imported on the start path)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            pass  # ENOLCK (NFS without locks): the pid check alone guards the temporary
        _write_all(fd, data)
        if owner is not None:
            os.fchown(fd, *owner)
        os.fchmod(fd, mode)
        if durable:
            os.fsync(fd)
        if not named:
            guardian = guard_name(dir_fd, tmp) if guard else None
            try:
                os.link(f"/proc/self/fd/{fd}", tmp, dst_dir_fd=dir_fd, follow_symlinks=True)
            except FileNotFoundError:  # no /proc: write it again under a name
                os.close(fd)
                fd = -1
                if guardian is not None:
                    guardian.release()
                    guardian = None
                return replace_at(
                    dir_fd,
                    name,
                    data,
                    mode,
                    owner=owner,
                    durable=durable,
                    tmpfile=False,
                    guard=guard,
                )
            linked = True
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        renamed = True
    except BaseException:
        gone = True
        if linked and not renamed:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                gone = False  # the guardian tries
        if fd >= 0:
            try:  # noqa: SIM105
                os.close(fd)
            except OSError:
                pass
        if guardian is not None:
            guardian.release(gone)
        raise
    if guardian is not None:
        guardian.release()
    warnings: list[str] = []
    if durable:
        try:
            os.fsync(dir_fd)
        except OSError as e:
            warnings.append(
                f"{name} was replaced, but flushing its directory failed: {e.strerror}; "
                "after a power loss the old file may come back"
            )
    try:
        os.close(fd)
    except OSError as e:
        warnings.append(f"{name} was replaced, but closing it failed: {e.strerror}")
    return warnings
