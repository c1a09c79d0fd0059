"""Spec mode consuming CDI: ``NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0`` and ``cdi.k8s.io/``
annotations inject devices from the CDI registry instead of host discovery."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import CDI_GPU_SPEC as GPU_SPEC
from support import GOOD_CDI_YAML as GOOD_YAML
from support import host_cdi_spec, make_bundle, run_cli

from ocihook.appliers.spec import edit_bundle
from ocihook.config.options import Options
from ocihook.core.errors import ApplyError, CdiError
from ocihook.pipeline.cdinames import cdi_device_names
from ocihook.request.nvidia import request_from_spec


@pytest.fixture
def spec_dir(tmp_path: Path) -> Path:
    d = tmp_path / "cdi"
    d.mkdir()
    (d / "nvidia.json").write_text(json.dumps(host_cdi_spec(tmp_path / "host", GPU_SPEC)))
    return d


def _edit_cli(bundle: Path, spec_dir: Path) -> subprocess.CompletedProcess[str]:
    """``ocihook edit -b bundle`` with a configuration file naming ``spec_dir``."""
    cfg = bundle.parent / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    return run_cli("edit", "--config", str(cfg), "-b", str(bundle))


def _nodes(doc: dict[str, Any]) -> list[tuple[str, int]]:
    return [(d["path"], d["minor"]) for d in doc["linux"]["devices"]]


def test_env_cdi_name_injects_from_registry(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    before = (b / "config.json").read_bytes()
    result = edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert result.written and result.plan is None
    assert result.cdi_devices == ("nvidia.com/gpu=1",)
    assert result.before == before
    doc = json.loads((b / "config.json").read_text())
    assert _nodes(doc) == [("/dev/nvidiactl", 255), ("/dev/nvidia1", 1)]
    env = doc["process"]["env"]
    assert "NVIDIA_CDI=1" in env and "NVIDIA_VISIBLE_DEVICES=void" in env
    assert "NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1" not in env
    allow = [r for r in doc["linux"]["resources"]["devices"] if r.get("allow")]
    assert [(r["major"], r["minor"], r["access"]) for r in allow[-2:]] == [
        (195, 255, "rwm"),
        (195, 1, "rwm"),
    ]
    assert [m["destination"] for m in doc["mounts"]][-1].endswith("libcuda.so.535.261.03")


def test_annotations_and_mixed_env(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(
        tmp_path,
        ["NVIDIA_VISIBLE_DEVICES=1,nvidia.com/gpu=0"],
        annotations={"cdi.k8s.io/extra": "nvidia.com/gpu=1", "other": "x"},
    )
    result = edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    # the annotation replaces NVIDIA_VISIBLE_DEVICES, as in the NVIDIA toolkit
    assert result.cdi_devices == ("nvidia.com/gpu=1",)
    doc = json.loads(result.after)
    assert _nodes(doc) == [("/dev/nvidiactl", 255), ("/dev/nvidia1", 1)]


def test_annotation_only_request(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, [], annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu=0"})
    result = edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert result.cdi_devices == ("nvidia.com/gpu=0",)
    assert _nodes(json.loads(result.after)) == [("/dev/nvidiactl", 255), ("/dev/nvidia0", 0)]


def test_unresolvable_leaves_bundle_untouched(tmp_path: Path, spec_dir: Path) -> None:
    (spec_dir / "broken.yaml").write_text("cdiVersion: [\n")
    b = make_bundle(
        tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,nvidia.com/gpu=5,acme.io/x=y"]
    )
    before = (b / "config.json").read_bytes()
    with pytest.raises(CdiError) as info:
        edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    err = info.value
    assert err.value == ("nvidia.com/gpu=5", "acme.io/x=y")
    assert err.path == str(b / "config.json")
    assert err.hint is not None and str(spec_dir / "broken.yaml") in err.hint
    assert (b / "config.json").read_bytes() == before


def test_modes(tmp_path: Path) -> None:
    doc = {
        "process": {"env": ["NVIDIA_VISIBLE_DEVICES=0,GPU-1b2c3d4e-0000-1111-2222-333344445555"]}
    }
    req = request_from_spec(doc)
    assert cdi_device_names(doc, req, Options()) == ()
    assert cdi_device_names(doc, req, Options(mode="cdi")) == (
        "nvidia.com/gpu=0",
        "nvidia.com/gpu=GPU-1b2c3d4e-0000-1111-2222-333344445555",
    )
    all_doc = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=all"]}}
    assert cdi_device_names(all_doc, request_from_spec(all_doc), Options(mode="cdi")) == (
        "nvidia.com/gpu=all",
    )
    cdi_doc = {"process": {"env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"]}}
    cdi_req = request_from_spec(cdi_doc)
    assert cdi_device_names(cdi_doc, cdi_req, Options(mode="legacy")) == ()
    assert cdi_device_names(cdi_doc, cdi_req, Options(default_kind="acme.io/gpu")) == (
        "nvidia.com/gpu=0",
    )
    ann = {"annotations": {"cdi.k8s.io/a": "acme.io/net=eth0"}, "process": {"env": []}}
    assert cdi_device_names(ann, request_from_spec(ann), Options()) == ("acme.io/net=eth0",)
    assert cdi_device_names(ann, request_from_spec(ann), Options(annotation_prefixes=("x/",))) == ()


def test_bad_annotation_names_field(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, [], annotations={"cdi.k8s.io/gpu": "nvidia.com/gpu"})
    with pytest.raises(CdiError) as info:
        edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert (info.value.field, info.value.path) == ("cdi.k8s.io/gpu", str(b / "config.json"))


def test_cli_edit_with_config_file(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 0, r.stderr
    assert "CDI devices nvidia.com/gpu=0; written" in r.stderr
    doc = json.loads((b / "config.json").read_text())
    assert _nodes(doc) == [("/dev/nvidiactl", 255), ("/dev/nvidia0", 0)]

    b2 = tmp_path / "b2"
    b.rename(b2)
    r = _edit_cli(b2, spec_dir)
    # already void after the first edit: nothing to do
    assert r.returncode == 0 and "unchanged" in r.stderr


def test_cli_unresolvable_exit_11(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=7"])
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 11
    assert "unresolvable CDI devices nvidia.com/gpu=7" in r.stderr


def test_cli_conflicting_producers_exit_11(tmp_path: Path, spec_dir: Path) -> None:
    """Two producers of nvidia.com/gpu in one directory (the toolkit's spec beside
    ocihook's): a request for one of their devices fails in one line naming both files
    and saying why, not "unresolvable"; config.json is untouched."""
    first = spec_dir / "nvidia.json"
    second = spec_dir / "nvidia-ctk.yaml"
    shutil.copy(first, second)
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,nvidia.com/gpu=9"])
    before = (b / "config.json").read_bytes()
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 11
    assert r.stderr.count("\n") == 1 and "unresolvable CDI devices nvidia.com/gpu=9" in r.stderr
    assert f"CDI specs {second} and {first} all define nvidia.com/gpu=0" in r.stderr
    assert "requested CDI device nvidia.com/gpu=0 in conflict:" in r.stderr
    assert "hint: keep one producer per kind in a spec directory" in r.stderr
    assert (b / "config.json").read_bytes() == before


BASE = {"ociVersion": "1.0.2", "root": {"path": "rootfs"}}
GPU0_ENV = {"args": ["sh"], "env": ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"], "cwd": "/"}


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        ({"process": GPU0_ENV, "linux": []}, "linux"),
        ({"process": GPU0_ENV, "linux": "x"}, "linux"),
        ({"process": GPU0_ENV, "linux": {"devices": {}}}, "linux.devices"),
        ({"process": GPU0_ENV, "linux": {"devices": [1]}}, "linux.devices[0]"),
        ({"process": GPU0_ENV, "linux": {"resources": []}}, "linux.resources"),
        (
            {"process": GPU0_ENV, "linux": {"resources": {"devices": "x"}}},
            "linux.resources.devices",
        ),
        ({"process": {**GPU0_ENV, "user": {"uid": "5", "gid": 0}}}, "process.user.uid"),
        ({"process": {**GPU0_ENV, "user": {"uid": 0, "gid": True}}}, "process.user.gid"),
        ({"process": GPU0_ENV, "mounts": {}}, "mounts"),
        ({"process": GPU0_ENV, "hooks": {"prestart": {}}}, "hooks.prestart"),
        (
            {"process": {"args": ["sh"], "env": []}, "annotations": ["cdi.k8s.io/x"]},
            "annotations",
        ),
    ],
)
def test_malformed_config_json_exit_3_untouched(
    tmp_path: Path, spec_dir: Path, extra: dict[str, Any], field: str
) -> None:
    """Found by review: these shapes crashed with a traceback (exit 1)."""
    b = tmp_path / "b"
    (b / "rootfs").mkdir(parents=True)
    (b / "config.json").write_text(json.dumps({**BASE, **extra}))
    before = (b / "config.json").read_bytes()
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert f"field {field}" in r.stderr
    assert (b / "config.json").read_bytes() == before


@pytest.mark.parametrize("process", [None, {"args": ["sh"], "env": None, "cwd": "/"}])
def test_null_process_or_env_counts_as_absent(
    tmp_path: Path, spec_dir: Path, process: dict[str, Any] | None
) -> None:
    b = tmp_path / "b"
    (b / "rootfs").mkdir(parents=True)
    doc = {**BASE, "process": process, "annotations": {"cdi.k8s.io/x": "nvidia.com/gpu=0"}}
    (b / "config.json").write_text(json.dumps(doc))
    result = edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    after = json.loads(result.after)
    assert after["process"]["env"] == ["NVIDIA_CDI=1", "NVIDIA_VISIBLE_DEVICES=void"]
    assert _nodes(after) == [("/dev/nvidiactl", 255), ("/dev/nvidia0", 0)]


def test_malformed_env_name_reported_as_written(tmp_path: Path, spec_dir: Path) -> None:
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0,nvidia.com/=1"])
    with pytest.raises(CdiError) as info:
        edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert info.value.value == "nvidia.com/=1"
    assert info.value.field == "process.env[NVIDIA_VISIBLE_DEVICES]"


# --- malformed and hostile input to the CDI generator and loader ----------------------------------


def test_cdi_edit_of_deeply_nested_config_is_no_traceback(tmp_path: Path) -> None:
    """A config.json that json.loads accepts (an unknown field nested 600 deep) goes
    through spec mode's host-discovery path fine, but a CDI request copies the document
    with the recursive _copy_json (two frames a level with the list comprehension) and
    dies with RecursionError: exit 1 and a traceback instead of a result or exit 3."""
    from ocihook.sim.demo import default_config

    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "gpu.yaml").write_text(
        GOOD_YAML.replace("example.com", "nvidia.com")
        .replace("name: gpu0", "name: '0'")
        .replace("0.3.0", "0.5.0")
    )
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    doc = default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    depth = 600
    text = json.dumps(doc)[:-1] + ', "x": ' + "[" * depth + "]" * depth + "}"
    (bundle / "config.json").write_text(text)
    cfg = tmp_path / "config.toml"
    cfg.write_text(f'cdi-spec-dirs = ["{spec_dir}"]\n')
    r = run_cli("edit", "--config", str(cfg), "-b", str(bundle))
    assert "Traceback" not in r.stderr, r.stderr[-600:]
    # 600 levels are within what the JSON reader and writer take: edited, exit 0
    assert r.returncode == 0, r.stderr
    out = json.loads((bundle / "config.json").read_text())
    assert "A=1" in out["process"]["env"]


# --- mount targets: made in the rootfs as for the legacy path ----------------------------


def _targets_spec(tmp_path: Path) -> Path:
    """A spec directory whose device ``nvidia.com/gpu=0`` bind-mounts a host file, a host
    directory and a node under /dev, and mounts a tmpfs."""
    host = tmp_path / "host"
    (host / "share").mkdir(parents=True)
    (host / "libfoo.so.1").write_bytes(b"\x7fELF")
    d = tmp_path / "cdi-targets"
    d.mkdir()
    mounts = [
        {"hostPath": str(host / "libfoo.so.1"), "containerPath": "/usr/lib/x/libfoo.so.1"},
        {"hostPath": str(host / "share"), "containerPath": "/usr/share/foo", "type": "bind"},
        {"hostPath": str(host / "libfoo.so.1"), "containerPath": "/dev/foo"},
        {"hostPath": "tmpfs", "containerPath": "/run/foo", "type": "tmpfs"},
    ]
    for m in mounts[:3]:
        m.setdefault("options", ["ro", "nosuid", "nodev", "bind"])
    spec = {
        "cdiVersion": "0.5.0",
        "kind": "nvidia.com/gpu",
        "devices": [{"name": "0", "containerEdits": {"mounts": mounts}}],
    }
    (d / "targets.json").write_text(json.dumps(spec))
    return d


def _tree(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): "dir" if p.is_dir() else f"file {p.stat().st_size}"
        for p in sorted(root.rglob("*"))
    }


def test_cdi_edit_makes_the_bind_mount_targets(tmp_path: Path) -> None:
    """The targets of the bind mounts a CDI device adds are made in the rootfs before
    config.json is written (an empty file for a file, a directory for a directory); not
    those under /dev (the runtime mounts a new file system there) nor of other mounts;
    a dry run makes none."""
    spec_dir = _targets_spec(tmp_path)
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    options = Options(cdi_spec_dirs=(str(spec_dir),))
    assert not edit_bundle(str(b), dry_run=True, options=options).written
    assert _tree(b / "rootfs") == {}
    result = edit_bundle(str(b), options=options)
    assert result.written and result.cdi_devices == ("nvidia.com/gpu=0",)
    assert _tree(b / "rootfs") == {
        "usr": "dir",
        "usr/lib": "dir",
        "usr/lib/x": "dir",
        "usr/lib/x/libfoo.so.1": "file 0",
        "usr/share": "dir",
        "usr/share/foo": "dir",
    }


def test_cdi_link_at_a_target_is_refused_and_nothing_is_left(tmp_path: Path) -> None:
    """A link the image placed at a CDI mount's target (toward a host file): ApplyError
    (exit 7 from the command), config.json unchanged, the host file untouched, the
    targets made before it removed."""
    spec_dir = _targets_spec(tmp_path)
    victim = tmp_path / "victim"
    victim.write_bytes(b"host file\n")
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    (b / "rootfs/usr/lib/x").mkdir(parents=True)
    os.symlink(str(victim), b / "rootfs/usr/lib/x/libfoo.so.1")
    before, tree = (b / "config.json").read_bytes(), _tree(b / "rootfs")
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 7, r.stderr
    assert r.stderr.count("\n") == 1 and "symbolic link" in r.stderr, r.stderr
    assert "/usr/lib/x/libfoo.so.1" in r.stderr
    assert (b / "config.json").read_bytes() == before
    assert victim.read_bytes() == b"host file\n"
    # /usr/share/foo, made first (mounts go in depth order), is gone again
    assert _tree(b / "rootfs") == tree


def test_cdi_write_failure_removes_the_targets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """config.json cannot be replaced (the bundle directory read-only, full): ApplyError,
    and the targets made for it are removed again."""
    from ocihook.appliers import spec

    spec_dir = _targets_spec(tmp_path)
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=0"])
    before = (b / "config.json").read_bytes()
    seen: list[dict[str, str]] = []

    def refuse(*_args: object, **_kwargs: object) -> bytes:
        seen.append(_tree(b / "rootfs"))  # what was made before the write
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(spec, "write_json_atomic", refuse)
    with pytest.raises(ApplyError, match=r"cannot replace config\.json: Read-only file system"):
        edit_bundle(str(b), options=Options(cdi_spec_dirs=(str(spec_dir),)))
    assert (b / "config.json").read_bytes() == before
    assert [sorted(t) for t in seen] == [
        ["usr", "usr/lib", "usr/lib/x", "usr/lib/x/libfoo.so.1", "usr/share", "usr/share/foo"]
    ]
    assert _tree(b / "rootfs") == {}


# --- stale specs -------------------------------------------------------------------------


def _listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def _generated_host(tmp_path: Path) -> tuple[Path, Path]:
    """A simulated host of its own and the CDI spec ``ocihook cdi generate`` writes for it
    (the spec dir), as the boot unit would have written it before a driver change."""
    from ocihook.sim import host as simhost

    sim = simhost.build(str(tmp_path / "host"))
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    out = spec_dir / "nvidia.json"
    r = run_cli(
        "cdi", "generate", "--driver-root", sim.root, "--dev-root", sim.root, "--output", str(out)
    )
    assert r.returncode == 0, r.stderr
    return Path(sim.root), spec_dir


@pytest.mark.parametrize("lost", ["library", "device node"])
def test_stale_spec_refused_at_injection(tmp_path: Path, lost: str) -> None:
    """A spec generated before the driver changed: a library it mounts, or a device node it
    names, is gone from the host. The edit is refused with one line naming the file and
    how to regenerate (exit 11); config.json and the rootfs are as they were."""
    _root, spec_dir = _generated_host(tmp_path)
    spec = json.loads((spec_dir / "nvidia.json").read_text())
    if lost == "library":
        gone = next(
            m["hostPath"]
            for m in spec["containerEdits"]["mounts"]
            if "libcuda.so." in m["hostPath"]
        )
    else:
        dev = next(d for d in spec["devices"] if d["name"] == "1")
        node = dev["containerEdits"]["deviceNodes"][0]
        gone = node.get("hostPath") or node["path"]
    os.unlink(gone)
    b = make_bundle(tmp_path / "b", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    before = (b / "config.json").read_bytes()
    rootfs_before = _listing(b / "rootfs")
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 11, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(
        f"ocihook: error[bad-cdi-spec]: stale CDI spec: {gone} is not on the host"
    )
    assert f"file {spec_dir / 'nvidia.json'}" in lines[0]
    assert f"ocihook cdi generate --output {spec_dir / 'nvidia.json'}" in lines[0]
    assert (b / "config.json").read_bytes() == before
    assert _listing(b / "rootfs") == rootfs_before


def test_fresh_generated_spec_injects(tmp_path: Path) -> None:
    """The same spec on an unchanged host: injected (the check finds every file)."""
    root, spec_dir = _generated_host(tmp_path)
    b = make_bundle(tmp_path / "b", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 0, r.stderr
    doc = json.loads((b / "config.json").read_text())
    assert any(m["source"].startswith(str(root)) for m in doc["mounts"])


def test_stale_check_is_ocihooks_not_the_references(tmp_path: Path) -> None:
    """inject_devices alone keeps the reference library's behaviour (no check);
    ``check_host_files`` adds it. Non-bind mounts (tmpfs) name no host file."""
    from ocihook.cdi.inject import inject_devices, stale_host_file
    from ocihook.cdi.registry import Registry
    from ocihook.cdi.spec import load_spec

    present = tmp_path / "present"
    present.write_text("")
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "example.com/gpu",
        "devices": [
            {
                "name": "a",
                "containerEdits": {
                    "mounts": [
                        {"hostPath": "tmpfs", "containerPath": "/t", "type": "tmpfs"},
                        {"hostPath": str(present), "containerPath": "/p", "options": ["bind"]},
                        {"hostPath": str(tmp_path / "gone"), "containerPath": "/g"},
                    ]
                },
            }
        ],
    }
    path = str(tmp_path / "x.json")
    spec = load_spec(json.dumps(doc), path=path)
    assert stale_host_file(spec.devices[0].container_edits) == str(tmp_path / "gone")
    registry = Registry.from_specs([(0, path, spec)])
    config = {"process": {"env": []}}
    out = inject_devices(config, registry, ["example.com/gpu=a"])
    assert [m["destination"] for m in out["mounts"]] == ["/t", "/p", "/g"]
    with pytest.raises(CdiError) as err:
        inject_devices(config, registry, ["example.com/gpu=a"], check_host_files=True)
    assert err.value.path == path
    assert err.value.message == f"stale CDI spec: {tmp_path / 'gone'} is not on the host"
    assert config == {"process": {"env": []}}


@pytest.mark.parametrize(
    ("mounts", "field"),
    [
        ([5], "mounts[0]"),
        ([{"destination": 5}], "mounts[0].destination"),
        ([{}], "mounts[0].destination"),
    ],
)
def test_config_json_mount_without_string_destination(
    tmp_path: Path, spec_dir: Path, mounts: list[Any], field: str
) -> None:
    """A config.json mount that is not an object with a string destination: one line
    naming the field (exit 3), where injection once raised TypeError."""
    b = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    doc = json.loads((b / "config.json").read_text())
    doc["mounts"] = mounts
    (b / "config.json").write_text(json.dumps(doc))
    before = (b / "config.json").read_bytes()
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 3, r.stderr
    assert "Traceback" not in r.stderr
    assert f"field {field}" in r.stderr and str(b / "config.json") in r.stderr
    assert (b / "config.json").read_bytes() == before


def test_generated_spec_re_edit_is_unchanged(tmp_path: Path) -> None:
    """A bundle edited again for the same CDI device, with the spec ``cdi generate`` wrote
    (its hooks run this interpreter with ocihook's program): the recorded injection is taken
    out and made again, so nothing is added twice ("already injected; unchanged"). The
    hooks were once added again on every edit."""
    _root, spec_dir = _generated_host(tmp_path)
    b = make_bundle(tmp_path / "b", ["NVIDIA_VISIBLE_DEVICES=nvidia.com/gpu=1"])
    first = _edit_cli(b, spec_dir)
    assert first.returncode == 0, first.stderr
    after_first = (b / "config.json").read_bytes()
    hooks = json.loads(after_first)["hooks"]["createContainer"]
    assert hooks and all(h["args"][5:7] == ["hook", "cdi"] for h in hooks)
    for _ in range(2):
        again = _edit_cli(b, spec_dir)
        assert again.returncode == 0, again.stderr
        assert again.stderr.endswith("CDI devices nvidia.com/gpu=1; already injected; unchanged\n")
        assert (b / "config.json").read_bytes() == after_first


@pytest.mark.parametrize(
    ("variable", "kind"),
    [("AMD_VISIBLE_DEVICES", "amd.com/gpu"), ("INTEL_VISIBLE_DEVICES", "intel.com/gpu")],
)
def test_drm_cdi_names_voided_after_injection(tmp_path: Path, variable: str, kind: str) -> None:
    """Spec mode injects AMD/Intel CDI names and sets their variable to void, as it does
    NVIDIA_VISIBLE_DEVICES: a hook registered too then has nothing to do (exit 0) instead of
    refusing the CDI name (exit 5) — even with a spec that does not void it itself."""
    spec = {
        "cdiVersion": "0.5.0",
        "kind": kind,
        "devices": [
            {
                "name": "0",
                "containerEdits": {"env": ["X=1"], "deviceNodes": [{"path": "/dev/null"}]},
            }
        ],
    }
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "v.json").write_text(json.dumps(spec))
    b = make_bundle(tmp_path / "b", [f"{variable}={kind}=0"])
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 0, r.stderr
    env = json.loads((b / "config.json").read_text())["process"]["env"]
    assert f"{variable}=void" in env and "X=1" in env
    state = json.dumps({"ociVersion": "1.0.2", "id": "c", "pid": 1, "bundle": str(b)})
    hook = run_cli("hook", "prestart", stdin=state)
    assert hook.returncode == 0, hook.stderr


@pytest.mark.parametrize(
    ("node", "stale"),
    [
        ({"path": "/dev/nonexistent-xyz", "type": "c", "major": 1, "minor": 3}, False),
        ({"path": "/dev/nonexistent-xyz", "type": "p"}, False),
        ({"path": "/dev/nonexistent-xyz"}, True),
        ({"path": "/dev/nonexistent-xyz", "type": "c"}, True),
        ({"path": "/dev/x", "hostPath": "/dev/nonexistent-xyz", "type": "c", "major": 1}, True),
    ],
)
def test_stale_check_of_device_nodes(node: dict[str, Any], stale: bool) -> None:
    """A node given in full (type and major) needs no host file: the runtime makes it. One
    that names a hostPath, or needs the host node for its numbers, does."""
    from ocihook.cdi.inject import stale_host_file
    from ocihook.cdi.spec import load_spec

    doc = {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "devices": [{"name": "0", "containerEdits": {"deviceNodes": [node]}}],
    }
    spec = load_spec(json.dumps(doc), path="x")
    assert (stale_host_file(spec.devices[0].container_edits) is not None) == stale


def test_stale_check_of_hook_programs() -> None:
    from ocihook.cdi.inject import stale_host_file
    from ocihook.cdi.spec import load_spec

    hooks = [{"hookName": "createContainer", "path": "/opt/gone/bin/nvidia-ctk"}]
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "devices": [{"name": "0", "containerEdits": {"hooks": hooks}}],
    }
    spec = load_spec(json.dumps(doc), path="x")
    assert stale_host_file(spec.devices[0].container_edits) == "/opt/gone/bin/nvidia-ctk"


@pytest.mark.parametrize(
    ("dirs", "stale"),
    [
        (
            ["/opt/gone-venv/lib/python3.11/site-packages"],
            "/opt/gone-venv/lib/python3.11/site-packages/ocihook/_main.py",
        ),
        (["rootfs/usr/lib/python3/dist-packages"], "rootfs/usr/lib/python3/dist-packages"),
        (None, None),  # the package directory of this checkout
    ],
)
def test_stale_check_of_the_interpreter_hook(
    tmp_path: Path, dirs: list[str] | None, stale: str | None
) -> None:
    """A spec whose hook runs ocihook's program with an interpreter that is still there is
    stale when the directory the program names no longer holds ocihook (a removed virtual
    environment), or names a relative one; injecting it is refused (exit 11's error), config.json
    unchanged."""
    from ocihook.cdi.inject import inject_devices, stale_host_file
    from ocihook.cdi.registry import Registry
    from ocihook.cdi.spec import load_spec
    from ocihook.config.options import hook_program, package_dir

    program = hook_program(dirs if dirs is not None else [package_dir()])
    args = [sys.executable, "-I", "-S", "-c", program, "hook", "cdi", "--links", "/usr/lib::a/b"]
    hooks = [{"hookName": "createContainer", "path": sys.executable, "args": args}]
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "devices": [{"name": "0", "containerEdits": {"hooks": hooks}}],
    }
    path = str(tmp_path / "x.json")
    spec = load_spec(json.dumps(doc), path=path)
    assert stale_host_file(spec.devices[0].container_edits) == stale
    registry = Registry.from_specs([(0, path, spec)])
    config = {"process": {"env": []}}
    if stale is None:
        inject_devices(config, registry, ["a.com/b=0"], check_host_files=True)
        return
    with pytest.raises(CdiError) as err:
        inject_devices(config, registry, ["a.com/b=0"], check_host_files=True)
    assert err.value.message == f"stale CDI spec: {stale} is not on the host"
    assert config == {"process": {"env": []}}


def test_nul_in_a_cdi_mount_path_is_one_line_and_leaves_nothing(tmp_path: Path) -> None:
    """A containerPath with a NUL byte once raised ValueError from the mount-target code
    (exit 1) and left the targets made before it."""
    ok = tmp_path / "ok"
    ok.write_text("")
    mounts = [
        {"hostPath": str(ok), "containerPath": "/ok/file", "options": ["bind"]},
        {"hostPath": str(ok), "containerPath": "/a/b/bad\u0000x", "options": ["bind"]},
    ]
    doc = {
        "cdiVersion": "0.5.0",
        "kind": "a.com/b",
        "devices": [{"name": "0", "containerEdits": {"mounts": mounts}}],
    }
    spec_dir = tmp_path / "cdi"
    spec_dir.mkdir()
    (spec_dir / "a.json").write_text(json.dumps(doc))
    b = make_bundle(tmp_path / "b", ["NVIDIA_VISIBLE_DEVICES=a.com/b=0"])
    before = (b / "config.json").read_bytes()
    r = _edit_cli(b, spec_dir)
    assert r.returncode == 11, r.stderr
    # the spec fails to load (cdi validate names the field), so the device is unknown
    assert f"CDI spec files that failed to load: {spec_dir / 'a.json'}" in r.stderr
    assert "Traceback" not in r.stderr
    v = run_cli("cdi", "validate", str(spec_dir / "a.json"))
    assert v.returncode == 11 and "mount containerPath holds a NUL byte" in v.stderr
    assert (b / "config.json").read_bytes() == before
    assert _listing(b / "rootfs") == []
