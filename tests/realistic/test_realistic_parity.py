"""What a container gets on the realistic 535.261.03 host, against what the NVIDIA
Container Toolkit gives:

* device nodes that are not world read-writable (``NVreg_DeviceFileMode=0660``,
  ``NVreg_DeviceFileGID=44``, as ``/proc/driver/nvidia/params`` reports them) put their
  group in ``process.user.additionalGids`` (spec mode) and in a generated CDI spec;
* the toolkit's development links and the GBM backend link;
* a CDI spec's libraries, mounted at their host directories (Debian's ``nvidia/current``),
  stay in the cache when the image runs ``ldconfig`` itself (the ``ld.so.conf.d`` drop-in).

The driver files are the realistic host's; the dev root (``/dev``, ``/proc``, ``/sys``) is a
copy of its ``proc``/``sys`` with the driver parameters changed, and, as root, real character
device nodes mode 0660 group 44.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ocihook.appliers.spec import edit_bundle
from ocihook.cdi.generate import generate_spec
from ocihook.cdi.hookargs import hook_data
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.plan.build import ContainerLayout, make_plan
from ocihook.request.nvidia import request_from_env

pytestmark = pytest.mark.realistic

VIDEO = 44
LIBDIR = "/usr/lib/x86_64-linux-gnu"


def _dev_root(realistic: dict[str, Any], tmp: Path, *, nodes: bool) -> Path:
    """A dev root like the realistic host's whose driver makes 0660 nodes of group 44;
    with ``nodes`` (root only), those nodes exist."""
    src = Path(realistic["root"])
    dev = tmp / "devroot"
    for part in ("proc", "sys"):
        shutil.copytree(src / part, dev / part, symlinks=True)
    params = dev / "proc/driver/nvidia/params"
    text = params.read_text()
    text = text.replace("DeviceFileGID: 0\n", f"DeviceFileGID: {VIDEO}\n")
    text = text.replace("DeviceFileMode: 438\n", "DeviceFileMode: 432\n")
    os.chmod(params, 0o644)
    params.write_text(text)
    (dev / "dev").mkdir()
    if nodes:
        for n in realistic["device_nodes"]["nodes"]:
            p = dev / n["path"].lstrip("/")
            os.mknod(p, stat.S_IFCHR | 0o660, os.makedev(n["major"], n["minor"]))
            os.chown(p, 0, VIDEO)
            os.chmod(p, 0o660)
    return dev


@pytest.fixture(params=["nodes-missing", "nodes-present"])
def host_root(
    request: pytest.FixtureRequest, realistic: dict[str, Any], tmp_path: Path
) -> HostRoot:
    present = request.param == "nodes-present"
    if present and os.geteuid() != 0:
        pytest.skip("making device nodes needs root")
    dev = _dev_root(realistic, tmp_path, nodes=present)
    return HostRoot(driver_root=realistic["root"], dev_root=str(dev))


def test_plan_gives_the_group_of_0660_nodes(host_root: HostRoot) -> None:
    host = discover(host_root)
    plan = make_plan(host, request_from_env({"NVIDIA_VISIBLE_DEVICES": "1"}), ContainerLayout())
    nodes = {n.path: (n.file_mode, n.gid) for n in plan.edits.device_nodes}
    assert nodes == {
        "/dev/nvidiactl": (0o660, VIDEO),
        "/dev/nvidia-uvm": (0o660, VIDEO),
        "/dev/nvidia-uvm-tools": (0o660, VIDEO),
        "/dev/nvidia1": (0o660, VIDEO),
    }
    assert plan.edits.additional_gids == (VIDEO,)
    assert plan.to_dict()["containerEdits"]["additionalGids"] == [VIDEO]


def test_spec_mode_writes_additional_gids(
    host_root: HostRoot, bundle_factory: Any, tmp_path: Path
) -> None:
    bundle = bundle_factory(["true"], ["NVIDIA_VISIBLE_DEVICES=0"], debian=True)
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    doc["process"]["user"] = {"uid": 1000, "gid": 1000, "additionalGids": [1000, VIDEO]}
    path.write_text(json.dumps(doc))
    result = edit_bundle(bundle, host_root)
    assert result.written
    after = json.loads(path.read_text())
    assert after["process"]["user"]["additionalGids"] == [1000, VIDEO]  # not repeated
    devices = {d["path"]: (d["fileMode"], d["gid"]) for d in after["linux"]["devices"]}
    assert devices["/dev/nvidia0"] == (0o660, VIDEO)
    del doc["process"]["user"]["additionalGids"]
    path.write_text(json.dumps(doc))
    edit_bundle(bundle, host_root)
    assert json.loads(path.read_text())["process"]["user"]["additionalGids"] == [VIDEO]


def test_generated_cdi_spec_lists_the_group(host_root: HostRoot) -> None:
    spec = generate_spec(discover(host_root), hook_command=("/usr/bin/ocihook",))
    assert spec.container_edits.additional_gids == (VIDEO,)
    assert spec.version == "0.7.0"  # additionalGids needs it
    assert {(n.path, n.gid, n.file_mode) for n in spec.container_edits.device_nodes} >= {
        ("/dev/nvidiactl", VIDEO, 0o660)
    }
    gpu0 = next(d for d in spec.devices if d.name == "0")
    assert [(n.path, n.gid) for n in gpu0.container_edits.device_nodes] == [("/dev/nvidia0", VIDEO)]


def test_world_writable_host_needs_no_group(realistic: dict[str, Any]) -> None:
    host = discover(HostRoot.single(realistic["root"]))
    plan = make_plan(host, request_from_env({"NVIDIA_VISIBLE_DEVICES": "all"}), ContainerLayout())
    assert plan.edits.additional_gids == ()
    spec = generate_spec(host, hook_command=("/usr/bin/ocihook",))
    assert spec.container_edits.additional_gids == ()
    assert spec.version < "0.7.0"


def _links(plan: Any) -> dict[str, str]:
    return {s.link: s.target for s in plan.edits.symlinks}


def test_development_links_as_the_toolkit(realistic: dict[str, Any]) -> None:
    host = discover(HostRoot.single(realistic["root"]))
    everything = "compute,utility,video,graphics,ngx,display"
    plan = make_plan(
        host,
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "0", "NVIDIA_DRIVER_CAPABILITIES": everything}),
        ContainerLayout.for_image(True, "x86_64"),
    )
    links = _links(plan)
    version = realistic["driver_version"]
    for link, target in {
        "libcuda.so": "libcuda.so.1",
        "libnvidia-ml.so": "libnvidia-ml.so.1",
        "libnvcuvid.so": "libnvcuvid.so.1",
        "libnvidia-encode.so": "libnvidia-encode.so.1",
        "libnvidia-fbc.so": "libnvidia-fbc.so.1",
        "libnvidia-ngx.so": "libnvidia-ngx.so.1",
        "libnvidia-opticalflow.so": "libnvidia-opticalflow.so.1",
        "libGLX_indirect.so.0": "libGLX_nvidia.so.0",
        "libnvidia-vulkan-producer.so": f"libnvidia-vulkan-producer.so.{version}",
        "gbm/nvidia-drm_gbm.so": "../libnvidia-allocator.so.1",
    }.items():
        assert links.get(f"{LIBDIR}/{link}") == target, link
    mounts = {m.destination for m in plan.edits.mounts}
    assert f"{LIBDIR}/libnvidia-vulkan-producer.so.{version}" in mounts
    # compute alone: no GBM backend, no graphics links
    compute = make_plan(
        host,
        request_from_env({"NVIDIA_VISIBLE_DEVICES": "0"}),
        ContainerLayout.for_image(True, "x86_64"),
    )
    links = _links(compute)
    assert f"{LIBDIR}/gbm/nvidia-drm_gbm.so" not in links
    assert f"{LIBDIR}/libGLX_indirect.so.0" not in links
    assert links[f"{LIBDIR}/libnvidia-ml.so"] == "libnvidia-ml.so.1"
    assert links[f"{LIBDIR}/libcuda.so"] == "libcuda.so.1"


def test_cdi_spec_hook_makes_the_same_links(realistic: dict[str, Any]) -> None:
    host = discover(HostRoot.single(realistic["root"]))
    spec = generate_spec(host, hook_command=("/usr/bin/ocihook",))
    (hook,) = spec.container_edits.hooks
    args = list(hook.args)
    data = hook_data(args)
    assert data is not None
    links = set(data[1])
    current = f"{LIBDIR}/nvidia/current"
    assert f"../libnvidia-allocator.so.1::{current}/gbm/nvidia-drm_gbm.so" in links
    assert f"libGLX_nvidia.so.0::{current}/libGLX_indirect.so.0" in links
    assert f"libnvidia-ml.so.1::{current}/libnvidia-ml.so" in links
    assert "--ld-so-conf" in args


def _ldconfig_lists(rootfs: Path, soname: str) -> list[str]:
    out = subprocess.run(
        ["ldconfig", "-p", "-C", str(rootfs / "etc/ld.so.cache")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split("=> ")[1] for line in out.splitlines() if line.strip().startswith(soname)]


def test_image_ldconfig_keeps_libraries_at_host_directories(
    realistic: dict[str, Any], tmp_path: Path
) -> None:
    """The image re-runs ldconfig (many entrypoints do): with the drop-in the CDI spec's
    libcuda.so.1 (at Debian's nvidia/current, as the spec mounts it) stays in the cache;
    without it, it is gone."""
    if os.geteuid() != 0 or shutil.which("ldconfig") is None:
        pytest.skip("needs root (ldconfig -r chroots) and ldconfig")
    from ocihook.appliers.live import create_container_hook
    from ocihook.appliers.live.libraries import LD_SO_CONF_DROP_IN
    from ocihook.oci.bundle import load_bundle
    from ocihook.sim.demo import make_busybox_bundle

    host = discover(HostRoot.single(realistic["root"]))
    cuda = next(lib for lib in host.libraries if lib.soname == "libcuda.so.1")
    assert "/nvidia/current/" in cuda.path
    results = {}
    for with_conf in (True, False):
        bundle = make_busybox_bundle(str(tmp_path / f"b{with_conf}"), ["true"], [], debian=True)
        rootfs = Path(bundle, "rootfs")
        (rootfs / "etc/ld.so.conf.d").mkdir(parents=True, exist_ok=True)
        (rootfs / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
        (rootfs / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(f"{LIBDIR}\n")
        # the library where the CDI mount puts it (a hard link or copy: ldconfig -r chroots)
        dest = rootfs / cuda.path.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(cuda.host_path, dest)
        except OSError:
            shutil.copy2(cuda.host_path, dest)
        soname_link = f"{os.path.dirname(cuda.path)}/libcuda.so.1"
        create_container_hook(
            load_bundle(bundle),
            [f"{cuda.name}::{soname_link}"],
            [soname_link],
            ld_so_conf=with_conf,
        )
        assert _ldconfig_lists(rootfs, "libcuda.so.1") == [soname_link]  # the hook's cache
        drop_in = rootfs / LD_SO_CONF_DROP_IN.lstrip("/")
        if with_conf:
            assert drop_in.read_text().splitlines()[1:] == [os.path.dirname(cuda.path)]
            assert stat.S_IMODE(drop_in.stat().st_mode) == 0o644
        else:
            assert not drop_in.exists()
        subprocess.run(["ldconfig", "-r", str(rootfs)], check=True, capture_output=True)
        results[with_conf] = _ldconfig_lists(rootfs, "libcuda.so.1")
    assert results == {True: [soname_link], False: []}
