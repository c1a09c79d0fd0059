"""The Helm chart (packaging/kubernetes/chart/ocihook), rendered without helm: the subset of
Go templates it uses (``{{ .Values.a.b }}``, ``.Release.Namespace``, ``.Chart.*``,
``| default``, whole-line ``if`` / ``end``) substituted here, anything else refused so the
chart stays inside what this test checks. Rendered with its own values it gives the
plain manifests of packaging/kubernetes/ (images aside); every ``ocihook k8s`` command
in it (containers, init containers, preStop hooks) parses with the CLI's own parser,
choices and all; the host paths agree (the installer's host root is where the node's /
is mounted, its prefix is where the device plugin's CDI hooks run ocihook, the plugin's
container driver root is where a hostPath volume of its driver root is mounted), also
with the values for NVIDIA's driver container; the DaemonSets load as the Kubernetes
API models. The DRA plugin (``draPlugin.enabled``, dra-plugin-daemonset.yaml) publishes
with its own ServiceAccount token, and its ClusterRole grants exactly the (API group,
resource, verb) triples its API client issues (``ocihook.k8s.apiserver.API_CALLS``,
checked against the requests the client really makes); no other pod has a token."""

from __future__ import annotations

import copy
import os
import re
import tomllib
from typing import Any

import click
import pytest
import yaml
from support import REPO

from ocihook.commands.cli_k8s import k8s
from ocihook.engines.hostinstall import PREFIX
from ocihook.k8s.apiserver import ApiServer

KUBERNETES = os.path.join(REPO, "packaging/kubernetes")
CHART = os.path.join(KUBERNETES, "chart/ocihook")
DIRECTIVE = re.compile(r"\{\{-?\s*(.*?)\s*-?\}\}")
LINE_DIRECTIVE = re.compile(r"\s*\{\{-?\s*(if\s+(\S+)|end)\s*-?\}\}\s*")


def _chart_meta() -> dict[str, Any]:
    with open(os.path.join(CHART, "Chart.yaml")) as f:
        meta: dict[str, Any] = yaml.safe_load(f)
    return meta


def _values(**overrides: Any) -> dict[str, Any]:
    with open(os.path.join(CHART, "values.yaml")) as f:
        values: dict[str, Any] = yaml.safe_load(f)
    for dotted, value in overrides.items():
        *path, last = dotted.split("__")
        node = values
        for key in path:
            node = node[key]
        node[last] = value
    return values


def _lookup(ref: str, values: dict[str, Any], namespace: str) -> Any:
    if ref == ".Release.Namespace":
        return namespace
    if ref.startswith(".Chart."):
        key = ref[len(".Chart.") :]
        return _chart_meta()[key[0].lower() + key[1:]]
    if ref.startswith(".Values."):
        node: Any = values
        for key in ref[len(".Values.") :].split("."):
            node = node[key]
        return node
    raise AssertionError(f"the chart uses {ref!r}, which this renderer does not support")


def _evaluate(expr: str, values: dict[str, Any], namespace: str) -> str:
    first, *pipes = (p.strip() for p in expr.split("|"))
    value = _lookup(first, values, namespace)
    for pipe in pipes:
        name, *args = pipe.split()
        assert name == "default" and len(args) == 1, f"unsupported pipe {pipe!r}"
        if value in ("", None):
            value = _lookup(args[0], values, namespace)
    return str(value)


def render(text: str, values: dict[str, Any], namespace: str = "kube-system") -> str:
    """``text`` (a template) with ``values``: whole-line ``if``/``end`` blocks kept or
    dropped, every other ``{{ ... }}`` replaced by its value."""
    out, keep = [], [True]
    for line in text.splitlines():
        m = LINE_DIRECTIVE.fullmatch(line)
        if m:
            if m.group(1) == "end":
                keep.pop()
            else:
                keep.append(keep[-1] and bool(_lookup(m.group(2), values, namespace)))
            continue
        if keep[-1]:
            out.append(DIRECTIVE.sub(lambda d: _evaluate(d.group(1), values, namespace), line))
    assert keep == [True], "unbalanced if/end"
    return "\n".join(out) + "\n"


def rendered(values: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    """The chart's objects by (kind, name)."""
    objects = {}
    templates = os.path.join(CHART, "templates")
    for name in sorted(os.listdir(templates)):
        if not name.endswith(".yaml"):
            continue
        with open(os.path.join(templates, name)) as f:
            text = render(f.read(), values)
        for doc in yaml.safe_load_all(text):
            if doc:
                objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def plain_manifests(*, dra: bool = False) -> dict[tuple[str, str], dict[str, Any]]:
    objects = {}
    names = ["installer-daemonset.yaml", "device-plugin-daemonset.yaml"]
    for name in names + (["dra-plugin-daemonset.yaml"] if dra else []):
        with open(os.path.join(KUBERNETES, name)) as f:
            for doc in yaml.safe_load_all(f):
                if doc["kind"] != "Pod":  # the example pods are not the chart's
                    objects[(doc["kind"], doc["metadata"]["name"])] = doc
    return objects


def _pod(ds: dict[str, Any]) -> dict[str, Any]:
    pod: dict[str, Any] = ds["spec"]["template"]["spec"]
    return pod


def _commands(pod: dict[str, Any]) -> list[tuple[dict[str, Any], list[str]]]:
    """Every command the pod runs: (container, argv) for containers, init containers and
    preStop hooks."""
    out = []
    for c in pod.get("initContainers", []) + pod["containers"]:
        out.append((c, c["command"] + c.get("args", [])))
        pre = c.get("lifecycle", {}).get("preStop", {}).get("exec")
        if pre:
            out.append((c, pre["command"]))
    return out


def _ocihook_args(pod: dict[str, Any], sub: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """``--opt=value`` arguments of each ``ocihook k8s SUB`` command in the pod."""
    found = []
    for c, argv in _commands(pod):
        if argv[:3] == ["ocihook", "k8s", sub]:
            found.append((c, dict(a.partition("=")[::2] for a in argv[3:])))
    return found


def host_path_problems(objects: dict[tuple[str, str], dict[str, Any]], prefix: str) -> list[str]:
    """What disagrees among the host paths the chart's pods name (empty: consistent)."""
    problems = []
    for (kind, name), obj in objects.items():
        if kind != "DaemonSet":
            continue
        pod = _pod(obj)
        volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
        for sub in ("install", "uninstall", "device-plugin", "dra-plugin"):
            for c, args in _ocihook_args(pod, sub):
                mounts = {m["mountPath"]: volumes[m["name"]] for m in c["volumeMounts"]}
                if sub in ("install", "uninstall"):
                    if mounts.get(args["--host-root"]) != "/":
                        problems.append(f"{name} {sub}: --host-root is not the node's /")
                    if args["--prefix"] != prefix:
                        problems.append(f"{name} {sub}: --prefix {args['--prefix']} != {prefix}")
                    continue
                if args["--hook-path"] != f"{prefix}/bin/ocihook":
                    problems.append(f"{name}: --hook-path is not the installed ocihook")
                seen, driver = args["--container-driver-root"], args["--driver-root"]
                host = [
                    os.path.normpath(os.path.join(h, seen[len(m) :].lstrip("/")))
                    for m, h in mounts.items()
                    if seen == m or seen.startswith(m.rstrip("/") + "/")
                ]
                if host != [os.path.normpath(driver)]:
                    problems.append(f"{name}: {seen} is not where {driver} is mounted")
    return problems


def test_chart_version_is_the_project_version() -> None:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        version = tomllib.load(f)["project"]["version"]
    meta = _chart_meta()
    assert meta["apiVersion"] == "v2" and meta["name"] == "ocihook"
    assert meta["appVersion"] == version


DRA_OBJECTS = {
    ("ServiceAccount", "ocihook-dra-plugin"),
    ("ClusterRole", "ocihook-dra-plugin"),
    ("ClusterRoleBinding", "ocihook-dra-plugin"),
    ("DaemonSet", "ocihook-dra-plugin"),
}


@pytest.mark.parametrize("dra", [False, True])
def test_chart_renders_the_plain_manifests(dra: bool) -> None:
    """Images aside (the chart names repository:tag from its values), the chart with its
    own values is packaging/kubernetes/{installer,device-plugin}-daemonset.yaml; with
    ``draPlugin.enabled`` also dra-plugin-daemonset.yaml (its ServiceAccount, ClusterRole
    and binding too)."""
    values = _values(draPlugin__enabled=dra)
    chart, plain = rendered(values), plain_manifests(dra=dra)
    assert (
        set(chart)
        == set(plain)
        == {
            ("ServiceAccount", "ocihook"),
            ("DaemonSet", "ocihook-installer"),
            ("DaemonSet", "ocihook-device-plugin"),
        }
        | (DRA_OBJECTS if dra else set())
    )
    image = f"{values['image']['repository']}:{_chart_meta()['appVersion']}"
    for key, obj in chart.items():
        mine, theirs = copy.deepcopy(obj), copy.deepcopy(plain[key])
        if key[0] == "DaemonSet":
            for c in _containers(mine):
                assert c.pop("image") == image
                assert c.pop("imagePullPolicy") == "IfNotPresent"
            for c in _containers(theirs):
                assert c.pop("image") == "registry.example.com/ocihook:0.1.0"
        assert mine == theirs, key


def _containers(ds: dict[str, Any]) -> list[dict[str, Any]]:
    pod = _pod(ds)
    containers: list[dict[str, Any]] = pod.get("initContainers", []) + pod["containers"]
    return containers


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"installer__runtime": "containerd", "devicePlugin__migStrategy": "mixed"},
        {"driverRoot": "/run/nvidia/driver", "containerDriverRoot": "/host/run/nvidia/driver"},
        {"prefix": "/opt/ocihook", "devicePlugin__deviceIdStrategy": "index"},
        {"draPlugin__enabled": True},
        {"installer__restartMode": "systemd"},
        {"installer__runtime": "crio", "installer__restartMode": "signal"},
        {
            "draPlugin__enabled": True,
            "prefix": "/opt/ocihook",
            "driverRoot": "/run/nvidia/driver",
            "containerDriverRoot": "/host/run/nvidia/driver",
        },
    ],
)
def test_every_ocihook_command_parses_and_host_paths_agree(overrides: dict[str, Any]) -> None:
    values = _values(**overrides)
    objects = rendered(values)
    seen = set()
    for (kind, name), obj in objects.items():
        if kind != "DaemonSet":
            continue
        for _c, argv in _commands(_pod(obj)):
            if argv[0] != "ocihook":
                assert argv == ["sleep", "infinity"], (name, argv)
                continue
            assert argv[1] == "k8s", argv
            command = k8s.commands[argv[2]]
            # the CLI's own parser: unknown options, bad choices and types fail here
            with command.make_context(argv[2], list(argv[3:])) as ctx:
                assert ctx.params
            seen.add(argv[2])
    dra = {"dra-plugin"} if values["draPlugin"]["enabled"] else set()
    assert seen == {"install", "uninstall", "device-plugin"} | dra
    assert host_path_problems(objects, values["prefix"]) == []


def test_the_default_prefix_is_the_installers() -> None:
    assert _values()["prefix"] == PREFIX


def test_the_checks_catch_a_wrong_chart() -> None:
    """The checks are not vacuous: a driver root mounted elsewhere, a prefix the plugin
    does not run, a bad choice are each caught."""
    values = _values(driverRoot="/run/nvidia/driver")  # containerDriverRoot left at /host
    problems = host_path_problems(rendered(values), values["prefix"])
    assert problems == ["ocihook-device-plugin: /host is not where /run/nvidia/driver is mounted"]
    objects = rendered(_values())
    problems = host_path_problems(objects, "/opt/elsewhere")
    assert "ocihook-installer install: --prefix /usr/local/ocihook != /opt/elsewhere" in problems
    assert "ocihook-device-plugin: --hook-path is not the installed ocihook" in problems
    bad = rendered(_values(installer__runtime="docker"))
    install = _pod(bad[("DaemonSet", "ocihook-installer")])["initContainers"][0]["command"]
    with pytest.raises(click.BadParameter):
        k8s.commands["install"].make_context("install", install[3:])


def test_components_can_be_left_out() -> None:
    objects = rendered(_values(installer__enabled=False))
    assert ("DaemonSet", "ocihook-installer") not in objects
    assert ("DaemonSet", "ocihook-device-plugin") in objects
    objects = rendered(_values(devicePlugin__enabled=False))
    assert set(objects) == {("ServiceAccount", "ocihook"), ("DaemonSet", "ocihook-installer")}
    objects = rendered(_values(draPlugin__enabled=True, installer__enabled=False,
                               devicePlugin__enabled=False))  # fmt: skip
    assert set(objects) == DRA_OBJECTS | {("ServiceAccount", "ocihook")}


def test_the_renderer_refuses_what_it_does_not_know() -> None:
    with pytest.raises(AssertionError, match="does not support"):
        render("x: {{ .Capabilities.KubeVersion }}\n", _values())
    with pytest.raises(AssertionError, match="unsupported pipe"):
        render("x: {{ .Values.prefix | quote }}\n", _values())


def test_daemonsets_load_as_kubernetes_models() -> None:
    kubernetes = pytest.importorskip("kubernetes", reason="pip install -e '.[test]'")
    api = kubernetes.client.ApiClient()
    for (kind, name), obj in rendered(_values(draPlugin__enabled=True)).items():
        model = api._ApiClient__deserialize(obj, f"V1{kind}")
        assert model.metadata.name == name
        if kind == "DaemonSet":
            pod = model.spec.template.spec
            # only the DRA plugin calls the API server
            assert pod.automount_service_account_token is (name == "ocihook-dra-plugin")
            assert all(c.image for c in pod.containers)
        if kind == "ClusterRole":
            assert [(r.api_groups, r.resources, r.verbs) for r in model.rules] == [
                (["resource.k8s.io"], ["resourceslices"], ["list", "create", "update", "delete"]),
                (["resource.k8s.io"], ["resourceclaims"], ["get"]),
            ]


# --- the DRA plugin's RBAC --------------------------------------------------------------------


def _role_of(objects: dict[tuple[str, str], dict[str, Any]], daemonset: str) -> set[Any]:
    """The (API group, resource, verb) triples the pods of ``daemonset`` may call: the
    rules of every ClusterRole (and Role) bound to its ServiceAccount, expanded; wildcards
    kept as ``*`` (so that they fail the comparison)."""
    pod = _pod(objects[("DaemonSet", daemonset)])
    account = pod.get("serviceAccountName", "default")
    namespace = objects[("DaemonSet", daemonset)]["metadata"]["namespace"]
    granted = set()
    for (kind, _name), binding in objects.items():
        if kind not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        if {"kind": "ServiceAccount", "name": account, "namespace": namespace} not in binding[
            "subjects"
        ]:
            continue
        role = objects[(binding["roleRef"]["kind"], binding["roleRef"]["name"])]
        for rule in role["rules"]:
            assert set(rule) == {"apiGroups", "resources", "verbs"}, rule  # no resourceNames
            for group in rule["apiGroups"]:
                for resource in rule["resources"]:
                    for verb in rule["verbs"]:
                        granted.add((group, resource, verb))
    return granted


class _Recording(ApiServer):
    """An :class:`~ocihook.k8s.apiserver.ApiServer` whose ``call`` (the one HTTP layer)
    records each request as (API group, resource, verb), read back from the method and
    the path the way the API server reads them, and answers as a server holding two
    slices would."""

    def __init__(self) -> None:
        super().__init__("http://apiserver.test")
        self.seen: set[tuple[str, str, str]] = set()

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        from urllib.parse import urlsplit

        parts = urlsplit(path).path.strip("/").split("/")
        assert parts[0] == "apis", path
        group, rest = parts[1], parts[3:]
        if rest[0] == "namespaces":
            rest = rest[2:]
        resource, named = rest[0], len(rest) > 1
        verb = {
            ("GET", False): "list", ("GET", True): "get", ("POST", False): "create",
            ("PUT", True): "update", ("DELETE", True): "delete",
        }[(method, named)]  # fmt: skip
        self.seen.add((group, resource, verb))
        if verb == "list":
            items = [{"metadata": {"name": n, "resourceVersion": "7"}} for n in ("kept", "gone")]
            return 200, {"items": items}
        if verb == "get":
            return 200, {"metadata": {"uid": "u-1"}}
        return {"create": 201, "update": 200, "delete": 200}[verb], {}


def _calls_the_code_makes() -> set[tuple[str, str, str]]:
    """Every call the DRA plugin's API client makes: a publish that updates, creates and
    deletes, and a claim read, through :class:`_Recording`."""
    from ocihook.k8s.apiserver import ApiClaims, publish_slices

    api = _Recording()
    slices = [{"metadata": {"name": n}, "spec": {}} for n in ("kept", "new")]
    counts = publish_slices(api, slices, driver="gpu.ocihook.io", node="n")
    assert counts == {"created": 1, "updated": 1, "deleted": 1}
    assert ApiClaims(api).get("default", "claim", "u-1") is not None
    return api.seen


def test_dra_role_grants_exactly_what_the_client_calls() -> None:
    """The DRA plugin's ClusterRole, in the plain manifest and in the chart, grants every
    (API group, resource, verb) the API client issues and nothing more. The client's list
    is ocihook.k8s.apiserver.API_CALLS (ApiServer.request refuses any other), and it is
    checked against the calls the client really makes (read back from the HTTP method and
    path): a call added to the code and not to the role fails here."""
    from ocihook.k8s.apiserver import API_CALLS

    calls = _calls_the_code_makes()
    assert calls == set(API_CALLS)
    assert calls == {
        ("resource.k8s.io", "resourceslices", "list"),
        ("resource.k8s.io", "resourceslices", "create"),
        ("resource.k8s.io", "resourceslices", "update"),
        ("resource.k8s.io", "resourceslices", "delete"),
        ("resource.k8s.io", "resourceclaims", "get"),
    }
    for objects in (plain_manifests(dra=True), rendered(_values(draPlugin__enabled=True))):
        assert _role_of(objects, "ocihook-dra-plugin") == calls
        # the installer and the device plugin have no API access at all
        assert _role_of(objects, "ocihook-installer") == set()
        assert _role_of(objects, "ocihook-device-plugin") == set()


def test_the_role_check_catches_a_wrong_role() -> None:
    """Not vacuous: a verb missing from the role, or one too many, or a wildcard, shows."""
    objects = plain_manifests(dra=True)
    role = objects[("ClusterRole", "ocihook-dra-plugin")]
    role["rules"][0]["verbs"] = ["list", "create", "update"]
    assert _calls_the_code_makes() - _role_of(objects, "ocihook-dra-plugin") == {
        ("resource.k8s.io", "resourceslices", "delete")
    }
    role["rules"][1]["verbs"] = ["get", "watch"]
    assert ("resource.k8s.io", "resourceclaims", "watch") in _role_of(objects, "ocihook-dra-plugin")
    role["rules"][1]["resources"] = ["*"]
    assert ("resource.k8s.io", "*", "get") in _role_of(objects, "ocihook-dra-plugin")


@pytest.mark.parametrize("source", ["plain", "chart"])
def test_dra_plugin_publishes_with_its_own_token(
    source: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The DRA plugin runs in publishing mode: no --print-slices, no --apiserver (the
    in-cluster configuration), its ServiceAccount's token mounted (the only token of
    ocihook's pods), NODE_NAME from the downward API's spec.nodeName; the command parses
    with the CLI's own parser and --node-name takes NODE_NAME."""
    objects = (
        plain_manifests(dra=True)
        if source == "plain"
        else rendered(_values(draPlugin__enabled=True))
    )
    ds = objects[("DaemonSet", "ocihook-dra-plugin")]
    pod = _pod(ds)
    assert pod["serviceAccountName"] == "ocihook-dra-plugin"
    assert pod["automountServiceAccountToken"] is True
    account = objects[("ServiceAccount", "ocihook-dra-plugin")]
    assert account["automountServiceAccountToken"] is True
    assert account["metadata"]["namespace"] == ds["metadata"]["namespace"]
    assert objects[("ServiceAccount", "ocihook")]["automountServiceAccountToken"] is False
    for name in ("ocihook-installer", "ocihook-device-plugin"):
        other = _pod(objects[("DaemonSet", name)])
        assert other["serviceAccountName"] == "ocihook"
        assert other["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    argv = container["command"]
    assert argv[:3] == ["ocihook", "k8s", "dra-plugin"]
    assert not any(a.startswith(("--print-slices", "--apiserver", "--node-name")) for a in argv)
    assert container["env"] == [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}
    ]
    command = k8s.commands["dra-plugin"]
    with command.make_context("dra-plugin", argv[3:]) as ctx:
        assert ctx.params["print_slices"] is None and ctx.params["apiserver"] is None
        assert ctx.params["driver"] == "gpu.ocihook.io"
    monkeypatch.setenv("NODE_NAME", "gpu-node-7")
    with command.make_context("dra-plugin", argv[3:]) as ctx:
        assert ctx.params["node_name"] == "gpu-node-7"


@pytest.mark.parametrize(
    ("runtime", "mode", "refused"),
    [("auto", "none", False), ("containerd", "systemd", False), ("crio", "signal", False),
     ("containerd", "signal", True), ("none", "systemd", True)],
)  # fmt: skip
def test_installer_restart_mode(runtime: str, mode: str, refused: bool) -> None:
    """installer.restartMode reaches install and uninstall alike; the pod sees the host's
    processes (hostPID: signal and systemd need them); a pair of values the installer
    refuses at its start (containerd does not reload on SIGHUP) is refused by the same
    check here."""
    from ocihook.core.errors import EngineConfigError
    from ocihook.engines.restart import check_mode

    objects = rendered(_values(installer__runtime=runtime, installer__restartMode=mode))
    pod = _pod(objects[("DaemonSet", "ocihook-installer")])
    assert pod["hostPID"] is True
    for sub in ("install", "uninstall"):
        ((_c, args),) = _ocihook_args(pod, sub)
        assert args["--restart-mode"] == mode
    engine = None if runtime == "none" else "containerd" if runtime == "auto" else runtime
    if refused:
        with pytest.raises(EngineConfigError):
            check_mode(engine, mode)
    else:
        check_mode(engine, mode)
