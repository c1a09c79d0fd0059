"""Where host discovery reads from: a driver root and a dev root, never ``/`` by literal.

A :class:`HostRoot` names two directories:

* the **driver root** holds the user-space driver: libraries, ``etc/ld.so.cache``,
  binaries. On a plain host it is ``/``; with a driver container it is
  ``/run/nvidia/driver``; for the simulated hosts of the tests it is a fixture tree.
* the **dev root** holds the kernel's view: ``dev/``, and by default ``proc/`` and ``sys/``
  beneath it. On a plain host and with a driver container it is ``/``.

Every discovery module builds its paths with these helpers (as psutil reads procfs through
a settable ``PROCFS_PATH``), so pointing both roots at a fixture tree simulates a whole host.
Paths returned are host paths (absolute, with the root prefix applied).
"""

from __future__ import annotations

import os
import stat

from .errors import DiscoveryError
from .records import Record

__all__ = ["HostRoot", "read_text"]


def _join(root: str, path: str) -> str:
    """Join ``path`` (absolute, in the root's terms) under ``root`` lexically."""
    rel = path.lstrip("/")
    if root in ("", "/"):
        return "/" + rel
    return os.path.join(root, rel) if rel else root


class HostRoot(Record):
    """The roots host discovery reads through.

    Attributes:
        driver_root: absolute host directory holding the user-space driver (default ``/``).
        dev_root: absolute host directory holding ``dev/`` (default ``/``).
        proc_root: absolute host directory mounted with procfs; default ``<dev_root>/proc``.
        sys_root: absolute host directory mounted with sysfs; default ``<dev_root>/sys``.
        ldcache: path of the ``ld.so.cache`` in the driver root's terms
            (default ``/etc/ld.so.cache``).
        library_dirs: extra directories (driver-root terms) searched for driver libraries
            the ``ld.so.cache`` does not list, before the built-in fallback directories.

    Raises:
        ValueError: when a root is not an absolute path.
    """

    driver_root: str = "/"
    dev_root: str = "/"
    proc_root: str | None = None
    sys_root: str | None = None
    ldcache: str = "/etc/ld.so.cache"
    library_dirs: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("driver_root", "dev_root", "proc_root", "sys_root"):
            value = getattr(self, name)
            if value is not None and not os.path.isabs(value):
                raise ValueError(f"{name} must be an absolute path, not {value!r}")
        if not self.ldcache.startswith("/"):
            raise ValueError(f"ldcache must be an absolute path, not {self.ldcache!r}")
        for d in self.library_dirs:
            if not d.startswith("/"):
                raise ValueError(f"library directories must be absolute paths, not {d!r}")

    @classmethod
    def single(cls, root: str) -> HostRoot:
        """A host whose driver root and dev root are both ``root`` (a simulated host)."""
        root = os.path.abspath(root)
        return cls(driver_root=root, dev_root=root)

    def driver(self, path: str) -> str:
        """Host path of ``path`` (absolute, driver-root terms), joined lexically.

        Symlinks are *not* resolved here; use :func:`ocihook.linux.pathsafe.resolve_in_root` with
        :attr:`driver_root` for that.
        """
        return _join(self.driver_root, path)

    def dev(self, path: str) -> str:
        """Host path of a ``/dev`` path such as ``/dev/nvidia0`` under the dev root."""
        return _join(self.dev_root, path)

    def proc(self, path: str) -> str:
        """Host path of ``path`` relative to procfs (``driver/nvidia/version``)."""
        base = self.proc_root if self.proc_root is not None else _join(self.dev_root, "/proc")
        return _join(base, path)

    def sys(self, path: str) -> str:
        """Host path of ``path`` relative to sysfs (``module/nvidia/version``)."""
        base = self.sys_root if self.sys_root is not None else _join(self.dev_root, "/sys")
        return _join(base, path)


def read_text(path: str, *, what: str, missing_hint: str | None = None) -> str:
    """Read a small text file (procfs, sysfs, config) and return its contents.

    Args:
        path: host path.
        what: what the file is, for the message ("driver version file").
        missing_hint: the hint to give when the file does not exist.

    Raises:
        DiscoveryError: the file is missing, unreadable or not a regular file (a FIFO
            would block), naming the path; undecodable bytes are replaced, never raised.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY)
        with open(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise DiscoveryError(f"{what} is not a regular file", path=path)
            data = f.read(1 << 20)
    except FileNotFoundError:
        raise DiscoveryError(f"{what} not found", path=path, hint=missing_hint) from None
    except OSError as e:
        raise DiscoveryError(f"cannot read {what}: {e.strerror}", path=path) from None
    return data.decode("utf-8", "replace")


def listdir(path: str, what: str) -> list[str]:
    """Names in the directory ``path``, sorted; ``[]`` when it does not exist.

    Raises:
        DiscoveryError: it exists but cannot be read (naming it and ``what`` it is).
    """
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as e:
        raise DiscoveryError(f"cannot list {what}: {e.strerror}", path=path) from None


def read_optional_text(path: str, *, what: str, limit: int = 1 << 20) -> str | None:
    """A small text file's contents (at most ``limit`` bytes, undecodable bytes replaced),
    or ``None`` when it does not exist.

    Raises:
        DiscoveryError: it exists but cannot be read, naming it and ``what`` it is.
    """
    try:
        with open(path, "rb") as f:
            data = f.read(limit)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as e:
        raise DiscoveryError(f"cannot read {what}: {e.strerror}", path=path) from None
    return data.decode("utf-8", "replace")


def read_attr(path: str) -> str | None:
    """A sysfs attribute's text without surrounding white space, or ``None`` when the
    file does not exist. At most 64 KiB are read; undecodable bytes are replaced.

    Raises:
        DiscoveryError: it exists but cannot be read.
    """
    text = read_optional_text(path, what="a sysfs attribute", limit=1 << 16)
    return None if text is None else text.strip()
