"""``ocihook doctor`` on the simulated and the realistic host: every applicable layer PASS
(the container layers are in tests/e2e/test_e2e_doctor.py), and one planted failure per
layer reported FAIL with the fix that repairs it."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from support import run_cli

from ocihook import doctor
from ocihook.core.hostroot import HostRoot
from ocihook.engines import configure_containerd, configure_docker, hooks_d_document
from ocihook.sim import host as simhost
from ocihook.sim.elfwrite import make_shared_object

REPO = Path(__file__).resolve().parents[3]
RUNTIME = os.path.join(os.path.dirname(sys.executable), "ocihook-runtime")


def _socket(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    here = os.getcwd()
    os.chdir(path.parent)  # a relative name: the full path is longer than sun_path
    try:
        if os.path.lexists(path.name):  # the simulated host has the socket already
            os.unlink(path.name)
        s = socket.socket(socket.AF_UNIX)
        s.bind(path.name)
        s.close()
    finally:
        os.chdir(here)


def _sim(tmp_path: Path, version: str = simhost.DEFAULT_DRIVER_VERSION) -> Path:
    root = tmp_path / f"host-{version}"
    simhost.build(str(root), driver_version=version)
    _socket(root / "var/run/nvidia-persistenced/socket")
    return root


def _generate_cdi(root: Path, etc: Path) -> Path:
    out = etc / "etc/cdi/nvidia.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    hostargs = ["--driver-root", str(root), "--dev-root", str(root)]
    assert run_cli("cdi", "generate", *hostargs, "--output", str(out)).returncode == 0
    return out


def _configured(tmp_path: Path, root: Path) -> Path:
    """A config root where docker and containerd register this installation's
    ocihook-runtime, podman its hooks.d file, with a CDI spec of ``root``."""
    etc = tmp_path / "etc-root"
    docker = etc / "etc/docker/daemon.json"
    docker.parent.mkdir(parents=True)
    after, _ = configure_docker(None, path=str(docker), runtime_path=RUNTIME)
    docker.write_bytes(after)
    containerd = etc / "etc/containerd/config.toml"
    containerd.parent.mkdir(parents=True)
    after, _ = configure_containerd(None, path=str(containerd), runtime_path=RUNTIME)
    containerd.write_bytes(after)
    hooks = etc / "usr/share/containers/oci/hooks.d/ocihook-prestart.json"
    hooks.parent.mkdir(parents=True)
    hooks.write_text(json.dumps(hooks_d_document()))
    _generate_cdi(root, etc)
    return etc


def _env_file(tmp_path: Path, *lines: str) -> str:
    path = tmp_path / "image.env"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _run(root: Path, etc: Path | None = None, **kw: Any) -> doctor.Report:
    return doctor.run_doctor(
        HostRoot.single(str(root)),
        config_root=str(etc or root / "no-etc"),
        containers=False,
        gpu_backend="procfs",
        **kw,
    )


def _check(report: doctor.Report, layer: str, name: str) -> doctor.Check:
    found = [c for c in report.checks if c.layer == layer and c.name.startswith(name)]
    assert len(found) == 1, [c for c in report.checks if c.layer == layer]
    return found[0]


def test_simulated_host_every_layer_passes(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    env = _env_file(
        tmp_path,
        "NVIDIA_VISIBLE_DEVICES=0,3",
        "NVIDIA_REQUIRE_CUDA=cuda>=12.0",
        "CUDA_VERSION=12.0.1",
    )
    report = _run(root, etc, image_env=env)
    assert [c.status for c in report.checks if c.layer == "host"] == ["PASS"] * 6, report.checks
    for layer in ("host", "runtime", "request"):
        assert report.layer_status(layer) == "PASS", [c for c in report.checks if c.layer == layer]
    assert report.layer_status("gpu") == "SKIP"
    assert _check(report, "runtime", "docker").evidence.startswith(f"ocihook -> {RUNTIME}")
    assert _check(report, "runtime", "podman").status == "PASS"
    cdi = _check(report, "runtime", "CDI spec")
    assert "driver 550.127.05" in cdi.evidence and "valid" in cdi.evidence
    cuda = _check(report, "host", "CUDA driver version")
    # the simulated libcuda is no real library: the table, and the evidence says so
    assert cuda.evidence.startswith("CUDA 12.4 (driver-branch table for 550.127.05")
    req = _check(report, "request", "request")
    assert "-> GPUs 0 (" in req.evidence and "3 (" in req.evidence
    assert _check(report, "request", "requirements").evidence.endswith(
        "met with CUDA 12.4 (driver-branch table)"
    )
    libs = _check(report, "host", "driver libraries")
    assert libs.evidence.startswith("10 64-bit and 2 32-bit 550.127.05 libraries")
    assert "1 file(s) of another driver version skipped" in libs.evidence
    assert report.facts["cudaSource"] == "table"
    assert not report.failed


@pytest.mark.realistic
def test_realistic_host_layers_pass(realistic: dict[str, Any], tmp_path: Path) -> None:
    root = Path(realistic["root"])
    report = doctor.run_doctor(
        HostRoot.single(str(root)), config_root=str(tmp_path), containers=False
    )
    assert [c.status for c in report.checks if c.layer == "host"] == ["PASS"] * 6, report.checks
    cuda = _check(report, "host", "CUDA driver version")
    # the real 535 libcuda answers cuDriverGetVersion without a GPU, in a child process
    assert cuda.evidence.startswith("CUDA 12.2 (cuDriverGetVersion of "), cuda
    assert report.facts["cudaSource"] == "libcuda"
    libs = _check(report, "host", "driver libraries")
    assert libs.evidence.startswith("23 64-bit and 19 32-bit 535.261.03 libraries"), libs
    assert len(report.facts["gpus"]) == 8


def test_module_not_loaded_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    os.unlink(root / "proc/driver/nvidia/version")
    report = _run(root)
    c = _check(report, "host", "kernel module")
    assert c.status == "FAIL"
    assert "the NVIDIA kernel module is not loaded" in c.evidence
    assert c.fix.startswith("load it (modprobe nvidia")
    assert {x.status for x in report.checks if x.layer == "host" and x is not c} == {"SKIP"}


def test_module_not_in_proc_modules_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    (root / "proc/modules").write_text("ext4 1 0 - Live 0x0\n")
    c = _check(_run(root), "host", "kernel module")
    assert c.status == "FAIL" and "no nvidia module" in c.evidence
    assert c.fix == "reload the driver: modprobe nvidia"


def test_library_of_the_wrong_class_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    lib = root / "usr/lib/x86_64-linux-gnu/nvidia/current/libcuda.so.550.127.05"
    lib.write_bytes(make_shared_object("libcuda.so.1", elf_class=32, machine="i386"))
    c = _check(_run(root), "host", "driver libraries")
    assert c.status == "FAIL"
    assert (
        f"{lib} (ld.so.cache libcuda.so.1): ELF class 32, expected 64, machine EM_386, "
        "expected EM_X86_64, ld.so.cache flags 0x0303 name another ABI than the file's "
        "32-bit EM_386 (0x0003)"
    ) in c.evidence, c.evidence
    assert c.fix.startswith("reinstall the driver's user-space packages")


def test_unresolved_driver_dependency_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    lib = root / "usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.550.127.05"
    lib.write_bytes(
        make_shared_object("libnvidia-cfg.so.1", needed=("libnvidia-gone.so.1", "libc.so.6"))
    )
    c = _check(_run(root), "host", "driver libraries")
    assert c.status == "FAIL"
    assert c.evidence == (
        f"{lib} needs libnvidia-gone.so.1, which the driver root does not provide; "
        "1 file(s) of another driver version skipped"
    )


def test_missing_persistenced_and_uvm_warn(tmp_path: Path) -> None:
    root = tmp_path / "bare"
    simhost.build(str(root))
    (root / simhost.PERSISTENCED_SOCKET.lstrip("/")).unlink()  # no daemon
    devices = root / "proc/devices"
    devices.write_text(devices.read_text().replace("237 nvidia-uvm\n", ""))
    report = _run(root)
    assert _check(report, "host", "persistence daemon").status == "WARN"
    nodes = _check(report, "host", "device nodes")
    assert nodes.status == "WARN" and "nvidia-uvm is not loaded" in nodes.evidence
    assert nodes.fix.startswith("modprobe nvidia-uvm")


def test_engine_config_pointing_at_nothing_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    daemon = etc / "etc/docker/daemon.json"
    daemon.write_text(json.dumps({"runtimes": {"ocihook": {"path": "/opt/gone/ocihook-runtime"}}}))
    c = _check(_run(root, etc), "runtime", "docker")
    assert c.status == "FAIL"
    assert c.evidence == f"ocihook in {daemon}: /opt/gone/ocihook-runtime does not exist"
    assert c.fix.startswith("ocihook runtime configure --runtime docker")


def test_hook_on_a_pyenv_shim_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    shim = tmp_path / ".pyenv/shims/python3"
    shim.parent.mkdir(parents=True)
    shim.write_text('#!/usr/bin/env bash\nexec "/root/.pyenv/libexec/pyenv" exec "$@"\n')
    shim.chmod(0o755)
    hooks = etc / "usr/share/containers/oci/hooks.d/ocihook-prestart.json"
    hooks.write_text(json.dumps(hooks_d_document(str(shim))))
    c = _check(_run(root, etc), "runtime", "podman")
    assert c.status == "FAIL" and "shim" in c.evidence, c
    assert c.fix.startswith("ocihook runtime configure --runtime podman")


def test_second_toolkit_in_hooks_d_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    theirs = etc / "usr/share/containers/oci/hooks.d/oci-nvidia-hook.json"
    theirs.write_text(
        json.dumps(
            {
                "version": "1.0.0",
                "hook": {
                    "path": "/usr/bin/nvidia-container-toolkit",
                    "args": ["nvidia-container-toolkit", "prestart"],
                },
                "when": {"always": True},
                "stages": ["prestart"],
            }
        )
    )
    c = _check(_run(root, etc), "runtime", "podman")
    assert c.status == "FAIL" and "GPUs would be injected twice" in c.evidence
    assert c.fix == f"remove the toolkit's registration ({theirs}) or uninstall it"


def test_unregistered_engine_named_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = tmp_path / "etc-root"
    (etc / "etc/docker").mkdir(parents=True)
    (etc / "etc/docker/daemon.json").write_text("{}")
    report = _run(root, etc, engines=["docker"])
    c = _check(report, "runtime", "docker")
    assert c.status == "FAIL" and c.fix == "ocihook runtime configure --runtime docker"
    assert [x.name for x in report.checks if x.layer == "runtime"] == ["docker", "CDI spec"]


def test_stale_cdi_spec_fails(tmp_path: Path) -> None:
    old = _sim(tmp_path)
    etc = _configured(tmp_path, old)
    new = _sim(tmp_path, "560.35.03")
    c = _check(_run(new, etc), "runtime", "CDI spec")
    assert c.status == "FAIL"
    assert "stale: generated for driver 550.127.05, loaded driver is 560.35.03" in c.evidence
    assert c.fix.startswith("regenerate it: systemctl start ocihook-cdi-refresh.service")


def test_cdi_spec_with_vanished_files_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    os.unlink(root / "usr/lib/x86_64-linux-gnu/libnvidia-cfg.so.550.127.05")
    c = _check(_run(root, etc), "runtime", "CDI spec")
    assert c.status == "FAIL" and "host path(s) no longer exist" in c.evidence


def test_invalid_cdi_spec_fails_schema(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    spec = etc / "etc/cdi/nvidia.json"
    doc = json.loads(spec.read_text())
    doc["devices"][0]["containerEdits"]["deviceNodes"] = "nope"
    spec.write_text(json.dumps(doc))
    c = _check(_run(root, etc), "runtime", "CDI spec")
    assert c.status == "FAIL"
    assert c.evidence.startswith(
        "invalid against the CDI schema: $.devices[0].containerEdits.deviceNodes: 'nope' is "
    ), c.evidence


def test_image_needing_newer_cuda_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    env = _env_file(tmp_path, "NVIDIA_VISIBLE_DEVICES=all", "NVIDIA_REQUIRE_CUDA=cuda>=12.6")
    report = _run(root, image_env=env, driver_version="560.35.03")
    c = _check(report, "request", "requirements")
    assert c.status == "FAIL"
    assert "NVIDIA_REQUIRE_CUDA not met" in c.evidence
    assert c.evidence.endswith("(CUDA 12.4 (driver-branch table))")
    assert c.fix.startswith("update the driver to a version supporting CUDA 12.6 or newer")
    upgrade = _check(report, "request", "driver 560.35.03")
    assert upgrade.status == "PASS"
    assert upgrade.evidence.startswith("will run on driver 560.35.03: it supports CUDA 12.6")


def test_pre_upgrade_to_an_older_driver_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    env = _env_file(tmp_path, "CUDA_VERSION=12.4.1", "NVIDIA_VISIBLE_DEVICES=0")
    report = _run(root, image_env=env, driver_version="535.261.03")
    assert _check(report, "request", "requirements").status == "PASS"
    c = _check(report, "request", "driver 535.261.03")
    assert c.status == "FAIL"
    assert c.evidence.startswith("will not run on driver 535.261.03 (CUDA 12.2): legacy CUDA image")
    assert "CUDA 12.4 or newer" in c.fix


def test_unknown_gpu_in_request_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    env = _env_file(tmp_path, "NVIDIA_VISIBLE_DEVICES=9")
    c = _check(_run(root, image_env=env), "request", "request")
    assert c.status == "FAIL" and "asks for list 9" in c.evidence


def test_void_request_warns(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    c = _check(_run(root, image_env=_env_file(tmp_path, "PATH=/bin")), "request", "request")
    assert c.status == "WARN" and c.fix.startswith("set NVIDIA_VISIBLE_DEVICES")


def _schema() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((REPO / "specs/doctor-record.schema.json").read_text())
    packaged = json.loads((REPO / "ocihook/schemas/doctor-record.schema.json").read_text())
    assert packaged == doc
    return doc


def test_record_validates_and_cli_exit_codes(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    (bundle / "config.json").write_text(
        json.dumps(
            {
                "ociVersion": "1.0.2",
                "process": {
                    "args": ["sh"],
                    "cwd": "/",
                    "env": ["NVIDIA_VISIBLE_DEVICES=1", "CUDA_VERSION=12.1.0"],
                },
                "root": {"path": "rootfs"},
                "annotations": {
                    "org.opencontainers.image.digest": "sha256:" + "e" * 64,
                    "io.kubernetes.cri.image-name": "nvcr.io/nvidia/cuda:12.1.0-base",
                    "unrelated": "x",
                },
            }
        )
    )
    record = tmp_path / "record.json"
    hostargs = ["--driver-root", str(root), "--dev-root", str(root), "--config-root", str(etc)]
    r = run_cli(
        "doctor", *hostargs, "--bundle", str(bundle), "--record", str(record), "--no-container"
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines()[0] == "host        PASS"
    assert r.stdout.splitlines()[-1] == "result: PASS (0 failed, 0 warnings)"
    doc = json.loads(record.read_text())
    jsonschema.validate(doc, _schema())
    assert doc["driver"] == {
        "version": "550.127.05",
        "cudaVersion": "12.4",
        "cudaVersionSource": "table",
    }
    assert doc["image"]["digest"] == "sha256:" + "e" * 64
    assert doc["image"]["annotations"] == {
        "org.opencontainers.image.digest": "sha256:" + "e" * 64,
        "io.kubernetes.cri.image-name": "nvcr.io/nvidia/cuda:12.1.0-base",
    }
    assert doc["image"]["requirements"] == [{"name": "CUDA_VERSION", "value": "cuda>=12.1"}]
    assert doc["engines"]["docker"]["runtimes"] == {"ocihook": RUNTIME}
    assert doc["gpus"][1]["migMode"] == "enabled" and doc["gpus"][0]["migMode"] == "disabled"
    spec = etc / "etc/cdi/nvidia.json"
    import hashlib

    assert doc["cdiSpecs"][0]["sha256"] == hashlib.sha256(spec.read_bytes()).hexdigest()
    assert doc["layers"] == {
        "host": "PASS",
        "runtime": "PASS",
        "request": "PASS",
        "visibility": "SKIP",
        "gpu": "SKIP",
    }

    os.unlink(root / "proc/driver/nvidia/version")
    r = run_cli("doctor", *hostargs, "--json", "--no-container")
    assert r.returncode == 14, r.stderr
    jsonschema.validate(json.loads(r.stdout), _schema())
    assert r.stderr.strip() == (
        "ocihook: error[doctor-failed]: 1 check(s) FAILed, first: host: kernel module"
    )


def test_cli_refuses_bundle_and_image_env(tmp_path: Path) -> None:
    r = run_cli("doctor", "--bundle", str(tmp_path), "--image-env", str(tmp_path / "x"))
    assert r.returncode == 2 and "give --bundle or --image-env, not both" in r.stderr


def test_forward_compatibility_is_reported_and_does_not_hide_a_failure(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    bundle = tmp_path / "bundle"
    compat = bundle / "rootfs/usr/local/cuda/compat"
    compat.mkdir(parents=True)
    (compat / "libcuda.so.575.57.08").write_bytes(make_shared_object("libcuda.so.1"))
    (compat / "libcuda.so.1").symlink_to("libcuda.so.575.57.08")
    (bundle / "config.json").write_text(
        json.dumps(
            {
                "ociVersion": "1.0.2",
                "process": {
                    "args": ["sh"],
                    "cwd": "/",
                    "env": ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_CUDA=cuda>=12.9"],
                },
                "root": {"path": "rootfs"},
            }
        )
    )
    report = _run(root, bundle=str(bundle))
    fwd = _check(report, "request", "CUDA forward compatibility")
    assert fwd.status == "PASS"
    assert fwd.evidence == (
        "the image's /usr/local/cuda/compat/libcuda.so.575.57.08 is used on driver 550.127.05 "
        "(no usable note: compat branch 575 > host branch 550)"
    )
    req = _check(report, "request", "requirements")
    assert req.status == "FAIL"
    assert req.evidence.endswith(
        "the image carries CUDA forward-compatibility libraries, but the check uses the host "
        "driver's CUDA version"
    )
    assert req.fix.endswith("NVIDIA_DISABLE_REQUIRE=true)")


def test_containerd_import_overriding_the_runtime_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    main = etc / "etc/containerd/config.toml"
    main.write_text('imports = ["conf.d/*.toml"]\n' + main.read_text())
    dropin = etc / "etc/containerd/conf.d/50-gpu.toml"
    dropin.parent.mkdir()
    dropin.write_text(
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.ocihook.options]\n'
        'BinaryName = "/usr/local/bin/ocihook-runtime-old"\n'
    )
    report = _run(root, etc)
    c = _check(report, "runtime", "containerd")
    assert c.status == "FAIL"
    assert c.evidence == f"ocihook in {dropin}: /usr/local/bin/ocihook-runtime-old does not exist"
    assert report.facts["engines"]["containerd"]["files"] == [str(main), str(dropin)]


def test_crio_drop_in_registration(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = tmp_path / "etc-root"
    dropins = etc / "etc/crio/crio.conf.d"
    dropins.mkdir(parents=True)
    (dropins / "99-ocihook.conf").write_text(
        f'[crio.runtime.runtimes.ocihook]\nruntime_path = "{RUNTIME}"\nruntime_type = "oci"\n'
    )
    report = _run(root, etc)
    c = _check(report, "runtime", "crio")
    assert c.status == "PASS" and c.evidence.startswith(f"ocihook -> {RUNTIME} in ")
    (dropins / "10-nvidia.conf").write_text(
        '[crio.runtime]\ndefault_runtime = "nvidia"\n'
        '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n'
    )
    c = _check(_run(root, etc), "runtime", "crio")
    assert c.status == "WARN" and "the NVIDIA Container Toolkit too" in c.evidence
    assert (
        c.fix == f"remove the toolkit's registration ({dropins / '10-nvidia.conf'}) or uninstall it"
    )


def test_malformed_engine_file_fails(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    etc = tmp_path / "etc-root"
    (etc / "etc/docker").mkdir(parents=True)
    (etc / "etc/docker/daemon.json").write_text('{"runtimes": ')
    c = _check(_run(root, etc), "runtime", "docker")
    assert c.status == "FAIL" and c.evidence.startswith("not valid JSON")


@pytest.mark.skipif(os.geteuid() != 0, reason="the simulated host's device nodes need root")
def test_device_node_with_the_wrong_minor_fails(tmp_path: Path) -> None:
    import stat as st

    root = _sim(tmp_path)
    node = root / "dev/nvidia0"
    node.unlink()
    os.mknod(node, 0o666 | st.S_IFCHR, os.makedev(195, 9))
    c = _check(_run(root), "host", "device nodes")
    assert c.status == "FAIL" and str(node) in c.evidence


@pytest.mark.skipif(os.geteuid() != 0, reason="the simulated host's device nodes need root")
def test_device_node_mode_warns(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    os.chmod(root / "dev/nvidia0", 0o600)
    c = _check(_run(root), "host", "device nodes")
    assert c.status == "WARN"
    assert f"{root}/dev/nvidia0 mode 0600" in c.evidence
    assert c.fix.startswith("chmod 0666 the nodes")


def test_no_gpu_fails(tmp_path: Path) -> None:
    import shutil

    root = _sim(tmp_path)
    shutil.rmtree(root / "proc/driver/nvidia/gpus")
    (root / "proc/driver/nvidia/gpus").mkdir()
    c = _check(_run(root), "host", "GPUs")
    assert c.status == "FAIL" and c.fix.startswith("check dmesg")


def test_hook_interpreter_without_ocihook_fails(tmp_path: Path) -> None:
    import venv

    root = _sim(tmp_path)
    etc = _configured(tmp_path, root)
    bare = tmp_path / "bare-venv"
    venv.EnvBuilder(with_pip=False).create(bare)
    hooks = etc / "usr/share/containers/oci/hooks.d/ocihook-prestart.json"
    hooks.write_text(json.dumps(hooks_d_document(str(bare / "bin/python"))))
    c = _check(_run(root, etc), "runtime", "podman")
    assert c.status == "FAIL"
    assert f"{bare}/bin/python cannot import ocihook (ModuleNotFoundError" in c.evidence


def test_persistenced_pid_file_of_a_dead_daemon_warns(tmp_path: Path) -> None:
    root = _sim(tmp_path)
    (root / "var/run/nvidia-persistenced/nvidia-persistenced.pid").write_text("4242\n")
    c = _check(_run(root), "host", "persistence daemon")
    assert c.status == "WARN" and "pid 4242 (not running)" in c.evidence
    (root / "proc/4242").mkdir()
    c = _check(_run(root), "host", "persistence daemon")
    assert c.status == "PASS" and c.evidence.endswith("pid 4242 (running)")


def test_the_device_plugins_stale_spec_names_its_fix(tmp_path: Path) -> None:
    """The Kubernetes device plugin's spec (kind k8s.ocihook.io/nvidia-gpu) is checked as
    the refresh unit's is; stale, its fix is the plugin's restart (it writes it at start)."""
    old = _sim(tmp_path)
    etc = _configured(tmp_path, old)
    spec = etc / "etc/cdi/nvidia.json"
    doc = json.loads(spec.read_text())
    doc["kind"] = "k8s.ocihook.io/nvidia-gpu"
    plugin = etc / "etc/cdi/k8s.ocihook.io-nvidia-gpu.json"
    plugin.write_text(json.dumps(doc))
    spec.unlink()
    new = _sim(tmp_path, "560.35.03")
    report = _run(new, etc)
    (c,) = [x for x in report.checks if x.name == f"CDI spec {plugin}"]
    assert c.status == "FAIL" and c.evidence.startswith("stale: generated for driver 550.127.05")
    assert (
        c.fix == "restart the ocihook device plugin's pod on this node: it writes its spec at start"
    )
