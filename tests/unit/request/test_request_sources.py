"""Every request source, with the toolkit's precedence, and the extra device sets."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ocihook.core.errors import RequestError
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.pipeline.extras import request_device_nodes
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.request.nvidia import request_from_spec
from ocihook.request.policy import RequestPolicy
from ocihook.request.sources import VOLUME_MOUNT_DIR
from ocihook.sim import host as simhost


def _config(env: list[str], *, privileged: bool = False, mounts: list[str] = ()) -> dict[str, Any]:
    caps = ["CAP_KILL"] + (["CAP_SYS_ADMIN"] if privileged else [])
    return {
        "root": {"path": "rootfs"},
        "process": {"env": env, "capabilities": {"bounding": caps}},
        "mounts": [
            {"destination": f"{VOLUME_MOUNT_DIR}/{m}", "source": "/dev/null", "type": "bind"}
            for m in mounts
        ],
    }


def test_volume_mounts_win_over_env_when_accepted() -> None:
    cfg = _config(
        ["NVIDIA_VISIBLE_DEVICES=all"], mounts=["1", "GPU-11111111-2222-3333-4444-555555555555"]
    )
    assert request_from_spec(cfg).kind == "all"  # not accepted: env decides
    r = request_from_spec(cfg, policy=RequestPolicy(accept_volume_mounts=True))
    assert (r.kind, r.devices, r.source) == (
        "list",
        ("1", "GPU-11111111-2222-3333-4444-555555555555"),
        "mounts",
    )


def test_cdi_mount_names_become_qualified_names() -> None:
    cfg = _config([], mounts=["cdi/nvidia.com/gpu/0"])
    r = request_from_spec(cfg, policy=RequestPolicy(accept_volume_mounts=True))
    assert r.devices == ("nvidia.com/gpu=0",)


def test_swarm_resource_before_env() -> None:
    cfg = _config(["NVIDIA_VISIBLE_DEVICES=0", "DOCKER_RESOURCE_GPU=2,3"])
    assert request_from_spec(cfg).devices == ("0",)
    r = request_from_spec(cfg, policy=RequestPolicy(swarm_resource=("DOCKER_RESOURCE_GPU",)))
    assert (r.devices, r.source) == (("2", "3"), "DOCKER_RESOURCE_GPU")


def test_unprivileged_env_policy() -> None:
    strict = RequestPolicy(accept_env_unprivileged=False)
    assert request_from_spec(_config(["NVIDIA_VISIBLE_DEVICES=0"]), policy=strict).is_void
    assert request_from_spec(
        _config(["NVIDIA_VISIBLE_DEVICES=0"], privileged=True), policy=strict
    ).devices == ("0",)
    # mounts still work for unprivileged containers: that is what they are for
    both = RequestPolicy(accept_env_unprivileged=False, accept_volume_mounts=True)
    assert request_from_spec(_config([], mounts=["0"]), policy=both).devices == ("0",)


def test_mig_management_is_for_privileged_containers() -> None:
    env = ["NVIDIA_VISIBLE_DEVICES=none", "NVIDIA_MIG_CONFIG_DEVICES=all"]
    with pytest.raises(RequestError) as ei:
        request_from_spec(_config(env), path="/b/config.json")
    assert ei.value.field == "process.env[NVIDIA_MIG_CONFIG_DEVICES]"
    assert "privileged" in str(ei.value) and "/b/config.json" in str(ei.value)
    r = request_from_spec(_config(env, privileged=True))
    assert r.mig_config and not r.mig_monitor and r.privileged
    with pytest.raises(RequestError):
        request_from_spec(_config(["NVIDIA_MIG_MONITOR_DEVICES=0"], privileged=True))


def test_features_and_imex() -> None:
    env = [
        "NVIDIA_VISIBLE_DEVICES=0",
        "NVIDIA_GDS=enabled",
        "NVIDIA_MOFED=disabled",
        "NVIDIA_IMEX_CHANNELS=0,3,3",
        "NVIDIA_NVSWITCH=enabled",
    ]
    r = request_from_spec(_config(env))
    assert r.features == {"gds", "nvswitch"} and r.imex_channels == ("0", "3")
    with pytest.raises(RequestError):
        request_from_spec(_config(["NVIDIA_IMEX_CHANNELS=x"]))
    # IMEX alone makes a GPU-less container that still gets the channel
    r = request_from_spec(_config(["NVIDIA_IMEX_CHANNELS=1"]))
    assert r.kind == "none" and r.imex_channels == ("1",)


@pytest.mark.parametrize(
    ("value", "bad"),
    [
        ("1048576", "1048576"),
        ("1048577", "1048577"),
        ("9999999", "9999999"),
        ("0,2000000", "2000000"),
        ("all,1048576", "1048576"),
        (" 3 , 1048576 ", "1048576"),
    ],
)
def test_imex_channel_out_of_range_refused(value: str, bad: str) -> None:
    """A channel is a minor: below 2**20 (``MINORBITS``); the request says which entry."""
    with pytest.raises(RequestError, match="IMEX channel out of range") as e:
        request_from_spec(_config([f"NVIDIA_IMEX_CHANNELS={value}"]), path="/b/config.json")
    assert e.value.value == bad
    assert e.value.field == "process.env[NVIDIA_IMEX_CHANNELS]"
    assert e.value.path == "/b/config.json"
    assert "1048575" in str(e.value)


@pytest.mark.parametrize("bad", ["-1", "1.5", "some", "0x1"])
def test_imex_malformed_channel_refused(bad: str) -> None:
    with pytest.raises(RequestError, match="malformed IMEX channel") as e:
        request_from_spec(_config([f"NVIDIA_IMEX_CHANNELS=0,{bad}"]))
    assert e.value.value == bad


def test_imex_channel_numbers_for_discovery() -> None:
    """Discovery takes channel numbers (or ``all``), never the request's text."""
    r = request_from_spec(_config(["NVIDIA_IMEX_CHANNELS=1048575,3,0,3"]))
    assert r.imex_channels == ("1048575", "3", "0")
    assert r.imex_channel_numbers == (1048575, 3, 0)
    r = request_from_spec(_config(["NVIDIA_IMEX_CHANNELS=2,all"]))
    assert r.imex_channel_numbers == "all"
    assert request_from_spec(_config(["NVIDIA_VISIBLE_DEVICES=0"])).imex_channel_numbers == ()


def test_extra_nodes_in_the_plan(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    root = str(tmp_path / "host")
    subprocess.run(["cp", "-a", sim.root, root], check=True)
    devices = Path(root, "proc/devices")
    devices.write_text(
        devices.read_text().replace("226 drm\n", "226 drm\n241 nvidia-caps-imex-channels\n")
    )
    if os.geteuid() == 0:
        Path(root, "dev/nvidia-caps-imex-channels").mkdir()
        for n in (0, 3):
            os.mknod(
                os.path.join(root, f"dev/nvidia-caps-imex-channels/channel{n}"),
                0o666 | stat.S_IFCHR,
                os.makedev(241, n),
            )
    host = discover(HostRoot.single(root))
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_IMEX_CHANNELS=3", "NVIDIA_MIG_MONITOR_DEVICES=all"]
    request = request_from_spec(_config(env, privileged=True))
    extra = request_device_nodes(host, request)
    assert [(n.path, n.major, n.minor) for n in extra] == [
        ("/dev/nvidia-caps/nvidia-cap2", simhost.CAPS_MAJOR, 2),
        ("/dev/nvidia-caps-imex-channels/channel3", 241, 3),
    ]
    plan = make_plan(host, request, ContainerLayout(), extra)
    paths = [n.path for n in plan.edits.device_nodes]
    assert "/dev/nvidia-caps/nvidia-cap2" in paths and "/dev/nvidia-caps/nvidia-cap1" not in paths
    assert (241, 3) in {(r.major, r.minor) for r in plan.edits.cgroup_rules}


def test_only_dev_null_mounts_are_requests() -> None:
    """A tmpfs (a Kubernetes emptyDir) at the request path is not a request: only
    /dev/null mounted there is (the mount source is what the device plugin controls)."""
    policy = RequestPolicy(accept_volume_mounts=True, accept_env_unprivileged=False)
    cfg = _config([])
    cfg["mounts"] = [
        {"destination": f"{VOLUME_MOUNT_DIR}/all", "source": "tmpfs", "type": "tmpfs"},
        {"destination": f"{VOLUME_MOUNT_DIR}/imex/3", "source": "/tmp/x", "type": "bind"},
    ]
    assert request_from_spec(cfg, policy=policy).is_void
    cfg["mounts"].append(
        {"destination": "//var/run/nvidia-container-devices/1/", "source": "/dev/./null"}
    )
    r = request_from_spec(cfg, policy=policy)
    assert r.devices == ("1",) and r.imex_channels == ()


def test_untrusted_environment_asks_for_nothing_at_all() -> None:
    """With the environment of unprivileged containers ignored, neither the swarm
    variable nor IMEX/feature variables bring anything."""
    policy = RequestPolicy(accept_env_unprivileged=False, swarm_resource=("DOCKER_RESOURCE_GPU",))
    for env in (
        ["DOCKER_RESOURCE_GPU=all"],
        ["NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_IMEX_CHANNELS=all"],
        ["NVIDIA_GDS=enabled", "NVIDIA_MOFED=enabled"],
    ):
        assert request_from_spec(_config(env), policy=policy).is_void, env
    assert request_from_spec(
        _config(["DOCKER_RESOURCE_GPU=1"], privileged=True), policy=policy
    ).devices == ("1",)


def test_gds_brings_its_nodes_and_mounts(
    sim: simhost.SimulatedHost, tmp_path: Any, bundle_factory: Any
) -> None:
    """NVIDIA_GDS=enabled: /dev/nvidia-fs* nodes, the driver root's /etc/cufile.json and
    /run/udev (a directory: mounted as one in both modes)."""
    from support import need_root_and, register_hook

    from ocihook.appliers.spec import edit_bundle
    from ocihook.pipeline.extras import request_mounts
    from ocihook.sim.demo import run_container

    root = str(tmp_path / "host")
    subprocess.run(["cp", "-a", sim.root, root], check=True)
    devices = Path(root, "proc/devices")
    devices.write_text(devices.read_text().replace("226 drm\n", "226 drm\n242 nvidia-fs\n"))
    Path(root, "etc/cufile.json").write_text('{"logging": {}}\n')
    Path(root, "run/udev/data").mkdir(parents=True)
    Path(root, "run/udev/data/marker").write_text("udev\n")
    host = discover(HostRoot.single(root))
    request = request_from_spec(_config(["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"]))
    assert [(m.destination, m.source) for m in request_mounts(host, request)] == [
        ("/etc/cufile.json", os.path.join(root, "etc/cufile.json")),
        ("/run/udev", os.path.join(root, "run/udev")),
    ]
    need_root_and("runc")
    os.mknod(os.path.join(root, "dev/nvidia-fs0"), 0o666 | stat.S_IFCHR, os.makedev(242, 0))
    script = "cat /etc/cufile.json /run/udev/data/marker; ls -l /dev/nvidia-fs0"
    for mode in ("spec", "hook"):
        bundle = bundle_factory(
            ["sh", "-c", script], ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_GDS=enabled"]
        )
        if mode == "spec":
            assert edit_bundle(bundle, HostRoot.single(root)).written
        else:
            register_hook(bundle, root)
        proc = run_container(bundle, state_root=str(tmp_path / f"runc-{mode}"))
        assert proc.returncode == 0, proc.stderr
        assert '{"logging": {}}' in proc.stdout and "udev" in proc.stdout
        assert "242,   0" in proc.stdout
