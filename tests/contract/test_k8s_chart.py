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
API models."""

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


def plain_manifests() -> dict[tuple[str, str], dict[str, Any]]:
    objects = {}
    for name in ("installer-daemonset.yaml", "device-plugin-daemonset.yaml"):
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
        for sub in ("install", "uninstall", "device-plugin"):
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


def test_chart_renders_the_plain_manifests() -> None:
    """Images aside (the chart names repository:tag from its values), the chart with its
    own values is packaging/kubernetes/{installer,device-plugin}-daemonset.yaml."""
    values = _values()
    chart, plain = rendered(values), plain_manifests()
    assert (
        set(chart)
        == set(plain)
        == {
            ("ServiceAccount", "ocihook"),
            ("DaemonSet", "ocihook-installer"),
            ("DaemonSet", "ocihook-device-plugin"),
        }
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
    assert seen == {"install", "uninstall", "device-plugin"}
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


def test_the_renderer_refuses_what_it_does_not_know() -> None:
    with pytest.raises(AssertionError, match="does not support"):
        render("x: {{ .Capabilities.KubeVersion }}\n", _values())
    with pytest.raises(AssertionError, match="unsupported pipe"):
        render("x: {{ .Values.prefix | quote }}\n", _values())


def test_daemonsets_load_as_kubernetes_models() -> None:
    kubernetes = pytest.importorskip("kubernetes", reason="pip install -e '.[test]'")
    api = kubernetes.client.ApiClient()
    for (kind, name), obj in rendered(_values()).items():
        model = api._ApiClient__deserialize(obj, f"V1{kind}")
        assert model.metadata.name == name
        if kind == "DaemonSet":
            pod = model.spec.template.spec
            assert pod.automount_service_account_token is False
            assert all(c.image for c in pod.containers)
