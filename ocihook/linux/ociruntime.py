"""The OCI runtime's version, and what it means for spec mode's safety.

Spec mode (``ocihook edit``, the wrapper in ``spec`` and ``auto`` mode) writes bind mounts
into ``config.json`` and the runtime mounts them. ocihook makes every mount target inside
the rootfs before it writes (docs/guide/spec-mode.md), but an image that swaps a directory
for a link to the host *while the runtime mounts* races the runtime's own target handling.
runc before 1.1.14 resolves and creates missing targets with a check-then-create sequence
that such a race can redirect to the host (CVE-2024-45310, fixed in runc 1.1.14 and
1.2.0-rc.3): it then makes empty files or directories on the host. The hook modes hand
the runtime no such mounts. :func:`mount_race_warning` says so for a runtime binary.

The version is read by running ``<runtime> --version`` (a host binary, never one from a
container) with a fixed environment, and kept in :mod:`ocihook.linux.cachestore` keyed by
the binary's identity, so a start pays for the process once per installed runtime.
"""

from __future__ import annotations

import os

from . import cachestore

__all__ = [
    "RUNC_SAFE_MOUNT_TARGETS",
    "mount_race_warning",
    "parse_version_output",
    "runtime_version",
]

#: The first runc release whose bind-mount target handling resists a racing image
#: (runc's GHSA-jfvp-7x6p-h2pv, CVE-2024-45310).
RUNC_SAFE_MOUNT_TARGETS = (1, 1, 14)
#: Entries of :mod:`ocihook.linux.cachestore` holding runtime versions.
CACHE_PREFIX = "runtime-version"
_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}


def parse_version_output(text: str) -> tuple[str, str, tuple[int, int, int]] | None:
    """``(name, shown version, (major, minor, patch))`` from the first line of
    ``<runtime> --version`` (``"runc version 1.1.5+ds1"`` -> ``("runc", "1.1.5+ds1",
    (1, 1, 5))``; ``"crun version 1.8.1"``; a missing patch is 0), or ``None`` when the line
    is not ``NAME version X.Y[.Z][suffix]``."""
    first = text.split("\n", 1)[0].split()
    if len(first) < 3 or first[1] != "version":
        return None
    name, shown = first[0], first[2]
    digits = []
    for part in shown.split(".", 2):
        end = 0
        while end < len(part) and part[end].isascii() and part[end].isdigit():
            end += 1
        if end == 0 or end > 9:
            break
        digits.append(int(part[:end]))
        if end < len(part):
            break
    if len(digits) < 2:
        return None
    major, minor, patch = (*digits, 0)[:3]
    return name, shown, (major, minor, patch)


def _run_version(path: str) -> str | None:
    """Standard output of ``path --version`` (5 s at most), or ``None`` when it cannot
    be run or fails. Spawned without :mod:`subprocess` (its import costs milliseconds)."""
    r, w = os.pipe()
    try:
        null = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        try:
            pid = os.posix_spawn(
                path,
                [path, "--version"],
                _ENV,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, null, 0),
                    (os.POSIX_SPAWN_DUP2, w, 1),
                    (os.POSIX_SPAWN_DUP2, null, 2),
                ],
            )
        finally:
            os.close(null)
    except OSError:
        os.close(r)
        os.close(w)
        return None
    os.close(w)
    try:
        out = b""
        while len(out) < 4096:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            out += chunk
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        return None
    return out.decode("utf-8", "replace")


def runtime_version(
    path: str, *, cache_dir: str = cachestore.DEFAULT_DIR
) -> tuple[str, str, tuple[int, int, int]] | None:
    """:func:`parse_version_output` of the runtime binary at ``path`` (absolute), or
    ``None`` when it cannot be run or does not say. Cached in ``cache_dir`` by the
    binary's device, inode, size and mtime (never raises for the cache)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = {
        "path": path,
        "identity": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns],
    }
    found = cachestore.lookup(key, {}, cache_dir, prefix=CACHE_PREFIX)
    if isinstance(found, tuple) and len(found) == 3:
        name, shown, version = found
        return str(name), str(shown), (int(version[0]), int(version[1]), int(version[2]))
    out = _run_version(path)
    parsed = None if out is None else parse_version_output(out)
    if parsed is not None:
        cachestore.store(key, parsed, (), cache_dir, prefix=CACHE_PREFIX)
    return parsed


def mount_race_warning(path: str, *, cache_dir: str = cachestore.DEFAULT_DIR) -> str | None:
    """One line when the runtime at ``path`` is a runc older than
    :data:`RUNC_SAFE_MOUNT_TARGETS` (see the module docstring), else ``None`` (also when
    its version cannot be read: nothing is claimed)."""
    found = runtime_version(path, cache_dir=cache_dir)
    if found is None:
        return None
    name, shown, version = found
    if name != "runc" or version >= RUNC_SAFE_MOUNT_TARGETS:
        return None
    return (
        f"{path} is runc {shown}, older than 1.1.14: an image that swaps a directory for a "
        "link while runc mounts can make it create empty files on the host "
        "(CVE-2024-45310); spec mode hands runc its bind mounts, the hook modes do not: "
        "upgrade runc (a distribution's package may carry the fix), or use hook mode"
    )
