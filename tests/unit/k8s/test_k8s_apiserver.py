"""Publishing ResourceSlices through the API server: a stand-in of the API server's
resourceslices endpoints (an HTTP server in a thread: list with field selectors, create,
get-free replace with resourceVersion checks, delete, bearer token), the publisher against
it, and the dra-plugin command publishing at its start. The slices the server receives
are checked against the kubernetes client's models."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from ocihook.core.errors import ConfigError
from ocihook.k8s.apiserver import ApiServer, publish_slices

PATH = "/apis/resource.k8s.io/v1beta1/resourceslices"


class FakeApi:
    """The store and the request log of the stand-in."""

    def __init__(self, token: str | None) -> None:
        self.token = token
        self.items: dict[str, dict[str, Any]] = {}
        self.calls: list[tuple[str, str]] = []
        self.version = 0
        self.claims: dict[tuple[str, str], dict[str, Any]] = {}


def _handler(api: FakeApi) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *_args: Any) -> None:
            pass

        def _send(self, status: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _auth(self) -> bool:
            if api.token and self.headers.get("Authorization") != f"Bearer {api.token}":
                self._send(401, {"kind": "Status", "message": "Unauthorized"})
                return False
            return True

        def _body(self) -> Any:
            return json.loads(self.rfile.read(int(self.headers["Content-Length"])))

        def do_GET(self) -> None:
            api.calls.append(("GET", self.path))
            if not self._auth() or self._claim():
                return
            url = urllib.parse.urlsplit(self.path)
            selector = urllib.parse.parse_qs(url.query).get("fieldSelector", [""])[0]
            want = dict(part.split("=", 1) for part in selector.split(",") if part)
            items = [
                i
                for i in api.items.values()
                if all(
                    {"spec.nodeName": i["spec"]["nodeName"], "spec.driver": i["spec"]["driver"]}[k]
                    == v
                    for k, v in want.items()
                )
            ]
            self._send(200, {"kind": "ResourceSliceList", "items": items})

        def _claim(self) -> bool:
            """GET .../namespaces/<ns>/resourceclaims/<name>: from api.claims."""
            parts = urllib.parse.urlsplit(self.path).path.split("/")
            if "resourceclaims" not in parts:
                return False
            key = (urllib.parse.unquote(parts[-3]), urllib.parse.unquote(parts[-1]))
            claim = api.claims.get(key)
            if claim is None:
                self._send(404, {"kind": "Status", "message": "not found"})
            else:
                self._send(200, claim)
            return True

        def do_POST(self) -> None:
            api.calls.append(("POST", self.path))
            if not self._auth():
                return
            body = self._body()
            name = body["metadata"]["name"]
            if name in api.items:
                self._send(409, {"kind": "Status", "message": "already exists"})
                return
            api.version += 1
            body["metadata"]["resourceVersion"] = str(api.version)
            api.items[name] = body
            self._send(201, body)

        def do_PUT(self) -> None:
            api.calls.append(("PUT", self.path))
            if not self._auth():
                return
            body = self._body()
            name = self.path.rsplit("/", 1)[1]
            current = api.items.get(name)
            if current is None:
                self._send(404, {"kind": "Status", "message": "not found"})
                return
            if body["metadata"].get("resourceVersion") != current["metadata"]["resourceVersion"]:
                self._send(409, {"kind": "Status", "message": "the object has been modified"})
                return
            api.version += 1
            body["metadata"]["resourceVersion"] = str(api.version)
            api.items[name] = body
            self._send(200, body)

        def do_DELETE(self) -> None:
            api.calls.append(("DELETE", self.path))
            if not self._auth():
                return
            name = self.path.rsplit("/", 1)[1]
            if api.items.pop(name, None) is None:
                self._send(404, {"kind": "Status", "message": "not found"})
                return
            self._send(200, {"kind": "Status", "status": "Success"})

    return Handler


@pytest.fixture
def fake_api() -> Iterator[tuple[FakeApi, str]]:
    api = FakeApi(token="s3cret")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(api))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield api, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _slice(name: str, node: str, driver: str, devices: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "basic": {}} for i in range(devices)],
        },
    }


def test_create_replace_delete(fake_api: tuple[FakeApi, str]) -> None:
    api, url = fake_api
    server = ApiServer(url, token="s3cret")
    # another driver's slice on this node, and this driver's on another node: untouched
    api.items["other"] = _slice("other", "node-a", "other.example.com", 1)
    api.items["elsewhere"] = _slice("elsewhere", "node-b", "gpu.ocihook.io", 1)
    for item in api.items.values():
        item["metadata"]["resourceVersion"] = "1"
    first = publish_slices(
        server,
        [_slice("node-a-gpu", "node-a", "gpu.ocihook.io", 2)],
        driver="gpu.ocihook.io",
        node="node-a",
    )
    assert first == {"created": 1, "updated": 0, "deleted": 0}
    assert len(api.items["node-a-gpu"]["spec"]["devices"]) == 2
    second = publish_slices(
        server,
        [_slice("node-a-gpu", "node-a", "gpu.ocihook.io", 3)],
        driver="gpu.ocihook.io",
        node="node-a",
    )
    assert second == {"created": 0, "updated": 1, "deleted": 0}  # its resourceVersion carried
    assert len(api.items["node-a-gpu"]["spec"]["devices"]) == 3
    renamed = publish_slices(
        server,
        [_slice("node-a-gpu-2", "node-a", "gpu.ocihook.io", 3)],
        driver="gpu.ocihook.io",
        node="node-a",
    )
    assert renamed == {"created": 1, "updated": 0, "deleted": 1}
    assert sorted(api.items) == ["elsewhere", "node-a-gpu-2", "other"]
    assert (
        "GET",
        f"{PATH}?fieldSelector=spec.nodeName%3Dnode-a%2Cspec.driver%3Dgpu.ocihook.io",
    ) in api.calls


def test_refusals_are_one_line(fake_api: tuple[FakeApi, str]) -> None:
    _api, url = fake_api
    with pytest.raises(ConfigError) as err:
        publish_slices(ApiServer(url, token="wrong"), [], driver="gpu.ocihook.io", node="n")
    assert "the API server refused to list resourceslices: 401 Unauthorized" in str(err.value)
    assert err.value.hint == (
        "the plugin's ServiceAccount needs list, create, update and delete on resourceslices; "
        "get on resourceclaims (resource.k8s.io)"
    )
    with pytest.raises(ConfigError, match="cannot reach the API server"):
        publish_slices(ApiServer("http://127.0.0.1:9"), [], driver="d.example.com", node="n")
    with pytest.raises(ConfigError, match="not an http"):
        ApiServer("ftp://x")


def test_in_cluster_configuration(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok\n")
    assert ApiServer.in_cluster({}, str(sa)) is None
    env = {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    api = ApiServer.in_cluster(env, str(sa))
    assert api is not None and (api.url, api.token) == ("https://10.96.0.1:443", "tok")
    v6 = ApiServer.in_cluster({**env, "KUBERNETES_SERVICE_HOST": "fd00::1"}, str(sa))
    assert v6 is not None and v6.url == "https://[fd00::1]:443"
    with pytest.raises(ConfigError, match="service account token"):
        ApiServer.in_cluster(env, str(tmp_path / "none"))


def test_dra_plugin_publishes_at_start(fake_api: tuple[FakeApi, str], tmp_path: Path) -> None:
    """The command publishes the node's slices (valid for the kubernetes client's model)
    before it serves kubelet, then runs until SIGTERM."""
    import signal
    import subprocess
    import sys

    from ocihook.sim import host as simhost

    api, url = fake_api
    api.token = None  # kubectl proxy's URL: no token
    sim = simhost.build(str(tmp_path / "host"), make_dev_nodes=False)
    args = [
        sys.executable, "-m", "ocihook", "k8s", "dra-plugin", "--driver-root", sim.root,
        "--dev-root", sim.root, "--node-name", "node-c", "--apiserver", url,
        "--plugin-dir", str(tmp_path / "plugins"), "--registry-dir", str(tmp_path / "reg"),
        "--cdi-dir", str(tmp_path / "cdi"), "--claims-dir", str(tmp_path / "claims"),
    ]  # fmt: skip
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True)
    try:
        lines = iter(proc.stderr.readline, "") if proc.stderr else iter(())
        line = next((x for x in lines if "ResourceSlices" in x), "")
        assert line.startswith(
            f"ocihook: ResourceSlices of gpu.ocihook.io on node-c published to {url}: 1 created"
        ), line
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
    (item,) = api.items.values()
    assert item["spec"]["nodeName"] == "node-c"
    assert len(item["spec"]["devices"]) == len(sim.gpus)
    from kubernetes.client import ApiClient

    client = ApiClient()
    obj = client._ApiClient__deserialize(item, "V1beta1ResourceSlice")  # type: ignore[attr-defined]
    assert obj.spec.node_name == "node-c"


def test_claims_read_from_the_api_server(fake_api: tuple[FakeApi, str]) -> None:
    """ApiClaims gets the claim kubelet names, and only when its uid is the one named (a
    claim made again under the same name is another claim)."""
    from ocihook.k8s.apiserver import ApiClaims

    api, url = fake_api
    claim = {"metadata": {"name": "gpu claim", "namespace": "team/a", "uid": "u-1"}, "status": {}}
    api.claims[("team/a", "gpu claim")] = claim
    claims = ApiClaims(ApiServer(url, token="s3cret"))
    assert claims.get("team/a", "gpu claim", "u-1") == claim
    assert claims.get("team/a", "gpu claim", "u-2") is None  # another claim of that name
    assert claims.get("team/a", "missing", "u-1") is None
    assert (
        "GET",
        "/apis/resource.k8s.io/v1beta1/namespaces/team%2Fa/resourceclaims/gpu%20claim",
    ) in api.calls
    assert ApiClaims(ApiServer("http://127.0.0.1:9")).get("n", "c", "u") is None  # unreachable


def test_only_the_listed_calls_are_issued(fake_api: tuple[FakeApi, str]) -> None:
    """ApiServer.request issues the triples of API_CALLS (the DRA plugin's RBAC rules)
    and refuses any other before a request is sent."""
    from ocihook.k8s.apiserver import API_CALLS

    api, url = fake_api
    server = ApiServer(url, token="s3cret")
    for verb, resource in (("get", "resourceslices"), ("watch", "resourceslices"),
                           ("list", "resourceclaims"), ("get", "nodes")):  # fmt: skip
        assert ("resource.k8s.io", resource, verb) not in API_CALLS
        calls = len(api.calls)
        with pytest.raises(ValueError, match=f"{verb} {resource} is not in API_CALLS"):
            server.request(verb, resource, "x")
        assert len(api.calls) == calls
    status, answer = server.request("list", "resourceslices")
    assert status == 200 and answer["items"] == []
    assert api.calls[-1] == ("GET", PATH)
