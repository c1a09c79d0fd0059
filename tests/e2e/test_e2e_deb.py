"""The Debian package that ``scripts/build-deb`` makes, installed into a fresh Debian 12
tree and used from there: dpkg installs it (its postinst byte-compiles the modules and
enables the three units), ``ocihook info`` reads the simulated host, ``ocihook cdi
generate`` writes a spec whose hook runs ``/usr/bin/python3`` with the package's directory
and ``ocihook cdi list`` has nothing to say about it, ``ocihook demo`` runs a busybox
container under the tree's runc with two GPUs, the boot unit's command (``--warm-cache``)
writes the start path's module image and the package's interpreter imports from it; then
``dpkg --purge`` leaves the tree as it was (the file list before
the install and after the purge differ only by dpkg's own log).

The tree is Debian's: ``mmdebstrap`` builds it once from the mirror this machine's apt
uses (``/etc/apt/sources.list.d/debian.sources``, variant ``apt`` plus the package's
dependencies, runc and busybox-static) into a tarball cached in
``${OCIHOOK_CACHE:-~/.cache/ocihook}``; each run unpacks a fresh copy. Everything runs
chrooted into it, in a private mount namespace (``unshare -m``) holding its ``/proc``,
``/sys``, ``/dev`` and tmpfs ``/run`` and ``/tmp``, so nothing reaches the host. Without
the mirror the test skips, saying why, except under ``CI=true`` (CI reaches the
registries), where it fails.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import REPO, need_root_and
from support.debian import base_tarball

#: The only path the purge may leave that was not there before: dpkg's own log, which
#: the first dpkg run in a fresh mmdebstrap tree creates.
DPKG_LOG = "f ./var/log/dpkg.log"


def _file_list(tree: Path) -> set[str]:
    """Every path in ``tree`` with its type (``f ./etc/x``), on its file system only."""
    out = subprocess.run(
        ["find", ".", "-xdev", "-printf", "%y %p\\n"],
        cwd=tree,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return set(out.splitlines())


#: Run in a private mount namespace: the tree bound on itself (runc's pivot_root needs its
#: root to be a mount point), its /proc, /sys, /dev and tmpfs /run and /tmp; then each
#: step chrooted with an empty environment, its output tagged for the test.
INSIDE = r"""
set -eu
T=$1
mount --bind "$T" "$T"
mount -t proc proc "$T/proc"
mount --rbind /sys "$T/sys"
mount --rbind /dev "$T/dev"
mount -t tmpfs tmpfs "$T/run"
mount -t tmpfs tmpfs "$T/tmp"
in_tree() { chroot "$T" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root "$@"; }
in_tree dpkg -i /root/ocihook.deb
echo "WANTS $(ls "$T/etc/systemd/system/multi-user.target.wants" | tr '\n' ' ')"
mkdir "$T/tmp/evil" && echo 'print("EVIL")' >"$T/tmp/evil/sitecustomize.py"
echo "ISOLATED $(in_tree PYTHONPATH=/tmp/evil ocihook --version 2>&1 | tr '\n' ' ')"
for c in ocihook ocihook-runtime nvidia-container-runtime-hook; do
    echo "FIRSTLINE $c $(head -n 1 "$T/usr/bin/$c")"
done
echo "RUNTIME $(in_tree PYTHONPATH=/tmp/evil ocihook-runtime --version 2>&1 | head -n 1)"
echo "PYC $(find "$T/usr/lib/python3/dist-packages/ocihook" -name '*.pyc' | wc -l)"
in_tree python3 -I -c "from ocihook.sim import host; host.build('/tmp/sim')"
in_tree ocihook info --json --driver-root /tmp/sim --dev-root /tmp/sim --gpu-backend procfs \
    >"$T/tmp/info.json"
echo "INFO $(tr -d '\n' <"$T/tmp/info.json")"
in_tree ocihook cdi generate --driver-root /tmp/sim --dev-root /tmp/sim --output /tmp/cdi/nvidia.json
echo "SPEC $(tr -d '\n' <"$T/tmp/cdi/nvidia.json")"
in_tree ocihook cdi list --spec-dir /tmp/cdi 2>"$T/tmp/list.err" | sed 's/^/LIST /'
sed 's/^/LISTERR /' "$T/tmp/list.err"
in_tree ocihook demo --workdir /tmp/demo >"$T/tmp/demo.out" 2>&1 || { cat "$T/tmp/demo.out"; exit 1; }
sed 's/^/DEMO /' "$T/tmp/demo.out"
in_tree ocihook cdi generate --driver-root /tmp/sim --dev-root /tmp/sim --warm-cache \
    --output /var/run/cdi/nvidia.yaml
echo "UNITSPEC $(test -f "$T/run/cdi/nvidia.yaml" && echo written)"
echo "IMAGES $(ls "$T/run/ocihook" | grep -c '^modules-.*\.img$')"
echo "SERVED $(in_tree /usr/bin/python3 -I -S -c "import sys; sys.path += ['/usr/lib/python3/dist-packages']
from ocihook.core import modimage
ok = modimage.install()
import ocihook.commands.cdihook as m
print(ok, type(m.__loader__).__name__)")"
in_tree dpkg --purge ocihook
echo "UNITSPEC $(test -f "$T/run/cdi/nvidia.yaml" && echo left || echo removed)"
"""


def _tagged(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


def test_deb_installs_runs_and_purges_clean(tmp_path: Path) -> None:
    need_root_and("mmdebstrap", "dpkg-deb", "fakeroot", "unshare", "chroot", "find")
    pytest.importorskip("build", reason="pip install -e '.[test]' installs build")
    tarball = base_tarball()
    built = subprocess.run(
        [os.path.join(REPO, "scripts/build-deb"), "--outdir", str(tmp_path), "--no-lintian"],
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    deb = Path(built.stdout.strip().splitlines()[-1])
    assert deb.name == "ocihook_0.1.0-1_all.deb"

    tree = tmp_path / "tree"
    tree.mkdir()
    subprocess.run(["tar", "-C", str(tree), "-xf", str(tarball)], check=True)
    before = _file_list(tree)
    shutil.copy(deb, tree / "root/ocihook.deb")
    proc = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", INSIDE, "sh", str(tree)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout

    # postinst enabled the units (deb-systemd-helper; no systemd runs in the tree)
    assert _tagged(out, "WANTS") == [
        "ocihook-cdi-refresh.path ocihook-cdi-refresh.service ocihook-dev-char-symlinks.service "
    ]
    # the commands start isolated: a PYTHONPATH sitecustomize is not run
    assert _tagged(out, "ISOLATED") == ["ocihook version 0.1.0 "]
    # the commands are Python scripts started by the package's interpreter, isolated and
    # without site: no /bin/sh in between
    assert _tagged(out, "FIRSTLINE") == [
        f"{c} #!/usr/bin/python3 -IS"
        for c in ("ocihook", "ocihook-runtime", "nvidia-container-runtime-hook")
    ]
    assert _tagged(out, "RUNTIME") == ["ocihook-runtime version 0.1.0"]
    assert int(_tagged(out, "PYC")[0]) > 100  # py3compile ran
    # ocihook info on the simulated host, from the installed files
    (info_line,) = _tagged(out, "INFO")
    info = json.loads(info_line)
    assert info["driverVersion"] == "550.127.05"
    assert len(info["gpus"]) == 8
    # the spec's hook runs the package's interpreter with ocihook's program, importing from
    # the package's directory, with this version; cdi list is content
    (spec_line,) = _tagged(out, "SPEC")
    spec = json.loads(spec_line)
    (hook,) = spec["containerEdits"]["hooks"]
    assert hook["path"] == "/usr/bin/python3"
    assert hook["args"][1:5] == [
        "-I",
        "-S",
        "-c",
        "import sys; sys.path += ['/usr/lib/python3/dist-packages']; "
        "from ocihook._main import run; run()",
    ]
    assert hook["args"][5:9] == ["hook", "cdi", "--ocihook-version", "0.1.0"]
    # the purge removes the spec the unit writes (/var/run/cdi/nvidia.yaml, YAML)
    assert _tagged(out, "UNITSPEC") == ["written", "removed"]
    # the unit's command (--warm-cache) wrote the start path's module image, and the
    # package's interpreter takes the CDI hook's modules from it
    assert _tagged(out, "IMAGES") == ["1"]
    assert _tagged(out, "SERVED") == ["True ImageLoader"]
    assert "nvidia.com/gpu=all" in _tagged(out, "LIST")
    assert _tagged(out, "LISTERR") == []
    # the busybox container under the tree's runc: its GPUs and the driver's libcuda
    demo = "\n".join(_tagged(out, "DEMO"))
    assert "7f 45 4c 46" in demo, demo
    assert "cat: can't open '/dev/nvidia0': No such device or address" in demo, demo

    (tree / "root/ocihook.deb").unlink()
    after = _file_list(tree)
    assert after - before - {DPKG_LOG} == set(), "left by the purge"
    assert before - after == set(), "removed by install and purge"
    assert not [p for p in after if "ocihook" in p], shlex.join(sorted(after)[:5])
