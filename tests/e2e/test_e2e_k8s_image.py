"""ocihook's Kubernetes image, built offline by ``scripts/build-image`` (buildah, the
Debian 12 tree of :mod:`support.debian`, the Debian package, the k8s extra's wheels),
then used the way the cluster uses it: its OCI archive unpacked layer by layer, its
default command ``ocihook k8s device-plugin``, grpc and the generated messages importable
there, its device plugin listing a simulated node's GPUs; then the installer --
``ocihook k8s install --host-root /host`` run chrooted in the image with a node's ``/``
bound at ``/host`` -- on a node that has containerd but no
Python at all (busybox-static only): the node runs ``/usr/local/ocihook/bin/ocihook``
(version, ``info`` and ``cdi generate`` on a simulated GPU host), containerd's file
registers ``ocihook-runtime`` with CDI on; installing again writes nothing; ``ocihook k8s
uninstall`` leaves the node as it was. Everything runs in a private mount namespace.
Skips (saying why) without root, buildah, the Debian tree or the wheels.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from support import REPO, need_root_and
from support.debian import base_tarball, unavailable

CONTAINERD_TOML = """\
version = 2

[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
"""

#: The program of the hooks in the CDI specs the payload's ocihook writes on the node: the
#: package's directory there (``ocihook.config.options.cdi_hook_command``).
HOOK_PROGRAM = (
    "import sys; sys.path += ['/usr/local/ocihook/lib/python3/dist-packages']; "
    "from ocihook._main import run; run()"
)

INSIDE = r"""
set -eu
R=$1 H=$2
mkdir -p "$R/host" "$R/proc" "$H/proc"
mount -t proc proc "$R/proc"
mount -t proc proc "$H/proc"
mount --bind "$H" "$R/host"
in_image() { chroot "$R" env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root "$@"; }
on_node() { chroot "$H" env -i PATH=/bin "$@"; }
in_image python3 -I -c 'import grpc, google.protobuf, ocihook.k8s.rpc, ocihook.k8s.deviceplugin; print("GRPC", grpc.__version__)'
in_image ocihook k8s device-plugin --help | head -n 1 | sed 's/^/PLUGINHELP /'
in_image python3 -I -c "from ocihook.sim import host; host.build('/tmp/sim')"
in_image ocihook k8s device-plugin --list --driver-root=/ --container-driver-root=/tmp/sim \
    --gpu-backend procfs 2>/dev/null >"$R/tmp/list.json"
echo "LIST $(tr -d '\n' <"$R/tmp/list.json")"
in_image ocihook k8s install --host-root /host 2>&1 | sed 's/^/INSTALL /'
echo "VERSION $(on_node /usr/local/ocihook/bin/ocihook --version)"
echo "RUNTIME $(on_node /usr/local/ocihook/bin/ocihook-runtime --version)"
P=/usr/local/ocihook
on_node $P/bin/python3 -I -c "from ocihook.sim import host; host.build('/tmp/sim')"
on_node $P/bin/ocihook info --json --driver-root /tmp/sim --dev-root /tmp/sim \
    --gpu-backend procfs >"$H/tmp/info.json"
echo "INFO $(tr -d '\n' <"$H/tmp/info.json")"
on_node $P/bin/ocihook cdi generate --driver-root /tmp/sim --dev-root /tmp/sim \
    --output /tmp/cdi/nvidia.json
echo "SPEC $(tr -d '\n' <"$H/tmp/cdi/nvidia.json")"
on_node $P/bin/python3 -I -S -c "$HOOK_PROGRAM" hook cdi --help | head -n 1 | sed 's/^/HOOKHELP /'
rm -rf "$H/tmp/sim" "$H/tmp/cdi" "$H/tmp/info.json"
in_image ocihook k8s install --host-root /host 2>&1 | sed 's/^/AGAIN /'
in_image ocihook k8s uninstall --host-root /host 2>&1 | sed 's/^/UNINSTALL /'
"""


def _tagged(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


def _unpack_oci_archive(archive: Path, work: Path) -> tuple[dict[str, object], Path]:
    """The image's config and its root file system: the OCI archive's one manifest, its
    layers extracted in order (whiteouts ``.wh.NAME`` remove ``NAME``)."""
    layout = work / "layout"
    layout.mkdir()
    with tarfile.open(archive) as tar:
        tar.extractall(layout, filter="tar")

    def blob(digest: str) -> Path:
        algorithm, hexdigest = digest.split(":")
        return layout / "blobs" / algorithm / hexdigest

    index = json.loads((layout / "index.json").read_text())
    (entry,) = index["manifests"]
    manifest = json.loads(blob(entry["digest"]).read_text())
    config = json.loads(blob(manifest["config"]["digest"]).read_text())
    rootfs = work / "rootfs"
    rootfs.mkdir()
    for layer in manifest["layers"]:
        with tarfile.open(blob(layer["digest"])) as tar:
            members = []
            for m in tar.getmembers():
                base = os.path.basename(m.name)
                if base.startswith(".wh."):
                    gone = rootfs / os.path.dirname(m.name) / base[4:]
                    if gone.is_dir() and not gone.is_symlink():
                        shutil.rmtree(gone)
                    elif gone.exists() or gone.is_symlink():
                        gone.unlink()
                else:
                    members.append(m)
            tar.extractall(rootfs, members=members, filter="fully_trusted")
    return config, rootfs


def _file_list(tree: Path) -> set[str]:
    out = subprocess.run(
        ["find", ".", "-xdev", "-printf", "%y %m %p\\n"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.splitlines())


def test_image_builds_offline_and_installs_onto_a_node_without_python(tmp_path: Path) -> None:
    need_root_and("buildah", "dpkg-deb", "fakeroot", "unshare", "chroot", "find")
    pytest.importorskip("build", reason="pip install -e '.[test]' installs build")
    busybox = shutil.which("busybox")
    if busybox is None:
        pytest.skip("busybox-static is not installed (apt-get install busybox-static)")
    base = base_tarball()
    built = subprocess.run(
        [os.path.join(REPO, "scripts/build-image"), "--outdir", str(tmp_path), "--base", str(base)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if "wheels" in built.stderr and "could not be downloaded" in built.stderr:
        unavailable(built.stderr.strip().splitlines()[-1])
    assert built.returncode == 0, built.stderr[-3000:]
    archive = Path(built.stdout.strip().splitlines()[-1])
    assert archive.name == "ocihook-image_0.1.0.tar"
    (summary,) = [ln for ln in built.stderr.splitlines() if ln.startswith("build-image: ocihook")]
    m = re.fullmatch(
        r"build-image: ocihook:0\.1\.0: ([\d.]+) MB \(\S+ as an OCI archive\), built in (\d+) s",
        summary,
    )
    assert m, summary
    print(summary)
    assert 100 < float(m.group(1)) < 400  # Debian's python3 + the package + grpc

    config, rootfs = _unpack_oci_archive(archive, tmp_path)
    assert config["config"]["Cmd"] == ["ocihook", "k8s", "device-plugin"]  # type: ignore[index]
    payload = (rootfs / "usr/share/ocihook/host-payload.list").read_text().splitlines()
    dests = {ln.split("\t")[0] for ln in payload}
    assert {"libexec/python3", "lib/ld.so", "lib/libc.so.6", "bin/ocihook"} <= dests
    assert "lib/python3/dist-packages/ocihook/_main.py" in dests
    assert "lib/python3/dist-packages/jsonschema/__init__.py" in dests
    assert not [d for d in dests if "grpc" in d]  # the node agents stay in the image

    node = tmp_path / "node"
    for d in ("bin", "usr/local", "etc/containerd", "run/containerd", "tmp"):
        (node / d).mkdir(parents=True)
    shutil.copy(busybox, node / "bin/busybox")
    for name in ("sh", "env", "ls", "tr", "rm"):
        (node / "bin" / name).symlink_to("busybox")
    (node / "etc/containerd/config.toml").write_text(CONTAINERD_TOML)
    (node / "run/containerd/containerd.sock").touch()
    (node / "proc").mkdir()
    before = _file_list(node)
    assert not [p for p in before if "python" in p]  # the node has no Python of its own

    proc = subprocess.run(
        [
            "unshare",
            "-m",
            "--propagation",
            "private",
            "sh",
            "-c",
            INSIDE,
            "sh",
            str(rootfs),
            str(node),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HOOK_PROGRAM": HOOK_PROGRAM},
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert _tagged(out, "GRPC")[0].startswith("1.")
    assert _tagged(out, "PLUGINHELP") == ["Usage: ocihook k8s device-plugin [OPTIONS]"]
    # the image's device plugin on a simulated node seen at /tmp/sim: eight GPUs, whose
    # CDI names are of ocihook's own kind
    listed = json.loads(_tagged(out, "LIST")[0])["nvidia.com/gpu"]
    assert len(listed) == 8
    assert listed[0]["cdi"].startswith("k8s.ocihook.io/nvidia-gpu=GPU-")
    install = _tagged(out, "INSTALL")
    assert re.fullmatch(
        r"ocihook: /usr/local/ocihook: \d{4} files written \(\d+ KiB\), 0 unchanged, 0 removed",
        install[0],
    ), install
    assert install[1:] == [
        "ocihook: /host/etc/containerd/config.toml: updated",
        "ocihook: restart containerd on the node to use ocihook-runtime and CDI",
    ]
    # the node runs ocihook, from the copy
    assert _tagged(out, "VERSION") == ["ocihook version 0.1.0"]
    assert _tagged(out, "RUNTIME") == ["ocihook-runtime version 0.1.0"]
    info = json.loads(_tagged(out, "INFO")[0])
    assert info["driverVersion"] == "550.127.05"
    assert len(info["gpus"]) == 8
    spec = json.loads(_tagged(out, "SPEC")[0])
    # the spec's hook: the payload's interpreter with ocihook's program, which runs there
    (hook,) = spec["containerEdits"]["hooks"]
    assert hook["path"] == hook["args"][0] == "/usr/local/ocihook/bin/python3"
    assert hook["args"][1:5] == ["-I", "-S", "-c", HOOK_PROGRAM]
    assert _tagged(out, "HOOKHELP")[0].startswith("usage: ocihook hook cdi [-h]")
    # again: nothing written
    again = _tagged(out, "AGAIN")
    assert re.fullmatch(
        r"ocihook: /usr/local/ocihook: 0 files written \(0 KiB\), \d{4} unchanged, 0 removed",
        again[0],
    ), again
    assert again[1] == "ocihook: /host/etc/containerd/config.toml: already configured; unchanged"
    # uninstall: containerd's file as it was, the node as it was
    uninstall = _tagged(out, "UNINSTALL")
    assert uninstall[0] == "ocihook: /etc/containerd/config.toml: restored", uninstall
    assert (node / "etc/containerd/config.toml").read_text() == CONTAINERD_TOML
    assert _file_list(node) == before
