"""The ``createContainer`` hooks that spec mode registers (``ocihook hook create-container``):
soname links, the container's ``ld.so.cache`` and the ``/proc/driver/nvidia`` mask, undone
together on failure. They run in the container's mount namespace already."""

from __future__ import annotations

import os

from ...core.errors import ApplyError, OcihookError
from ...oci.bundle import Bundle
from ...plan.compat import CudaCompat
from ...plan.procmask import ProcMask
from .libraries import (
    LD_SO_CONF_DROP_IN,
    restore_loader_files,
    write_ld_so_conf,
    write_loader_files,
)
from .procmask import (
    caps_minors,
    clone_gpu_proc_dirs,
    config_devices,
    mask_proc_driver,
    read_proc_files,
)
from .rootfs import unlock_readonly_rootfs
from .undo import partial, run_undo

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Mapping, Sequence

    from .undo import Undo


__all__ = [
    "RootfsChanges",
    "create_container_hook",
    "create_symlinks_hook",
    "edit_rootfs",
    "update_ldcache_hook",
]


def _parse_links(links: Sequence[str]) -> list[tuple[str, str]]:
    out = []
    for spec in links:
        target, sep, link = spec.partition("::")
        if not sep or not target or not link.startswith("/"):
            raise ApplyError(
                "a link must be TARGET::LINK with an absolute LINK", field="--link", value=spec
            )
        out.append((target, link))
    return out


def _parse_libs(libraries: Sequence[str]) -> tuple[list[str], dict[str, int]]:
    """The container paths of ``--lib PATH[::FLAGS]`` values, and the ``ld.so.cache``
    flags given with some of them (``0x0303``: hexadecimal, as ``ocihook cdi generate``
    and spec mode write them from discovery; such a library's file is not read).

    Raises:
        ApplyError: a relative ``PATH``, or ``FLAGS`` that is not a hexadecimal number
            of at most ``0x7fffffff`` (glibc's ``ld.so.cache`` flags are an ``int32_t``).
    """
    paths: list[str] = []
    known: dict[str, int] = {}
    for value in libraries:
        path, sep, flags = value.partition("::")
        ok = path.startswith("/")
        if ok and sep:
            digits = flags[2:] if flags[:2] in ("0x", "0X") else ""
            ok = 0 < len(digits) <= 8 and all(c in "0123456789abcdefABCDEF" for c in digits)
            ok = ok and int(digits, 16) <= 0x7FFFFFFF  # the cache's flags field is an int32
            if ok:
                known[path] = int(digits, 16)
        if not ok:
            raise ApplyError(
                "a library must be PATH or PATH::FLAGS (an absolute PATH, hexadecimal "
                "ld.so.cache FLAGS such as 0x0303, at most 0x7fffffff)",
                field="--lib",
                value=value,
            )
        paths.append(path)
    return paths, known


def create_container_hook(
    bundle: Bundle,
    links: Sequence[str] = (),
    libraries: Sequence[str] = (),
    proc_mask: ProcMask | None = None,
    cuda_compat: CudaCompat | None = None,
    ld_so_conf: bool = False,
) -> None:
    """createContainer hook: create ``TARGET::LINK`` links inside the bundle's rootfs, then
    enter ``libraries`` (``PATH`` or ``PATH::FLAGS``: :func:`_parse_libs`) in its
    ``/etc/ld.so.cache`` (with ``ld_so_conf``, also list their
    directories in an ``ld.so.conf.d`` drop-in: :func:`write_ld_so_conf`); if a step
    fails, the links made, the drop-in and the cache are restored before
    :class:`ApplyError` is raised.

    Runs in the container's mount namespace before ``pivot_root``, so the rootfs is at
    its host path. Every link is made relative to an in-root directory descriptor. Last,
    with ``proc_mask``, ``/proc/driver/nvidia`` is masked (:func:`mask_proc_driver`).

    A rootfs that crun made read-only already (``root.readonly``) is made writable for
    the edits and read-only again afterwards (:func:`.rootfs.unlock_readonly_rootfs`).

    Raises:
        ApplyError: malformed ``--link`` or ``--lib``, a link that cannot be created (a
            directory in the way, a hostile path), or see :func:`write_ldcache`.
    """
    pairs = _parse_links(links)
    paths, known = _parse_libs(libraries)
    relock = unlock_readonly_rootfs(bundle.rootfs)  # crun: read-only before the hook
    try:
        edit_rootfs(
            bundle.rootfs,
            bundle.config,
            pairs,
            paths,
            proc_mask,
            cuda_compat,
            ld_so_conf,
            known=known,
        ).close()
    finally:
        if relock is not None:
            relock()


class RootfsChanges:
    """What :func:`edit_rootfs` changed in a rootfs, and how to take it back.

    Holds the rootfs descriptor until :meth:`close` (keep the changes) or :meth:`rollback`
    (undo them: the links made removed, replaced links and the previous ``ld.so.cache``
    and drop-in put back, the mask detached; best effort) is called.
    """

    def __init__(
        self,
        root_fd: int,
        undo: list[Undo],
        created: list[str],
        replaced: list[tuple[str, str]],
    ) -> None:
        self.root_fd = root_fd
        self.undo = undo
        self.created = created
        self.replaced = replaced

    def rollback(self) -> None:
        """Undo every change, then close the descriptor."""
        from ...linux import pathsafe

        run_undo(self.undo)
        for link, previous in reversed(self.replaced):
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                pathsafe.symlink_in_root(self.root_fd, link, previous)
            except (OSError, OcihookError):
                pass
        for path in reversed(self.created):
            try:  # noqa: SIM105
                pathsafe.remove_in_root(self.root_fd, path)
            except (OSError, OcihookError):
                pass
        self.close()

    def close(self) -> None:
        """Keep the changes; close the descriptor (idempotent)."""
        if self.root_fd >= 0:
            fd, self.root_fd = self.root_fd, -1
            try:  # noqa: SIM105 (contextlib is not imported on this path)
                os.close(fd)  # an O_PATH descriptor: the kernel released it even on EIO
            except OSError:
                pass


def edit_rootfs(
    rootfs: str,
    config: dict[str, object],
    pairs: Sequence[tuple[str, str]],
    libraries: Sequence[str],
    proc_mask: ProcMask | None = None,
    cuda_compat: CudaCompat | None = None,
    ld_so_conf: bool = False,
    sources: Mapping[str, str] | None = None,
    known: Mapping[str, int] | None = None,
) -> RootfsChanges:
    """Make the soname links ``pairs`` (``(target, link)``), enter ``libraries`` in the
    container's ``/etc/ld.so.cache`` and, for an image with a musl loader, its
    ``/etc/ld-musl-<arch>.path`` (:func:`.libraries.write_loader_files`; ``sources`` maps a
    library's container path to the host file whose ELF header gives its soname and ABI,
    for an edit made before the driver files are mounted; ``known`` maps one to the
    ``ld.so.cache`` flags discovery already has, so its file is not read), optionally list their
    directories in the ``ld.so.conf.d`` drop-in, and last mask ``/proc/driver/nvidia``
    (``proc_mask``: only in the container's mount namespace), all inside the root file
    system ``rootfs`` (a path: the host's, or the container's before ``pivot_root``)
    through in-root descriptor operations.

    Returns:
        The changes made (:class:`RootfsChanges`); the caller closes or rolls them back.

    Raises:
        ApplyError: a step failed; everything made before it is undone first.
    """
    from ...linux import pathsafe

    root_fd = pathsafe.open_root(rootfs)
    changes = RootfsChanges(root_fd, [], [], [])
    undo = changes.undo
    gpu_fds: dict[str, int] = {}
    try:
        pathsafe.symlinks_in_root(
            root_fd,
            [(link, target) for target, link in pairs],
            created=changes.created,
            replaced=changes.replaced,
        )
        if libraries and ld_so_conf:
            written, before = write_ld_so_conf(root_fd, libraries)
            if written and before is None:
                undo.append(partial(pathsafe.remove_in_root, root_fd, LD_SO_CONF_DROP_IN))
            elif written:
                undo.append(
                    partial(pathsafe.write_file_in_root, root_fd, LD_SO_CONF_DROP_IN, before, 0o644)
                )
        if libraries:  # an /etc made here is taken back too
            os.close(pathsafe.makedirs_in_root(root_fd, "/etc", created=changes.created))
            loader_files = write_loader_files(
                root_fd, rootfs, libraries, cuda_compat, sources, known
            )
            undo.append(partial(restore_loader_files, root_fd, loader_files))
        if proc_mask is not None:
            gpu_fds = clone_gpu_proc_dirs(proc_mask)
            devices = config_devices(config)
            minors = caps_minors([(d.get("path"), d.get("minor")) for d in devices])
            files = read_proc_files(proc_mask.host_dir, minors)
            mask_proc_driver(root_fd, files, gpu_fds, undo)
    except (OSError, OcihookError) as e:
        changes.rollback()
        if isinstance(e, OcihookError):
            raise
        raise ApplyError(f"cannot change the container: {e.strerror}", path=rootfs) from None
    except BaseException:  # a bug, an interrupt: nothing made is left behind either
        changes.rollback()
        raise
    finally:
        for fd in gpu_fds.values():
            os.close(fd)
    return changes


def create_symlinks_hook(bundle: Bundle, links: Sequence[str]) -> None:
    """createContainer hook: create ``TARGET::LINK`` links (see
    :func:`create_container_hook`)."""
    create_container_hook(bundle, links, ())


def update_ldcache_hook(bundle: Bundle, libraries: Sequence[str]) -> None:
    """createContainer hook: add ``libraries`` to the rootfs's ``/etc/ld.so.cache`` (see
    :func:`write_ldcache`)."""
    create_container_hook(bundle, (), libraries)
