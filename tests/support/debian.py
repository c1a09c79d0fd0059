"""The Debian 12 tree the packaging tests build on: ``mmdebstrap`` makes it once from the
mirror this machine's apt uses (``/etc/apt/sources.list.d/debian.sources``, variant
``apt`` plus :data:`BASE_PACKAGES`) into a tarball cached in
``${OCIHOOK_CACHE:-~/.cache/ocihook}`` (:func:`base_tarball`); ``scripts/build-image``
finds the same tarball under the same key. Without the mirror a test skips, saying why,
except under ``CI=true`` (CI reaches the registries), where it fails
(:func:`unavailable`)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

#: What the base tree holds beyond variant ``apt``: ocihook's Debian package's Depends,
#: what the package test runs (runc, busybox-static), and deb-systemd-helper
#: (init-system-helpers). ``scripts/build-image`` lists the same.
BASE_PACKAGES = (
    "python3",
    "python3-pyelftools",
    "python3-jsonschema",
    "python3-click",
    "python3-yaml",
    "python3-tomlkit",
    "runc",
    "busybox-static",
    "init-system-helpers",
)
SUITE = "bookworm"
SOURCES = "/etc/apt/sources.list.d/debian.sources"


def cache_dir() -> Path:
    """``$OCIHOOK_CACHE``, else ``~/.cache/ocihook``."""
    return Path(os.environ.get("OCIHOOK_CACHE") or os.path.expanduser("~/.cache/ocihook"))


def unavailable(reason: str) -> None:
    """Skip with ``reason``; under ``CI=true`` fail with it."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{reason} (CI=true: the registries are reachable there)")
    pytest.skip(reason)


def base_tarball() -> Path:
    """The cached base tree tarball, built by mmdebstrap when missing (about 45 s)."""
    key = hashlib.sha256(" ".join((SUITE, *BASE_PACKAGES)).encode()).hexdigest()[:12]
    tarball = cache_dir() / f"debian-{SUITE}-deb-test-{key}.tar"
    if tarball.exists():
        return tarball
    if not os.path.exists(SOURCES):
        unavailable(f"no {SOURCES}: mmdebstrap has no mirror to build the Debian tree from")
    if shutil.which("mmdebstrap") is None:
        unavailable("mmdebstrap is not installed (scripts/setup installs it as root)")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    partial = tarball.with_suffix(".partial.tar")
    cmd = ["mmdebstrap", "--variant=apt", "--include=" + ",".join(BASE_PACKAGES)]
    proc = subprocess.run(
        [*cmd, SUITE, str(partial), SOURCES], capture_output=True, text=True, timeout=900
    )
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        unavailable(f"mmdebstrap could not build the Debian {SUITE} tree: {last}")
    os.replace(partial, tarball)
    return tarball
