"""End to end with real runc: a container running as a non-root user opens NVIDIA device
nodes of mode 0660 group 44 (``NVreg_DeviceFileMode=0660``, ``NVreg_DeviceFileGID=44``),
because ocihook puts group 44 in ``process.user.additionalGids`` — in spec mode from host
discovery, and from a CDI spec ``ocihook cdi generate`` wrote for that host.

The oracle is the container's own view: its groups (``id -G``), the node's mode, owner and
group, and opening ``/dev/nvidia0``: ENXIO (the permission check passed; no driver behind the
node) with the group, EACCES without it in spec mode (the control: the same bundle with the
group removed). Through CDI the node also belongs to the container's user (the CDI
library's rule for nodes without a ``uid``), so the control opens it too.
The driver files are the realistic 535 host's; the dev root is a copy of its ``proc`` and
``sys`` with the driver parameters changed and real nodes made with mknod.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest
from support import need_root_and

from ocihook.appliers.spec import edit_bundle
from ocihook.cdi.generate import generate_spec, spec_bytes
from ocihook.config.options import Options
from ocihook.core.hostroot import HostRoot
from ocihook.discovery.nvidia import discover
from ocihook.sim.demo import run_container

pytestmark = pytest.mark.e2e

VIDEO = 44
USER = 1000
SCRIPT = r"""
echo "GROUPS $(id -G)"
echo "NODE $(stat -c '%a %u %g' /dev/nvidia0)"
echo "OPEN $(cat /dev/nvidia0 2>&1 | head -n 1)"
"""


def _lines(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


@pytest.fixture
def host_root(realistic: dict[str, Any], tmp_path: Path) -> HostRoot:
    need_root_and("runc")
    src = Path(realistic["root"])
    dev = tmp_path / "devroot"
    for part in ("proc", "sys"):
        shutil.copytree(src / part, dev / part, symlinks=True)
    params = dev / "proc/driver/nvidia/params"
    text = params.read_text().replace("DeviceFileGID: 0\n", f"DeviceFileGID: {VIDEO}\n")
    os.chmod(params, 0o644)
    params.write_text(text.replace("DeviceFileMode: 438\n", "DeviceFileMode: 432\n"))
    (dev / "dev").mkdir()
    for n in realistic["device_nodes"]["nodes"]:
        p = dev / n["path"].lstrip("/")
        os.mknod(p, stat.S_IFCHR | 0o660, os.makedev(n["major"], n["minor"]))
        os.chown(p, 0, VIDEO)
        os.chmod(p, 0o660)
    return HostRoot(driver_root=str(src), dev_root=str(dev))


def _as_user(bundle: str) -> None:
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    doc["process"]["user"] = {"uid": USER, "gid": USER}
    path.write_text(json.dumps(doc, indent="\t"))


def _drop_group(bundle: str) -> None:
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    user = doc["process"]["user"]
    user["additionalGids"] = [g for g in user.get("additionalGids", []) if g != VIDEO]
    path.write_text(json.dumps(doc, indent="\t"))


@pytest.mark.parametrize("path", ["spec-mode", "cdi"])
def test_non_root_user_opens_0660_nodes(
    path: str, host_root: HostRoot, bundle_factory: Any, tmp_path: Path
) -> None:
    options = Options()
    env = ["NVIDIA_VISIBLE_DEVICES=0"]
    if path == "cdi":
        spec_dir = tmp_path / "cdi"
        spec_dir.mkdir()
        spec = generate_spec(discover(host_root))
        (spec_dir / "nvidia.json").write_bytes(spec_bytes(spec, "json"))
        options = Options(cdi_spec_dirs=(str(spec_dir),))
        env = ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]
    outs = {}
    for with_group in (True, False):
        bundle = bundle_factory(["sh", "-c", SCRIPT], env, debian=True)
        _as_user(bundle)
        result = edit_bundle(bundle, host_root, options=options)
        assert result.written
        doc = json.loads(Path(bundle, "config.json").read_text())
        assert VIDEO in doc["process"]["user"]["additionalGids"]
        if not with_group:
            _drop_group(bundle)
        proc = run_container(bundle, state_root=str(tmp_path / f"runc-{with_group}"))
        assert proc.returncode == 0, proc.stderr
        outs[with_group] = proc.stdout
    ok, control = outs[True], outs[False]
    enxio = "cat: can't open '/dev/nvidia0': No such device or address"
    assert str(VIDEO) in _lines(ok, "GROUPS")[0].split(), ok
    assert _lines(ok, "OPEN") == [enxio], ok
    assert str(VIDEO) not in _lines(control, "GROUPS")[0].split(), control
    if path == "spec-mode":  # the host's owner, mode and group: the group is what opens it
        assert _lines(ok, "NODE") == [f"660 0 {VIDEO}"], ok
        assert _lines(control, "OPEN") == ["cat: can't open '/dev/nvidia0': Permission denied"]
    else:  # the CDI library gives a node without a uid to the container's user
        assert _lines(ok, "NODE") == [f"660 {USER} {VIDEO}"], ok
        assert _lines(control, "OPEN") == [enxio], control
