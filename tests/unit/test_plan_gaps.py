"""Plans on the simulated host for what hand-made mutants of the code got past:
32-bit libraries (``compat32`` selects them, they go to the 32-bit directory), the IPC
socket's ``noexec``, CUDA compat only with ``compute``, and identifiers that must never
reach ``int()`` (a non-hex PCI domain, a non-numeric MIG index)."""

from __future__ import annotations

import pytest

from ocihook.core.errors import RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.driverfiles import select_libraries
from ocihook.discovery.nvidia import NvidiaHost, discover
from ocihook.plan import IPC_MOUNT_OPTIONS, ContainerLayout, Plan, make_plan
from ocihook.request import Request, request_from_env, select_devices
from ocihook.sim import host as simhost


@pytest.fixture(scope="module")
def host(sim: simhost.SimulatedHost) -> NvidiaHost:
    return discover(HostRoot.single(sim.root))


def _plan(host: NvidiaHost, caps: str, layout: ContainerLayout | None = None) -> Plan:
    req = request_from_env({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": caps})
    return make_plan(host, req, layout or ContainerLayout.for_image(True, "x86_64"))


def test_the_simulated_host_has_32bit_libraries(host: NvidiaHost) -> None:
    lib32 = sorted((lib.soname, lib.capability) for lib in host.libraries if lib.elf_class == 32)
    assert lib32 == [("libcuda.so.1", "compute"), ("libnvidia-ml.so.1", "utility")]


def test_32bit_libraries_only_with_compat32(host: NvidiaHost) -> None:
    without = select_libraries(host.libraries, ["compute", "utility"])
    assert {lib.elf_class for lib in without} == {64}
    with32 = select_libraries(host.libraries, ["compute", "utility", "compat32"])
    assert sorted(lib.soname for lib in with32 if lib.elf_class == 32) == [
        "libcuda.so.1",
        "libnvidia-ml.so.1",
    ]


@pytest.mark.parametrize(
    ("layout", "dir64", "dir32"),
    [
        (
            ContainerLayout.for_image(True, "x86_64"),
            "/usr/lib/x86_64-linux-gnu",
            "/usr/lib/i386-linux-gnu",
        ),
        (ContainerLayout(), "/usr/lib64", "/usr/lib32"),
    ],
)
def test_compat32_mounts_into_the_32bit_directory(
    host: NvidiaHost, sim: simhost.SimulatedHost, layout: ContainerLayout, dir64: str, dir32: str
) -> None:
    v = sim.driver_version
    edits = _plan(host, "compute,utility,compat32", layout).edits
    by_dest = {m.destination: m.source for m in edits.mounts}
    src32 = by_dest[f"{dir32}/libcuda.so.{v}"]
    src64 = by_dest[f"{dir64}/libcuda.so.{v}"]
    assert "/i386-linux-gnu/" in src32 and "/x86_64-linux-gnu/" in src64
    links = {s.link: s.target for s in edits.symlinks}
    assert links[f"{dir32}/libcuda.so.1"] == f"libcuda.so.{v}"
    assert f"{dir32}/libcuda.so.1" in edits.ldcache_libraries
    assert f"{dir32}/libnvidia-ml.so.1" in edits.ldcache_libraries
    # no 32-bit file lands in the 64-bit directory
    assert not any("/i386-linux-gnu/" in s for d, s in by_dest.items() if d.startswith(dir64))
    without = _plan(host, "compute,utility", layout).edits
    assert not any(m.destination.startswith(dir32) for m in without.mounts)


def test_ipc_socket_is_mounted_noexec(host: NvidiaHost) -> None:
    edits = _plan(host, "utility").edits
    sockets = [m for m in edits.mounts if m.destination == simhost.PERSISTENCED_SOCKET]
    assert len(sockets) == 1
    assert sockets[0].options == IPC_MOUNT_OPTIONS
    assert {"noexec", "nosuid", "nodev"} <= set(sockets[0].options)
    graphics = _plan(host, "graphics").edits
    assert not any(m.destination == simhost.PERSISTENCED_SOCKET for m in graphics.mounts)


def test_cuda_compat_only_with_compute(host: NvidiaHost, sim: simhost.SimulatedHost) -> None:
    assert _plan(host, "utility").edits.cuda_compat is None
    assert _plan(host, "graphics,utility").edits.cuda_compat is None
    compat = _plan(host, "compute").edits.cuda_compat
    assert compat is not None and compat.host_driver == sim.driver_version


@pytest.mark.parametrize(
    "item",
    [
        "zzzz:07:00.0",  # non-hex domain
        "0000:zz:00.0",
        "0g00:07:00.0",
        "00000000:07:0x.0",
        "0:x",  # non-numeric MIG index
        "x:0",
        "1:",
        ":1",
        "1:\u0663",  # an Arabic-Indic digit: str.isdigit() but not ASCII
        "\u0661:0",
        "1:1:1",
    ],
)
def test_malformed_identifiers_never_reach_int(host: NvidiaHost, item: str) -> None:
    with pytest.raises(RequestError) as err:
        select_devices(Request("list", (item,)), host.gpus)
    assert item in str(err.value)
