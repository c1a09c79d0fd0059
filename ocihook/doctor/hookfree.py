"""Would an image work with a hook-free CDI spec (``ocihook cdi generate --hook-free``)?

Such a spec mounts each 64-bit driver library at ``<dir>/<soname>`` in a few directories
and runs no hook: no ``ld.so.cache`` entry, no link. The image's loader then finds
``libcuda.so.1`` only by searching one of those directories by default, and only when its
own ``ld.so.cache`` names no other ``libcuda.so.1`` (the cache is consulted first). This
check reads the image's files to tell (:func:`hook_free_fit`); it runs nothing from it.

The default search directories, by loader:

* glibc built for a Debian multiarch layout (its loader in ``/usr/lib/<triplet>``):
  ``/lib/<triplet>``, ``/usr/lib/<triplet>``, ``/lib``, ``/usr/lib`` (``ld.so --help``,
  "System search path", on Debian and Ubuntu);
* any other 64-bit glibc: ``/lib64``, ``/usr/lib64`` (RHEL, Fedora, SUSE);
* musl: its path file ``/etc/ld-musl-<arch>.path`` when the image has one, else
  ``/lib:/usr/local/lib:/usr/lib`` (musl ``ldso/dynlink.c``).
"""

from __future__ import annotations

import os

from ..cdi.generate import HOOK_FREE_DIRS
from ..core.readfile import read_regular
from ..linux.loaders import Loader, find_loaders, parse_musl_path
from .report import Check

__all__ = ["check_hook_free", "hook_free_fit", "loader_search_dirs"]

_MUSL_DEFAULT = ("/lib", "/usr/local/lib", "/usr/lib")


def loader_search_dirs(rootfs: str, loader: Loader) -> tuple[str, ...]:
    """The directories ``loader`` of the image at ``rootfs`` searches without a cache
    entry (module docstring), container paths."""
    if loader.kind == "musl":
        path_file = loader.path_file
        if path_file is not None:
            from ..linux.pathsafe import resolve_in_root

            try:
                dirs = parse_musl_path(read_regular(resolve_in_root(rootfs, path_file), 65536))
            except Exception:
                dirs = None
            if dirs:
                return tuple(dirs)
        return _MUSL_DEFAULT
    multiarch = loader.multiarch_dir
    if multiarch is not None:
        triplet = os.path.basename(multiarch)
        return (f"/lib/{triplet}", f"/usr/lib/{triplet}", "/lib", "/usr/lib")
    return ("/lib64", "/usr/lib64") if loader.elf_class == 64 else ("/lib", "/usr/lib")


def _own_libcuda(rootfs: str) -> str | None:
    """The path the image's own ``/etc/ld.so.cache`` gives ``libcuda.so.1``, or ``None``."""
    from ..linux import ldcache
    from ..linux.pathsafe import resolve_in_root

    try:
        entries = ldcache.parse(read_regular(resolve_in_root(rootfs, "/etc/ld.so.cache"), 64 << 20))
    except Exception:
        return None
    for entry in entries:
        if entry.soname == "libcuda.so.1":
            return str(entry.path)
    return None


def hook_free_fit(rootfs: str, dirs: tuple[str, ...] = HOOK_FREE_DIRS) -> tuple[str, str]:
    """``(status, evidence)`` for the image at ``rootfs`` and a hook-free spec mounting the
    libraries in ``dirs``: ``"PASS"`` when every 64-bit loader of the image searches one
    of ``dirs`` and its cache names no other ``libcuda.so.1``; ``"WARN"`` (the spec would
    not serve it; the default one does) when a loader searches none of them or the cache
    names another; ``"SKIP"`` for an image with no 64-bit loader (a static or scratch
    image: nothing to tell)."""
    loaders = [x for x in find_loaders(rootfs) if x.elf_class == 64]
    if not loaders:
        return "SKIP", "the image has no 64-bit dynamic loader (static or scratch): nothing to tell"
    problems: list[str] = []
    found: list[str] = []
    for loader in loaders:
        searched = loader_search_dirs(rootfs, loader)
        hit = [d for d in searched if d in dirs]
        if hit:
            found.append(f"{loader.kind} ({loader.interpreter}) finds it in {hit[0]}")
        else:
            problems.append(
                f"{loader.kind} ({loader.interpreter}) searches {':'.join(searched)}, none "
                f"of {', '.join(dirs)}"
            )
    own = _own_libcuda(rootfs)
    if own is not None:
        problems.append(
            f"the image's ld.so.cache names its own libcuda.so.1 ({own}), which the loader "
            "takes before searching"
        )
    if problems:
        return "WARN", "; ".join(problems)
    return "PASS", "; ".join(found)


def check_hook_free(rootfs: str, dirs: tuple[str, ...] = HOOK_FREE_DIRS) -> Check:
    """The request layer's check of :func:`hook_free_fit` for a bundle's image."""
    status, evidence = hook_free_fit(rootfs, dirs)
    fix = (
        ""
        if status != "WARN"
        else "use the default spec (with its hook) for this image, or --hook-free-dir with a "
        "directory its loader searches"
    )
    return Check("request", "hook-free CDI spec", status, evidence, fix)
