"""Host discovery on the simulated host, the realistic host, and broken hosts."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import run_cli

from ocihook.core.errors import DiscoveryError, LdCacheError
from ocihook.core.hostroot import HostRoot
from ocihook.core.vocab import parse_gpu_information
from ocihook.discovery.nvidia import discover
from ocihook.discovery.procfs import parse_devices, parse_driver_version
from ocihook.linux import ldcache
from ocihook.sim import host as simhost


def test_simulated_host_matches_its_description(sim: simhost.SimulatedHost) -> None:
    host = discover(HostRoot.single(sim.root))
    assert host.driver_version == sim.driver_version == "550.127.05"
    assert [(g.index, g.minor, g.uuid, g.bus_id) for g in host.gpus] == [
        (g.index, g.minor, g.uuid, g.bus_id) for g in sim.gpus
    ]
    # index is PCI bus order, minor is the kernel's: they differ for some GPUs
    assert any(g.index != g.minor for g in host.gpus)
    assert [g.bus_id for g in host.gpus] == sorted(g.bus_id for g in host.gpus)
    assert host.majors["nvidia"] == 195 and host.majors["nvidia-uvm"] == simhost.UVM_MAJOR
    assert [(n.path, n.major, n.minor) for n in host.control_nodes] == [
        ("/dev/nvidiactl", 195, 255),
        ("/dev/nvidia-uvm", simhost.UVM_MAJOR, 0),
        ("/dev/nvidia-uvm-tools", simhost.UVM_MAJOR, 1),
    ]
    assert all(n.present == sim.dev_nodes for n in host.control_nodes)


def test_simulated_host_libraries(sim: simhost.SimulatedHost) -> None:
    host = discover(HostRoot.single(sim.root))
    by_soname = {lib.soname: lib for lib in host.libraries if lib.elf_class == 64}
    v = sim.driver_version
    lib32 = {lib.soname: lib.path for lib in host.libraries if lib.elf_class == 32}
    assert lib32 == {
        "libcuda.so.1": f"/usr/lib/i386-linux-gnu/libcuda.so.{v}",
        "libnvidia-ml.so.1": f"/usr/lib/i386-linux-gnu/libnvidia-ml.so.{v}",
    }
    assert set(by_soname) == {
        "libnvidia-ml.so.1",
        "libnvidia-cfg.so.1",
        "libcuda.so.1",
        "libcudadebugger.so.1",
        "libnvidia-opencl.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-allocator.so.1",
        "libnvidia-nvvm.so.4",
        f"libnvidia-gpucomp.so.{v}",
        f"libnvidia-pkcs11-openssl3.so.{v}",
    }
    cuda = by_soname["libcuda.so.1"]
    # reached through an absolute /etc/alternatives link, re-rooted in the driver root
    assert cuda.host_path == os.path.join(
        sim.root, f"usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{v}"
    )
    assert cuda.name == f"libcuda.so.{v}" and cuda.capability == "compute"
    assert by_soname["libnvidia-ml.so.1"].capability == "utility"
    for lib in host.libraries:
        assert lib.host_path.startswith(sim.root + "/")
        assert lib.name.endswith("." + v)
        with open(lib.host_path, "rb") as f:
            assert f.read(4) == b"\x7fELF"
    # the stale 470 library is seen and refused
    assert not any("470" in lib.host_path for lib in host.libraries)
    assert any("libnvidia-cfg.so.470.57.02" in w for w in host.warnings)


def test_elf_facts_agree_with_cache(sim: simhost.SimulatedHost) -> None:
    from ocihook.linux.elf import read_elf_info

    for lib in discover(HostRoot.single(sim.root)).libraries:
        info = read_elf_info(lib.host_path)
        assert info.soname == lib.soname
        if lib.elf_class == 64:
            assert info.elf_class == 64 and info.machine == "EM_X86_64"
            assert info.abi_flags == lib.abi_flags == 0x0303
        else:  # the 32-bit libcuda and libnvidia-ml
            assert info.elf_class == 32 and info.machine == "EM_386"
            assert info.abi_flags == lib.abi_flags == 0x0003


def test_realistic_host(realistic: dict[str, Any]) -> None:
    root = realistic["root"]
    host = discover(HostRoot.single(root))
    assert host.driver_version == "535.261.03"
    expected = sorted(realistic["gpus"], key=lambda g: g["index"])
    assert [(g.index, g.minor, g.uuid.lower(), g.bus_id) for g in host.gpus] == [
        (g["index"], g["minor"], g["uuid"].lower(), g["bus_id"].lower()) for g in expected
    ]
    by_soname = {lib.soname: lib for lib in host.libraries}
    cuda = by_soname["libcuda.so.1"]
    assert cuda.name == "libcuda.so.535.261.03"
    assert cuda.host_path.startswith(root + "/")
    assert os.path.isfile(cuda.host_path) and not os.path.islink(cuda.host_path)
    for soname in (
        "libnvidia-ml.so.1",
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-nvvm.so.4",
        "libnvidia-allocator.so.1",
        "libcudadebugger.so.1",
        "libnvidia-opencl.so.1",
    ):
        assert soname in by_soname, soname
    # every library found is what readelf says it is
    if shutil.which("readelf"):
        for lib in host.libraries:
            out = subprocess.run(
                ["readelf", "-d", lib.host_path], capture_output=True, text=True, check=True
            ).stdout
            if "Library soname:" not in out:  # libnvidia-vulkan-producer has none
                assert lib.soname == lib.name, lib
                continue
            assert f"Library soname: [{lib.soname}]" in out, lib


def test_realistic_uses_the_real_ldconfig_view(realistic: dict[str, Any]) -> None:
    if shutil.which("ldconfig") is None:
        pytest.skip("needs ldconfig")
    root = realistic["root"]
    out = subprocess.run(
        ["ldconfig", "-p", "-C", os.path.join(root, "etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    host = discover(HostRoot.single(root))
    outside = []
    for lib in host.libraries:
        abi = "libc6,x86-64" if lib.elf_class == 64 else "libc6"
        line = f"\t{lib.soname} ({abi}) => {lib.cache_path}"
        if line not in out:
            outside.append(lib.soname)
    # only Debian's libnvidia-cfg and libvdpau_nvidia (their links live in .../nvidia/ and
    # .../vdpau/, not in ld.so.conf) and libnvidia-vulkan-producer (no soname, no link) come
    # from the fallback directories (nvidia/current); the rest is what ldconfig lists
    assert sorted(outside) == [
        "libnvidia-cfg.so.1",
        "libnvidia-vulkan-producer.so.535.261.03",
        "libvdpau_nvidia.so.1",
        "libvdpau_nvidia.so.1",
    ]
    for lib in host.libraries:
        if lib.soname in outside:
            assert "/nvidia/current/" in lib.cache_path
    assert {lib.elf_class for lib in host.libraries} == {64, 32}


# -- parsers ------------------------------------------------------------------------------


def test_parse_driver_version_formats() -> None:
    prop = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.261.03  Wed Jul 30 2025\nGCC version: gcc 12.2.0\n"
    open_ = (
        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build"
        "  (dvs-builder@U22)  Thu Sep 18 2025\n"
    )
    assert parse_driver_version(prop) == "535.261.03"
    assert parse_driver_version(open_) == "580.95.05"
    assert (
        parse_driver_version("NVRM version: NVIDIA UNIX Kernel Module for aarch64  470.57\n")
        == "470.57"
    )
    with pytest.raises(DiscoveryError) as ei:
        parse_driver_version("garbage\n", path="/p/version")
    assert ei.value.path == "/p/version"


@given(st.integers(0, 9999), st.integers(0, 999), st.integers(0, 99), st.booleans())
def test_parse_driver_version_roundtrip(a: int, b: int, c: int, open_module: bool) -> None:
    v = f"{a}.{b}.{c:02d}"
    line = (
        f"NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  {v}  Release Build"
        if open_module
        else f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {v}  Mon Jan 1"
    )
    assert parse_driver_version(line + "\n") == v


def test_parse_gpu_information() -> None:
    text = "Model: \t\t NVIDIA H100: 80GB\nGPU UUID: \t GPU-x\nnonsense line\nDevice Minor: \t 3\n"
    info = parse_gpu_information(text)
    assert info == {"Model": "NVIDIA H100: 80GB", "GPU UUID": "GPU-x", "Device Minor": "3"}


def test_parse_devices_reads_only_char_section() -> None:
    text = "Character devices:\n  1 mem\n195 nvidia-frontend\n509 nvidia-uvm\n\nBlock devices:\n  8 sd\n259 nvidia-uvm\n"
    assert parse_devices(text) == {"mem": 1, "nvidia-frontend": 195, "nvidia-uvm": 509}


@given(st.text(max_size=300))
def test_parsers_never_crash(text: str) -> None:
    parse_devices(text)
    parse_gpu_information(text)
    with contextlib.suppress(DiscoveryError):
        parse_driver_version(text)


# -- broken hosts -------------------------------------------------------------------------


def _copy_sim(sim: simhost.SimulatedHost, tmp_path: Any) -> str:
    dst = str(tmp_path / "host")
    subprocess.run(["cp", "-a", sim.root, dst], check=True)
    return dst


def test_no_driver(tmp_path: Any) -> None:
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(str(tmp_path)))
    assert ei.value.path == str(tmp_path / "proc/driver/nvidia/version")
    assert "driver" in str(ei.value)


def test_missing_ldcache(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """No ld.so.cache: the standard directories are searched, with one warning."""
    root = _copy_sim(sim, tmp_path)
    os.unlink(os.path.join(root, "etc/ld.so.cache"))
    h = discover(HostRoot.single(root))
    cuda = next(lib for lib in h.libraries if lib.soname == "libcuda.so.1")
    assert cuda.path == f"/usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.{sim.driver_version}"
    assert len(h.libraries) == 10 + len(simhost.LIBRARIES32)  # and the 32-bit ones
    cache = os.path.join(root, "etc/ld.so.cache")
    assert [w for w in h.warnings if "ld.so.cache" in w] == [
        f"no ld.so.cache in the driver root ({cache}): driver libraries searched in the "
        "standard library directories of the driver root (lib64, lib, usr/lib64, "
        "usr/lib/<triplet>, ...)"
    ]


def test_missing_ldcache_and_no_library_anywhere(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """Neither a cache nor a library in any standard directory: one error line naming the
    settings to change."""
    root = _copy_sim(sim, tmp_path)
    os.unlink(os.path.join(root, "etc/ld.so.cache"))
    subprocess.run(["rm", "-rf", os.path.join(root, "usr/lib")], check=True)
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    text = str(ei.value)
    assert ei.value.path == root and "\n" not in text
    assert "no ld.so.cache in the driver root" in text
    assert "--driver-root" in text and "--library-path" in text
    # a discovery that looks for no library does not need one, nor one that asks only
    # for graphics (a driver may have none; every driver has libcuda and libnvidia-ml)
    assert discover(HostRoot.single(root), capabilities=()).libraries == ()
    assert discover(HostRoot.single(root), capabilities=("graphics",)).libraries == ()


def test_garbage_ldcache(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy_sim(sim, tmp_path)
    with open(os.path.join(root, "etc/ld.so.cache"), "wb") as f:
        f.write(b"glibc-ld.so.cache1.1" + b"\xff" * 40)
    with pytest.raises(LdCacheError) as ei:
        discover(HostRoot.single(root))
    assert ei.value.path == os.path.join(root, "etc/ld.so.cache")


def test_malformed_gpu_information(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy_sim(sim, tmp_path)
    gpus = os.path.join(root, "proc/driver/nvidia/gpus")
    first = sorted(os.listdir(gpus))[0]
    info = os.path.join(gpus, first, "information")
    text = Path(info).read_text().replace("Device Minor: \t 0", "Device Minor: \t zero")
    with open(info, "w") as f:
        f.write(text)
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    assert (ei.value.path, ei.value.field, ei.value.value) == (info, "Device Minor", "zero")


def test_excluded_gpu_is_skipped(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy_sim(sim, tmp_path)
    gpus = os.path.join(root, "proc/driver/nvidia/gpus")
    first = sorted(os.listdir(gpus))[0]
    info = os.path.join(gpus, first, "information")
    text = Path(info).read_text().replace("GPU Excluded:\t No", "GPU Excluded:\t Yes")
    with open(info, "w") as f:
        f.write(text)
    host = discover(HostRoot.single(root))
    assert len(host.gpus) == len(sim.gpus) - 1
    assert host.gpus[0].uuid == sim.gpus[1].uuid and host.gpus[0].index == 0


def test_wrong_device_node_is_refused(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    root = _copy_sim(sim, tmp_path)
    node = os.path.join(root, "dev/nvidia0")
    os.unlink(node)
    import stat

    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # /dev/null's number
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    assert ei.value.path == node and "invalid device node" in str(ei.value)
    assert ei.value.value == "char 1:3"


def test_symlinked_library_escaping_driver_root_stays_inside(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """An absolute link in the driver root is re-rooted: it never reaches the real host."""
    root = _copy_sim(sim, tmp_path)
    alt = os.path.join(root, "etc/alternatives/libcuda.so.1")
    os.unlink(alt)
    os.symlink("/usr/lib/x86_64-linux-gnu/libc.so.6", alt)  # a real host file
    host = discover(HostRoot.single(root))
    assert all(lib.host_path.startswith(root + "/") for lib in host.libraries)
    assert "libcuda.so.1" not in {lib.soname for lib in host.libraries if lib.elf_class == 64}


def test_ldcache_of_simhost_agrees_with_ldconfig(sim: simhost.SimulatedHost) -> None:
    if shutil.which("ldconfig") is None:
        pytest.skip("needs ldconfig")
    path = os.path.join(sim.root, "etc/ld.so.cache")
    out = subprocess.run(
        ["ldconfig", "-p", "-C", path], capture_output=True, text=True, check=True
    ).stdout
    lines = [ln.strip() for ln in out.splitlines() if "=>" in ln]
    with open(path, "rb") as f:
        entries = ldcache.parse(f.read())
    abi = {0x0303: "libc6,x86-64", 0x0003: "libc6"}
    assert lines == [f"{e.soname} ({abi[e.flags]}) => {e.path}" for e in entries]
    assert sum(e.flags == 0x0003 for e in entries) == 2  # the 32-bit libcuda, libnvidia-ml


# --- hostile host trees ---------------------------------------------------------------------------


def test_nvidia_major_must_be_195(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy_sim(sim, tmp_path)
    p = Path(root, "proc/devices")
    p.write_text(p.read_text().replace("195 nvidia", "10 nvidia"))
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    assert ei.value.value == 10 and ei.value.path == str(p)


@pytest.mark.parametrize("minor", ["254", "255", "1048576"])
def test_gpu_minor_out_of_range(sim: simhost.SimulatedHost, tmp_path: Any, minor: str) -> None:
    root = _copy_sim(sim, tmp_path)
    info = sorted(Path(root, "proc/driver/nvidia/gpus").glob("*/information"))[0]
    text = info.read_text()
    info.write_text(text.replace("Device Minor: \t 0", f"Device Minor: \t {minor}"))
    with pytest.raises(DiscoveryError, match="out of range"):
        discover(HostRoot.single(root))


@pytest.mark.parametrize("which", ["information", "ld.so.cache"])
def test_fifos_in_the_host_trees_do_not_hang(
    sim: simhost.SimulatedHost, tmp_path: Any, which: str
) -> None:
    root = _copy_sim(sim, tmp_path)
    if which == "information":
        path = sorted(Path(root, "proc/driver/nvidia/gpus").glob("*/information"))[0]
    else:
        path = Path(root, "etc/ld.so.cache")
    path.unlink()
    os.mkfifo(path)
    proc = run_cli("info", "--driver-root", root, "--dev-root", root, text=False)
    assert proc.returncode == 6
    assert b"not a regular file" in proc.stderr


def test_soname_with_a_path_is_not_used(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _copy_sim(sim, tmp_path)
    v = sim.driver_version
    libdir = "/usr/lib/x86_64-linux-gnu"
    entries = [
        ldcache.CacheEntry(
            "libnvidia-ml.so.1/../../../bin/sh", f"{libdir}/libnvidia-ml.so.{v}", 0x0303
        ),
        ldcache.CacheEntry("libcuda.so.1", f"{libdir}/libcuda.so.1", 0x0303),
    ]
    Path(root, "etc/ld.so.cache").write_bytes(ldcache.build(entries))
    h = discover(HostRoot.single(root))
    sonames = [lib.soname for lib in h.libraries]
    assert "libcuda.so.1" in sonames
    assert all("/" not in s and ".." not in s for s in sonames)
    # libnvidia-ml still comes, through the fallback directories, under its real soname
    assert "libnvidia-ml.so.1" in sonames


def test_fifo_where_a_library_should_be_does_not_block(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    root = _copy_sim(sim, tmp_path)
    lib = Path(root, f"usr/lib/x86_64-linux-gnu/libnvidia-ptxjitcompiler.so.{sim.driver_version}")
    lib.unlink()
    os.mkfifo(lib)
    h = discover(HostRoot.single(root))  # returns: the FIFO is never opened for reading
    assert "libnvidia-ptxjitcompiler.so.1" not in {x.soname for x in h.libraries}
    assert any("libnvidia-ptxjitcompiler" in w for w in h.warnings)
