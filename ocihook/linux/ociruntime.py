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
    "VERSION_TIMEOUT",
    "is_racy_runc",
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
#: What is stored for a binary that exited without a version to read (it printed nothing
#: usable, or failed), so that it is not run again until the binary changes. A binary that
#: could not be started, or was killed at the timeout, is asked again on the next start.
UNKNOWN_VERSION = "unknown"


def parse_version_output(text: str) -> tuple[str, str, tuple[int, int, int]] | None:
    """``(name, shown version, (major, minor, patch))`` from ``<runtime> --version``: the
    first line ``NAME version X.Y[.Z][suffix]`` whose NAME is not ``ocihook-runtime``
    (the wrapper prints its own version, then the real runtime's). ``"runc version
    1.1.5+ds1"`` -> ``("runc", "1.1.5+ds1", (1, 1, 5))``; ``"crun version 1.8.1"``; a
    missing patch is 0. ``None`` when no line has that form."""
    for line in text.split("\n")[:20]:
        found = _parse_version_line(line)
        if found is not None and found[0] != "ocihook-runtime":
            return found
    return None


def _parse_version_line(line: str) -> tuple[str, str, tuple[int, int, int]] | None:
    first = line.split()
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


def _release_candidate(shown: str) -> int | None:
    """The ``N`` of a ``-rc.N``/``-rcN`` pre-release suffix (``1.2.0-rc.2`` -> 2), else
    ``None``."""
    _, sep, rest = shown.partition("-rc")
    digits = rest.lstrip(".")
    end = 0
    while end < len(digits) and digits[end].isascii() and digits[end].isdigit():
        end += 1
    return int(digits[:end]) if sep and 0 < end <= 9 else None


def is_racy_runc(shown: str, version: tuple[int, int, int]) -> bool:
    """Whether runc ``version`` (``shown`` as it printed it) makes bind-mount targets in
    the racy way: before 1.1.14, and the 1.2.0 release candidates before rc.3 (the fix
    came in 1.1.14 and 1.2.0-rc.3)."""
    if version < RUNC_SAFE_MOUNT_TARGETS:
        return True
    rc = _release_candidate(shown)
    return version == (1, 2, 0) and rc is not None and rc < 3


#: Seconds ``<runtime> --version`` may take before it is killed.
VERSION_TIMEOUT = 5.0


def _run_version(path: str, timeout: float = VERSION_TIMEOUT) -> str | None:
    """Standard output of ``path --version``, or ``None`` when it cannot be run, fails, or
    is not done within ``timeout`` seconds (see :func:`_ask_version`)."""
    return _ask_version(path, timeout)[0]


def _ask_version(path: str, timeout: float = VERSION_TIMEOUT) -> tuple[str | None, bool]:
    """``(output, exited)``: the standard output of ``path --version`` (``None`` when it
    cannot be run, fails, or is not done within ``timeout`` seconds: then it is killed; a
    child it left holding the pipe does not keep us either), and whether the binary ran and
    exited on its own, so that its answer stands until it changes (``False``: not started,
    killed at the timeout, reaped by someone else). Spawned without :mod:`subprocess` (its
    import costs milliseconds)."""
    import select
    import time

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
        return None, False
    os.close(w)
    try:  # readable once the child exits (Linux 5.3): no polling for its status
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = -1
    deadline = time.monotonic() + timeout
    out = b""
    status: int | None = None
    eof = False
    try:
        while True:
            if status is None:
                try:
                    done, status_now = os.waitpid(pid, os.WNOHANG)
                except ChildProcessError:  # SIGCHLD ignored: the child was reaped for us
                    return None, False
                if done:
                    status = status_now
            left = deadline - time.monotonic()
            if left <= 0 or (eof and status is not None):
                break
            waited = ([] if eof else [r]) + ([pidfd] if pidfd >= 0 and status is None else [])
            if not waited:  # output closed, no pidfd: poll for the exit status
                time.sleep(min(left, 0.001))
                continue
            ready, _, _ = select.select(waited, [], [], min(left, 0.05))
            if r in ready:
                chunk = os.read(r, 4096)
                eof = not chunk
                out += chunk
                if len(out) > 65536:
                    break
            elif not ready and status is not None:
                break  # exited, and what it left running holds the pipe: stop here
    finally:
        os.close(r)
        if pidfd >= 0:
            os.close(pidfd)
    if status is None:
        try:
            os.kill(pid, 9)
            _, status = os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        return None, False
    if os.waitstatus_to_exitcode(status) != 0:
        return None, True
    return out.decode("utf-8", "replace"), True


def runtime_version(
    path: str, *, cache_dir: str | None = None
) -> tuple[str, str, tuple[int, int, int]] | None:
    """:func:`parse_version_output` of the runtime binary at ``path`` (absolute), or
    ``None`` when it cannot be run or does not say. Cached in ``cache_dir`` by the
    binary's device, inode, size and mtime (never raises for the cache; default:
    :func:`ocihook.linux.cachestore.store_dir`)."""
    cache_dir = cache_dir or cachestore.store_dir()
    try:
        st = os.stat(path)
    except OSError:
        return None
    key = {
        "path": path,
        "identity": [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns],
    }
    found = cachestore.lookup(key, {}, cache_dir, prefix=CACHE_PREFIX)
    if found == UNKNOWN_VERSION:
        return None
    if isinstance(found, tuple) and len(found) == 3:
        name, shown, version = found
        return str(name), str(shown), (int(version[0]), int(version[1]), int(version[2]))
    out, exited = _ask_version(path)
    parsed = None if out is None else parse_version_output(out)
    if exited:
        # a runtime that does not say (youki, runsc, a wrapper) is not asked again on every
        # start; one that hung or could not start this time is
        stored = UNKNOWN_VERSION if parsed is None else parsed
        cachestore.store(key, stored, (), cache_dir, prefix=CACHE_PREFIX)
    return parsed


def mount_race_warning(path: str, *, cache_dir: str | None = None) -> str | None:
    """One line when the runtime at ``path`` is a runc older than
    :data:`RUNC_SAFE_MOUNT_TARGETS` (see the module docstring), else ``None`` (also when
    its version cannot be read: nothing is claimed)."""
    found = runtime_version(path, cache_dir=cache_dir)
    if found is None:
        return None
    name, shown, version = found
    if name != "runc" or not is_racy_runc(shown, version):
        return None
    return (
        f"{path} is runc {shown}, older than 1.1.14: an image that swaps a directory for a "
        "link while runc mounts can make it create empty files on the host "
        "(CVE-2024-45310); spec mode hands runc its bind mounts, the hook modes do not: "
        "upgrade runc (a distribution's package may carry the fix), or use hook mode"
    )
