"""Spec mode: ocihook edit rewrites config.json atomically, or leaves it byte-identical."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support import make_bundle, rootfs_tree, run_cli

from ocihook.appliers.spec import apply_plan, edit_bundle, has_hooks, remove_mount_targets
from ocihook.core.errors import (
    ApplyError,
    DiscoveryError,
    RequestError,
    SpecError,
    StateError,
    exit_code_for,
)
from ocihook.core.hostroot import HostRoot
from ocihook.oci import bundle as bundle_mod
from ocihook.oci.bundle import load_bundle, parse_state
from ocihook.sim import host as simhost

COMMAND = ("/py", "-I", "-m", "ocihook")


def _cache(rootfs: Path) -> dict[str, str]:
    from ocihook.linux import ldcache

    return {e.soname: e.path for e in ldcache.parse((rootfs / "etc/ld.so.cache").read_bytes())}


def test_edit_two_gpus(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """The edit gives the nodes, rules and mounts in config.json and makes the soname links
    and the container's ld.so.cache in the rootfs itself; the createContainer
    hook is left with the /proc/driver/nvidia mask only."""
    bundle = str(
        make_bundle(
            tmp_path, ["NVIDIA_VISIBLE_DEVICES=0,3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
        )
    )
    result = edit_bundle(bundle, HostRoot.single(sim.root), command=COMMAND)
    assert result.written and result.in_rootfs
    doc = json.loads(Path(os.path.join(bundle, "config.json")).read_text())
    devices = doc["linux"]["devices"]
    assert [(d["path"], d["major"], d["minor"]) for d in devices][-2:] == [
        ("/dev/nvidia0", 195, 0),
        (f"/dev/nvidia{sim.gpus[3].minor}", 195, sim.gpus[3].minor),
    ]
    rules = doc["linux"]["resources"]["devices"]
    assert rules[0] == {"allow": False, "access": "rwm"}  # the runtime's deny-all stays first
    assert {(r["major"], r["minor"]) for r in rules[1:]} == {
        (d["major"], d["minor"]) for d in devices
    }
    mounts = [m for m in doc["mounts"] if m["destination"].startswith("/usr/lib64/")]
    assert mounts and all(m["options"] == ["ro", "nosuid", "nodev", "bind"] for m in mounts)
    hooks = doc["hooks"]["createContainer"]
    assert len(hooks) == 1 and hooks[0]["timeout"] == 30
    args = hooks[0]["args"]
    assert args[:6] == [*COMMAND, "hook", "create-container"]
    assert args[6:8] == ["--mask-proc", os.path.join(sim.root, "proc/driver/nvidia")]
    assert args[8::2] == ["--proc-gpu"] * 2 and len(args) == 12
    assert hooks[0]["env"] and not any(e.startswith("LD_") for e in hooks[0]["env"])
    rootfs = Path(bundle) / "rootfs"
    assert os.readlink(rootfs / "usr/lib64/libcuda.so.1") == f"libcuda.so.{sim.driver_version}"
    assert result.plan is not None
    links = {s.link: s.target for s in result.plan.edits.symlinks}
    assert links and all(os.readlink(rootfs / link.lstrip("/")) == t for link, t in links.items())
    cache = _cache(rootfs)
    assert cache["libcuda.so.1"] == "/usr/lib64/libcuda.so.1"
    assert cache["libnvidia-ml.so.1"] == "/usr/lib64/libnvidia-ml.so.1"
    assert set(result.plan.edits.ldcache_libraries) <= set(cache.values())
    assert "NVIDIA_VISIBLE_DEVICES=void" in doc["process"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=0,3" not in doc["process"]["env"]
    # a second run re-plans the recorded request (ocihook.edits) and finds nothing to change
    again = edit_bundle(bundle, HostRoot.single(sim.root), command=COMMAND)
    assert not again.written and again.plan is not None and again.after == result.after
    assert _cache(rootfs) == cache


def test_links_below_dev_stay_with_the_hook(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """All capabilities: the DRM by-path links below /dev stay with the hook (the runtime
    mounts /dev after the edit) beside the mask; no --lib or --cuda-compat."""
    bundle = str(
        make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=all"])
    )
    result = edit_bundle(bundle, HostRoot.single(sim.root), command=COMMAND)
    assert result.in_rootfs
    hooks = json.loads(Path(bundle, "config.json").read_text())["hooks"]["createContainer"]
    assert len(hooks) == 1
    args = hooks[0]["args"]
    assert args[:6] == [*COMMAND, "hook", "create-container"]
    mask = args.index("--mask-proc")
    assert args[mask + 1] == os.path.join(sim.root, "proc/driver/nvidia")
    assert not {"--lib", "--cuda-compat"} & set(args)
    # only the DRM by-path links stay: the runtime mounts /dev after the edit
    links = [args[i + 1] for i, a in enumerate(args) if a == "--link"]
    assert links and all(link.split("::")[1].startswith("/dev/dri/by-path/") for link in links)
    assert args.count("--proc-gpu") == 1
    assert os.path.islink(Path(bundle, "rootfs/usr/lib64/libcuda.so.1"))


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"namespaces": [{"type": "user"}]}, "user namespace"),
        (None, "the mount at /etc covers /etc/ld.so.cache"),
        (None, "the mount at /usr/lib64 covers /usr/lib64/"),
    ],
    ids=["user-namespace", "etc-mount", "libdir-mount"],
)
def test_links_stay_with_the_hook_when_the_rootfs_edit_could_differ(
    extra: dict[str, Any] | None,
    reason: str,
    sim: simhost.SimulatedHost,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A user namespace, or an engine's mount over /etc or the library directory: the
    links and the cache are left to the createContainer hook, as before, nothing is made
    in the rootfs but the mount targets, and the debug log says why."""
    from ocihook.core import log

    logged: list[tuple[str, dict[str, object]]] = []
    monkeypatch.setattr(log, "debug", lambda message, **f: logged.append((message, f)))
    env = ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]
    bundle = str(make_bundle(tmp_path, env))
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    if extra:
        doc["linux"].update(extra)
    else:
        dest = reason.split()[3]
        doc["mounts"].append({"destination": dest, "type": "tmpfs", "source": "tmpfs"})
    path.write_text(json.dumps(doc))
    result = edit_bundle(bundle, HostRoot.single(sim.root), command=COMMAND)
    assert result.written and not result.in_rootfs
    hooks = json.loads(path.read_text())["hooks"]["createContainer"]
    args = hooks[0]["args"]
    assert f"libcuda.so.{sim.driver_version}::/usr/lib64/libcuda.so.1" in args
    assert args[args.index("--lib") + 1].startswith("/usr/lib64/")
    assert hooks[0]["timeout"] == 30
    assert hooks[0]["env"] and not any(e.startswith("LD_") for e in hooks[0]["env"])
    rootfs = Path(bundle) / "rootfs"
    assert not (rootfs / "etc/ld.so.cache").exists()
    assert not (rootfs / "usr/lib64/libcuda.so.1").is_symlink()
    why = [str(f["reason"]) for m, f in logged if "left to the createContainer hook" in m]
    assert len(why) == 1 and reason in why[0], logged


def test_a_failed_rootfs_edit_falls_back_to_the_hook(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """A rootfs edit that fails half-way (a directory where the cache goes) undoes what it
    made and leaves the links to the hook, which reports the problem in the container's
    own terms; the edit itself succeeds."""
    bundle = str(
        make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=utility"])
    )
    rootfs = Path(bundle) / "rootfs"
    (rootfs / "etc/ld.so.cache").mkdir(parents=True)  # a directory where the cache goes
    result = edit_bundle(bundle, HostRoot.single(sim.root), command=COMMAND)
    assert result.written and not result.in_rootfs
    args = json.loads(Path(bundle, "config.json").read_text())["hooks"]["createContainer"][0]
    assert "--link" in args["args"] and "--lib" in args["args"]
    assert sorted(p.name for p in (rootfs / "etc").iterdir()) == ["ld.so.cache"]
    # the links made before the cache failed are gone; only the mount targets are left
    assert not any(p.is_symlink() for p in (rootfs / "usr/lib64").iterdir())
    assert any(p.is_file() for p in (rootfs / "usr/lib64").iterdir())


def test_a_host_without_proc_driver_nvidia_needs_no_hook(tmp_path: Any) -> None:
    """WSL2 (no /proc/driver/nvidia): nothing is left for a hook; the links and the cache
    entries for the driver store are in the rootfs, config.json has no hooks."""
    from ocihook.sim import wsl as simwsl

    w = simwsl.build(str(tmp_path / "wsl"))
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=all"]))
    result = edit_bundle(bundle, HostRoot.single(w.root), command=COMMAND)
    assert result.written and result.in_rootfs and result.plan is not None
    doc = json.loads(Path(bundle, "config.json").read_text())
    assert "hooks" not in doc
    rootfs = Path(bundle) / "rootfs"
    store = f"/usr/lib/wsl/drivers/{simwsl.STORE}"
    assert os.readlink(rootfs / store.lstrip("/") / "libcuda.so.1") == "libcuda.so.1.1"
    assert _cache(rootfs)["libcuda.so.1"] == f"{store}/libcuda.so.1"


def test_apply_plan_replaces_by_path_and_destination(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"]))
    first = edit_bundle(bundle, HostRoot.single(sim.root), dry_run=True)
    assert first.plan is not None and not first.written
    once = apply_plan(load_bundle(bundle).config, first.plan)
    twice = apply_plan(once, first.plan)
    assert len(twice["linux"]["devices"]) == len(once["linux"]["devices"])
    assert len(twice["mounts"]) == len(once["mounts"])
    assert twice["hooks"] == once["hooks"] and len(once["hooks"]["createContainer"]) == 1
    assert twice["linux"]["resources"]["devices"] == once["linux"]["resources"]["devices"]
    assert twice == once


def test_void_request_leaves_file_identical(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    bundle = str(make_bundle(tmp_path, []))
    before = Path(os.path.join(bundle, "config.json")).read_bytes()
    result = edit_bundle(bundle, HostRoot.single(sim.root))
    assert not result.written
    assert Path(os.path.join(bundle, "config.json")).read_bytes() == before


def _assert_one_line_error(
    proc: subprocess.CompletedProcess[bytes], code: int, *needles: str
) -> None:
    err = proc.stderr.decode()
    assert proc.returncode == code, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ocihook: error[")
    for n in needles:
        assert n in lines[0], (n, lines[0])


BAD_CASES = [
    # (env, extra doc, exit code, needles)
    (["NVIDIA_VISIBLE_DEVICES=9"], None, 5, ["no such GPU", "NVIDIA_VISIBLE_DEVICES", "'9'"]),
    (
        ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_DRIVER_CAPABILITIES=compute,warp"],
        None,
        5,
        ["unknown driver capability", "NVIDIA_DRIVER_CAPABILITIES", "'warp'"],
    ),
    (["NVIDIA_VISIBLE_DEVICES=GPU-1"], None, 5, ["unsupported GPU identifier", "'GPU-1'"]),
    (["NVIDIA_VISIBLE_DEVICES=0"], {"root": {"path": 5}}, 3, ["root.path"]),
    (["NVIDIA_VISIBLE_DEVICES=0"], {"linux": {"devices": "x"}}, 3, ["linux.devices"]),
]


@pytest.mark.parametrize(("env", "extra", "code", "needles"), BAD_CASES)
def test_bad_input_edit(
    sim: simhost.SimulatedHost,
    tmp_path: Any,
    env: list[str],
    extra: dict[str, Any] | None,
    code: int,
    needles: list[str],
) -> None:
    bundle = str(make_bundle(tmp_path, env, **(extra or {})))
    cfg = os.path.join(bundle, "config.json")
    before = Path(cfg).read_bytes()
    listing = sorted(os.listdir(bundle))
    proc = run_cli(
        "edit", "-b", bundle, "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    _assert_one_line_error(proc, code, cfg, *needles)
    assert Path(cfg).read_bytes() == before
    assert sorted(os.listdir(bundle)) == listing  # no temporary file left


def test_missing_and_malformed_config(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    proc = run_cli(
        "edit", "-b", str(tmp_path), "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    _assert_one_line_error(proc, 3, "config.json not found", str(tmp_path / "config.json"))
    (tmp_path / "config.json").write_bytes(b'{"root": {"path": "rootfs"},\n "process": ')
    proc = run_cli(
        "edit", "-b", str(tmp_path), "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    _assert_one_line_error(proc, 3, "malformed JSON at line 2", str(tmp_path / "config.json"))
    assert (tmp_path / "config.json").read_bytes() == b'{"root": {"path": "rootfs"},\n "process": '


def test_driver_root_without_driver(tmp_path: Any) -> None:
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"]))
    empty = tmp_path / "empty"
    empty.mkdir()
    before = Path(os.path.join(bundle, "config.json")).read_bytes()
    proc = run_cli(
        "edit", "-b", bundle, "--driver-root", str(empty), "--dev-root", str(empty), text=False
    )
    _assert_one_line_error(
        proc, 6, "NVIDIA driver version file not found", str(empty / "proc/driver/nvidia/version")
    )
    assert Path(os.path.join(bundle, "config.json")).read_bytes() == before


def test_readonly_bundle_dir_is_an_apply_error(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """A bundle whose directory cannot be written: exit 7, config.json unchanged, and the
    mount targets made in the (writable, elsewhere) root file system removed again."""
    rootfs = tmp_path / "rootfs-elsewhere"
    rootfs.mkdir()
    bundle = str(
        make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], **{"root": {"path": str(rootfs)}})
    )
    cfg = os.path.join(bundle, "config.json")
    before = Path(cfg).read_bytes()
    args = ["edit", "-b", bundle, "--driver-root", sim.root, "--dev-root", sim.root]
    if os.geteuid() == 0:
        # root ignores permission bits: make the bundle a read-only bind mount in a
        # private mount namespace instead
        script = f'mount --bind {bundle} {bundle} && mount -o remount,bind,ro {bundle} && exec "$@"'
        proc = subprocess.run(
            [
                "unshare",
                "-m",
                "--propagation",
                "private",
                "sh",
                "-c",
                script,
                "sh",
                sys.executable,
                "-m",
                "ocihook",
                *args,
            ],
            capture_output=True,
            timeout=60,
        )
    else:
        os.chmod(bundle, 0o555)
        try:
            proc = run_cli(*args, text=False)
        finally:
            os.chmod(bundle, 0o755)
    _assert_one_line_error(proc, 7, "cannot replace config.json", cfg)
    assert Path(cfg).read_bytes() == before
    assert os.listdir(rootfs) == []  # the targets made before the write were rolled back


@pytest.mark.parametrize(
    ("stdin", "code", "needles"),
    [
        (b"", 4, ["no container state on stdin"]),
        (b"{not json", 4, ["malformed JSON"]),
        (b'{"id": "x", "pid": 1, "bundle": "relative"}', 4, ["bundle", "'relative'"]),
        (b'{"id": "x", "pid": -3, "bundle": "/b"}', 4, ["pid"]),
        (
            b'{"id": "x", "pid": 5, "bundle": "/nonexistent-bundle"}',
            3,
            ["/nonexistent-bundle/config.json"],
        ),
    ],
)
def test_bad_state(stdin: bytes, code: int, needles: list[str]) -> None:
    proc = run_cli("hook", "prestart", stdin=stdin, text=False)
    _assert_one_line_error(proc, code, *needles)


def test_hook_fast_exit_for_no_gpu(tmp_path: Any) -> None:
    bundle = str(make_bundle(tmp_path, ["FOO=bar"]))
    state = json.dumps(
        {"ociVersion": "1.0.2", "id": "c1", "status": "creating", "pid": 12345, "bundle": bundle}
    ).encode()
    proc = run_cli("hook", "prestart", "--driver-root", "/nonexistent", stdin=state, text=False)
    assert proc.returncode == 0 and proc.stderr == b""


def test_state_and_bundle_parsers(tmp_path: Any) -> None:
    s = parse_state(
        b'{"ociVersion":"1.0.2","id":"a","status":"creating","pid":7,"bundle":"/b","annotations":{"k":"v"}}'
    )
    assert (s.id, s.pid, s.bundle, s.status, s.annotations) == (
        "a",
        7,
        "/b",
        "creating",
        {"k": "v"},
    )
    with pytest.raises(StateError):
        parse_state(b'{"id":"a","pid":true,"bundle":"/b"}')
    bundle = str(make_bundle(tmp_path, []))
    b = load_bundle(bundle)
    assert b.rootfs == os.path.join(bundle, "rootfs")
    assert exit_code_for(SpecError("x")) == 3
    assert exit_code_for(DiscoveryError("x")) == 6
    assert exit_code_for(RequestError("x")) == 5
    assert exit_code_for(ValueError()) == 1


def test_diff_compares_documents_not_formatting(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """A compact config.json: the diff shows only what ocihook adds, and --dry-run alone
    says what it would do."""
    from ocihook.sim.demo import default_config

    b = tmp_path / "bundle"
    (b / "rootfs").mkdir(parents=True)
    doc = default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=1"])
    (b / "config.json").write_text(json.dumps(doc, separators=(",", ":")))
    before = (b / "config.json").read_bytes()
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    proc = run_cli("edit", "-b", str(b), "--dry-run", "--diff", *roots, text=False)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.decode()
    removed = [ln for ln in out.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert removed == ['-\t\t\t"NVIDIA_VISIBLE_DEVICES=1"']  # replaced by void, nothing else
    assert '+\t\t\t\t"path": "/dev/nvidia1",' in out
    proc = run_cli("edit", "-b", str(b), "--dry-run", *roots, text=False)
    assert proc.returncode == 0
    assert "would add 1 GPU, 4 device nodes, 11 mounts, 10 links" in proc.stdout.decode()
    assert "(to be made in the rootfs, with its ld.so.cache)" in proc.stdout.decode()
    assert (b / "config.json").read_bytes() == before
    assert sorted(os.listdir(b / "rootfs")) == []  # nothing was made there


def test_missing_driver_root_is_named(tmp_path: Any) -> None:
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"]))
    proc = run_cli("edit", "-b", bundle, "--driver-root", str(tmp_path / "nope"), text=False)
    _assert_one_line_error(proc, 6, "driver root does not exist", str(tmp_path / "nope"))


def test_hook_with_missing_bundle_config_hints_at_stdin(tmp_path: Any) -> None:
    state = json.dumps({"id": "x", "pid": 5, "bundle": str(tmp_path)}).encode()
    proc = run_cli("hook", "prestart", stdin=state, text=False)
    _assert_one_line_error(proc, 3, "config.json not found", "state JSON on stdin")


# --- config.json written and read safely ----------------------------------------------------------


def test_write_json_atomic_never_chmods_through_a_swapped_link(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bundle's owner swaps the temporary file for a link to a victim while the new
    config.json is being written; the victim's mode must not change, and set-id bits of
    the old config.json are not copied."""
    victim = tmp_path / "victim"
    victim.write_text("secret")
    os.chmod(victim, 0o600)
    d = tmp_path / "b"
    d.mkdir()
    cfg = d / "config.json"
    cfg.write_text("{}")
    os.chmod(cfg, 0o4777)
    real_fsync = os.fsync

    def swap(fd: int) -> None:
        real_fsync(fd)
        for name in os.listdir(d):
            if name.startswith(".config.json."):
                os.unlink(d / name)
                os.symlink(victim, d / name)

    monkeypatch.setattr(bundle_mod.os, "fsync", swap)
    with contextlib.suppress(OSError):
        bundle_mod.write_json_atomic(str(cfg), {"a": 1})
    assert stat.S_IMODE(victim.stat().st_mode) == 0o600
    assert victim.read_text() == "secret"
    monkeypatch.setattr(bundle_mod.os, "fsync", real_fsync)
    if cfg.is_symlink():  # the swapped link was renamed over config.json: the owner's doing
        cfg.unlink()
    cfg.write_text("{}")
    os.chmod(cfg, 0o4777)
    bundle_mod.write_json_atomic(str(cfg), {"a": 1})
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o777  # no set-uid bit carried over


def test_lone_surrogate_in_config_is_written_as_an_escape(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    b = tmp_path / "b"
    (b / "rootfs").mkdir(parents=True)
    (b / "config.json").write_text(
        '{"root": {"path": "rootfs"}, "annotations": {"x": "\\ud800"}, '
        '"process": {"env": ["NVIDIA_VISIBLE_DEVICES=0"]}}'
    )
    proc = run_cli(
        "edit", "-b", str(b), "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((b / "config.json").read_bytes())
    assert doc["annotations"]["x"] == "\ud800"


@pytest.mark.parametrize("bad", [b"\xff\xfe{\x00}\x00", b"\xef\xbb\xbf{}", b'{"a": NaN}'])
def test_non_json_config_is_refused(tmp_path: Any, bad: bytes) -> None:
    (tmp_path / "config.json").write_bytes(bad)
    proc = run_cli("edit", "-b", str(tmp_path), text=False)
    assert proc.returncode == 3, proc.stderr
    assert b"Traceback" not in proc.stderr
    assert (tmp_path / "config.json").read_bytes() == bad


def test_rootless_bundle_gets_bind_mounted_nodes(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """A bundle with a user namespace: the nodes are nosuid,noexec bind mounts of the host
    nodes under the dev root, not linux.devices entries; the cgroup rules stay (a runtime
    with a delegated cgroup still applies them)."""
    extra = {"linux": {"namespaces": [{"type": "mount"}, {"type": "user"}]}}
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], **(extra or {})))
    assert edit_bundle(bundle, HostRoot.single(sim.root), command=("/py",)).written
    doc = json.loads(Path(bundle, "config.json").read_text())
    assert "devices" not in doc["linux"]
    nodes = [m for m in doc["mounts"] if m["destination"].startswith("/dev/nvidia")]
    assert sorted((m["destination"], m["source"]) for m in nodes) == sorted(
        (f"/dev/{n}", os.path.join(sim.root, "dev", n))
        for n in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0")
    )
    assert all(m["type"] == "bind" and m["options"] == ["bind", "nosuid", "noexec"] for m in nodes)
    rules = doc["linux"]["resources"]["devices"]
    assert {"allow": True, "type": "c", "access": "rw", "major": 195, "minor": 0} in rules


def test_rootless_spec_detection(tmp_path: Any) -> None:
    from ocihook.appliers.spec import rootless_spec

    ident = tmp_path / "ident"
    ident.write_text("         0          0 4294967295\n")
    mapped = tmp_path / "mapped"
    mapped.write_text("         0       1000          1\n         1     100000      65536\n")
    userns = {"linux": {"namespaces": [{"type": "user"}]}}
    assert rootless_spec(userns, uid_map=str(ident))
    assert not rootless_spec({"linux": {"namespaces": [{"type": "pid"}]}}, uid_map=str(ident))
    assert rootless_spec({}, uid_map=str(mapped))  # ocihook in a rootless engine's namespace
    assert not rootless_spec({}, uid_map=str(tmp_path / "missing"))


def test_edit_replaces_config_json_atomically(sim: Any, tmp_path: Any) -> None:
    """``ocihook edit`` writes a new file and renames it over config.json: a reader that
    holds the old file (here a second hard link) still sees the old document whole, the
    new config.json is another inode, and no temporary is left in the bundle."""
    from ocihook.sim.demo import default_config

    b = tmp_path / "bundle"
    (b / "rootfs").mkdir(parents=True)
    doc = default_config(["sh"], ["NVIDIA_VISIBLE_DEVICES=0"])
    (b / "config.json").write_text(json.dumps(doc))
    os.chmod(b / "config.json", 0o640)
    before = (b / "config.json").read_bytes()
    os.link(b / "config.json", tmp_path / "held")
    inode = os.stat(b / "config.json").st_ino
    proc = run_cli(
        "edit", "-b", str(b), "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "held").read_bytes() == before
    assert os.stat(b / "config.json").st_ino != inode
    assert os.stat(b / "config.json").st_mode & 0o777 == 0o640
    new = json.loads((b / "config.json").read_bytes())
    assert "NVIDIA_VISIBLE_DEVICES=void" in new["process"]["env"]
    assert sorted(os.listdir(b)) == ["config.json", "rootfs"]


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_edit_makes_the_mount_targets_in_the_rootfs(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """Spec mode makes every bind-mount target itself (the runtime then makes nothing):
    an empty regular file per library and for the IPC socket; a dry run makes none."""
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    proc = run_cli("edit", "-b", str(bundle), "--dry-run", *roots, text=False)
    assert proc.returncode == 0, proc.stderr
    assert _tree(bundle / "rootfs") == []
    proc = run_cli("edit", "-b", str(bundle), *roots, text=False)
    assert proc.returncode == 0, proc.stderr
    mounts = json.loads((bundle / "config.json").read_text())["mounts"]
    ours = [m["destination"] for m in mounts if m["source"].startswith(sim.root)]
    assert f"/usr/lib64/libcuda.so.{sim.driver_version}" in ours
    assert simhost.PERSISTENCED_SOCKET in ours
    for dest in ours:
        st = os.lstat(bundle / "rootfs" / dest.lstrip("/"))
        assert stat.S_ISREG(st.st_mode) and st.st_size == 0, dest


def test_edit_makes_targets_through_image_links_inside_the_rootfs(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """A hostile image whose library directory is a link out of the root (absolute, and
    with ``..`` past ``/``): the targets are made where the link leads *inside* the
    root, never on the host."""
    host_dir = tmp_path / "host-lib"
    host_dir.mkdir()
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    rootfs = bundle / "rootfs"
    (rootfs / "usr").mkdir()
    os.symlink(f"/../../../../..{host_dir}", rootfs / "usr" / "lib64")
    os.symlink(str(host_dir), rootfs / "var")  # /var/run/nvidia-persistenced/socket
    roots = ["--driver-root", sim.root, "--dev-root", sim.root]
    proc = run_cli("edit", "-b", str(bundle), *roots, text=False)
    assert proc.returncode == 0, proc.stderr
    assert os.listdir(host_dir) == []
    inside = rootfs / str(host_dir).lstrip("/")
    assert (inside / f"libcuda.so.{sim.driver_version}").is_file()
    assert (inside / "run/nvidia-persistenced/socket").is_file()


def test_a_link_at_a_mount_target_is_refused_and_nothing_is_left(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """A link placed at a library's target (toward a host file) is refused: exit 7,
    config.json unchanged, the host file untouched and the targets made before it removed."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"host file\n")
    bundle = make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    rootfs = bundle / "rootfs"
    (rootfs / "usr/lib64").mkdir(parents=True)
    os.symlink(str(victim), rootfs / f"usr/lib64/libnvidia-cfg.so.{sim.driver_version}")
    before_tree = _tree(rootfs)
    before = (bundle / "config.json").read_bytes()
    proc = run_cli(
        "edit", "-b", str(bundle), "--driver-root", sim.root, "--dev-root", sim.root, text=False
    )
    _assert_one_line_error(proc, 7, "symbolic link", f"libnvidia-cfg.so.{sim.driver_version}")
    assert (bundle / "config.json").read_bytes() == before
    assert victim.read_bytes() == b"host file\n"
    assert _tree(rootfs) == before_tree


_UC = ["NVIDIA_VISIBLE_DEVICES=0,3", "NVIDIA_DRIVER_CAPABILITIES=compute,utility"]


def test_a_deferred_rootfs_edit_makes_what_the_edit_makes(
    sim: simhost.SimulatedHost, tmp_path: Any
) -> None:
    """``defer_rootfs`` (the wrapper runtime, which makes the links while the runtime creates
    the container): the same config.json, nothing made in the rootfs but the mount targets
    until ``rootfs_edit.run()``, and then the same rootfs tree as an edit that makes them
    itself."""
    now = str(make_bundle(tmp_path / "now", _UC))
    later = str(make_bundle(tmp_path / "later", _UC))
    root = HostRoot.single(sim.root)
    made = edit_bundle(now, root, command=COMMAND, mask_by_caller=True, indent=None)
    deferred = edit_bundle(
        later, root, command=COMMAND, mask_by_caller=True, indent=None, defer_rootfs=True
    )
    assert made.rootfs_edit is None and made.caller_mask is not None
    assert deferred.rootfs_edit is not None and deferred.in_rootfs
    assert deferred.caller_mask == made.caller_mask
    assert Path(later, "config.json").read_bytes() == Path(now, "config.json").read_bytes()
    rootfs = Path(later) / "rootfs"
    before = rootfs_tree(rootfs)
    assert before and not any(v.startswith("-> ") for v in before.values())
    assert "etc/ld.so.cache" not in before
    deferred.rootfs_edit.run().close()
    assert rootfs_tree(rootfs) == rootfs_tree(Path(now) / "rootfs")
    assert _cache(rootfs)["libcuda.so.1"] == "/usr/lib64/libcuda.so.1"


def test_a_deferred_rootfs_edit_rolls_back(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """What ``rootfs_edit.run()`` made goes again at ``rollback()`` (the runtime failed),
    and with ``remove_mount_targets`` the rootfs is as before the edit; a run that fails
    half-way (a directory where the cache goes) undoes its own steps and raises
    ApplyError."""
    bundle = str(make_bundle(tmp_path / "a", _UC))
    rootfs = Path(bundle) / "rootfs"
    before = rootfs_tree(rootfs)
    result = edit_bundle(bundle, HostRoot.single(sim.root), mask_by_caller=True, defer_rootfs=True)
    assert result.rootfs_edit is not None and result.rootfs_edit.changes is None
    assert result.targets and all(t.startswith("/") for t in result.targets)
    made = result.rootfs_edit.run()
    assert result.rootfs_edit.run() is made is result.rootfs_edit.changes  # made once
    made.rollback()
    assert remove_mount_targets(str(rootfs), result.targets) == []
    assert rootfs_tree(rootfs) == before
    bundle = str(make_bundle(tmp_path / "b", _UC))
    rootfs = Path(bundle) / "rootfs"
    result = edit_bundle(bundle, HostRoot.single(sim.root), mask_by_caller=True, defer_rootfs=True)
    (rootfs / "etc/ld.so.cache").mkdir(parents=True)
    before = rootfs_tree(rootfs)
    assert result.rootfs_edit is not None
    with pytest.raises(ApplyError):
        result.rootfs_edit.run()
    assert rootfs_tree(rootfs) == before


@pytest.mark.parametrize(
    "case",
    [
        "another hook",
        "Hooks",
        "hooks not an object",
        "empty hooks",
        "mask not by caller",
        "a mount over a link",
    ],
)
def test_when_the_rootfs_edit_is_deferred(
    sim: simhost.SimulatedHost, tmp_path: Any, case: str
) -> None:
    """The links are left to the caller of the runtime's create only when nothing but the
    runtime could look at the rootfs before the container starts. With a hook of any stage
    in config.json (a member ``hooks`` in any case: runc matches member names without
    regard to case) the edit makes them but hands them to the caller to roll back if the
    create fails; with no caller mounting the mask (the runtime is exec'ed at once) the
    edit makes them and hands them over too, for a failed ``execve`` to take back; a mount
    over them leaves them to the hook, as before."""
    bundle = str(make_bundle(tmp_path, _UC))
    path = Path(bundle, "config.json")
    doc = json.loads(path.read_text())
    if case == "another hook":
        doc["hooks"] = {"prestart": [{"path": "/bin/true"}]}
    elif case == "Hooks":
        doc["Hooks"] = {"createRuntime": [{"path": "/bin/true"}]}
    elif case == "hooks not an object":
        doc["hooks"] = []
    elif case == "empty hooks":
        doc["hooks"] = {"prestart": [], "createContainer": []}
    elif case == "a mount over a link":
        doc["mounts"].append({"destination": "/usr/lib64", "type": "tmpfs", "source": "tmpfs"})
    path.write_text(json.dumps(doc))
    by_caller = case != "mask not by caller"
    result = edit_bundle(
        bundle, HostRoot.single(sim.root), mask_by_caller=by_caller, defer_rootfs=True
    )
    links = (Path(bundle) / "rootfs/usr/lib64/libcuda.so.1").is_symlink()
    assert result.in_rootfs == (case != "a mount over a link")
    if case == "a mount over a link":
        assert result.rootfs_edit is None and not links
        return
    assert result.rootfs_edit is not None
    made = case != "empty hooks"
    assert (result.rootfs_edit.changes is not None) == made == links
    assert made == (has_hooks(doc) or not by_caller)


@pytest.mark.parametrize("key", ["hooks", "HOOKS", "hook\u017f", "hoo\u212as"])
def test_has_hooks_folds_names_as_runc_reads_them(key: str) -> None:
    """Go's encoding/json matches member names by simple case folding (U+017F long s is
    s, U+212A Kelvin is k): each of these is a member runc reads as ``hooks``."""
    assert has_hooks({key: {"prestart": [{"path": "/bin/true"}]}})
    assert not has_hooks({key: {"prestart": []}})
    assert not has_hooks({key: None, "hook": {"prestart": [{"path": "/bin/true"}]}})
