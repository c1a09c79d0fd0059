"""Pins of planning: the groups a non-root container user needs are those of the nodes
that others may not both read *and* write — a ``0664`` node (world-readable, not
world-writable) needs its group. Checked on real nodes made with ``mknod`` and described
by discovery, and for every mode with hypothesis."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.hostroot import HostRoot
from ocihook.discovery.devices import device_node
from ocihook.plan.build import node_groups
from ocihook.plan.edits import DeviceNode


@pytest.mark.parametrize(
    ("mode", "needs_group"),
    [(0o664, True), (0o660, True), (0o662, True), (0o666, False), (0o667, False), (0o606, False)],
)
def test_real_nodes_need_their_group_unless_world_read_writable(
    tmp_path: Path, mode: int, needs_group: bool
) -> None:
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    (tmp_path / "dev").mkdir()
    for minor, gid in ((0, 44), (1, 0)):  # a video-group node and a root-group one
        path = tmp_path / f"dev/nvidia{minor}"
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(195, minor))
        os.chown(path, 0, gid)
        os.chmod(path, mode)
    root = HostRoot(driver_root=str(tmp_path), dev_root=str(tmp_path))
    nodes = [device_node(root, f"/dev/nvidia{m}", 195, m) for m in (0, 1)]
    assert [n.file_mode for n in nodes] == [mode, mode]
    assert node_groups(nodes) == ((44,) if needs_group else ())


def test_unset_mode_is_world_read_writable() -> None:
    assert node_groups([DeviceNode("/dev/x", gid=44, file_mode=None)]) == ()
    assert node_groups([DeviceNode("/dev/x", gid=44, file_mode=0o660)] * 2) == (44,)


@given(
    st.lists(st.tuples(st.integers(0, 0o7777), st.integers(0, 2**32 - 1)), min_size=0, max_size=6)
)
def test_node_groups_for_any_modes(specs: list[tuple[int, int]]) -> None:
    """A group is needed when a node has one (not 0) and others lack read or write."""
    nodes = [DeviceNode(f"/dev/n{i}", gid=g, file_mode=m) for i, (m, g) in enumerate(specs)]
    want = sorted({g for m, g in specs if g and not (m & 0o004 and m & 0o002)})
    assert node_groups(nodes) == tuple(want)


def test_old_mig_form_matches_gpu_instance_and_compute_instance(sim: Any) -> None:
    """The simulated host's GPU 1 has MIG devices (gi 1, ci 0) and (gi 2, ci 0):
    ``MIG-<gpu uuid>/2/0`` selects the second; ``/1/1`` (a compute instance that does not
    exist in GPU instance 1) selects nothing and is refused."""
    from ocihook.core.errors import RequestError
    from ocihook.discovery.nvidia import discover
    from ocihook.plan.select import select_devices
    from ocihook.request.nvidia import request_from_env

    gpus = discover(HostRoot.single(sim.root)).gpus
    gpu = gpus[1]
    assert [(m.gi, m.ci) for m in gpu.mig_devices] == [(1, 0), (2, 0)]
    picked = select_devices(
        request_from_env({"NVIDIA_VISIBLE_DEVICES": f"MIG-{gpu.uuid}/2/0"}), gpus
    )
    assert [(s.gpu.index, s.mig and (s.mig.gi, s.mig.ci)) for s in picked] == [(1, (2, 0))]
    with pytest.raises(RequestError):
        select_devices(request_from_env({"NVIDIA_VISIBLE_DEVICES": f"MIG-{gpu.uuid}/1/1"}), gpus)
