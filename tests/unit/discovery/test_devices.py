"""Device nodes besides the GPUs: modeset, DRM, IMEX, feature-gated sets, WSL2.

Fixture trees are plain directories under ``tmp_path`` used as both roots. Cases that need
real character nodes make them with ``os.mknod`` and skip (with the reason printed by
``-ra``) when not run as root; everything else runs everywhere.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import DiscoveryError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.devices import (
    DRM_MAJOR,
    IMEX_CHANNEL_LIMIT,
    WSL_DRIVER_STORE_FILES,
    dri_nodes,
    gdrcopy_nodes,
    gds_nodes,
    imex_channel_nodes,
    modeset_node,
    mofed_nodes,
    nvswitch_nodes,
    wsl_devices,
)
from ocihook.discovery.procfs import parse_char_majors, parse_devices, parse_misc, parse_sysfs_dev
from ocihook.discovery.records import DriDevices, HostDeviceNode, WslFile

IMEX_MAJOR = 507
NVSWITCH_MAJOR = 508
GDRDRV_MAJOR = 509
NVFS_MAJOR = 510
UVERBS_DYNAMIC_MAJOR = 511


def mknod(path: Path, major: int, minor: int, mode: int = 0o666, kind: int = stat.S_IFCHR) -> None:
    """Make a device node (skips the test, with the reason, when not root)."""
    if os.geteuid() != 0:
        pytest.skip("making device nodes (os.mknod) needs root")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mknod(path, kind | mode, os.makedev(major, minor))
    os.chmod(path, mode)


def write(path: Path, text: str | bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)


@pytest.fixture
def host(tmp_path: Path) -> HostRoot:
    return HostRoot.single(str(tmp_path))


def node_tuple(n: HostDeviceNode) -> tuple[str, int, int, bool]:
    return (n.path, n.major, n.minor, n.present)


# -- /dev/nvidia-modeset --------------------------------------------------------------------


def test_modeset_present(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-modeset", 195, 254, mode=0o660)
    node = modeset_node(host, {"nvidia": 195})
    assert node_tuple(node) == ("/dev/nvidia-modeset", 195, 254, True)
    assert node.file_mode == 0o660
    assert node.host_path == str(tmp_path / "dev/nvidia-modeset")
    # drivers before 550.40 call the major nvidia-frontend; no entry at all means 195
    assert modeset_node(host, {"nvidia-frontend": 195}) == node
    assert modeset_node(host, {}) == node


def test_modeset_missing_is_described_not_present(host: HostRoot) -> None:
    node = modeset_node(host, {"nvidia": 195})
    assert node_tuple(node) == ("/dev/nvidia-modeset", 195, 254, False)
    assert node.file_mode == 0o666


def test_modeset_wrong_number_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-modeset", 195, 253)
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        modeset_node(host, {"nvidia": 195})
    assert e.value.value == "char 195:253"


def test_modeset_regular_file_refused(tmp_path: Path, host: HostRoot) -> None:
    write(tmp_path / "dev/nvidia-modeset", "")
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        modeset_node(host, {"nvidia": 195})
    assert e.value.value == "not a character device"


# -- DRM ------------------------------------------------------------------------------------


def add_drm(
    root: Path, sys_id: str, entries: dict[str, str | bytes | None], *, bridge: str = "0000:00"
) -> Path:
    """Make ``sys/devices/pci<bridge>/<sys_id>/drm/<entry>/dev`` and the
    ``sys/bus/pci/devices/<sys_id>`` link the kernel makes (relative, as in real sysfs);
    return ``sys/bus/pci/devices/<sys_id>/drm``."""
    device = root / f"sys/devices/pci{bridge}/{sys_id}"
    for name, dev in entries.items():
        (device / "drm" / name).mkdir(parents=True)
        if dev is not None:
            write(device / "drm" / name / "dev", dev)
    (device / "drm").mkdir(parents=True, exist_ok=True)
    (device / "vendor").write_text("0x10de\n")
    link = root / "sys/bus/pci/devices" / sys_id
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(f"../../../devices/pci{bridge}/{sys_id}")
    return link / "drm"  # the path discovery reads through


def test_dri_two_gpus_with_nodes_and_links(tmp_path: Path, host: HostRoot) -> None:
    drm = add_drm(
        tmp_path,
        "0000:3b:00.0",
        {"card1": "226:1\n", "renderD128": "226:128\n", "controlD65": None},
    )
    (drm / "card1" / "card1-DP-1").mkdir()  # connectors live below the card
    add_drm(tmp_path, "0000:86:00.0", {"card2": "226:2\n", "renderD129": "226:129\n"})
    for name, minor in (("card1", 1), ("renderD128", 128), ("card2", 2), ("renderD129", 129)):
        mknod(tmp_path / "dev/dri" / name, DRM_MAJOR, minor, mode=0o660)
    by_path = tmp_path / "dev/dri/by-path"
    by_path.mkdir()
    (by_path / "pci-0000:3b:00.0-card").symlink_to("../card1")

    first = dri_nodes(host, "00000000:3b:00.0")
    assert first.bus_id == "00000000:3b:00.0"
    assert first.card is not None and first.render is not None
    assert node_tuple(first.card) == ("/dev/dri/card1", 226, 1, True)
    assert node_tuple(first.render) == ("/dev/dri/renderD128", 226, 128, True)
    assert first.card.file_mode == 0o660
    assert first.card.host_path == str(tmp_path / "dev/dri/card1")
    assert first.links == (
        ("/dev/dri/by-path/pci-0000:3b:00.0-card", "../card1"),
        ("/dev/dri/by-path/pci-0000:3b:00.0-render", "../renderD128"),
    )
    assert first.nodes == (first.card, first.render)

    second = dri_nodes(host, "00000000:86:00.0")
    assert [node_tuple(n) for n in second.nodes] == [
        ("/dev/dri/card2", 226, 2, True),
        ("/dev/dri/renderD129", 226, 129, True),
    ]
    assert second.links == (
        ("/dev/dri/by-path/pci-0000:86:00.0-card", "../card2"),
        ("/dev/dri/by-path/pci-0000:86:00.0-render", "../renderD129"),
    )
    # a 4-digit domain and upper case are the same GPU
    assert dri_nodes(host, "0000:86:00.0") == second
    assert dri_nodes(host, "00000000:86:00.0".upper()) == second


def test_dri_missing_host_nodes_described_not_present(tmp_path: Path, host: HostRoot) -> None:
    add_drm(tmp_path, "0000:3b:00.0", {"card0": "226:0\n", "renderD128": "226:128\n"})
    devices = dri_nodes(host, "00000000:3b:00.0")
    assert [node_tuple(n) for n in devices.nodes] == [
        ("/dev/dri/card0", 226, 0, False),
        ("/dev/dri/renderD128", 226, 128, False),
    ]
    assert [link for link, _ in devices.links] == [
        "/dev/dri/by-path/pci-0000:3b:00.0-card",
        "/dev/dri/by-path/pci-0000:3b:00.0-render",
    ]


def test_dri_without_dev_attribute_uses_the_name(tmp_path: Path, host: HostRoot) -> None:
    add_drm(tmp_path, "0000:3b:00.0", {"card3": None})
    devices = dri_nodes(host, "00000000:3b:00.0")
    assert devices.card is not None
    assert node_tuple(devices.card) == ("/dev/dri/card3", 226, 3, False)
    assert devices.render is None
    assert devices.links == (("/dev/dri/by-path/pci-0000:3b:00.0-card", "../card3"),)


def test_dri_no_drm_directory(tmp_path: Path, host: HostRoot) -> None:
    # nvidia-drm not loaded: the PCI device exists, its drm/ does not
    add_drm(tmp_path, "0000:3b:00.0", {})
    (tmp_path / "sys/devices/pci0000:00/0000:3b:00.0/drm").rmdir()
    assert dri_nodes(host, "00000000:3b:00.0") == DriDevices(bus_id="00000000:3b:00.0")
    # no such PCI device at all
    assert dri_nodes(host, "00000000:99:00.0").nodes == ()


def test_dri_wrong_host_node_refused(tmp_path: Path, host: HostRoot) -> None:
    add_drm(tmp_path, "0000:3b:00.0", {"card1": "226:1\n"})
    mknod(tmp_path / "dev/dri/card1", 226, 2)
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        dri_nodes(host, "00000000:3b:00.0")
    assert e.value.path == str(tmp_path / "dev/dri/card1")
    assert e.value.value == "char 226:2"


def test_dri_host_node_of_wrong_type_refused(tmp_path: Path, host: HostRoot) -> None:
    add_drm(tmp_path, "0000:3b:00.0", {"renderD128": "226:128\n"})
    (tmp_path / "dev/dri/renderD128").mkdir(parents=True)
    with pytest.raises(DiscoveryError, match="invalid device node"):
        dri_nodes(host, "00000000:3b:00.0")


@pytest.mark.parametrize(
    "content",
    [
        "garbage\n",
        "",
        "\n",
        "226",
        "226:",
        ":1",
        "226:x\n",
        "226:1:2\n",
        "-226:1\n",
        "226:-1\n",
        " 226:1\n",
        "226:01\n",
        "4096:1\n",
        "226:1048576\n",
        "\uff12\uff12\uff16:1\n",  # fullwidth digits
        b"\xff\xfe\x00",
        "226:1\n\n",
    ],
)
def test_dri_garbage_dev_attribute(tmp_path: Path, host: HostRoot, content: str | bytes) -> None:
    drm = add_drm(tmp_path, "0000:3b:00.0", {"card1": content})
    with pytest.raises(DiscoveryError, match="malformed device number in sysfs") as e:
        dri_nodes(host, "00000000:3b:00.0")
    assert e.value.path == str(drm / "card1" / "dev")
    assert str(drm / "card1" / "dev") in str(e.value)


@pytest.mark.parametrize("content", ["226:5\n", "10:1\n", "226:129\n"])
def test_dri_dev_attribute_not_matching_name(tmp_path: Path, host: HostRoot, content: str) -> None:
    drm = add_drm(tmp_path, "0000:3b:00.0", {"card1": content})
    with pytest.raises(DiscoveryError, match="does not match its name") as e:
        dri_nodes(host, "00000000:3b:00.0")
    assert e.value.path == str(drm / "card1" / "dev")


def test_dri_unreadable_dev_attribute(tmp_path: Path, host: HostRoot) -> None:
    drm = add_drm(tmp_path, "0000:3b:00.0", {"card1": None})
    (drm / "card1" / "dev").mkdir()  # EISDIR on read
    with pytest.raises(DiscoveryError, match="cannot read the DRM device number") as e:
        dri_nodes(host, "00000000:3b:00.0")
    assert e.value.path == str(drm / "card1" / "dev")


def test_dri_two_cards_for_one_gpu(tmp_path: Path, host: HostRoot) -> None:
    add_drm(tmp_path, "0000:3b:00.0", {"card0": "226:0\n", "card1": "226:1\n"})
    with pytest.raises(DiscoveryError, match="more than one DRM card"):
        dri_nodes(host, "00000000:3b:00.0")


@pytest.mark.parametrize("bus_id", ["", "3b:00.0", "0000:3b:00", "0000:3b:00.8", "zz:3b:00.0"])
def test_dri_malformed_bus_id(host: HostRoot, bus_id: str) -> None:
    with pytest.raises(DiscoveryError, match="malformed PCI bus id") as e:
        dri_nodes(host, bus_id)
    assert e.value.value == bus_id


# -- IMEX channels --------------------------------------------------------------------------

IMEX = {"nvidia-caps-imex-channels": IMEX_MAJOR}


def test_imex_all(tmp_path: Path, host: HostRoot) -> None:
    chan = tmp_path / "dev/nvidia-caps-imex-channels"
    mknod(chan / "channel3", IMEX_MAJOR, 3)
    mknod(chan / "channel0", IMEX_MAJOR, 0)
    write(chan / "README", "not a channel")
    write(chan / "channel01", "not a name the driver makes")
    nodes = imex_channel_nodes(host, IMEX, "all")
    assert [node_tuple(n) for n in nodes] == [
        ("/dev/nvidia-caps-imex-channels/channel0", IMEX_MAJOR, 0, True),
        ("/dev/nvidia-caps-imex-channels/channel3", IMEX_MAJOR, 3, True),
    ]


def test_imex_all_without_nodes_or_major(host: HostRoot) -> None:
    assert imex_channel_nodes(host, IMEX, "all") == ()
    assert imex_channel_nodes(host, {}, "all") == ()


def test_imex_some(tmp_path: Path, host: HostRoot) -> None:
    chan = tmp_path / "dev/nvidia-caps-imex-channels"
    mknod(chan / "channel0", IMEX_MAJOR, 0)
    mknod(chan / "channel3", IMEX_MAJOR, 3)
    nodes = imex_channel_nodes(host, IMEX, [3, 7, 3, 0])
    assert [node_tuple(n) for n in nodes] == [
        ("/dev/nvidia-caps-imex-channels/channel0", IMEX_MAJOR, 0, True),
        ("/dev/nvidia-caps-imex-channels/channel3", IMEX_MAJOR, 3, True),
        ("/dev/nvidia-caps-imex-channels/channel7", IMEX_MAJOR, 7, False),
    ]
    assert imex_channel_nodes(host, IMEX, iter([0])) == nodes[:1]
    assert imex_channel_nodes(host, IMEX, []) == ()


def test_imex_highest_channel_accepted(host: HostRoot) -> None:
    (node,) = imex_channel_nodes(host, IMEX, [IMEX_CHANNEL_LIMIT - 1])
    assert (node.minor, node.present) == (2**20 - 1, False)


def test_imex_explicit_channels_need_the_driver_major(host: HostRoot) -> None:
    with pytest.raises(DiscoveryError, match="no IMEX channels") as e:
        imex_channel_nodes(host, {"nvidia": 195}, [0])
    assert e.value.field == "nvidia-caps-imex-channels"
    assert imex_channel_nodes(host, {}, []) == ()


def test_imex_wrong_node_refused(tmp_path: Path, host: HostRoot) -> None:
    write(tmp_path / "dev/nvidia-caps-imex-channels/channel4", "")
    with pytest.raises(DiscoveryError, match="invalid device node"):
        imex_channel_nodes(host, IMEX, [4])
    with pytest.raises(DiscoveryError, match="invalid device node"):
        imex_channel_nodes(host, IMEX, "all")


def test_imex_wrong_minor_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-caps-imex-channels/channel2", IMEX_MAJOR, 5)
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        imex_channel_nodes(host, IMEX, "all")
    assert e.value.value == f"char {IMEX_MAJOR}:5"


# -- NVSwitch -------------------------------------------------------------------------------

NVSWITCH = {"nvidia": 195, "nvidia-nvswitch": NVSWITCH_MAJOR}


def test_nvswitch_present(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255)
    mknod(tmp_path / "dev/nvidia-nvswitch1", NVSWITCH_MAJOR, 1)
    mknod(tmp_path / "dev/nvidia-nvswitch0", NVSWITCH_MAJOR, 0)
    mknod(tmp_path / "dev/nvidia0", 195, 0)  # not a switch
    assert [node_tuple(n) for n in nvswitch_nodes(host, NVSWITCH)] == [
        ("/dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255, True),
        ("/dev/nvidia-nvswitch0", NVSWITCH_MAJOR, 0, True),
        ("/dev/nvidia-nvswitch1", NVSWITCH_MAJOR, 1, True),
    ]


def test_nvswitch_absent(tmp_path: Path, host: HostRoot) -> None:
    assert nvswitch_nodes(host, {"nvidia": 195}) == ()
    # the driver is there but made no node: the control node is still described
    (tmp_path / "dev").mkdir()
    assert [node_tuple(n) for n in nvswitch_nodes(host, NVSWITCH)] == [
        ("/dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 255, False)
    ]


def test_nvswitch_bad_nodes_refused(tmp_path: Path, host: HostRoot) -> None:
    write(tmp_path / "dev/nvidia-nvswitch2", "")
    with pytest.raises(DiscoveryError, match="invalid device node"):
        nvswitch_nodes(host, NVSWITCH)


def test_nvswitch_wrong_minor_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-nvswitchctl", NVSWITCH_MAJOR, 254)
    with pytest.raises(DiscoveryError, match="invalid device node"):
        nvswitch_nodes(host, NVSWITCH)


# -- GDRCopy --------------------------------------------------------------------------------


def test_gdrcopy_present(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/gdrdrv", GDRDRV_MAJOR, 0)
    (node,) = gdrcopy_nodes(host, {"gdrdrv": GDRDRV_MAJOR})
    assert node_tuple(node) == ("/dev/gdrdrv", GDRDRV_MAJOR, 0, True)


def test_gdrcopy_absent(host: HostRoot) -> None:
    assert gdrcopy_nodes(host, {"nvidia": 195}) == ()
    (node,) = gdrcopy_nodes(host, {"gdrdrv": GDRDRV_MAJOR})
    assert node_tuple(node) == ("/dev/gdrdrv", GDRDRV_MAJOR, 0, False)


def test_gdrcopy_stale_node_refused(tmp_path: Path, host: HostRoot) -> None:
    # the module was reloaded with another major; the old node is someone else's device
    mknod(tmp_path / "dev/gdrdrv", GDRDRV_MAJOR - 1, 0)
    with pytest.raises(DiscoveryError, match="invalid device node"):
        gdrcopy_nodes(host, {"gdrdrv": GDRDRV_MAJOR})


# -- GPUDirect Storage ----------------------------------------------------------------------


def test_gds_present(tmp_path: Path, host: HostRoot) -> None:
    for n in (0, 1, 2, 10):
        mknod(tmp_path / f"dev/nvidia-fs{n}", NVFS_MAJOR, n)
    nodes = gds_nodes(host, {"nvidia-fs": NVFS_MAJOR})
    assert [node_tuple(n) for n in nodes] == [
        (f"/dev/nvidia-fs{n}", NVFS_MAJOR, n, True) for n in (0, 1, 2, 10)
    ]


def test_gds_absent(tmp_path: Path, host: HostRoot) -> None:
    assert gds_nodes(host, {"nvidia-fs": NVFS_MAJOR}) == ()  # no /dev at all
    (tmp_path / "dev").mkdir()
    write(tmp_path / "dev/nvidia-fs", "")  # not a name the driver makes
    assert gds_nodes(host, {"nvidia-fs": NVFS_MAJOR}) == ()
    assert gds_nodes(host, {}) == ()


def test_gds_wrong_minor_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/nvidia-fs3", NVFS_MAJOR, 4)
    with pytest.raises(DiscoveryError, match="invalid device node"):
        gds_nodes(host, {"nvidia-fs": NVFS_MAJOR})


# -- MOFED ----------------------------------------------------------------------------------

MISC = " 58 rdma_cm\n183 hw_random\n229 fuse\n"


def test_mofed_present(tmp_path: Path, host: HostRoot) -> None:
    ib = tmp_path / "dev/infiniband"
    mknod(ib / "uverbs1", 231, 193)
    mknod(ib / "uverbs0", 231, 192)
    mknod(ib / "rdma_cm", 10, 58)
    mknod(ib / "umad0", 231, 0)  # not for MOFED applications
    write(tmp_path / "proc/misc", MISC)
    nodes = mofed_nodes(host)
    assert [node_tuple(n) for n in nodes] == [
        ("/dev/infiniband/uverbs0", 231, 192, True),
        ("/dev/infiniband/uverbs1", 231, 193, True),
        ("/dev/infiniband/rdma_cm", 10, 58, True),
    ]
    assert all(n.file_mode == 0o666 for n in nodes)


def test_mofed_absent(tmp_path: Path, host: HostRoot) -> None:
    assert mofed_nodes(host) == ()
    (tmp_path / "dev/infiniband").mkdir(parents=True)
    assert mofed_nodes(host) == ()


def test_mofed_without_proc_misc_takes_the_node_minor(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/rdma_cm", 10, 120)
    (node,) = mofed_nodes(host)
    assert node_tuple(node) == ("/dev/infiniband/rdma_cm", 10, 120, True)
    # /proc/misc not listing rdma_cm nor minor 120: the node is stale but harmless
    write(tmp_path / "proc/misc", "183 hw_random\n")
    assert mofed_nodes(host) == (node,)


def test_mofed_rdma_cm_minor_differs_from_proc_misc(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/rdma_cm", 10, 57)
    write(tmp_path / "proc/misc", MISC)
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        mofed_nodes(host)
    assert "10:58" in str(e.value)


def test_mofed_rdma_cm_minor_of_another_device(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/rdma_cm", 10, 229)
    write(tmp_path / "proc/misc", "183 hw_random\n229 fuse\n")
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        mofed_nodes(host)
    assert "'fuse'" in str(e.value)


@pytest.mark.parametrize("kind", ["block", "wrong major", "file"])
def test_mofed_rdma_cm_not_a_misc_char_device(tmp_path: Path, host: HostRoot, kind: str) -> None:
    path = tmp_path / "dev/infiniband/rdma_cm"
    if kind == "block":
        mknod(path, 10, 58, kind=stat.S_IFBLK)
    elif kind == "wrong major":
        mknod(path, 11, 58)
    else:
        write(path, "")
    with pytest.raises(DiscoveryError, match="invalid device node"):
        mofed_nodes(host)


def test_mofed_uverbs_wrong_number_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/uverbs2", 231, 192)
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        mofed_nodes(host)
    assert "231:194" in str(e.value)


def test_mofed_uverbs_dynamic_region(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/uverbs33", UVERBS_DYNAMIC_MAJOR, 1)
    write(
        tmp_path / "proc/devices",
        f"Character devices:\n231 infiniband_verbs\n{UVERBS_DYNAMIC_MAJOR} infiniband_verbs\n"
        "\nBlock devices:\n  8 sd\n",
    )
    (node,) = mofed_nodes(host)
    assert node_tuple(node) == ("/dev/infiniband/uverbs33", UVERBS_DYNAMIC_MAJOR, 1, True)


def test_mofed_uverbs_dynamic_region_refused(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/uverbs40", UVERBS_DYNAMIC_MAJOR, 8)
    write(tmp_path / "proc/devices", "Character devices:\n231 infiniband_verbs\n")
    with pytest.raises(DiscoveryError, match="invalid device node") as e:
        mofed_nodes(host)
    assert "there is none" in str(e.value)
    # the dynamic major is known but the minor is not N-32
    write(
        tmp_path / "proc/devices",
        f"Character devices:\n231 infiniband_verbs\n{UVERBS_DYNAMIC_MAJOR} infiniband_verbs\n",
    )
    os.unlink(tmp_path / "dev/infiniband/uverbs40")
    mknod(tmp_path / "dev/infiniband/uverbs40", UVERBS_DYNAMIC_MAJOR, 9)
    with pytest.raises(DiscoveryError, match="invalid device node"):
        mofed_nodes(host)


def test_mofed_uverbs_dynamic_region_needs_proc_devices(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/infiniband/uverbs32", UVERBS_DYNAMIC_MAJOR, 0)
    with pytest.raises(DiscoveryError, match="/proc/devices not found"):
        mofed_nodes(host)


# -- WSL2 -----------------------------------------------------------------------------------


def make_wsl(root: Path) -> None:
    lib = root / "usr/lib/wsl/lib"
    for name in (
        "libcuda.so.1.1",
        "libdxcore.so",
        "libnvidia-ml.so.1",
        "libnvwgf2umx.so",
        "libd3d12.so",
        "nvidia-smi",
    ):
        write(lib / name, name)
    (lib / "libcuda.so.1").symlink_to("libcuda.so.1.1")
    (lib / "libcuda.so").symlink_to("/usr/lib/wsl/lib/libcuda.so.1")  # absolute: in the root
    (lib / "libgone.so").symlink_to("libmissing.so")
    (lib / "subdir").mkdir()
    store = root / "usr/lib/wsl/drivers/nv_dispi.inf_amd64_0123456789abcdef"
    for name in ("libcuda.so.1.1", "libcuda_loader.so", "libnvidia-ml.so.1", "nvcubins.bin"):
        write(store / name, "store " + name)
    write(store / "nvidia-smi", "store smi")
    (root / "usr/lib/wsl/drivers/other.inf_amd64_ffff").mkdir()
    write(root / "usr/lib/wsl/drivers/other.inf_amd64_ffff/libd3d12.so", "")
    write(root / "usr/lib/wsl/drivers/README", "")


def test_wsl_present(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/dxg", 10, 125)
    write(tmp_path / "proc/misc", "125 dxg\n183 hw_random\n")
    make_wsl(tmp_path)
    wsl = wsl_devices(host)
    assert wsl is not None
    assert node_tuple(wsl.dxg) == ("/dev/dxg", 10, 125, True)
    lib = str(tmp_path / "usr/lib/wsl/lib")
    assert wsl.lib_dir == lib
    assert wsl.libraries == (
        WslFile(
            "libcuda.so",
            f"{lib}/libcuda.so.1.1",
            "/usr/lib/wsl/lib/libcuda.so.1",
            path="/usr/lib/wsl/lib/libcuda.so",
        ),
        WslFile(
            "libcuda.so.1",
            f"{lib}/libcuda.so.1.1",
            "libcuda.so.1.1",
            path="/usr/lib/wsl/lib/libcuda.so.1",
        ),
        WslFile("libcuda.so.1.1", f"{lib}/libcuda.so.1.1", path="/usr/lib/wsl/lib/libcuda.so.1.1"),
        WslFile("libd3d12.so", f"{lib}/libd3d12.so", path="/usr/lib/wsl/lib/libd3d12.so"),
        WslFile("libdxcore.so", f"{lib}/libdxcore.so", path="/usr/lib/wsl/lib/libdxcore.so"),
        WslFile(
            "libnvidia-ml.so.1",
            f"{lib}/libnvidia-ml.so.1",
            path="/usr/lib/wsl/lib/libnvidia-ml.so.1",
        ),
        WslFile(
            "libnvwgf2umx.so", f"{lib}/libnvwgf2umx.so", path="/usr/lib/wsl/lib/libnvwgf2umx.so"
        ),
        WslFile("nvidia-smi", f"{lib}/nvidia-smi", path="/usr/lib/wsl/lib/nvidia-smi"),
    )
    store = str(tmp_path / "usr/lib/wsl/drivers/nv_dispi.inf_amd64_0123456789abcdef")
    assert wsl.driver_stores == (store,)
    assert {f.name: f.host_path for f in wsl.driver_files} == {
        "libcuda.so.1.1": f"{store}/libcuda.so.1.1",
        "libcuda_loader.so": f"{store}/libcuda_loader.so",
        "libnvidia-ml.so.1": f"{store}/libnvidia-ml.so.1",
        "libdxcore.so": f"{lib}/libdxcore.so",
        "nvcubins.bin": f"{store}/nvcubins.bin",
        "nvidia-smi": f"{store}/nvidia-smi",
    }
    assert [f.name for f in wsl.driver_files] == [
        n for n in WSL_DRIVER_STORE_FILES if n not in wsl.missing
    ]
    assert wsl.missing == (
        "libnvidia-ptxjitcompiler.so.1",
        "libnvidia-ml_loader.so",
        "libnvdxgdmal.so.1",
    )
    assert any("libgone.so" in w for w in wsl.warnings)


def test_wsl_several_driver_stores_warned(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/dxg", 10, 125)
    make_wsl(tmp_path)
    write(tmp_path / "usr/lib/wsl/drivers/nv_a/nvcubins.bin", "first")
    wsl = wsl_devices(host)
    assert wsl is not None and len(wsl.driver_stores) == 2
    assert wsl.driver_stores[0].endswith("/nv_a")
    assert {f.name: f.host_path for f in wsl.driver_files}["nvcubins.bin"].endswith(
        "/nv_a/nvcubins.bin"
    )
    assert any("several driver stores" in w for w in wsl.warnings)


def test_wsl_dxg_without_libraries(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/dxg", 10, 62)
    wsl = wsl_devices(host)
    assert wsl is not None
    assert (wsl.libraries, wsl.driver_stores, wsl.driver_files) == ((), (), ())
    assert wsl.missing == WSL_DRIVER_STORE_FILES
    assert any("no WSL driver libraries" in w for w in wsl.warnings)


def test_wsl_absent(tmp_path: Path, host: HostRoot) -> None:
    make_wsl(tmp_path)  # libraries without /dev/dxg: not a WSL2 host
    assert wsl_devices(host) is None


def test_wsl_dxg_not_a_misc_device(tmp_path: Path, host: HostRoot) -> None:
    write(tmp_path / "dev/dxg", "")
    with pytest.raises(DiscoveryError, match="invalid device node"):
        wsl_devices(host)


def test_wsl_dxg_minor_differs_from_proc_misc(tmp_path: Path, host: HostRoot) -> None:
    mknod(tmp_path / "dev/dxg", 10, 126)
    write(tmp_path / "proc/misc", "125 dxg\n")
    with pytest.raises(DiscoveryError, match="invalid device node"):
        wsl_devices(host)


def test_wsl_link_cannot_leave_the_driver_root(tmp_path: Path) -> None:
    mknod(tmp_path / "root/dev/dxg", 10, 125)
    write(tmp_path / "outside/libcuda.so.1.1", "host file")
    lib = tmp_path / "root/usr/lib/wsl/lib"
    lib.mkdir(parents=True)
    (lib / "libcuda.so.1.1").symlink_to("../../../../../outside/libcuda.so.1.1")
    wsl = wsl_devices(HostRoot.single(str(tmp_path / "root")))
    assert wsl is not None
    assert wsl.libraries == ()  # resolved inside the root: nothing there
    assert all(str(tmp_path / "outside") not in f.host_path for f in wsl.driver_files)


# -- parsers --------------------------------------------------------------------------------


@given(st.integers(0, 4095), st.integers(0, 2**20 - 1), st.booleans())
def test_parse_sysfs_dev_round_trip(major: int, minor: int, newline: bool) -> None:
    text = f"{major}:{minor}" + ("\n" if newline else "")
    assert parse_sysfs_dev(text, path="/sys/x/dev") == (major, minor)


@given(st.text(max_size=30))
def test_parse_sysfs_dev_never_crashes(text: str) -> None:
    try:
        major, minor = parse_sysfs_dev(text, path="/sys/x/dev")
    except DiscoveryError as e:
        assert e.path == "/sys/x/dev"
    else:
        assert 0 <= major < 4096 and 0 <= minor < 2**20
        assert text.rstrip("\n") == f"{major}:{minor}"


@given(
    st.dictionaries(
        st.text(
            alphabet=st.characters(min_codepoint=33, max_codepoint=126), min_size=1, max_size=12
        ),
        st.integers(0, 255),
        max_size=10,
    )
)
def test_parse_misc_round_trip(minors: dict[str, int]) -> None:
    text = "".join(f"{minor:3d} {name}\n" for name, minor in minors.items())
    assert parse_misc(text) == minors


@given(st.text(max_size=200))
def test_parse_misc_never_crashes(text: str) -> None:
    assert all(isinstance(v, int) for v in parse_misc(text).values())


@given(
    st.lists(
        st.tuples(
            st.integers(1, 511),
            st.sampled_from(["nvidia", "nvidia-uvm", "infiniband_verbs", "drm", "misc"]),
        ),
        max_size=12,
    )
)
def test_parse_char_majors(entries: list[tuple[int, str]]) -> None:
    text = (
        "Character devices:\n"
        + "".join(f"{major:3d} {name}\n" for major, name in entries)
        + "\nBlock devices:\n  8 sd\n259 blkext\n"
    )
    expected: dict[str, list[int]] = {}
    for major, name in entries:
        if major not in expected.setdefault(name, []):
            expected[name].append(major)
    result = parse_char_majors(text)
    assert result == {name: tuple(nums) for name, nums in expected.items()}
    # agrees with the first-major parser the rest of discovery uses
    assert {name: nums[0] for name, nums in result.items()} == parse_devices(text)


# -- properties of the module ---------------------------------------------------------------


def test_results_are_immutable(host: HostRoot) -> None:
    devices = DriDevices(bus_id="00000000:3b:00.0")
    with pytest.raises(AttributeError):
        devices.card = None  # type: ignore[misc]
    node = modeset_node(host, {})
    with pytest.raises(AttributeError):
        node.present = True  # type: ignore[misc]
