"""The shipped device plugin DaemonSet (``packaging/kubernetes/device-plugin-daemonset.yaml``)
end to end through a real CRI: containerd 1.7 (Debian trixie) and 2.x (Debian sid) with
CDI, the test playing kubelet (:class:`support.FakeKubelet`).

The plugin runs as the manifest's container would: its ``command`` and ``args`` read from
the manifest, as a process (``python -m ocihook``) in a mount namespace of its own,
chrooted into a tmpfs holding only the host's system directories (its "image"), the
Python installation, and the manifest's ``volumeMounts`` at their ``mountPath``: the
simulated host at ``/host`` (read-only), the test kubelet's device plugin directory at
``/var/lib/kubelet/device-plugins`` and containerd's CDI directory at ``/var/run/cdi``;
as root without any capability (``capabilities: {drop: [ALL]}``). It sees the simulated
host only at ``/host``; the CDI specs it writes must name the host's paths.

What differs on a test machine, and only that, is substituted (every other argument comes
from the manifest, so a change there changes this test):

- ``ocihook`` (the image's command) -> this interpreter's ``python -m ocihook``, with
  the ocihook under test on ``PYTHONPATH``;
- ``--driver-root=/`` -> the simulated host's root (the host's ``/`` on a node);
  ``--container-driver-root=/host`` is kept: the plugin sees that root at ``/host``;
- the dev root, which the manifest leaves at its default ``/`` (the host's ``/`` again,
  so ``/host`` in the plugin's view) -> ``--dev-root=`` the simulated host's root, added
  (replaced, if the manifest ever gives it);
- ``--hook-path`` (the ocihook the installer DaemonSet puts on the host) -> a script
  running the ocihook under test (the CDI specs' hooks run on the host, by runc);
- ``--metrics-address=0.0.0.0:9400`` -> ``127.0.0.1:0`` (a free port, read from the
  plugin's log; the test's network is the host's);
- the volumes' ``hostPath`` -> the simulated host (``/``), the test's kubelet directory
  and containerd's CDI directory (a volume the test has no stand-in for fails the test).

A node's own ``nvidia.com/gpu`` spec (``ocihook cdi generate`` for the same simulated
host) lies in containerd's CDI directory for the whole module: the plugin's kind must not
collide with it, and the plugin must leave it alone.

Each pod's view is the oracle: the GPU nodes it has are exactly those of its allocation
(``/dev/nvidia<minor>``, ``/dev/dri/...``); each allocated node opens with ENXIO (the
device cgroup allows it; there is no driver) while a node of a GPU not allocated, made in
the pod with ``mknod`` (containerd grants CAP_MKNOD, and the cgroup allows ``mknod`` of
any node), fails to open with EPERM (the cgroup v1 ``devices`` controller denies it; on
this hybrid host runc uses v1); every driver library the plugin's spec mounts reads, in
the pod, as the host's file, an ELF file (the simulated host's libraries are small ELF
shared objects made by :mod:`ocihook.sim.elfwrite`); and ``libcuda.so.1`` resolves: the
``/etc/ld.so.cache`` the spec's hook wrote names it, and its link chain in the pod ends at
a mounted ELF library (the busybox image has no loader to ask). The AMD and Intel specs
mount no libraries (device nodes and ``/dev/dri/by-path`` links only).
"""

from __future__ import annotations

import glob
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("grpc", reason="needs grpcio: pip install 'ocihook[k8s]'")
pytest.importorskip("yaml", reason="needs PyYAML to read the manifest")

from support import (
    OCIHOOK,
    REPO,
    CriContainerd,
    FakeKubelet,
    daemonset_container,
    make_executable,
    need_root_and,
    pod_binds,
    run_cli,
    run_cri_pod,
    start_in_own_mounts,
)

import ocihook
from ocihook.config.options import hook_command
from ocihook.linux import ldcache
from ocihook.sim import host as simhost
from ocihook.sim import vendors

MANIFEST = os.path.join(REPO, "packaging/kubernetes/device-plugin-daemonset.yaml")
GPU = "nvidia.com/gpu"
ENXIO = "No such device or address"
EPERM = "Operation not permitted"

#: The pod's script; its environment names what to look at: OPEN (nodes to open), OTHER
#: (major:minor of nodes to make and open), LIBS (files to copy out), LINKS (links to
#: resolve).
SCRIPT = """\
ls /dev > /out/dev.txt
ls /dev/dri > /out/dri.txt 2>/dev/null
for n in $OPEN; do echo "$n $(cat $n 2>&1 | head -n 1)"; done > /out/open.txt
i=0
for mm in $OTHER; do
  i=$((i+1)); busybox mknod /tmp/other$i c ${mm%:*} ${mm#*:}
  echo "$mm $(cat /tmp/other$i 2>&1 | head -n 1)"
done > /out/other.txt
i=0
for f in $LIBS; do i=$((i+1)); echo "$i $f"; cat $f > /out/lib.$i; done > /out/libs.txt
for f in $LINKS; do echo "$f $(readlink -f $f)"; done > /out/links.txt
cat /etc/ld.so.cache > /out/ld.so.cache 2>/dev/null
true
"""


@pytest.fixture(scope="module")
def nv_host(tmp_path_factory: pytest.TempPathFactory) -> simhost.SimulatedHost:
    return simhost.build(str(tmp_path_factory.mktemp("nv-host")))


@pytest.fixture(scope="module")
def amd_host(tmp_path_factory: pytest.TempPathFactory) -> vendors.SimDrmHost:
    return vendors.build_amd(str(tmp_path_factory.mktemp("amd-host")))


@pytest.fixture(scope="module")
def intel_host(tmp_path_factory: pytest.TempPathFactory) -> vendors.SimDrmHost:
    return vendors.build_intel(str(tmp_path_factory.mktemp("intel-host")))


@pytest.fixture(scope="module", autouse=True)
def nodes_own_spec(cri: CriContainerd, nv_host: simhost.SimulatedHost) -> Iterator[Path]:
    """The node's own ``nvidia.com/gpu`` spec in containerd's CDI directory for the whole
    module; unchanged at the end (the plugin never touches another's spec)."""
    own = Path(cri.cdi_dir) / "nvidia.yaml"
    root = ["--driver-root", nv_host.root, "--dev-root", nv_host.root]
    r = run_cli("cdi", "generate", *root, "--output", str(own))
    assert r.returncode == 0, r.stderr
    before = own.read_bytes()
    assert b"kind: nvidia.com/gpu" in before
    yield own
    assert own.read_bytes() == before
    own.unlink()


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The ``--hook-path`` stand-in: runs the ocihook under test (bound to this
    interpreter and this source tree), as the host's runtime runs hooks."""
    import shlex

    path = tmp_path_factory.mktemp("hook") / "ocihook"
    argv = " ".join(shlex.quote(a) for a in hook_command())
    return make_executable(path, f'#!/bin/sh\nexec {argv} "$@"\n')


class Plugin:
    """The manifest's device plugin container running against one simulated host: its
    process, log, metrics URL, and the kubelet it registered with."""

    def __init__(
        self, proc: subprocess.Popen[bytes], log: Path, kubelet: FakeKubelet, cdi_dir: str
    ) -> None:
        self.proc, self.log, self.kubelet, self.cdi_dir = proc, log, kubelet, cdi_dir

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait(self, predicate: Callable[[], bool], timeout: float = 60) -> None:
        """Wait until ``predicate()`` holds; fail (with the plugin's log) when it does
        not or the plugin exits."""
        deadline = time.monotonic() + timeout
        while not predicate():
            assert self.proc.poll() is None, f"the plugin exited:\n{self.text()}"
            assert time.monotonic() < deadline, f"timed out; plugin log:\n{self.text()}"
            time.sleep(0.05)

    def metrics(self) -> str:
        m = re.search(r"metrics on (http://\S+/metrics)", self.text())
        assert m, self.text()
        with urllib.request.urlopen(m.group(1), timeout=10) as response:
            text: str = response.read().decode()
        return text

    def spec(self, kind: str) -> dict[str, Any]:
        """The CDI spec of ``kind`` the plugin wrote into containerd's CDI directory."""
        specs: list[dict[str, Any]] = []
        for path in glob.glob(os.path.join(self.cdi_dir, "*.json")):
            with open(path) as f:
                doc = json.load(f)
            if doc.get("kind") == kind:
                specs.append(doc)
        assert len(specs) == 1, (kind, specs)
        return specs[0]


def plugin_argv(
    container: dict[str, Any], substitutes: dict[str, str], defaults: dict[str, str]
) -> list[str]:
    """The manifest container's command line with the image's ``ocihook`` replaced by
    :data:`support.OCIHOOK` and the ``--name=value`` options of ``substitutes`` replaced
    (fails when the manifest no longer gives one of them, or gives it otherwise); the
    options of ``defaults`` (which the manifest leaves at their default) replaced when
    given, else added."""
    argv = [*container["command"], *container.get("args", [])]
    assert argv[0] == "ocihook", argv
    out, seen = [*OCIHOOK], set()
    replace = {**defaults, **substitutes}
    for arg in argv[1:]:
        name = arg.partition("=")[0]
        if name in replace:
            assert "=" in arg, f"{arg}: the test substitutes --name=value options"
            out.append(f"{name}={replace[name]}")
            seen.add(name)
        else:
            out.append(arg)
    assert set(substitutes) <= seen, f"the manifest no longer gives {set(substitutes) - seen}"
    out += [f"{k}={v}" for k, v in defaults.items() if k not in seen]
    return out


@pytest.fixture
def plugin(cri: CriContainerd, hook: str, tmp_path: Path) -> Iterator[Callable[[str], Plugin]]:
    """``start(host_root)``: the manifest's device plugin for the simulated host at
    ``host_root``, registered with a :class:`FakeKubelet`; stopped with SIGTERM at the
    end, which it must answer by exiting 0."""
    need_root_and("unshare", "chroot", "setpriv")
    container, volumes = daemonset_container(MANIFEST, "device-plugin")
    kubelet_dir = tmp_path / "dp"  # short: a unix socket path has at most 107 bytes
    kubelet_dir.mkdir()
    started: list[Plugin] = []

    def start(host_root: str) -> Plugin:
        argv = plugin_argv(
            container,
            {
                "--driver-root": host_root,
                "--hook-path": hook,
                "--metrics-address": "127.0.0.1:0",
            },
            {"--dev-root": host_root},
        )
        host = {
            "/": host_root,
            "/var/lib/kubelet/device-plugins": str(kubelet_dir),
            "/var/run/cdi": str(cri.cdi_dir),
        }
        binds = pod_binds(container, volumes, host)
        env = {e["name"]: e["value"] for e in container.get("env", [])}
        package = os.path.dirname(os.path.dirname(os.path.abspath(ocihook.__file__)))
        env.update(PATH="/usr/local/bin:/usr/bin:/bin", PYTHONPATH=package)
        caps = container.get("securityContext", {}).get("capabilities", {})
        root = tmp_path / f"root{len(started)}"
        root.mkdir()
        kubelet = FakeKubelet(str(kubelet_dir))
        log = tmp_path / f"plugin{len(started)}.log"
        proc = start_in_own_mounts(
            argv, root, binds, env=env, log=log, drop_capabilities="ALL" in caps.get("drop", [])
        )
        p = Plugin(proc, log, kubelet, str(cri.cdi_dir))
        started.append(p)
        return p

    yield start
    for p in started:
        if p.proc.poll() is not None:  # exited early: the test has failed on it already
            p.kubelet.stop()
            continue
        p.proc.send_signal(signal.SIGTERM)
        try:
            code = p.proc.wait(20)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()
            pytest.fail(f"the plugin did not stop on SIGTERM:\n{p.text()}")
        p.kubelet.stop()
        assert code == 0, f"plugin exit {code}:\n{p.text()}"


def _library_mounts(spec: dict[str, Any], names: list[str]) -> dict[str, str]:
    """containerPath -> hostPath of the shared libraries the spec mounts for the devices
    ``names`` (and for every device)."""
    edits = [spec.get("containerEdits", {})]
    edits += [d["containerEdits"] for d in spec["devices"] if d["name"] in names]
    return {
        m["containerPath"]: m["hostPath"]
        for e in edits
        for m in e.get("mounts", [])
        if ".so" in os.path.basename(m["containerPath"])
    }


def run_checked_pod(
    cri: CriContainerd,
    out: Path,
    allocation: Any,
    spec: dict[str, Any],
    *,
    open_: list[str],
    other: list[tuple[int, int]],
    host_root: str,
) -> dict[str, Any]:
    """Run a pod with ``allocation`` and check in it: each of ``open_`` opens with ENXIO,
    each node ``other`` (major, minor) made in the pod fails with EPERM, every library
    the spec mounts for the allocated devices is the host's ELF file, and every
    ``libcuda.so.1`` of the pod's ``/etc/ld.so.cache`` resolves to one of them. Returns the
    view: ``dev`` and ``dri`` (the names in ``/dev`` and ``/dev/dri``), ``libs``."""
    kind = spec["kind"]
    names = [c.name.split("=", 1)[1] for c in allocation.cdi_devices if c.name.startswith(kind)]
    assert names, (kind, allocation)
    libs = _library_mounts(spec, names)
    for host_path in libs.values():
        assert host_path.startswith(host_root + "/"), host_path  # the host's path, not /host's
    lib_dirs = sorted({os.path.dirname(p) for p in libs})
    env = {
        "OPEN": " ".join(open_),
        "OTHER": " ".join(f"{a}:{b}" for a, b in other),
        "LIBS": " ".join(sorted(libs)),
        "LINKS": " ".join(f"{d}/libcuda.so.1" for d in lib_dirs),
    }
    run_cri_pod(cri, out, SCRIPT, allocation, env=env)
    opened = dict(line.split(" ", 1) for line in (out / "open.txt").read_text().splitlines())
    assert sorted(opened) == sorted(open_), opened
    for node, result in opened.items():
        assert result.endswith(ENXIO), (node, result)
    made = dict(line.split(" ", 1) for line in (out / "other.txt").read_text().splitlines())
    assert sorted(made) == sorted(f"{a}:{b}" for a, b in other), made
    for node, result in made.items():
        assert result.endswith(EPERM), (node, result)
    copied = dict(line.split(" ", 1)[::-1] for line in (out / "libs.txt").read_text().splitlines())
    assert sorted(copied) == sorted(libs)
    for path, i in copied.items():
        data = (out / f"lib.{i}").read_bytes()
        assert data[:4] == b"\x7fELF", (path, data[:16])
        assert data == Path(libs[path]).read_bytes(), path
    links = {}
    for line in (out / "links.txt").read_text().splitlines():
        link, _, target = line.partition(" ")
        links[link] = target
    if any(os.path.basename(p).startswith("libcuda.so.") for p in libs):
        cache = ldcache.parse((out / "ld.so.cache").read_bytes())
        cuda = [e for e in cache if e.soname == "libcuda.so.1"]
        assert cuda, [e.soname for e in cache]
        for entry in cuda:
            assert links.get(entry.path) in libs, (entry.path, links)
    return {
        "dev": (out / "dev.txt").read_text().split(),
        "dri": (out / "dri.txt").read_text().split() if (out / "dri.txt").exists() else [],
        "libs": libs,
    }


def _nvidia_nodes(view: dict[str, Any]) -> list[str]:
    return sorted(n for n in view["dev"] if n.startswith("nvidia") and n[6:].isdigit())


def test_nvidia(
    cri: CriContainerd,
    plugin: Callable[[str], Plugin],
    nv_host: simhost.SimulatedHost,
    hook: str,
    tmp_path: Path,
) -> None:
    """nvidia.com/gpu: the plugin runs without capabilities in a root of its own and
    writes a spec naming the host's paths and --hook-path; two pods, given two GPUs and
    one (whose minor is not its index); the metrics endpoint counts what happened."""
    p = plugin(nv_host.root)
    kubelet = p.kubelet
    p.wait(lambda: len(kubelet.healthy(GPU)) == 8)
    assert {r.resource_name for r in kubelet.registrations} == {GPU}
    status = Path(f"/proc/{p.proc.pid}/status").read_text()
    assert re.search(r"^CapEff:\s+0+$", status, re.M), status  # capabilities: drop: [ALL]
    assert os.readlink(f"/proc/{p.proc.pid}/root") != "/"  # its own root, not the host's
    spec = p.spec("k8s.ocihook.io/nvidia-gpu")
    assert "/host" not in json.dumps(spec)  # the host's paths, not where the plugin read them
    hooks = [
        h for e in [spec, *spec["devices"]] for h in e.get("containerEdits", e).get("hooks", [])
    ]
    assert hooks and {h["path"] for h in hooks} == {hook}  # --hook-path
    by_uuid = {g.uuid: g for g in nv_host.gpus}
    two = kubelet.preferred(GPU, list(by_uuid), [], 2)
    third = nv_host.gpus[2]
    assert third.minor != third.index and third.uuid not in two
    for i, ids in enumerate((two, [third.uuid])):
        gpus = [by_uuid[u] for u in ids]
        rest = [g for g in nv_host.gpus if g.uuid not in ids]
        resp = kubelet.allocate(GPU, ids).container_responses[0]
        assert [c.name for c in resp.cdi_devices] == [f"k8s.ocihook.io/nvidia-gpu={u}" for u in ids]
        dri = sorted(n for g in gpus for n in (f"card{g.index + 1}", f"renderD{128 + g.index}"))
        view = run_checked_pod(
            cri,
            tmp_path / f"pod{i}",
            resp,
            spec,
            open_=[f"/dev/nvidia{g.minor}" for g in gpus]
            + ["/dev/nvidiactl", "/dev/nvidia-uvm"]
            + [f"/dev/dri/{n}" for n in dri],
            other=[(simhost.NVIDIA_MAJOR, g.minor) for g in rest[:2]]
            + [(226, 128 + rest[0].index)],
            host_root=nv_host.root,
        )
        assert _nvidia_nodes(view) == sorted(f"nvidia{g.minor}" for g in gpus), view["dev"]
        assert sorted(n for n in view["dri"] if n != "by-path") == dri
        assert any(os.path.basename(p).startswith("libcuda.so.") for p in view["libs"])
    metrics = p.metrics()
    assert f'ocihook_k8s_devices{{resource="{GPU}",health="Healthy"}} 8' in metrics
    assert f'ocihook_k8s_allocations_total{{resource="{GPU}"}} 2' in metrics


def test_amd(
    cri: CriContainerd,
    plugin: Callable[[str], Plugin],
    amd_host: vendors.SimDrmHost,
    tmp_path: Path,
) -> None:
    """amd.com/gpu: the pod has its GPU's card and render nodes and /dev/kfd, no other
    GPU's."""
    p = plugin(amd_host.root)
    kubelet = p.kubelet
    p.wait(lambda: len(kubelet.healthy("amd.com/gpu")) == len(amd_host.amd))
    assert {r.resource_name for r in kubelet.registrations} == {"amd.com/gpu"}
    spec = p.spec("k8s.ocihook.io/amd-gpu")
    want = sorted(kubelet.devices["amd.com/gpu"])[1]
    resp = kubelet.allocate("amd.com/gpu", [want]).container_responses[0]
    (name,) = [c.name for c in resp.cdi_devices]
    gpu = amd_host.amd[int(name.split("=")[1])]
    others = [g for g in amd_host.amd if g.render != gpu.render]
    dri = sorted([f"card{gpu.card}", f"renderD{gpu.render}"])
    view = run_checked_pod(
        cri,
        tmp_path / "amd",
        resp,
        spec,
        open_=[f"/dev/dri/{n}" for n in dri] + ["/dev/kfd"],
        other=[(226, g.render) for g in others[:2]],
        host_root=amd_host.root,
    )
    assert sorted(n for n in view["dri"] if n != "by-path") == dri
    assert "kfd" in view["dev"] and _nvidia_nodes(view) == []
    assert view["libs"] == {}


def test_intel(
    cri: CriContainerd,
    plugin: Callable[[str], Plugin],
    intel_host: vendors.SimDrmHost,
    tmp_path: Path,
) -> None:
    """gpu.intel.com/i915 and gpu.intel.com/xe, registered again after a kubelet restart
    (through the bind-mounted directory): a pod given the i915 GPU has its nodes and not
    the xe GPU's."""
    p = plugin(intel_host.root)
    kubelet = p.kubelet
    resources = {"gpu.intel.com/i915", "gpu.intel.com/xe"}
    p.wait(lambda: all(len(kubelet.healthy(r)) == 1 for r in resources))
    assert {r.resource_name for r in kubelet.registrations} == resources
    kubelet.restart()  # a new kubelet.sock, the plugin's sockets gone: it registers again
    p.wait(
        lambda: (
            len(kubelet.registrations) == 4 and all(len(kubelet.healthy(r)) == 1 for r in resources)
        )
    )
    spec = p.spec("k8s.ocihook.io/intel-gpu")
    (want,) = kubelet.healthy("gpu.intel.com/i915")
    resp = kubelet.allocate("gpu.intel.com/i915", [want]).container_responses[0]
    (name,) = [c.name for c in resp.cdi_devices]
    gpu = intel_host.intel[int(name.split("=")[1])]
    (other,) = [g for g in intel_host.intel if g is not gpu]
    dri = sorted([f"card{gpu.card}", f"renderD{gpu.render}"])
    view = run_checked_pod(
        cri,
        tmp_path / "intel",
        resp,
        spec,
        open_=[f"/dev/dri/{n}" for n in dri],
        other=[(226, other.render), (226, other.card)],
        host_root=intel_host.root,
    )
    assert sorted(n for n in view["dri"] if n != "by-path") == dri
    assert view["libs"] == {}
