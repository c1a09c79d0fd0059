"""The Kubernetes plugins in a container: ``--driver-root`` is the host's path,
``--container-driver-root`` where the plugin sees it. The simulated host sits under a fake
``/host`` prefix (``<tmp>/ctr/host``): discovery reads there, and every host path the
plugins hand out (CDI specs, Allocate's DeviceSpecs) is the host's own, naming a file that
exists once the prefix is put back."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytest.importorskip("grpc")

from hypothesis import given
from hypothesis import strategies as st
from support import run_cli

from ocihook.cdi.generate import transform_root
from ocihook.cdi.spec import Spec
from ocihook.core.errors import ConfigError
from ocihook.core.hostroot import HostRoot
from ocihook.k8s.deviceplugin import DevicePluginServer, ResourcePlugin
from ocihook.k8s.inventory import HEALTHY, UNHEALTHY, RootView, build_inventory, health
from ocihook.sim import host as simhost

GPU = "nvidia.com/gpu"
HOOK = "/usr/local/bin/ocihook"
KIND = "k8s.ocihook.io/nvidia-gpu"


@pytest.fixture
def prefixed(tmp_path: Path) -> tuple[simhost.SimulatedHost, str]:
    """The simulated host under ``<tmp>/ctr/host``, as a container that mounts the host's
    ``/`` at ``/host`` sees it (``<tmp>/ctr`` stands for the container's ``/``)."""
    if os.geteuid() != 0:
        pytest.skip("needs root: the simulated GPU nodes are made with mknod")
    prefix = str(tmp_path / "ctr" / "host")
    return simhost.build(prefix), prefix


def host_paths(spec: Spec) -> list[str]:
    """Every host path ``spec`` names: mount sources, device nodes' host paths, hook
    commands and ``--mask-proc`` arguments."""
    out: list[str] = []
    for edits in (spec.container_edits, *(d.container_edits for d in spec.devices)):
        out += [m.source for m in edits.mounts]
        out += [n.host_path or n.path for n in edits.device_nodes]
        for h in edits.hooks:
            out.append(h.path)
            out += [b for a, b in zip(h.args, h.args[1:], strict=False) if a == "--mask-proc"]
    return out


def test_spec_names_host_paths(prefixed: tuple[simhost.SimulatedHost, str]) -> None:
    sim, prefix = prefixed
    view = RootView.of(HostRoot(), container_driver_root=prefix)
    assert (view.container_driver_root, view.container_dev_root) == (prefix, prefix)
    inv = build_inventory(HostRoot(), view=view, hook_command=[HOOK])
    spec = inv.specs[KIND]
    paths = host_paths(spec)
    assert len(paths) > 50
    assert not [p for p in paths if prefix in p or "/ctr/" in p]
    assert "/proc/driver/nvidia" in paths and "/dev/nvidia0" in paths
    missing = [p for p in paths if p != HOOK and not os.path.lexists(prefix + p)]
    assert not missing
    # the same spec as one generated where the host is and moved with transform_root
    local = build_inventory(HostRoot.single(prefix), hook_command=[HOOK]).specs[KIND]
    assert spec == transform_root(local, prefix, "/")
    # the devices: host paths out, health read through the view
    devs = inv.devices[GPU]
    assert devs[2].nodes[-1] == ("/dev/nvidia3", "/dev/nvidia3")
    assert devs[2].driver_entry == f"/proc/driver/nvidia/gpus/{sim.gpus[2].bus_id[4:]}"
    assert {health(d, view=inv.view) for d in devs} == {HEALTHY}
    node = Path(prefix, "dev/nvidia3")
    node.rename(node.with_suffix(".gone"))
    try:
        assert health(devs[2], view=inv.view) == UNHEALTHY
        assert health(devs[3], view=inv.view) == HEALTHY
    finally:
        node.with_suffix(".gone").rename(node)


def test_allocate_and_written_spec(prefixed: tuple[simhost.SimulatedHost, str]) -> None:
    sim, prefix = prefixed
    inv = build_inventory(
        HostRoot(), view=RootView.of(HostRoot(), prefix), hook_command=[HOOK], replicas=2
    )
    plugin = ResourcePlugin(
        GPU, inv.devices[GPU], "/nonexistent", strategies=("envvar",), pass_device_specs=True,
        view=inv.view,
    )  # fmt: skip
    assert plugin.health_of(inv.devices[GPU][0].id) == HEALTHY
    r = plugin.allocate_one([f"{sim.gpus[2].uuid}::1"])
    assert [(d.container_path, d.host_path) for d in r.devices] == [
        ("/dev/nvidiactl", "/dev/nvidiactl"),
        ("/dev/nvidia-uvm", "/dev/nvidia-uvm"),
        ("/dev/nvidia-uvm-tools", "/dev/nvidia-uvm-tools"),
        ("/dev/nvidia3", "/dev/nvidia3"),
    ]
    cdi = Path(prefix).parent / "cdi"
    server = DevicePluginServer(inv, plugin_dir="/nonexistent", cdi_dir=str(cdi))
    assert server.write_specs() == 1
    (written,) = cdi.iterdir()
    assert prefix not in written.read_text()
    assert json.loads(written.read_text())["kind"] == KIND


def test_dra_vendor_specs(prefixed: tuple[simhost.SimulatedHost, str], tmp_path: Path) -> None:
    from ocihook.k8s.dra import DirectoryClaims, DraPlugin

    _, prefix = prefixed
    inv = build_inventory(HostRoot(), view=RootView.of(HostRoot(), prefix), hook_command=[HOOK])
    plugin = DraPlugin(inv, DirectoryClaims(str(tmp_path / "claims")), str(tmp_path / "cdi"))
    plugin.write_vendor_specs()
    (written,) = (tmp_path / "cdi").iterdir()
    assert prefix not in written.read_text()


def test_cli_list_and_features(prefixed: tuple[simhost.SimulatedHost, str]) -> None:
    sim, prefix = prefixed
    proc = run_cli(
        "k8s", "device-plugin", "--driver-root", "/", "--container-driver-root", prefix, "--list"
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert [d["id"] for d in data[GPU]] == [g.uuid for g in sim.gpus]
    assert {d["health"] for d in data[GPU]} == {HEALTHY}
    proc = run_cli("k8s", "features", "--container-driver-root", prefix)
    assert proc.returncode == 0, proc.stderr
    assert "nvidia.com/gpu.count=8" in proc.stdout
    proc = run_cli("k8s", "device-plugin", "--container-driver-root", "host", "--list")
    assert proc.returncode == 10
    assert proc.stderr.count("\n") == 1 and "--container-driver-root" in proc.stderr


def test_root_view_defaults() -> None:
    plain = RootView.of(HostRoot())
    assert plain.identity and plain.seen("/dev/nvidia0") == "/dev/nvidia0"
    # the host's / at /host: both roots there
    view = RootView.of(HostRoot(), "/host")
    assert (view.seen("/dev/nvidia0"), view.to_host("/host/usr/lib/x")) == (
        "/host/dev/nvidia0",
        "/usr/lib/x",
    )
    assert view.to_host("/host") == "/" and view.to_host("/hostx/y") == "/hostx/y"
    # a driver container: /run/nvidia/driver at /driver-root, the dev root where it is
    drv = HostRoot(driver_root="/run/nvidia/driver")
    view = RootView.of(drv, "/driver-root")
    assert view.container_dev_root == "/"
    assert (
        view.to_host("/driver-root/usr/lib/libcuda.so.1")
        == "/run/nvidia/driver/usr/lib/libcuda.so.1"
    )
    assert view.to_host("/dev/nvidia0") == "/dev/nvidia0"
    read = view.read_root(drv)
    assert (read.driver_root, read.dev_root, read.proc("x")) == ("/driver-root", "/", "/proc/x")
    # ... and with the host's / at /host
    view = RootView.of(drv, "/host/run/nvidia/driver", "/host")
    assert view.to_host("/host/dev/nvidia0") == "/dev/nvidia0"
    assert view.to_host("/host/run/nvidia/driver/usr/bin/nvidia-smi") == (
        "/run/nvidia/driver/usr/bin/nvidia-smi"
    )
    assert view.seen("/proc/driver/nvidia") == "/host/proc/driver/nvidia"
    # explicit procfs / sysfs roots follow the view
    read = view.read_root(drv.replace(proc_root="/proc", sys_root="/sys"))
    assert (read.proc_root, read.sys_root) == ("/host/proc", "/host/sys")


def test_root_view_refusals() -> None:
    with pytest.raises(ConfigError, match="must be an absolute path"):
        RootView.of(HostRoot(), "host")
    with pytest.raises(ConfigError, match="must be an absolute path"):
        RootView.of(HostRoot(), None, "dev")
    drv = HostRoot(driver_root="/run/nvidia/driver")
    with pytest.raises(ConfigError, match="both would be read at /") as e:
        RootView.of(drv, "/")
    assert "\n" not in str(e.value)


_part = st.text(alphabet="abc.", min_size=1, max_size=4).filter(lambda s: s not in (".", ".."))
_path = st.lists(_part, max_size=4).map(lambda parts: "/" + "/".join(parts))


@given(prefix=_path, driver=_path, dev=_path, rest=_path)
def test_root_view_round_trip(prefix: str, driver: str, dev: str, rest: str) -> None:
    """The host's tree seen under one prefix (a container mounting the host's ``/`` at
    ``prefix``): every path under either root is seen under the prefix and comes back."""

    def join(*paths: str) -> str:
        return "/" + "/".join(p for path in paths for p in path.split("/") if p)

    def under(path: str) -> str:
        return join(prefix, path)

    view = RootView.of(HostRoot(driver_root=driver, dev_root=dev), under(driver), under(dev))
    for root in (driver, dev):
        path = join(root, rest)
        assert view.seen(path) == under(path)
        assert view.to_host(view.seen(path)) == path
