"""A driver library that exists but cannot be read is an error naming it, never a silent
drop: ``edit`` and ``ocihook-runtime`` fail rather than start the container without
libcuda. Faults come from ``strace -e inject`` (EIO, EMFILE on ``openat``,
EIO on ``pread64``) and from a mode-000 file read by uid 65534."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support import make_bundle

from ocihook.linux import elfscan
from ocihook.linux.cachestore import DEFAULT_DIR as CACHE_DIR
from ocihook.sim import host as simhost

LIBCUDA = "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.127.05"
FIRMWARE = "usr/lib/firmware/nvidia/550.127.05"
WRAPPER = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")


def _need_strace() -> None:
    if shutil.which("strace") is None:
        pytest.skip("needs strace (apt-get install strace)")


def _uncached() -> list[str]:
    """A command prefix that hides the start-path cache (``/run/ocihook``, made by the boot
    unit on a GPU host) from the command: an empty tmpfs over it in a private mount
    namespace, so discovery reads the files these tests break instead of an entry that no
    key of the cache tells from them (a fault injected by strace changes nothing it sees).
    Nothing when the directory does not exist (CI)."""
    if not os.path.isdir(CACHE_DIR):
        return []
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip(f"{CACHE_DIR} exists and only root with unshare can hide it from the command")
    mount = f'mount -t tmpfs -o mode=0755 ocihook-test {CACHE_DIR} && exec "$@"'
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", mount, "sh"]


@pytest.fixture(scope="module")
def world() -> Iterator[Path]:
    """A simulated host and a bundle under a directory every user may enter (pytest's
    temporary directories are mode 0700, closed to uid 65534)."""
    base = Path(tempfile.mkdtemp(prefix="ocihook-unreadable-", dir="/tmp"))
    try:
        base.chmod(0o755)
        simhost.build(str(base / "host"))
        firmware = base / "host" / FIRMWARE
        firmware.mkdir(parents=True)
        (firmware / "gsp_ga10x.bin").write_bytes(b"firmware")
        yield base
    finally:
        shutil.rmtree(base)


def _edit(bundle: Path, world: Path, *prefix: str, dry_run: bool = False) -> Any:
    host = str(world / "host")
    args = ["edit", "-b", str(bundle), "--driver-root", host, "--dev-root", host]
    return subprocess.run(
        [
            *_uncached(),
            *prefix,
            *(sys.executable, "-m", "ocihook", *args),
            *(["--dry-run"] if dry_run else []),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )


def _strace(path: Path, syscall: str, error: str) -> list[str]:
    """strace failing every ``syscall`` on ``path`` (``-P``: only calls that name it, by
    path or by a descriptor open on it) with ``error``."""
    return [
        *("strace", "-f", "-qq", "-o", "/dev/null", "-P", str(path)),
        *("-e", f"trace={syscall}", "-e", f"inject={syscall}:error={error}"),
    ]


def _message(path: Path, reason: str) -> str:
    return f"ocihook: error[host-discovery]: cannot read driver library: {reason} (file {path})"


@pytest.mark.parametrize(
    ("syscall", "error", "reason"),
    [
        ("openat", "EIO", "Input/output error"),
        ("openat", "EMFILE", "Too many open files"),
        ("openat", "EACCES", "Permission denied"),
        ("pread64", "EIO", "Input/output error"),
    ],
)
def test_edit_refuses_unreadable_libcuda(
    syscall: str, error: str, reason: str, world: Path
) -> None:
    _need_strace()
    bundle = make_bundle(
        world,
        ["NVIDIA_VISIBLE_DEVICES=0"],
        name=f"b-{syscall}-{error}",
        minimal=True,
        indent=None,
        mode=0o755,
    )
    before = (bundle / "config.json").read_bytes()
    lib = world / "host" / LIBCUDA
    r = _edit(bundle, world, *_strace(lib, syscall, error))
    assert r.returncode == 6, r.stderr
    assert r.stderr.startswith(_message(lib, reason)), r.stderr
    assert (bundle / "config.json").read_bytes() == before


def test_edit_without_fault_mounts_libcuda(world: Path) -> None:
    """Control for the tests above: the same bundle and host give libcuda."""
    bundle = make_bundle(
        world, ["NVIDIA_VISIBLE_DEVICES=0"], name="b-control", minimal=True, indent=None, mode=0o755
    )
    r = _edit(bundle, world)
    assert r.returncode == 0, r.stderr
    mounts = json.loads((bundle / "config.json").read_text())["mounts"]
    assert str(world / "host" / LIBCUDA) in [m["source"] for m in mounts]


def test_edit_refuses_mode_000_library_for_non_root(world: Path) -> None:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run edit as uid 65534")
    lib = world / "host" / LIBCUDA
    mode = stat.S_IMODE(lib.stat().st_mode)
    bundle = make_bundle(
        world, ["NVIDIA_VISIBLE_DEVICES=0"], name="b-nobody", minimal=True, indent=None, mode=0o755
    )
    lib.chmod(0)
    try:
        r = _edit(
            bundle,
            world,
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            dry_run=True,
        )
    finally:
        lib.chmod(mode)
    assert r.returncode == 6, r.stderr
    assert r.stderr.startswith(_message(lib, "Permission denied")), r.stderr


def test_runtime_wrapper_refuses_unreadable_libcuda(world: Path) -> None:
    """ocihook-runtime stops with the error (exit 6) and never runs the real runtime."""
    _need_strace()
    bundle = make_bundle(
        world, ["NVIDIA_VISIBLE_DEVICES=0"], name="b-wrapper", minimal=True, indent=None, mode=0o755
    )
    calls = world / "runtime-called"
    fake = world / "fake-runc"
    fake.write_text(f"#!/bin/sh\necho called > {calls}\n")
    fake.chmod(0o755)
    host = world / "host"
    cfg = world / "wrapper.toml"
    cfg.write_text(f'driver-root = "{host}"\ndev-root = "{host}"\nruntimes = ["{fake}"]\n')
    lib = host / LIBCUDA
    r = subprocess.run(
        [
            *_uncached(),
            *_strace(lib, "openat", "EIO"),
            WRAPPER,
            "create",
            "--bundle",
            str(bundle),
            "cid",
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OCIHOOK_CONFIG": str(cfg)},
    )
    assert r.returncode == 6, r.stderr
    assert "cannot read driver library: Input/output error" in r.stderr
    assert str(lib) in r.stderr
    assert not calls.exists()


def test_elfscan_strict_raises_read_errors(tmp_path: Path) -> None:
    """Without ``strict`` a read error is "not ELF" (``None``); with it the OSError shows;
    a missing file is ``None`` either way."""
    missing = str(tmp_path / "missing.so")
    assert elfscan.dynamic_names(missing, strict=True) is None
    assert elfscan.abi_tag(missing, strict=True) is None
    # a descriptor open for writing only: pread fails with EBADF
    f = tmp_path / "lib.so"
    f.write_bytes(b"\x7fELF" + b"\0" * 60)
    fd = os.open(f, os.O_WRONLY)
    try:
        assert elfscan.dynamic_names(fd) is None
        with pytest.raises(OSError):
            elfscan.dynamic_names(fd, strict=True)
        with pytest.raises(OSError):
            elfscan.abi_tag(fd, strict=True)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    ("target", "syscall", "what"),
    [
        (FIRMWARE, "openat", "cannot read firmware directory"),
        (FIRMWARE + "/gsp_ga10x.bin", "newfstatat", "cannot resolve"),
        ("usr/lib/x86_64-linux-gnu/nvidia/current", "openat", "cannot read library directory"),
    ],
)
def test_unreadable_firmware_and_directories(
    target: str, syscall: str, what: str, world: Path
) -> None:
    """A firmware or fallback library directory that exists but cannot be listed, or a
    firmware file that cannot be examined, is an error too (the GSP firmware or a library
    the cache lacks would be missing)."""
    _need_strace()
    path = world / "host" / target
    bundle = make_bundle(
        world,
        ["NVIDIA_VISIBLE_DEVICES=0"],
        name="b-dir-" + target.replace("/", "-"),
        minimal=True,
        indent=None,
        mode=0o755,
    )
    r = _edit(bundle, world, *_strace(path, syscall, "EIO"), dry_run=True)
    assert r.returncode == 6, r.stderr
    assert r.stderr.startswith("ocihook: error[host-discovery]: " + what), r.stderr
    assert f": Input/output error (file {path})" in r.stderr, r.stderr
