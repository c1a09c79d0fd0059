"""Checks of the realistic 535.261.03 host tree (fixtures/realistic/build.py) with real tools.

The tree is built once (or reused from ${OCIHOOK_CACHE:-~/.cache/ocihook}) by a session-scoped
fixture; the tests skip with the reason when the build cannot run on this machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import REPO

BUILD = Path(REPO, "fixtures", "realistic", "build.py")
VERSION = "535.261.03"
ELF_MAGIC = b"\x7fELF"
EXIT_UNAVAILABLE = 3


def _build(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(BUILD), "--print-root", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="session")
def host() -> tuple[Path, dict[str, Any]]:
    if not sys.platform.startswith("linux") or shutil.which("apt-get") is None:
        pytest.skip("realistic fixture needs a Debian-like Linux machine with apt-get")
    r = _build()
    if r.returncode == EXIT_UNAVAILABLE:
        reason = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "unavailable"
        pytest.skip(f"realistic fixture cannot be built here: {reason}")
    if r.returncode != 0:
        pytest.fail(f"fixtures/realistic/build.py failed ({r.returncode}):\n{r.stderr}")
    root = Path(r.stdout.strip().splitlines()[-1])
    info = json.loads((root / ".ocihook-fixture.json").read_text())
    return root, info


def resolve(root: Path, path: str) -> Path:
    """Follow every link of `path` inside `root` (absolute targets re-rooted under `root`)."""
    todo = [p for p in path.split("/") if p]
    done: list[str] = []
    hops = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            if done:
                done.pop()
            continue
        cur = root.joinpath(*done, name)
        if cur.is_symlink():
            hops += 1
            assert hops < 40, f"symlink loop resolving {path}"
            target = os.readlink(cur)
            if target.startswith("/"):
                done = []
            todo = [p for p in target.split("/") if p] + todo
        else:
            done.append(name)
    return root.joinpath(*done)


def need(tool: str) -> str:
    found = shutil.which(tool) or next(
        (p for p in (f"/sbin/{tool}", f"/usr/sbin/{tool}") if os.access(p, os.X_OK)), None
    )
    if found is None:
        pytest.skip(f"{tool} not installed")
    return found


def ldconfig_p(root: Path) -> list[tuple[str, str, str]]:
    out = subprocess.run(
        [need("ldconfig"), "-p", "-C", str(root / "etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    rows = []
    for line in out.splitlines()[1:]:
        m = re.match(r"\s*(\S+) \(([^)]*)\) => (\S+)$", line)
        if m:
            rows.append((m.group(1), m.group(2), m.group(3)))
    return rows


def parse_kv(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if ":" in line:
            k, _, v = line.partition(":")
            out[k.strip()] = v.strip()
    return out


# ----------------------------------------------------------------------------- libraries
@pytest.mark.parametrize("abi", ["libc6,x86-64", "libc6"])
@pytest.mark.parametrize("soname", ["libcuda.so.1", "libnvidia-ml.so.1"])
def test_ld_cache_lists_driver_libs(
    host: tuple[Path, dict[str, Any]], soname: str, abi: str
) -> None:
    root, _ = host
    rows = [r for r in ldconfig_p(root) if r[0] == soname and r[1] == abi]
    assert len(rows) == 1, f"{soname} ({abi}) not in ldconfig -p output"
    triplet = "x86_64-linux-gnu" if abi == "libc6,x86-64" else "i386-linux-gnu"
    path = rows[0][2]
    assert path.endswith(f"/{triplet}/{soname}")
    final = resolve(root, path)
    assert final.is_file() and not final.is_symlink()
    assert final.name == soname.split(".so")[0] + f".so.{VERSION}"
    head = final.read_bytes()[:20]
    assert head[:4] == ELF_MAGIC
    assert head[4] == (2 if triplet.startswith("x86_64") else 1)  # EI_CLASS
    assert int.from_bytes(head[18:20], "little") == (62 if triplet.startswith("x86_64") else 3)


def test_every_cache_entry_resolves_inside_root(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    rows = ldconfig_p(root)
    assert len(rows) == len(info["ld_so_cache"]["entries"]) > 30
    unversioned = []
    for soname, abi, path in rows:
        final = resolve(root, path)
        assert final.is_file(), f"{path} does not resolve inside the root"
        head = final.read_bytes()[:5]
        assert head[:4] == ELF_MAGIC and head[4] == (2 if "x86-64" in abi else 1), path
        if not final.name.endswith(VERSION):
            unversioned.append(soname)
    # Debian ships libnvidia-api.so.1 as a plain file: the one library whose real file name
    # does not end with the driver version.
    assert unversioned == ["libnvidia-api.so.1"]


def test_libcuda_alternatives_chain_is_absolute(host: tuple[Path, dict[str, Any]]) -> None:
    root, _ = host
    top = root / "usr/lib/x86_64-linux-gnu/libcuda.so.1"
    alt = os.readlink(top)
    assert alt == "/etc/alternatives/nvidia--libcuda.so.1-x86_64-linux-gnu"
    assert os.readlink(root / alt.lstrip("/")) == (
        "/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.1"
    )
    final = resolve(root, "/usr/lib/x86_64-linux-gnu/libcuda.so.1")
    assert final == root / f"usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{VERSION}"
    assert final.is_file() and not final.is_symlink()
    assert final.read_bytes()[:4] == ELF_MAGIC
    # The ld.so.cache path goes through Debian's merged-/usr link (/lib -> usr/lib).
    assert os.readlink(root / "lib") == "usr/lib"
    assert resolve(root, "/lib/x86_64-linux-gnu/libcuda.so.1") == final
    # i386 too
    final32 = resolve(root, "/usr/lib/i386-linux-gnu/libcuda.so.1")
    assert final32.name == f"libcuda.so.{VERSION}" and final32.read_bytes()[4] == 1


@pytest.mark.parametrize(
    "path,soname",
    [
        (f"usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{VERSION}", "libcuda.so.1"),
        (f"usr/lib/i386-linux-gnu/nvidia/current/libcuda.so.{VERSION}", "libcuda.so.1"),
        (f"usr/lib/x86_64-linux-gnu/nvidia/current/libnvidia-ml.so.{VERSION}", "libnvidia-ml.so.1"),
        (
            f"usr/lib/x86_64-linux-gnu/libnvidia-glcore.so.{VERSION}",
            f"libnvidia-glcore.so.{VERSION}",
        ),
    ],
)
def test_readelf_soname(host: tuple[Path, dict[str, Any]], path: str, soname: str) -> None:
    root, _ = host
    out = subprocess.run(
        [need("readelf"), "-d", str(root / path)], capture_output=True, text=True, check=True
    ).stdout
    assert re.search(r"\(SONAME\)\s+Library soname: \[" + re.escape(soname) + r"\]", out)


def test_alternatives_links(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    alts = info["alternatives"]
    links = {a["link"] for a in alts}
    for want in (
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib/i386-linux-gnu/libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
        "/usr/lib/i386-linux-gnu/libnvidia-ml.so.1",
        "/usr/bin/nvidia-smi",
        "/usr/lib/nvidia/nvidia",
    ):
        assert want in links
    for a in alts:
        link = root / a["link"].lstrip("/")
        assert os.readlink(link) == a["alternative"]
        assert os.readlink(root / a["alternative"].lstrip("/")) == a["target"]
        assert resolve(root, a["link"]).exists(), a["link"]
    smi = resolve(root, "/usr/bin/nvidia-smi")
    assert smi.name == "nvidia-smi" and smi.read_bytes()[:4] == ELF_MAGIC
    assert (root / "var/lib/dpkg/alternatives/nvidia").is_file()


def test_packages_pinned(host: tuple[Path, dict[str, Any]]) -> None:
    _, info = host
    pkgs = info["packages"]
    archs = {(p["package"], p["arch"]) for p in pkgs}
    assert ("libcuda1", "amd64") in archs and ("libcuda1", "i386") in archs
    assert ("libnvidia-ml1", "i386") in archs
    for p in pkgs:
        if p["source"] == "nvidia-graphics-drivers":
            assert p["version"].split("-")[0] == VERSION, p


def test_firmware_and_socket(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    for fw in info["firmware"]:
        assert resolve(root, fw).is_file()
    for sock in info["sockets"]:
        assert stat.S_ISSOCK(os.lstat(resolve(root, sock)).st_mode)
        # /var/run -> /run is an absolute link on Debian: must be re-rooted as well
        assert resolve(root, "/var" + sock) == resolve(root, sock)


# ----------------------------------------------------------------------------- kernel side
def test_proc_version(host: tuple[Path, dict[str, Any]]) -> None:
    root, _ = host
    text = (root / "proc/driver/nvidia/version").read_text()
    first, second = text.splitlines()[:2]
    assert first.startswith("NVRM version: NVIDIA UNIX x86_64 Kernel Module  ")
    m = re.search(r"\d+\.\d+(\.\d+)?", first)
    assert m and m.group(0) == VERSION
    assert second.startswith("GCC version:  gcc version ")
    assert (root / "sys/module/nvidia/version").read_text() == f"{VERSION}\n"


def test_proc_params(host: tuple[Path, dict[str, Any]]) -> None:
    root, _ = host
    params = parse_kv((root / "proc/driver/nvidia/params").read_text())
    assert params["ModifyDeviceFiles"] == "1"
    assert params["DeviceFileMode"] == "438"
    assert params["RegistryDwords"] == '""'
    assert (root / "proc/driver/nvidia/registry").is_file()


def test_proc_gpus(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    gpus_dir = root / "proc/driver/nvidia/gpus"
    dirs = sorted(p.name for p in gpus_dir.iterdir())
    assert len(dirs) == 8
    assert all(re.fullmatch(r"[0-9a-f]{8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", d) for d in dirs)
    expected = {g["proc_dir"].rsplit("/", 1)[1]: g for g in info["gpus"]}
    assert sorted(expected) == dirs
    minors, uuids = [], []
    for index, d in enumerate(dirs):  # PCI bus order = index order
        kv = parse_kv((gpus_dir / d / "information").read_text())
        g = expected[d]
        assert g["index"] == index
        assert kv["Model"] == "NVIDIA H100 80GB HBM3" == g["model"]
        assert re.fullmatch(r"GPU-[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}", kv["GPU UUID"])
        assert kv["GPU UUID"] == g["uuid"]
        assert re.fullmatch(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", kv["Bus Location"])
        assert kv["Bus Location"] == g["bus_location"]
        assert d.endswith(kv["Bus Location"].split(":", 1)[1])
        assert int(kv["Device Minor"]) == g["minor"]
        assert kv["GPU Excluded"] == "No"
        assert kv["Bus Type"] == "PCIe"
        assert kv["GPU Firmware"] == VERSION
        minors.append(g["minor"])
        uuids.append(kv["GPU UUID"])
    assert sorted(minors) == list(range(8))
    assert sum(m != i for i, m in enumerate(minors)) >= 2  # index is not the minor
    assert len(set(uuids)) == 8


def test_proc_devices(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    text = (root / "proc/devices").read_text()
    char_part, _, block_part = text.partition("\nBlock devices:\n")
    assert char_part.startswith("Character devices:\n") and block_part
    char: dict[str, int] = {}
    for line in char_part.splitlines()[1:]:
        num, name = line.split(None, 1)
        char.setdefault(name, int(num))
    assert char["nvidia-frontend"] == 195
    assert char["nvidia-uvm"] == info["majors"]["nvidia-uvm"]
    assert char["nvidia-caps"] == info["majors"]["nvidia-caps"]
    assert char["drm"] == 226 and char["mem"] == 1 and char["pts"] == 136


def test_dev_nodes(host: tuple[Path, dict[str, Any]]) -> None:
    root, info = host
    dev = info["device_nodes"]
    if not dev["created"]:
        pytest.skip(f"no /dev nodes in the tree: {dev['reason']}")
    uvm = info["majors"]["nvidia-uvm"]
    want = {"nvidiactl": (195, 255), "nvidia-modeset": (195, 254)}
    want |= {"nvidia-uvm": (uvm, 0), "nvidia-uvm-tools": (uvm, 1)}
    want |= {f"nvidia{g['minor']}": (195, g["minor"]) for g in info["gpus"]}
    assert len(dev["nodes"]) == len(want) == 12
    for name, (major, minor) in want.items():
        st = os.lstat(root / "dev" / name)
        assert stat.S_ISCHR(st.st_mode), name
        assert (os.major(st.st_rdev), os.minor(st.st_rdev)) == (major, minor), name
        assert stat.S_IMODE(st.st_mode) == 0o666, name


def test_rebuild_is_instant(host: tuple[Path, dict[str, Any]]) -> None:
    root, _ = host
    t0 = time.monotonic()
    r = _build(timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode == 0 and Path(r.stdout.strip()) == root
    assert elapsed < 1.0, f"second run took {elapsed:.2f} s"
