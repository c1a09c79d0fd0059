"""Image layouts for loader tests, built with the machine's real glibc loader and Debian's
musl loader: Debian merged-/usr, RHEL ``/usr/lib64``, Alpine-like musl."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

GLIBC_LOADER = os.path.realpath("/lib64/ld-linux-x86-64.so.2")
MUSL_LOADER = os.path.realpath("/lib/ld-musl-x86_64.so.1")

needs_x86_64 = pytest.mark.skipif(
    os.uname().machine != "x86_64" or not os.path.isfile(GLIBC_LOADER),
    reason="the layouts below are x86-64's",
)
needs_musl = pytest.mark.skipif(
    not os.path.isfile(MUSL_LOADER), reason="Debian's musl package (scripts/setup) is missing"
)


def debian_merged_usr(root: Path) -> Path:
    """Debian 12: /lib, /lib64 links into /usr; the loader in the multiarch directory and
    /lib64's name an absolute link to it."""
    (root / "usr/lib/x86_64-linux-gnu").mkdir(parents=True)
    (root / "usr/lib64").mkdir(parents=True)
    shutil.copyfile(GLIBC_LOADER, root / "usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2")
    (root / "usr/lib64/ld-linux-x86-64.so.2").symlink_to(
        "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2"
    )
    (root / "lib").symlink_to("usr/lib")
    (root / "lib64").symlink_to("usr/lib64")
    return root


def rhel(root: Path) -> Path:
    """RHEL/Fedora: the loader in /usr/lib64, /lib64 a link to it."""
    (root / "usr/lib64").mkdir(parents=True)
    shutil.copyfile(GLIBC_LOADER, root / "usr/lib64/ld-linux-x86-64.so.2")
    (root / "lib64").symlink_to("usr/lib64")
    return root


def alpine(root: Path) -> Path:
    """Alpine: musl's loader in /lib (libc.musl and the loader are one file)."""
    (root / "lib").mkdir(parents=True)
    shutil.copyfile(MUSL_LOADER, root / "lib/ld-musl-x86_64.so.1")
    (root / "etc").mkdir()
    return root
