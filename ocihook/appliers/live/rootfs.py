"""A read-only container rootfs, made writable for the hook's edits and read-only again.

crun applies ``root.readonly`` before it runs the ``createContainer`` hooks (runc only
after them): the rootfs is then a read-only bind mount at its host path, and the empty
files that library mounts need, the soname links and ``/etc/ld.so.cache`` cannot be made
there. In the container's mount namespace the hook clears ``MOUNT_ATTR_RDONLY`` of that
one mount (``mount_setattr(2)``), edits, and sets it again before it returns — the
container's process never sees a writable rootfs. Only the mount whose mount point *is*
the rootfs is touched, never a mount above it (that would be the host's).
"""

from __future__ import annotations

import os

from ...core.errors import ApplyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["readonly_rootfs_mount", "unlock_readonly_rootfs"]


def _unescape(field: str) -> str:
    """A mountinfo path field with its octal escapes (``\\040`` for a space) decoded."""
    if "\\" not in field:
        return field
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def readonly_rootfs_mount(rootfs: str, *, mountinfo: str = "/proc/self/mountinfo") -> bool:
    """Whether the topmost mount whose mount point is ``rootfs`` (``proc(5)`` mountinfo:
    field 5, mount point; field 6, per-mount options) is read-only. ``False`` when no
    mount sits exactly at ``rootfs`` (the rootfs is a plain directory of a larger mount)
    or mountinfo cannot be read.

    First ``statvfs(3)``: without ``ST_RDONLY`` the mount ``rootfs`` is on (the topmost
    one at that path, when one sits there) is writable, and the answer is ``False``
    without reading mountinfo, which has thousands of lines on a busy Kubernetes node."""
    try:
        if not os.statvfs(rootfs).f_flag & os.ST_RDONLY:
            return False
    except OSError:
        pass  # mountinfo decides
    want = os.path.normpath(rootfs)
    found = None
    try:
        with open(mountinfo) as f:
            for line in f:
                fields = line.split()
                if len(fields) > 5 and _unescape(fields[4]) == want:
                    found = fields[5].split(",")
    except OSError:
        return False
    return found is not None and "ro" in found


def unlock_readonly_rootfs(rootfs: str) -> Callable[[], None] | None:
    """Make the read-only mount at ``rootfs`` writable (:func:`readonly_rootfs_mount`);
    return the function that makes it read-only again (call it before leaving the
    container's mount namespace), or ``None`` when there was nothing to do.

    Raises:
        ApplyError: the mount cannot be made writable (one line naming ``root.readonly``
            and what to use instead); or, from the returned function, cannot be made
            read-only again.
    """
    if not readonly_rootfs_mount(rootfs):
        return None
    from ...linux import syscalls as _linux

    hint = (
        "register ocihook at prestart (or use spec mode, ocihook edit), or set "
        "root.readonly = false in config.json"
    )
    try:
        fd = os.open(rootfs, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise ApplyError(
            f"cannot open the read-only container rootfs: {e.strerror}", path=rootfs, hint=hint
        ) from None
    try:
        _linux.mount_setattr(fd, "", _linux.AT_EMPTY_PATH, 0, _linux.MOUNT_ATTR_RDONLY)
    except OSError as e:
        os.close(fd)
        raise ApplyError(
            "the container rootfs is read-only (root.readonly) and cannot be made writable "
            f"for the hook: {e.strerror}",
            path=rootfs,
            hint=hint,
        ) from None

    closed: list[bool] = []

    def relock() -> None:
        if closed:
            return
        closed.append(True)
        try:
            _linux.mount_setattr(fd, "", _linux.AT_EMPTY_PATH, _linux.MOUNT_ATTR_RDONLY, 0)
        except OSError as e:
            raise ApplyError(
                f"cannot make the container rootfs read-only again: {e.strerror}", path=rootfs
            ) from None
        finally:
            os.close(fd)

    return relock
