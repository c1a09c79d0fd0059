"""The unprivileged policy covers every request channel of every vendor.

With ``accept-nvidia-visible-devices-envvar-when-unprivileged = false`` a container without
``CAP_SYS_ADMIN`` in its bounding set gets nothing from ``AMD_VISIBLE_DEVICES``,
``INTEL_VISIBLE_DEVICES`` or ``NVIDIA_VISIBLE_DEVICES`` — in spec mode (``ocihook edit``) and
in hook mode (``ocihook hook prestart``) — and the message says the policy ignored them;
``accept-cdi-annotations-when-unprivileged = false`` does the same for ``cdi.k8s.io/``
annotations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import make_bundle, run_cli

from ocihook.config.load import load_config
from ocihook.request.drm import drm_requests_from_spec
from ocihook.request.nvidia import request_from_spec
from ocihook.request.policy import RequestPolicy, ignored_by_policy, policy_note
from ocihook.sim import vendors as simvendors

STRICT = "accept-nvidia-visible-devices-envvar-when-unprivileged = false\n"
NO_ANNOTATIONS = "accept-cdi-annotations-when-unprivileged = false\n"
CAPS = ["CAP_CHOWN", "CAP_KILL"]


def _doc(env: list[str], *, privileged: bool, annotations: dict[str, str] | None = None) -> Any:
    caps = [*CAPS, "CAP_SYS_ADMIN"] if privileged else CAPS
    doc: dict[str, Any] = {
        "ociVersion": "1.0.2",
        "root": {"path": "rootfs"},
        "process": {
            "args": ["sh"],
            "cwd": "/",
            "env": ["PATH=/bin", *env],
            "capabilities": {k: list(caps) for k in ("bounding", "effective", "permitted")},
        },
        "linux": {},
    }
    if annotations:
        doc["annotations"] = annotations
    return doc


def _config(tmp: Path, text: str) -> str:
    path = tmp / "config.toml"
    path.write_text(text)
    return str(path)


def _ocihook(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, stdin=stdin)


def _edit(bundle: Path, cfg: str, root: str) -> subprocess.CompletedProcess[str]:
    return _ocihook(
        "edit", "--config", cfg, "-b", str(bundle), "--driver-root", root, "--dev-root", root
    )


def _device_paths(bundle: Path) -> list[str]:
    doc = json.loads((bundle / "config.json").read_text())
    return sorted(d["path"] for d in doc.get("linux", {}).get("devices", []))


@pytest.fixture(scope="module")
def amd(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")), make_dev_nodes=False)


@pytest.fixture(scope="module")
def intel(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_intel(str(tmp_path_factory.mktemp("intel")), make_dev_nodes=False)


def _need_nodes(host: simvendors.SimDrmHost) -> None:
    if not host.dev_nodes:
        pytest.skip("the simulated host needs root to mknod its /dev nodes")


@pytest.fixture(scope="module")
def amd_nodes(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    host = simvendors.build_amd(str(tmp_path_factory.mktemp("amdn")))
    _need_nodes(host)
    return host


@pytest.fixture(scope="module")
def intel_nodes(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    host = simvendors.build_intel(str(tmp_path_factory.mktemp("inteln")))
    _need_nodes(host)
    return host


@pytest.mark.parametrize("vendor", ["amd", "intel"])
def test_spec_mode_ignores_drm_variable_of_unprivileged(
    vendor: str,
    amd_nodes: simvendors.SimDrmHost,
    intel_nodes: simvendors.SimDrmHost,
    tmp_path: Path,
) -> None:
    host = amd_nodes if vendor == "amd" else intel_nodes
    variable = f"{vendor.upper()}_VISIBLE_DEVICES"
    bundle = make_bundle(tmp_path, doc=_doc([f"{variable}=all"], privileged=False))
    before = (bundle / "config.json").read_bytes()
    r = _edit(bundle, _config(tmp_path, STRICT), host.root)
    assert r.returncode == 0, r.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert (
        f"nothing requested: {variable} ignored by policy: unprivileged container (no "
        "CAP_SYS_ADMIN in its bounding set) and "
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false; unchanged"
    ) in r.stderr


@pytest.mark.parametrize("vendor", ["amd", "intel"])
def test_spec_mode_still_serves_privileged_containers(
    vendor: str,
    amd_nodes: simvendors.SimDrmHost,
    intel_nodes: simvendors.SimDrmHost,
    tmp_path: Path,
) -> None:
    host = amd_nodes if vendor == "amd" else intel_nodes
    variable = f"{vendor.upper()}_VISIBLE_DEVICES"
    bundle = make_bundle(tmp_path, doc=_doc([f"{variable}=all"], privileged=True))
    r = _edit(bundle, _config(tmp_path, STRICT), host.root)
    assert r.returncode == 0, r.stderr
    gpus = host.amd if vendor == "amd" else host.intel
    want = {f"/dev/dri/renderD{g.render}" for g in gpus}
    if vendor == "amd":
        want.add("/dev/kfd")
    assert want <= set(_device_paths(bundle)), _device_paths(bundle)
    assert "ignored" not in r.stderr


def test_default_policy_serves_unprivileged_amd(
    amd_nodes: simvendors.SimDrmHost, tmp_path: Path
) -> None:
    """The toolkit's default (true): the variable of an unprivileged container counts."""
    bundle = make_bundle(tmp_path, doc=_doc(["AMD_VISIBLE_DEVICES=all"], privileged=False))
    r = _edit(bundle, _config(tmp_path, ""), amd_nodes.root)
    assert r.returncode == 0, r.stderr
    assert "/dev/kfd" in _device_paths(bundle)


def test_spec_mode_nvidia_ignored_message(tmp_path: Path, sim: Any) -> None:
    bundle = make_bundle(tmp_path, doc=_doc(["NVIDIA_VISIBLE_DEVICES=all"], privileged=False))
    r = _edit(bundle, _config(tmp_path, STRICT), sim.root)
    assert r.returncode == 0, r.stderr
    assert "unset, empty or void" not in r.stderr
    assert (
        "nothing requested: NVIDIA_VISIBLE_DEVICES ignored by policy: unprivileged container"
    ) in r.stderr
    assert "accept-nvidia-visible-devices-envvar-when-unprivileged = false" in r.stderr


@pytest.mark.parametrize("variable", ["AMD_VISIBLE_DEVICES", "INTEL_VISIBLE_DEVICES"])
def test_hook_mode_ignores_drm_variable_of_unprivileged(
    variable: str, amd: simvendors.SimDrmHost, tmp_path: Path
) -> None:
    """The hook leaves before injecting (the state's pid 0 would make injection fail with
    exit 4), logs and prints why."""
    bundle = make_bundle(tmp_path, doc=_doc([f"{variable}=all"], privileged=False))
    log_file = tmp_path / "ocihook.log"
    cfg = _config(tmp_path, STRICT + f'log-file = "{log_file}"\nlog-level = "debug"\n')
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "pid": 0, "bundle": str(bundle)})
    r = _ocihook(
        "hook",
        "prestart",
        "--config",
        cfg,
        "--driver-root",
        amd.root,
        "--dev-root",
        amd.root,
        stdin=state,
    )
    assert r.returncode == 0, r.stderr
    assert f"{variable} ignored by policy" in r.stderr
    logged = log_file.read_text()
    assert "request ignored" in logged and f"{variable} ignored by policy" in logged
    assert "nothing requested" in logged


def test_hook_mode_privileged_amd_goes_on_to_inject(
    amd: simvendors.SimDrmHost, tmp_path: Path
) -> None:
    """Control: the same state for a privileged container reaches injection (and fails
    there on pid 0), so the test above can fail."""
    bundle = make_bundle(tmp_path, doc=_doc(["AMD_VISIBLE_DEVICES=all"], privileged=True))
    cfg = _config(tmp_path, STRICT)
    state = json.dumps({"ociVersion": "1.0.2", "id": "c1", "pid": 0, "bundle": str(bundle)})
    r = _ocihook(
        "hook",
        "prestart",
        "--config",
        cfg,
        "--driver-root",
        amd.root,
        "--dev-root",
        amd.root,
        stdin=state,
    )
    assert r.returncode == 4, r.stderr
    assert "no host pid" in r.stderr


def _cdi_dir(tmp: Path) -> Path:
    spec_dir = tmp / "cdi"
    spec_dir.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["EXAMPLE_GPU=0"]}}],
    }
    (spec_dir / "example.json").write_text(json.dumps(spec))
    return spec_dir


@pytest.mark.parametrize("privileged", [False, True])
def test_cdi_annotations_of_unprivileged(privileged: bool, tmp_path: Path) -> None:
    spec_dir = _cdi_dir(tmp_path)
    ann = {"cdi.k8s.io/example": "example.com/gpu=0"}
    bundle = make_bundle(tmp_path, doc=_doc([], privileged=privileged, annotations=ann))
    before = (bundle / "config.json").read_bytes()
    cfg = _config(tmp_path, f'cdi-spec-dirs = ["{spec_dir}"]\n' + NO_ANNOTATIONS)
    r = _ocihook("edit", "--config", cfg, "-b", str(bundle))
    assert r.returncode == 0, r.stderr
    env = json.loads((bundle / "config.json").read_text())["process"]["env"]
    if privileged:
        assert "EXAMPLE_GPU=0" in env
        assert "ignored" not in r.stderr
    else:
        assert (bundle / "config.json").read_bytes() == before
        assert (
            "nothing requested: annotations[cdi.k8s.io/example] ignored by policy: "
            "unprivileged container (no CAP_SYS_ADMIN in its bounding set) and "
            "accept-cdi-annotations-when-unprivileged = false; unchanged"
        ) in r.stderr


def test_cdi_annotations_default_accepted_for_unprivileged(tmp_path: Path) -> None:
    """Toolkit compatibility: without the key, annotations of any container count — also
    with the env policy strict."""
    spec_dir = _cdi_dir(tmp_path)
    ann = {"cdi.k8s.io/example": "example.com/gpu=0"}
    bundle = make_bundle(tmp_path, doc=_doc([], privileged=False, annotations=ann))
    cfg = _config(tmp_path, f'cdi-spec-dirs = ["{spec_dir}"]\n' + STRICT)
    r = _ocihook("edit", "--config", cfg, "-b", str(bundle))
    assert r.returncode == 0, r.stderr
    assert "EXAMPLE_GPU=0" in json.loads((bundle / "config.json").read_text())["process"]["env"]


def test_drm_cdi_name_in_variable_ignored_for_unprivileged(tmp_path: Path) -> None:
    """``AMD_VISIBLE_DEVICES=amd.com/gpu=0`` is a CDI request through the environment: the
    env policy covers it."""
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "amd.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"env": ["AMD_CDI=0"]}}],
    }
    (spec_dir / "amd.json").write_text(json.dumps(spec))
    bundle = make_bundle(
        tmp_path, doc=_doc(["AMD_VISIBLE_DEVICES=amd.com/gpu=0"], privileged=False)
    )
    before = (bundle / "config.json").read_bytes()
    cfg = _config(tmp_path, f'cdi-spec-dirs = ["{spec_dir}"]\n' + STRICT)
    r = _ocihook("edit", "--config", cfg, "-b", str(bundle))
    assert r.returncode == 0, r.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert "AMD_VISIBLE_DEVICES ignored by policy" in r.stderr


def test_policy_functions() -> None:
    strict = RequestPolicy(accept_env_unprivileged=False, swarm_resource=("DOCKER_RESOURCE_GPU",))
    env = [
        "AMD_VISIBLE_DEVICES=0",
        "INTEL_VISIBLE_DEVICES=card1",
        "NVIDIA_IMEX_CHANNELS=0",
        "DOCKER_RESOURCE_GPU=0",
        "NVIDIA_GDS=enabled",
        "NVIDIA_VISIBLE_DEVICES=",
    ]
    doc = _doc(env, privileged=False)
    assert drm_requests_from_spec(doc, policy=strict) == ()
    assert [r.vendor for r in drm_requests_from_spec(doc)] == ["amd", "intel"]
    assert request_from_spec(doc, policy=strict).is_void
    assert ignored_by_policy(doc, strict) == (
        "NVIDIA_IMEX_CHANNELS",
        "NVIDIA_GDS",
        "AMD_VISIBLE_DEVICES",
        "INTEL_VISIBLE_DEVICES",
        "DOCKER_RESOURCE_GPU",
    )
    assert ignored_by_policy(doc, RequestPolicy()) == ()
    assert ignored_by_policy(_doc(env, privileged=True), strict) == ()
    legacy = _doc(["CUDA_VERSION=12.2"], privileged=False)
    assert ignored_by_policy(legacy, strict) == (
        "CUDA_VERSION (a legacy CUDA image asks for all GPUs)",
    )
    ann = _doc([], privileged=False, annotations={"cdi.k8s.io/a": "x/y=0", "other": "1"})
    no_ann = RequestPolicy(accept_annotations_unprivileged=False)
    assert ignored_by_policy(ann, no_ann) == ("annotations[cdi.k8s.io/a]",)
    assert policy_note(("AMD_VISIBLE_DEVICES", "annotations[cdi.k8s.io/a]")).endswith(
        "accept-nvidia-visible-devices-envvar-when-unprivileged = false and "
        "accept-cdi-annotations-when-unprivileged = false"
    )


def test_config_key(tmp_path: Path) -> None:
    cfg = load_config(_config(tmp_path, NO_ANNOTATIONS), environ={})
    assert cfg.accept_cdi_annotations_when_unprivileged is False
    assert load_config(None, environ={}).accept_cdi_annotations_when_unprivileged is True
    r = _ocihook("config", "show", "--config", _config(tmp_path, NO_ANNOTATIONS))
    assert "accept-cdi-annotations-when-unprivileged = false" in r.stdout, r.stdout + r.stderr
    bad = _config(tmp_path, 'accept-cdi-annotations-when-unprivileged = "no"\n')
    assert _ocihook("config", "show", "--config", bad).returncode == 10
    assert os.path.exists(bad)


def test_runtime_wrapper_ignores_drm_variable_of_unprivileged(
    amd_nodes: simvendors.SimDrmHost, tmp_path: Path
) -> None:
    """ocihook-runtime (spec edits before the real runtime) leaves config.json as it was,
    says why, and runs the real runtime."""
    bundle = make_bundle(tmp_path, doc=_doc(["AMD_VISIBLE_DEVICES=all"], privileged=False))
    before = (bundle / "config.json").read_bytes()
    called = tmp_path / "called"
    fake = tmp_path / "fake-runc"
    fake.write_text(f'#!/bin/sh\necho "$@" > {called}\n')
    fake.chmod(0o755)
    root = amd_nodes.root
    cfg = _config(
        tmp_path,
        STRICT + f'driver-root = "{root}"\ndev-root = "{root}"\nruntimes = ["{fake}"]\n',
    )
    wrapper = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")
    r = subprocess.run(
        [wrapper, "create", "--bundle", str(bundle), "cid"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "OCIHOOK_CONFIG": cfg},
    )
    assert r.returncode == 0, r.stderr
    assert (bundle / "config.json").read_bytes() == before
    assert (
        f"ocihook-runtime: {bundle}/config.json: AMD_VISIBLE_DEVICES ignored by policy"
    ) in r.stderr
    assert called.read_text().split() == ["create", "--bundle", str(bundle), "cid"]


def test_plan_command_follows_the_policy(tmp_path: Path, sim: Any) -> None:
    """``ocihook plan`` shows what the container would get: nothing, and why."""
    bundle = make_bundle(tmp_path, doc=_doc(["NVIDIA_VISIBLE_DEVICES=all"], privileged=False))
    cfg = _config(tmp_path, STRICT)
    args = ["plan", "--config", cfg, "-b", str(bundle), "--driver-root", sim.root]
    r = _ocihook(*args, "--dev-root", sim.root)
    assert r.returncode == 0, r.stderr
    assert "NVIDIA_VISIBLE_DEVICES ignored by policy" in r.stderr
    assert json.loads(r.stdout)["gpus"] == []
    r = _ocihook(*args[:1], *args[3:], "--dev-root", sim.root)  # no --config: the default
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["gpus"]) == len(sim.gpus)
