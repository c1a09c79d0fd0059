"""Every capability's files on synthetic trees: the rules that the realistic host does not
exercise (TLS ABI note, non-GLVND libraries, sockets, binary search order, bad ELF)."""

from __future__ import annotations

import os
import socket
import subprocess
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.driverfiles import select_libraries
from ocihook.discovery.nvidia import discover
from ocihook.linux import ldcache
from ocihook.linux.elf import read_elf_info
from ocihook.sim import host as simhost
from ocihook.sim.elfwrite import make_executable, make_shared_object

V = simhost.DEFAULT_DRIVER_VERSION
LIB = "/usr/lib/x86_64-linux-gnu"


def _host(sim: simhost.SimulatedHost, tmp_path: Any, libs: list[tuple[str, str, bytes]]) -> str:
    """A tree with the simulated kernel side and exactly ``libs`` (soname, file, bytes)."""
    root = str(tmp_path / "r")
    os.makedirs(root)
    for d in ("proc", "sys"):
        subprocess.run(["cp", "-a", os.path.join(sim.root, d), root], check=True)
    os.makedirs(os.path.join(root, LIB.lstrip("/")))
    entries = []
    for soname, name, data in libs:
        with open(os.path.join(root, LIB.lstrip("/"), name), "wb") as f:
            f.write(data)
        entries.append(ldcache.CacheEntry(soname, f"{LIB}/{name}", 0x0303))
    os.makedirs(os.path.join(root, "etc"), exist_ok=True)
    with open(os.path.join(root, "etc/ld.so.cache"), "wb") as f:
        f.write(ldcache.build(entries))
    return root


def test_tls_needs_the_linux_2_3_99_note(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    good = f"libnvidia-tls.so.{V}"
    root = _host(sim, tmp_path, [(good, good, make_shared_object(good, abi_tag=(2, 3, 99)))])
    h = discover(HostRoot.single(root))
    assert [lib.name for lib in h.libraries] == [good]
    with open(os.path.join(root, LIB.lstrip("/"), good), "wb") as f:
        f.write(make_shared_object(good, abi_tag=(2, 6, 32)))
    h = discover(HostRoot.single(root))
    assert h.libraries == ()
    assert any("TLS ABI note" in w for w in h.warnings)


def test_non_glvnd_only_when_linked_to_nvidia_core(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    core = f"libnvidia-glcore.so.{V}"
    root = _host(
        sim,
        tmp_path,
        [
            (core, core, make_shared_object(core)),
            ("libGL.so.1", f"libGL.so.{V}", make_shared_object("libGL.so.1", needed=[core])),
            (
                "libEGL.so.1",
                f"libEGL.so.{V}",
                make_shared_object("libEGL.so.1", needed=["libc.so.6"]),
            ),
            (
                "libGLX_nvidia.so.0",
                f"libGLX_nvidia.so.{V}",
                make_shared_object("libGLX_nvidia.so.0"),
            ),
        ],
    )
    glvnd = {lib.soname for lib in discover(HostRoot.single(root)).libraries}
    assert glvnd == {core, "libGLX_nvidia.so.0"}
    legacy = {lib.soname for lib in discover(HostRoot.single(root), glvnd=False).libraries}
    assert legacy == {core, "libGL.so.1"}  # libEGL links no NVIDIA core: Mesa's, left out


def test_capability_selection_rules(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    names = {
        "video": ("libnvcuvid.so.1", f"libnvcuvid.so.{V}"),
        "compute": ("libcuda.so.1", f"libcuda.so.{V}"),
        "graphics": ("libEGL_nvidia.so.0", f"libEGL_nvidia.so.{V}"),
        "ngx": ("libnvidia-ngx.so.1", f"libnvidia-ngx.so.{V}"),
    }
    root = _host(sim, tmp_path, [(s, n, make_shared_object(s)) for s, n in names.values()])
    h = discover(HostRoot.single(root))
    caps = {lib.soname: lib.capability for lib in h.libraries}
    assert caps == {s: cap for cap, (s, _n) in names.items()}

    def pick(*c: str) -> set[str]:
        return {lib.soname for lib in select_libraries(h.libraries, c)}

    assert pick("video") == {"libnvcuvid.so.1", "libcuda.so.1"}  # video brings compute
    assert pick("display") == {"libEGL_nvidia.so.0"}  # display brings graphics
    assert pick("ngx") == {"libnvidia-ngx.so.1"}
    assert pick("utility") == set()


def test_32bit_only_with_compat32(sim: simhost.SimulatedHost) -> None:
    h = discover(HostRoot.single(sim.root))
    # the simulated host has 32-bit libcuda and libnvidia-ml: the check below can fail
    assert {lib.soname for lib in h.libraries if lib.elf_class == 32} == {
        "libcuda.so.1",
        "libnvidia-ml.so.1",
    }
    assert all(lib.elf_class == 64 for lib in select_libraries(h.libraries, ["compute"]))
    picked = select_libraries(h.libraries, ["compute", "compat32"])
    assert [lib.soname for lib in picked if lib.elf_class == 32] == ["libcuda.so.1"]
    only64 = discover(HostRoot.single(sim.root), capabilities=["compute"]).libraries
    assert {lib.elf_class for lib in only64} == {64}
    both = discover(HostRoot.single(sim.root), capabilities=["compute", "compat32"]).libraries
    assert {lib.elf_class for lib in both} == {64, 32}


@pytest.mark.parametrize(
    "hwcap_entry",
    [
        {"hwcap": 1 << 63},  # legacy "tls" subdirectory
        {"hwcap": 0x1},
        {"hwcaps_subdir": "x86-64-v3"},  # glibc-hwcaps
    ],
)
def test_hwcap_cache_entries_are_skipped(
    sim: simhost.SimulatedHost, tmp_path: Any, hwcap_entry: dict[str, Any]
) -> None:
    """An optimised variant listed under a hwcap is not the library the container's
    ld.so would load by default: discovery takes the plain entry only."""
    name = f"libcuda.so.{V}"
    root = _host(sim, tmp_path, [("libcuda.so.1", name, make_shared_object("libcuda.so.1"))])
    variant = os.path.join(root, LIB.lstrip("/"), "variant", name)
    os.makedirs(os.path.dirname(variant))
    with open(variant, "wb") as f:
        f.write(make_shared_object("libcuda.so.1"))
    entries = [
        ldcache.CacheEntry("libcuda.so.1", f"{LIB}/variant/{name}", 0x0303, **hwcap_entry),
        ldcache.CacheEntry("libcuda.so.1", f"{LIB}/{name}", 0x0303),
    ]
    with open(os.path.join(root, "etc/ld.so.cache"), "wb") as f:
        f.write(ldcache.build(entries))
    libs = discover(HostRoot.single(root)).libraries
    assert [(lib.soname, lib.path) for lib in libs] == [("libcuda.so.1", f"{LIB}/{name}")]


def test_wrong_class_or_machine_is_skipped(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    name = f"libcuda.so.{V}"
    root = _host(
        sim,
        tmp_path,
        [("libcuda.so.1", name, make_shared_object("libcuda.so.1", elf_class=32, machine="i386"))],
    )
    h = discover(HostRoot.single(root))
    assert h.libraries == ()
    assert any("not a 64-bit x86_64 ELF" in w for w in h.warnings)
    with open(os.path.join(root, LIB.lstrip("/"), name), "wb") as f:
        f.write(b"#!/bin/sh\necho not a library\n")
    assert discover(HostRoot.single(root)).libraries == ()


def test_binaries_sockets_firmware_configs(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _host(sim, tmp_path, [])
    exe = make_executable()

    def put(path: str, data: bytes = b"x", mode: int = 0o644) -> None:
        full = os.path.join(root, path.lstrip("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as f:
            f.write(data)
        os.chmod(full, mode)

    put("/usr/lib/nvidia/current/nvidia-smi", exe, 0o755)
    os.makedirs(os.path.join(root, "usr/bin"))
    os.symlink("/usr/lib/nvidia/current/nvidia-smi", os.path.join(root, "usr/bin/nvidia-smi"))
    put("/usr/sbin/nvidia-cuda-mps-control", exe, 0o755)
    put("/usr/bin/nvidia-debugdump", b"#!/bin/sh\n", 0o755)  # not ELF: skipped
    put(f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin")
    put(f"/usr/lib/firmware/nvidia/{V}/README")
    put("/usr/lib/firmware/nvidia/470.57.02/gsp_tu10x.bin")  # another version
    put("/usr/share/glvnd/egl_vendor.d/10_nvidia.json")
    put("/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json")
    put("/usr/share/egl/egl_external_platform.d/50_mesa.json")
    put("/etc/vulkan/icd.d/nvidia_icd.json")
    put("/etc/OpenCL/vendors/nvidia.icd")
    put(f"/usr/share/nvidia/nvidia-application-profiles-{V}-rc")
    sock_dir = os.path.join(root, "var/run/nvidia-persistenced")
    os.makedirs(sock_dir)
    s = socket.socket(socket.AF_UNIX)
    s.bind(os.path.join(sock_dir, "socket"))
    os.makedirs(os.path.join(root, "tmp/nvidia-mps"))
    os.makedirs(os.path.join(root, "var/run/nvidia-fabricmanager/socket"))  # a dir, not a socket
    try:
        h = discover(HostRoot.single(root))
    finally:
        s.close()
    got = {(f.kind, f.capability, f.path) for f in h.files}
    assert got == {
        ("binary", "utility", "/usr/bin/nvidia-smi"),
        ("binary", "compute", "/usr/sbin/nvidia-cuda-mps-control"),
        ("firmware", "all", f"/usr/lib/firmware/nvidia/{V}/gsp_ga10x.bin"),
        ("config", "graphics", "/usr/share/glvnd/egl_vendor.d/10_nvidia.json"),
        ("config", "graphics", "/usr/share/egl/egl_external_platform.d/15_nvidia_gbm.json"),
        ("config", "graphics", "/etc/vulkan/icd.d/nvidia_icd.json"),
        ("config", "compute", "/etc/OpenCL/vendors/nvidia.icd"),
        ("profile", "graphics", f"/usr/share/nvidia/nvidia-application-profiles-{V}-rc"),
        ("ipc", "utility", "/var/run/nvidia-persistenced/socket"),
        ("ipc", "compute", "/tmp/nvidia-mps"),
    }
    smi = next(f for f in h.files if f.path == "/usr/bin/nvidia-smi")
    assert smi.host_path == os.path.join(root, "usr/lib/nvidia/current/nvidia-smi")
    assert smi.elf_class == 64
    assert any("nvidia-debugdump" in w for w in h.warnings)
    # a compute-only discovery does not look at graphics files
    compute = discover(HostRoot.single(root), capabilities={"compute"})
    assert {f.capability for f in compute.files} <= {"compute", "all"}


def test_missing_proc_devices_is_named(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = _host(sim, tmp_path, [])
    os.unlink(os.path.join(root, "proc/devices"))
    with pytest.raises(DiscoveryError) as ei:
        discover(HostRoot.single(root))
    assert ei.value.path == os.path.join(root, "proc/devices")


VALID = make_shared_object("libx.so.1", needed=["liby.so.2"])


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.binary(max_size=600),
        st.integers(0, len(VALID)).map(lambda n: VALID[:n]),
        st.tuples(st.integers(0, len(VALID) - 1), st.integers(0, 255)).map(
            lambda t: VALID[: t[0]] + bytes([t[1]]) + VALID[t[0] + 1 :]
        ),
    )
)
def test_elf_reader_never_crashes(tmp_path_factory: Any, data: bytes) -> None:
    path = os.path.join(str(tmp_path_factory.getbasetemp()), "fuzz.so")
    with open(path, "wb") as f:
        f.write(data)
    try:
        info = read_elf_info(path)
    except DiscoveryError as e:
        assert e.path == path
    else:
        assert info.elf_class in (32, 64)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            (64, "x86_64", "little"),
            (32, "i386", "little"),
            (64, "aarch64", "big"),
            (32, "arm", "big"),
            (32, "arm", "little"),
        ]
    ),
    st.one_of(st.none(), st.tuples(st.integers(0, 9), st.integers(0, 9), st.integers(0, 200))),
)
def test_abi_note_reader_agrees_with_the_writer(
    tmp_path_factory: Any, kind: tuple[int, str, str], tag: tuple[int, int, int] | None
) -> None:
    from ocihook.linux.elfscan import abi_tag as _abi_tag

    cls, machine, endian = kind
    path = os.path.join(str(tmp_path_factory.getbasetemp()), "note.so")
    with open(path, "wb") as f:
        f.write(
            make_shared_object(
                "libz.so.1", elf_class=cls, machine=machine, endian=endian, abi_tag=tag
            )
        )
    assert _abi_tag(path) == (None if tag is None else (0, *tag))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_abi_note_reader_never_crashes(tmp_path_factory: Any, data: bytes) -> None:
    from ocihook.linux.elfscan import abi_tag as _abi_tag
    from ocihook.linux.elfscan import dynamic_names

    path = os.path.join(str(tmp_path_factory.getbasetemp()), "junk.so")
    with open(path, "wb") as f:
        f.write(b"\x7fELF\x02\x01" + data)
    tag = _abi_tag(path)
    assert tag is None or len(tag) == 4
    names = dynamic_names(path)
    assert names is None or isinstance(names[1], tuple)


@settings(max_examples=200, deadline=None)
@given(
    st.sampled_from(
        [
            (64, "x86_64", "little"),
            (32, "i386", "little"),
            (64, "aarch64", "big"),
            (32, "arm", "big"),
            (64, "ppc64le", "little"),
        ]
    ),
    st.one_of(
        st.none(),
        st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=30),
    ),
    st.lists(
        st.text(st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=20),
        max_size=5,
    ),
)
def test_dynamic_names_agree_with_pyelftools(
    tmp_path_factory: Any, kind: tuple[int, str, str], soname: str | None, needed: list[str]
) -> None:
    from ocihook.linux.elfscan import dynamic_names

    cls, machine, endian = kind
    path = os.path.join(str(tmp_path_factory.getbasetemp()), "dyn.so")
    with open(path, "wb") as f:
        f.write(
            make_shared_object(soname, elf_class=cls, machine=machine, endian=endian, needed=needed)
        )
    info = read_elf_info(path)
    assert dynamic_names(path) == (info.soname, info.needed) == (soname, tuple(needed))


def test_elfscan_agrees_with_pyelftools_on_real_driver_files(realistic: dict[str, Any]) -> None:
    from ocihook.linux.elfscan import abi_tag, dynamic_names

    h = discover(HostRoot.single(realistic["root"]))
    assert len(h.libraries) > 40
    for lib in h.libraries:
        info = read_elf_info(lib.host_path)
        assert dynamic_names(lib.host_path) == (info.soname, info.needed), lib.host_path
    tls = [lib for lib in h.libraries if lib.name.startswith("libnvidia-tls")]
    assert tls and all(abi_tag(lib.host_path) == (0, 2, 3, 99) for lib in tls)
