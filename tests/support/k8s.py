"""Kubernetes: :class:`FakeKubelet` (the kubelet's side of the device plugin API) and
containerd with CRI and CDI from Debian's packages (:func:`containerd_from_deb`,
:func:`start_cri_containerd`, :func:`cri_messages`, :func:`cri_client`,
:func:`busybox_oci_archive`), a pod run through CRI (:func:`run_cri_pod`), and a shipped
DaemonSet's container run as its process in a mount namespace of its own
(:func:`daemonset_container`, :func:`pod_binds`, :func:`start_in_own_mounts`)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.engines import stop_containerd
from support.paths import need_root_and
from support.processes import mounts_under


class FakeKubelet:
    """What kubelet's device manager does with a device plugin, in a test: it serves
    ``v1beta1.Registration`` on ``<plugin_dir>/kubelet.sock``, and for every plugin that
    registers it connects to the plugin's endpoint, reads ``GetDevicePluginOptions`` and
    keeps one ``ListAndWatch`` stream open (the latest list per resource in
    :attr:`devices`). :meth:`allocate` / :meth:`preferred` call the plugin as the device
    manager does at pod admission. :meth:`restart` re-creates ``kubelet.sock`` and removes
    the plugins' sockets, as a restarted kubelet does. Needs grpcio (``ocihook[k8s]``)."""

    def __init__(self, plugin_dir: str) -> None:
        import threading

        self.plugin_dir = plugin_dir
        self.registrations: list[Any] = []
        self.devices: dict[str, dict[str, str]] = {}
        self.updates: dict[str, int] = {}
        self.numa: dict[str, dict[str, list[int]]] = {}
        self.endpoints: dict[str, str] = {}
        self._cond = threading.Condition()
        self._channels: list[Any] = []
        self._server: Any = None
        self.start()

    def start(self) -> None:
        from ocihook.k8s import rpc

        self._server = rpc.unix_server(os.path.join(self.plugin_dir, "kubelet.sock"))
        rpc.add_service(self._server, rpc.REGISTRATION, self)

    def Register(self, request: Any, context: Any) -> Any:
        import threading

        from ocihook.k8s import rpc
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        if request.version != "v1beta1":
            context.abort(__import__("grpc").StatusCode.INVALID_ARGUMENT, "bad version")
        with self._cond:
            self.registrations.append(request)
            self.endpoints[request.resource_name] = request.endpoint
        channel = rpc.unix_channel(os.path.join(self.plugin_dir, request.endpoint))
        self._channels.append(channel)
        plugin = rpc.client(channel, rpc.DEVICE_PLUGIN)
        threading.Thread(
            target=self._watch, args=(request.resource_name, plugin), daemon=True
        ).start()
        return dp.Empty()

    def _watch(self, resource: str, plugin: Any) -> None:
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        try:
            for response in plugin.ListAndWatch(dp.Empty(), wait_for_ready=True, timeout=600):
                with self._cond:
                    self.devices[resource] = {d.ID: d.health for d in response.devices}
                    self.numa[resource] = {
                        d.ID: [n.ID for n in d.topology.nodes] for d in response.devices
                    }
                    self.updates[resource] = self.updates.get(resource, 0) + 1
                    self._cond.notify_all()
        except Exception:  # the stream ends when the plugin or this kubelet stops
            return

    def wait(self, predicate: Callable[[], bool], timeout: float = 20) -> None:
        """Wait until ``predicate()`` holds (evaluated under the lock); fail otherwise."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    pytest.fail(f"kubelet harness: condition not met; devices {self.devices}")
                self._cond.wait(left)

    def plugin(self, resource: str) -> Any:
        """A client of the plugin registered for ``resource``."""
        from ocihook.k8s import rpc

        channel = rpc.unix_channel(os.path.join(self.plugin_dir, self.endpoints[resource]))
        self._channels.append(channel)
        return rpc.client(channel, rpc.DEVICE_PLUGIN)

    def healthy(self, resource: str) -> list[str]:
        with self._cond:
            return [i for i, h in self.devices.get(resource, {}).items() if h == "Healthy"]

    def allocate(self, resource: str, *containers: list[str]) -> Any:
        """``Allocate`` for containers asking for the device ids given (one list each)."""
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        request = dp.AllocateRequest()
        for ids in containers:
            request.container_requests.add(devices_ids=ids)
        return self.plugin(resource).Allocate(request, timeout=10)

    def preferred(
        self, resource: str, available: list[str], must: list[str], size: int
    ) -> list[str]:
        from ocihook.k8s.api import deviceplugin_pb2 as dp

        request = dp.PreferredAllocationRequest()
        request.container_requests.add(
            available_deviceIDs=available, must_include_deviceIDs=must, allocation_size=size
        )
        response = self.plugin(resource).GetPreferredAllocation(request, timeout=10)
        return list(response.container_responses[0].deviceIDs)

    def restart(self) -> None:
        """Stop, remove every socket in the plugin directory (as kubelet does on start) and
        serve a new ``kubelet.sock``."""
        self.stop()
        for name in os.listdir(self.plugin_dir):
            if name.endswith(".sock"):
                os.unlink(os.path.join(self.plugin_dir, name))
        with self._cond:
            self.devices.clear()
        self.start()

    def stop(self) -> None:
        for channel in self._channels:
            channel.close()
        self._channels.clear()
        if self._server is not None:
            self._server.stop(grace=0).wait()
            self._server = None


#: containerd versions the CRI tests run, by Debian suite: trixie's 1.7 and
#: sid's 2.x (bookworm's 1.6.20 ignores CDI devices in a CRI request).
CONTAINERD_SUITES = {"trixie": "1.7", "sid": "2."}


def _debian_uri() -> tuple[str, str | None]:
    """(URI, Signed-By) of the machine's own Debian archive entry (deb822 or one-line)."""
    import re

    deb822 = Path("/etc/apt/sources.list.d/debian.sources")
    if deb822.is_file():
        for stanza in re.split(r"\n\s*\n", deb822.read_text()):
            fields = {}
            for line in stanza.splitlines():
                if line.strip() and not line.startswith("#") and ":" in line:
                    k, _, v = line.partition(":")
                    fields[k.strip().lower()] = v.strip()
            suites = fields.get("suites", "").split()
            if "deb" in fields.get("types", "").split() and not any(
                "security" in s for s in suites
            ):
                uris = fields.get("uris", "").split()
                if uris:
                    return uris[0], fields.get("signed-by")
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        for line in legacy.read_text().splitlines():
            m = re.match(r"\s*deb\s+(\[[^\]]*\]\s+)?(\S+)\s+(\S+)\s", line)
            if m and "security" not in m.group(3):
                return m.group(2), None
    raise FileNotFoundError("no Debian archive entry in /etc/apt")


def containerd_from_deb(suite: str) -> str:
    """The ``usr/bin`` directory of Debian ``suite``'s containerd, downloaded once with a
    private apt state (a sources file with the machine's own archive URI and ``suite``)
    and unpacked with ``dpkg -x`` under ``~/.cache/ocihook/containerd-<suite>``; skips the
    test, saying why, when it cannot be had."""
    cache = Path(os.path.expanduser("~/.cache/ocihook")) / f"containerd-{suite}"
    bindir = cache / "root" / "usr" / "bin"
    if (bindir / "containerd").is_file():
        return str(bindir)
    for tool in ("apt-get", "dpkg"):
        if shutil.which(tool) is None:
            pytest.skip(f"containerd {suite}: needs {tool} (a Debian-like machine)")
    try:
        uri, signed_by = _debian_uri()
    except FileNotFoundError as e:
        pytest.skip(f"containerd {suite}: {e}")
    apt = cache / "apt"
    for d in (apt / "lists" / "partial", apt / "cache" / "archives" / "partial", cache / "debs"):
        d.mkdir(parents=True, exist_ok=True)
    opt = f"[signed-by={signed_by}] " if signed_by else ""
    (apt / "sources.list").write_text(f"deb {opt}{uri} {suite} main\n")
    options = [
        "-o", f"Dir::Etc::SourceList={apt / 'sources.list'}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", "Dir::Etc::Preferences=/dev/null",
        "-o", "Dir::Etc::PreferencesParts=/dev/null",
        "-o", f"Dir::State::Lists={apt / 'lists'}",
        "-o", f"Dir::Cache={apt / 'cache'}",
        "-o", "Dir::State::status=/dev/null",
        "-o", "APT::Sandbox::User=root",
        "-o", "Acquire::Retries=2",
    ]  # fmt: skip
    for cmd, cwd in ((["update"], None), (["download", "containerd"], cache / "debs")):
        try:
            r = subprocess.run(
                ["apt-get", "-q", *options, *cmd], cwd=cwd, capture_output=True, text=True,
                timeout=900,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            pytest.skip(f"containerd {suite}: apt-get {cmd[0]} timed out")
        if r.returncode != 0:
            pytest.skip(f"containerd {suite}: apt-get {cmd[0]} failed: {r.stderr.strip()[-300:]}")
    debs = sorted((cache / "debs").glob("containerd_*.deb"))
    if not debs:
        pytest.skip(f"containerd {suite}: apt-get download gave no containerd .deb")
    tmp = cache / "root.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    subprocess.run(["dpkg", "-x", str(debs[-1]), str(tmp)], check=True, timeout=300)
    shutil.rmtree(cache / "root", ignore_errors=True)
    tmp.rename(cache / "root")
    return str(bindir)


#: The parts of the CRI API (runtime.v1, kubelet <-> container runtime) the CRI tests use:
#: our own declaration, with kubelet's package, service and message names and field numbers
#: (k8s.io/cri-api runtime/v1 api.proto); fields the tests do not use are left out (a
#: protobuf reader skips them). Compiled at test time with grpcio-tools.
CRI_PROTO = """\
syntax = "proto3";
package runtime.v1;

service RuntimeService {
  rpc Version(VersionRequest) returns (VersionResponse) {}
  rpc RunPodSandbox(RunPodSandboxRequest) returns (RunPodSandboxResponse) {}
  rpc StopPodSandbox(StopPodSandboxRequest) returns (StopPodSandboxResponse) {}
  rpc RemovePodSandbox(RemovePodSandboxRequest) returns (RemovePodSandboxResponse) {}
  rpc CreateContainer(CreateContainerRequest) returns (CreateContainerResponse) {}
  rpc StartContainer(StartContainerRequest) returns (StartContainerResponse) {}
  rpc RemoveContainer(RemoveContainerRequest) returns (RemoveContainerResponse) {}
  rpc ContainerStatus(ContainerStatusRequest) returns (ContainerStatusResponse) {}
}

message VersionRequest { string version = 1; }
message VersionResponse {
  string version = 1; string runtime_name = 2; string runtime_version = 3;
  string runtime_api_version = 4;
}
enum NamespaceMode { POD = 0; CONTAINER = 1; NODE = 2; TARGET = 3; }
message NamespaceOption { NamespaceMode network = 1; NamespaceMode pid = 2; NamespaceMode ipc = 3; }
message LinuxSandboxSecurityContext { NamespaceOption namespace_options = 1; }
message LinuxPodSandboxConfig {
  string cgroup_parent = 1; LinuxSandboxSecurityContext security_context = 2;
}
message PodSandboxMetadata { string name = 1; string uid = 2; string namespace = 3; uint32 attempt = 4; }
message PodSandboxConfig {
  PodSandboxMetadata metadata = 1; string hostname = 2; string log_directory = 3;
  map<string, string> labels = 6; map<string, string> annotations = 7;
  LinuxPodSandboxConfig linux = 8;
}
message RunPodSandboxRequest { PodSandboxConfig config = 1; string runtime_handler = 2; }
message RunPodSandboxResponse { string pod_sandbox_id = 1; }
message StopPodSandboxRequest { string pod_sandbox_id = 1; }
message StopPodSandboxResponse {}
message RemovePodSandboxRequest { string pod_sandbox_id = 1; }
message RemovePodSandboxResponse {}
message ImageSpec { string image = 1; }
message KeyValue { string key = 1; string value = 2; }
message Mount { string container_path = 1; string host_path = 2; bool readonly = 3; }
message Device { string container_path = 1; string host_path = 2; string permissions = 3; }
message CDIDevice { string name = 1; }
message ContainerMetadata { string name = 1; uint32 attempt = 2; }
message LinuxContainerSecurityContext { NamespaceOption namespace_options = 3; }
message LinuxContainerConfig { LinuxContainerSecurityContext security_context = 2; }
message ContainerConfig {
  ContainerMetadata metadata = 1; ImageSpec image = 2; repeated string command = 3;
  repeated string args = 4; repeated KeyValue envs = 6; repeated Mount mounts = 7;
  repeated Device devices = 8; map<string, string> annotations = 10; string log_path = 11;
  LinuxContainerConfig linux = 15; repeated CDIDevice CDI_devices = 17;
}
message CreateContainerRequest {
  string pod_sandbox_id = 1; ContainerConfig config = 2; PodSandboxConfig sandbox_config = 3;
}
message CreateContainerResponse { string container_id = 1; }
message StartContainerRequest { string container_id = 1; }
message StartContainerResponse {}
message RemoveContainerRequest { string container_id = 1; }
message RemoveContainerResponse {}
enum ContainerState {
  CONTAINER_CREATED = 0; CONTAINER_RUNNING = 1; CONTAINER_EXITED = 2; CONTAINER_UNKNOWN = 3;
}
message ContainerStatusRequest { string container_id = 1; bool verbose = 2; }
message ContainerStatus {
  string id = 1; ContainerState state = 3; int32 exit_code = 7; string reason = 10;
  string message = 11;
}
message ContainerStatusResponse { ContainerStatus status = 1; }
"""


def cri_messages(work: Path) -> Any:
    """The CRI message module compiled from :data:`CRI_PROTO` into ``work`` (skips without
    grpcio-tools)."""
    import importlib.util

    try:
        from grpc_tools import protoc
    except ImportError:
        pytest.skip(
            "the CRI tests compile their CRI proto with grpcio-tools: pip install grpcio-tools"
        )
    work.mkdir(parents=True, exist_ok=True)
    (work / "ocihook_test_cri.proto").write_text(CRI_PROTO)
    if (
        protoc.main(
            ["protoc", f"-I{work}", f"--python_out={work}", str(work / "ocihook_test_cri.proto")]
        )
        != 0
    ):
        pytest.fail("protoc could not compile the CRI proto")
    spec = importlib.util.spec_from_file_location(
        "ocihook_test_cri_pb2", work / "ocihook_test_cri_pb2.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cri_client(address: str, messages: Any) -> Any:
    """A ``runtime.v1.RuntimeService`` client on the unix socket ``address``."""
    from ocihook.k8s import rpc

    m = messages
    names = {
        "Version": (m.VersionRequest, m.VersionResponse),
        "RunPodSandbox": (m.RunPodSandboxRequest, m.RunPodSandboxResponse),
        "StopPodSandbox": (m.StopPodSandboxRequest, m.StopPodSandboxResponse),
        "RemovePodSandbox": (m.RemovePodSandboxRequest, m.RemovePodSandboxResponse),
        "CreateContainer": (m.CreateContainerRequest, m.CreateContainerResponse),
        "StartContainer": (m.StartContainerRequest, m.StartContainerResponse),
        "RemoveContainer": (m.RemoveContainerRequest, m.RemoveContainerResponse),
        "ContainerStatus": (m.ContainerStatusRequest, m.ContainerStatusResponse),
    }
    service = rpc.Service(
        "runtime.v1.RuntimeService", {k: rpc.Method(a, b) for k, (a, b) in names.items()}
    )
    return rpc.client(rpc.unix_channel(address), service)


def busybox_oci_archive(path: Path, name: str, entrypoint: list[str]) -> None:
    """Write an OCI image archive (``ctr images import`` reads it) named ``name``: one layer
    with the host's static busybox as ``/bin/busybox`` and its applets ``sh``, ``ls``,
    ``cat``, ``env``, ``sleep``, ``readlink``, ``head``; ``entrypoint`` as its Entrypoint."""
    import gzip
    import hashlib
    import io
    import tarfile

    from ocihook.sim.demo import find_busybox

    busybox = find_busybox()
    if busybox is None:
        pytest.skip("needs busybox (apt-get install busybox-static)")
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for d in ("bin", "dev", "proc", "sys", "etc", "tmp", "out"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        tar.add(busybox, "bin/busybox")
        for applet in ("sh", "ls", "cat", "env", "sleep", "readlink", "head", "grep"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
    layer_tar = raw.getvalue()
    layer = gzip.compress(layer_tar, mtime=0)
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    config = json.dumps({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": entrypoint, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }).encode()  # fmt: skip
    manifest = json.dumps({
        "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **blob(config)},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", **blob(layer)}],
    }).encode()  # fmt: skip
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **blob(manifest),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": name, "org.opencontainers.image.ref.name": name},
        }],
    }  # fmt: skip
    with tarfile.open(path, "w") as tar:

        def add(arcname: str, data: bytes) -> None:
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add(f"blobs/sha256/{digest.split(':')[1]}", data)


CRI_CONTAINERD_CONFIG = """\
version = 2
root = "{d}/root"
state = "{d}/state"
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp",
]

[grpc]
  address = "{d}/containerd.sock"

[ttrpc]
  address = "{d}/containerd.sock.ttrpc"

[plugins."io.containerd.grpc.v1.cri"]
  enable_cdi = true
  cdi_spec_dirs = ["{cdi}"]
  restrict_oom_score_adj = true
  stream_server_port = "0"
  sandbox_image = "{pause}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      # runc's state here, not in /run/containerd/runc/k8s.io (left behind on the host)
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{d}/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni/bin"
    conf_dir = "{d}/cni/conf"

# containerd 2.x imports through its transfer service, which unpacks only for the
# platforms and snapshotters listed here
[[plugins."io.containerd.transfer.v1.local".unpack_config]]
  platform = "linux/amd64"
  snapshotter = "native"
"""


#: The images the CRI tests import: the pod sandbox ("pause") and the workload.
PAUSE_IMAGE = "docker.io/ocihook/pause:1"


BUSYBOX_IMAGE = "docker.io/ocihook/busybox:1"


@dataclass
class CriContainerd:
    """A containerd with CRI and CDI of :func:`start_cri_containerd`."""

    address: str
    dir: Path
    cdi_dir: Path
    cgroup_parent: str
    version: str
    client: Any
    messages: Any


def start_cri_containerd(d: Path, suite: str, host_guard: str) -> Iterator[CriContainerd]:
    """containerd of Debian ``suite`` (:func:`containerd_from_deb`) with the CRI plugin and
    CDI (:data:`CRI_CONTAINERD_CONFIG`: private root, state, sockets and CDI spec dir,
    native snapshotter, no CNI: pods use the host network) and the two images of
    :func:`busybox_oci_archive` imported; stopped at the end with its shims."""
    need_root_and("runc")
    bindir = containerd_from_deb(suite)
    cdi = d / "cdi"
    cdi.mkdir(parents=True)
    (d / "config.toml").write_text(CRI_CONTAINERD_CONFIG.format(d=d, cdi=cdi, pause=PAUSE_IMAGE))
    address = str(d / "containerd.sock")
    env = dict(os.environ, PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}")
    with open(d / "containerd.log", "wb") as log:
        proc = subprocess.Popen(
            [os.path.join(bindir, "containerd"), "--config", str(d / "config.toml")],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True, env=env,
        )  # fmt: skip
    ctr = [os.path.join(bindir, "ctr"), "--address", address, "-n", "k8s.io"]
    try:
        messages = cri_messages(d / "cri")
        client = cri_client(address, messages)
        deadline = time.monotonic() + 30
        version = None
        while version is None:
            if proc.poll() is not None:
                pytest.fail(f"containerd exited: {(d / 'containerd.log').read_text()[-3000:]}")
            try:
                version = client.Version(messages.VersionRequest(version="v1"), timeout=2)
            except Exception:
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"containerd CRI did not start: {(d / 'containerd.log').read_text()[-3000:]}"
                    )
                time.sleep(0.2)
        for image, entry in (
            (PAUSE_IMAGE, ["/bin/sleep", "2147483647"]),
            (BUSYBOX_IMAGE, ["/bin/sh"]),
        ):
            archive = d / (image.rsplit("/", 1)[1].replace(":", "_") + ".tar")
            busybox_oci_archive(archive, image, entry)
            r = subprocess.run(
                [*ctr, "images", "import", "--snapshotter", "native", str(archive)],
                capture_output=True, text=True, timeout=120, env=env,
            )  # fmt: skip
            assert r.returncode == 0, r.stderr
        yield CriContainerd(
            address, d, cdi, f"/{host_guard}", version.runtime_version, client, messages
        )
    finally:
        stop_containerd(proc, address, 15)
        for line in mounts_under(str(d)):
            subprocess.run(["umount", "-l", line.split()[4]], check=False)


def run_cri_pod(
    cri: CriContainerd,
    out: Path,
    script: str,
    allocation: Any = None,
    cdi: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Run one pod (host network, cgroup parent of the test) with one container running
    ``sh -c script`` in :data:`BUSYBOX_IMAGE` as kubelet would: ``out`` (created) mounted
    at ``/out``, ``env`` as its environment, and with ``allocation`` (a
    ``ContainerAllocateResponse``) copied into the CRI request as kubelet's device
    manager copies it (envs, mounts, devices, annotations, CDI devices), plus the CDI
    devices named in ``cdi``. Waits for the container to exit (60 s at most), asserts exit
    status 0 (with its log), and removes the container and the pod."""
    m = cri.messages
    out.mkdir(parents=True, exist_ok=True)
    pod_uid = str(uuid.uuid4())
    sandbox = m.PodSandboxConfig(
        metadata=m.PodSandboxMetadata(name=f"gpu-{pod_uid[:8]}", uid=pod_uid, namespace="default"),
        log_directory=str(out / "logs"),
        linux=m.LinuxPodSandboxConfig(
            cgroup_parent=cri.cgroup_parent,
            security_context=m.LinuxSandboxSecurityContext(
                namespace_options=m.NamespaceOption(network=m.NODE)
            ),
        ),
    )
    pod = cri.client.RunPodSandbox(
        m.RunPodSandboxRequest(config=sandbox), timeout=60
    ).pod_sandbox_id
    try:
        config = m.ContainerConfig(
            metadata=m.ContainerMetadata(name="main"),
            image=m.ImageSpec(image=BUSYBOX_IMAGE),
            command=["/bin/sh", "-c", script],
            envs=[m.KeyValue(key=k, value=v) for k, v in sorted((env or {}).items())],
            mounts=[m.Mount(container_path="/out", host_path=str(out))],
            log_path="main.log",
            linux=m.LinuxContainerConfig(
                security_context=m.LinuxContainerSecurityContext(
                    namespace_options=m.NamespaceOption(network=m.NODE)
                )
            ),
        )
        if allocation is not None:  # what kubelet's device manager copies into the CRI request
            config.envs.extend(
                m.KeyValue(key=k, value=v) for k, v in sorted(allocation.envs.items())
            )
            config.mounts.extend(
                m.Mount(
                    container_path=x.container_path, host_path=x.host_path, readonly=x.read_only
                )
                for x in allocation.mounts
            )
            config.devices.extend(
                m.Device(
                    container_path=x.container_path,
                    host_path=x.host_path,
                    permissions=x.permissions,
                )
                for x in allocation.devices
            )
            config.annotations.update(allocation.annotations)
            config.CDI_devices.extend(m.CDIDevice(name=x.name) for x in allocation.cdi_devices)
        config.CDI_devices.extend(m.CDIDevice(name=n) for n in cdi or [])
        cid = cri.client.CreateContainer(
            m.CreateContainerRequest(pod_sandbox_id=pod, config=config, sandbox_config=sandbox),
            timeout=60,
        ).container_id
        cri.client.StartContainer(m.StartContainerRequest(container_id=cid), timeout=60)
        deadline = time.monotonic() + 60
        while True:
            status = cri.client.ContainerStatus(
                m.ContainerStatusRequest(container_id=cid), timeout=10
            ).status
            if status.state == m.CONTAINER_EXITED:
                break
            assert time.monotonic() < deadline, "the container did not exit"
            time.sleep(0.1)
        log_file = out / "logs" / "main.log"
        log = log_file.read_text() if log_file.exists() else ""
        assert status.exit_code == 0, (status.reason, status.message, log)
        cri.client.RemoveContainer(m.RemoveContainerRequest(container_id=cid), timeout=60)
    finally:
        cri.client.StopPodSandbox(m.StopPodSandboxRequest(pod_sandbox_id=pod), timeout=60)
        cri.client.RemovePodSandbox(m.RemovePodSandboxRequest(pod_sandbox_id=pod), timeout=60)


def daemonset_container(manifest: str, name: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The container ``name`` of the pod template of the first document of ``manifest``
    (a DaemonSet, parsed with PyYAML) and the template's ``volumes``."""
    import yaml

    with open(manifest) as f:
        doc = next(iter(yaml.safe_load_all(f)))
    assert doc["kind"] == "DaemonSet", (manifest, doc["kind"])
    pod = doc["spec"]["template"]["spec"]
    (container,) = [c for c in pod["containers"] if c["name"] == name]
    return container, list(pod.get("volumes", []))


def pod_binds(
    container: dict[str, Any], volumes: list[dict[str, Any]], host: dict[str, str]
) -> list[tuple[str, str, bool]]:
    """The ``volumeMounts`` of ``container`` as ``(source, mountPath, readOnly)``: each
    volume's ``hostPath.path`` is replaced by what ``host`` maps it to (the test's stand-in
    for that host directory). Fails when the manifest mounts a volume that is no host path,
    or a host path ``host`` does not map: the test must then be told what it stands for."""
    by_name = {v["name"]: v for v in volumes}
    binds = []
    for mount in container.get("volumeMounts", []):
        volume = by_name[mount["name"]]
        if "hostPath" not in volume:
            pytest.fail(f"volume {volume['name']} is no hostPath: the test cannot stand in for it")
        path = volume["hostPath"]["path"]
        if path not in host:
            pytest.fail(f"volume {volume['name']}: host path {path} has no stand-in in the test")
        binds.append((host[path], mount["mountPath"], bool(mount.get("readOnly", False))))
    return binds


#: The host's directories a process started by :func:`start_in_own_mounts` sees read-only
#: at the same paths (its "image"); symbolic links among them (merged /usr) are copied.
IMAGE_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc")


def start_in_own_mounts(
    argv: list[str],
    root: Path,
    binds: list[tuple[str, str, bool]],
    *,
    env: dict[str, str],
    log: Path,
    drop_capabilities: bool = True,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` as a pod's container process would run, without an image or a
    runtime: in a mount namespace of its own (``unshare -m --propagation private``),
    chrooted into a tmpfs mounted on ``root`` (an empty directory) that holds only the
    host's :data:`IMAGE_DIRS`, this interpreter's prefixes and the ``ocihook`` package's
    directory (read-only, at their own paths), a fresh ``/proc``, a read-only ``/sys``, a
    ``/dev`` with ``null``, ``zero``, ``random`` and ``urandom``, an empty ``/tmp``, and
    ``binds`` (``(host source, path inside, read-only)``: a pod's volume mounts). With
    ``drop_capabilities`` (``capabilities: {drop: [ALL]}``) it runs as root without any
    capability (``setpriv``). ``env`` is its whole environment, its standard output and
    error go to ``log``. The mounts vanish with the process; nothing is mounted on the
    host. Returns the process (its pid is the program's: every step execs)."""
    import shlex
    import sys

    import ocihook

    q = shlex.quote
    r = str(root)
    lines = ["set -e", f"mount -t tmpfs -o mode=755 ocihook-pod {q(r)}"]
    # the kernel's file systems first: a checkout or interpreter under /tmp is bound below
    # them, not hidden by the pod's /tmp
    lines += [
        f"mkdir {q(r + '/proc')} {q(r + '/sys')} {q(r + '/dev')} {q(r + '/tmp')}",
        f"mount -t proc proc {q(r + '/proc')}",
        f"mount -t sysfs -o ro sysfs {q(r + '/sys')}",
        f"mount -t tmpfs -o mode=755 dev {q(r + '/dev')}",
        f"mount -t tmpfs tmp {q(r + '/tmp')}",
    ]

    def bind(source: str, target: str, read_only: bool) -> None:
        kind = "-d" if os.path.isdir(source) else "-f"
        make = f"mkdir -p {q(r + target)}" if kind == "-d" else (
            f"mkdir -p {q(os.path.dirname(r + target))} && touch {q(r + target)}"
        )  # fmt: skip
        lines.append(make)
        lines.append(f"mount --bind {q(source)} {q(r + target)}")
        if read_only:
            lines.append(f"mount -o remount,bind,ro {q(r + target)}")

    bound: list[str] = []
    for d in IMAGE_DIRS:
        path = "/" + d
        if os.path.islink(path):
            lines.append(f"ln -s {q(os.readlink(path))} {q(r + path)}")
        elif os.path.isdir(path):
            bind(path, path, True)
            bound.append(path)
    package = os.path.dirname(os.path.dirname(os.path.abspath(ocihook.__file__)))
    for path in sorted({os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, package)}):
        if not any(path == b or path.startswith(b + "/") for b in bound):
            bind(path, path, True)
            bound.append(path)
    if sys.prefix != os.path.realpath(sys.prefix):  # the interpreter's path as it is named
        lines.append(f"mkdir -p {q(os.path.dirname(r + sys.prefix))}")
        lines.append(f"ln -s {q(os.path.realpath(sys.prefix))} {q(r + sys.prefix)}")
    for name in ("null", "zero", "random", "urandom"):
        bind(f"/dev/{name}", f"/dev/{name}", False)
    for source, target, read_only in binds:
        bind(source, target, read_only)
    drop = "setpriv --bounding-set=-all --inh-caps=-all -- " if drop_capabilities else ""
    command = " ".join(q(a) for a in argv)
    lines.append(
        f"exec chroot {q(r)} {drop}env -i {' '.join(q(f'{k}={v}') for k, v in env.items())} {command}"
    )
    with open(log, "wb") as f:
        return subprocess.Popen(
            ["unshare", "-m", "--propagation", "private", "sh", "-c", "\n".join(lines)],
            stdin=subprocess.DEVNULL, stdout=f, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
