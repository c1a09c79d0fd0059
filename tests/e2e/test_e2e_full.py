"""Everything libnvidia-container mounts, in both modes, on the realistic host: 64- and
32-bit libraries, binaries, firmware, the persistenced socket, graphics configuration,
DRM and modeset nodes, and the masked /proc/driver/nvidia."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import REPO, edit_cli, fake_proc_hook, fill_packaged, need_root_and

from ocihook.sim.demo import run_container

SCRIPT = r"""
grep -E ' /usr/bin/nvidia-smi | /usr/lib/firmware/nvidia/| /lib/firmware/nvidia/| /var/run/nvidia-persistenced/socket | /usr/share/vulkan/icd.d/nvidia_icd.json ' /proc/self/mountinfo | while read -r a b c d mp opts rest; do echo "MOUNT $mp $opts"; done
echo "LINK32 $(readlink /usr/lib/i386-linux-gnu/libcuda.so.1)"
echo "ELF32 $(head -c 5 /usr/lib/i386-linux-gnu/libcuda.so.1 | od -An -tx1 | tr -d ' ')"
echo "SMI $(head -c 4 /usr/bin/nvidia-smi | od -An -tx1 | tr -d ' ')"
for n in /dev/nvidia-modeset /dev/dri/card* /dev/dri/renderD*; do echo "NODE $n $(stat -c '%t:%T' $n)"; done
echo "BYPATH $(ls /dev/dri/by-path 2>&1 | tr '\n' ' ')"
echo "PROC $(ls /proc/driver/nvidia | tr '\n' ' ')"
echo "PROCGPUS $(ls /proc/driver/nvidia/gpus | tr '\n' ' ')"
echo "PARAMS $(grep ModifyDeviceFiles /proc/driver/nvidia/params)"
echo "PROCRO $(grep ' /proc/driver/nvidia ' /proc/self/mountinfo | cut -d' ' -f6)"
echo "TOUCH $(touch /proc/driver/nvidia/x 2>&1 | sed 's/.*: //')"
"""


@pytest.mark.parametrize("mode", ["spec", "hook"])
def test_everything_mounted(
    realistic: dict[str, Any],
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    mode: str,
) -> None:
    need_root_and("runc")
    root = realistic["root"]
    if not realistic.get("device_nodes", {}).get("created"):
        pytest.skip("the realistic host was built without /dev nodes (not root)")
    gpus = sorted(realistic["gpus"], key=lambda g: g["index"])
    env = ["NVIDIA_VISIBLE_DEVICES=2", "NVIDIA_DRIVER_CAPABILITIES=all"]
    bundle = bundle_factory(["sh", "-c", SCRIPT], env, debian=True)
    for applet in ("stat", "od", "tr", "sed", "cut", "touch"):
        link = Path(bundle, "rootfs/bin", applet)
        if not link.exists():
            link.symlink_to("busybox")
    fake = fake_proc_hook(bundle, tmp_path)
    if mode == "spec":
        p = edit_cli(bundle, root)
        assert p.returncode == 0, p.stderr
        cfg = Path(bundle, "config.json")
        doc = json.loads(cfg.read_text())
        doc["hooks"]["prestart"] = [fake]
        cfg.write_text(json.dumps(doc))
    else:
        with open(os.path.join(REPO, "packaging/config.json-hooks-snippet.json.in")) as f:
            snippet = json.loads(fill_packaged(f.read()))
        hook = snippet["hooks"]["prestart"][0]
        hook["args"] += ["--driver-root", root, "--dev-root", root]
        cfg = Path(bundle, "config.json")
        doc = json.loads(cfg.read_text())
        doc["hooks"] = {"prestart": [fake, hook]}
        cfg.write_text(json.dumps(doc))
    proc = run_container(bundle, state_root=str(tmp_path / "runc"))
    assert proc.returncode == 0, proc.stderr
    view: dict[str, list[str]] = {}
    for line in proc.stdout.splitlines():
        tag, _, rest = line.partition(" ")
        view.setdefault(tag, []).append(rest)
    mounts = dict(m.split(" ", 1) for m in view["MOUNT"])
    smi = mounts["/usr/bin/nvidia-smi"].split(",")
    assert "ro" in smi and "nosuid" in smi and "nodev" in smi and "noexec" not in smi
    fw = [mp for mp in mounts if "/firmware/nvidia/535.261.03/gsp" in mp]
    assert len(fw) == 2 and all("ro" in mounts[mp].split(",") for mp in fw)
    sock = mounts["/var/run/nvidia-persistenced/socket"].split(",")
    assert "rw" in sock and {"nosuid", "nodev", "noexec"} <= set(sock)
    assert "ro" in mounts["/usr/share/vulkan/icd.d/nvidia_icd.json"].split(",")
    assert view["LINK32"] == ["libcuda.so.535.261.03"]
    assert view["ELF32"] == ["7f454c4601"]  # ELFCLASS32
    assert view["SMI"] == ["7f454c46"]
    nodes = dict(n.split(" ", 1) for n in view["NODE"])
    assert nodes["/dev/nvidia-modeset"] == "c3:fe"
    assert view["PROC"] == ["gpus params registry version "]
    assert view["PROCGPUS"] == [f"{gpus[2]['proc_dir'].rsplit('/', 1)[-1]} "]
    assert view["PARAMS"] == ["ModifyDeviceFiles: 0"]
    assert "ro" in view["PROCRO"][0].split(",")
    assert view["TOUCH"] == ["Read-only file system"]
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()
