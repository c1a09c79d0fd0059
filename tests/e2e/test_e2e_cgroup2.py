"""Pure cgroup v2 end to end, and device rules re-applied by the cgroup manager.

Pure cgroup v2: in a private mount namespace a child of the host's cgroup2 mount is bound
over ``/sys/fs/cgroup`` (testbed.md), so runc and crun see a unified host and attach eBPF
device programs of their own. Both modes (spec mode: the runtime builds the program from
``linux.resources.devices``; hook mode: the prestart hook extends the runtime's program),
NVIDIA and AMD. Oracle: a requested node opens with ENXIO (allowed, no driver); a node of
an unrequested GPU that the container makes itself stays EPERM.

Re-apply (the systemd cgroup driver on ``daemon-reload``, ``runc update``): the cgroup
manager rebuilds the device rules from the container's spec and what hook mode added
behind the runtime's back is gone — the NVIDIA toolkit's "Failed to initialize NVML:
Unknown Error". Emulated while the container runs: cgroup v1 ``devices.deny`` ``a`` then
``devices.allow`` of exactly the spec's rules (and runc's default devices); cgroup v2 a new
device program built from the same rules replacing every attached one. Spec mode keeps
the GPU; hook mode loses it (the warning in docs/guide/hook-mode.md).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support import edit_cli, need_root_and, register_hook, with_mknod_cap

from ocihook.plan.edits import CgroupRule
from ocihook.sim import host as simhost
from ocihook.sim import vendors as simvendors

UNIFIED = "/sys/fs/cgroup/unified"


def _need_unified() -> None:
    if not os.path.isfile(os.path.join(UNIFIED, "cgroup.controllers")):
        pytest.skip(f"no cgroup2 mount at {UNIFIED}")


@pytest.fixture(scope="module")
def amd_host(tmp_path_factory: pytest.TempPathFactory) -> simvendors.SimDrmHost:
    return simvendors.build_amd(str(tmp_path_factory.mktemp("amd")))


@contextlib.contextmanager
def _child_cgroup(name: str) -> Any:
    child = os.path.join(UNIFIED, f"{name}-{os.getpid()}")
    os.makedirs(child, exist_ok=True)
    try:
        yield child
    finally:
        for d in sorted(Path(child).glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        assert not os.path.exists(child), f"cgroup {child} left behind"


def _pure_v2_command(runtime: str, child: str, state: str, bundle: str, cid: str) -> list[str]:
    inner = f"mount --bind {child} /sys/fs/cgroup && exec {runtime} --root {state} run -b {bundle} {cid}"
    return ["unshare", "-m", "--propagation", "private", "sh", "-c", inner]


NVIDIA_SCRIPT = (
    "echo OPEN $(cat /dev/nvidia0 2>&1 | head -n 1); "
    "busybox mknod /tmp/other c 195 5; echo OTHER $(cat /tmp/other 2>&1 | head -n 1)"
)
AMD_SCRIPT = (
    "echo OPEN $(cat /dev/dri/renderD$R 2>&1 | head -n 1); "
    "echo KFD $(cat /dev/kfd 2>&1 | head -n 1); "
    "busybox mknod /tmp/other c 226 $OTHER; echo OTHER $(cat /tmp/other 2>&1 | head -n 1)"
)


def _tagged(out: str, tag: str) -> list[str]:
    return [ln[len(tag) + 1 :] for ln in out.splitlines() if ln.startswith(tag + " ")]


@pytest.mark.parametrize("vendor", ["nvidia", "amd"])
@pytest.mark.parametrize("mode", ["spec", "hook"])
@pytest.mark.parametrize("runtime", ["runc", "crun"])
def test_pure_cgroup2_host(
    request: pytest.FixtureRequest,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    runtime: str,
    mode: str,
    vendor: str,
) -> None:
    need_root_and(runtime, "unshare")
    _need_unified()
    if vendor == "nvidia":
        sim: simhost.SimulatedHost = request.getfixturevalue("sim")
        root, script, env = sim.root, NVIDIA_SCRIPT, ["NVIDIA_VISIBLE_DEVICES=0"]
        opened = "cat: can't open '/dev/nvidia0': No such device or address"
    else:
        amd: simvendors.SimDrmHost = request.getfixturevalue("amd_host")
        if not amd.dev_nodes:
            pytest.skip("the AMD host was built without /dev nodes")
        g, other = amd.amd[0], amd.amd[2]
        root, script = amd.root, AMD_SCRIPT
        env = ["AMD_VISIBLE_DEVICES=0", f"R={g.render}", f"OTHER={other.render}"]
        opened = f"cat: can't open '/dev/dri/renderD{g.render}': No such device or address"
    bundle = bundle_factory(["sh", "-c", script], env)
    with_mknod_cap(bundle)
    if mode == "spec":
        proc = edit_cli(bundle, root)
        assert proc.returncode == 0, proc.stderr
    else:
        register_hook(bundle, root)
    cid = f"v2-{runtime}-{mode}-{vendor}-{os.getpid()}"
    with _child_cgroup("ocihook-v2") as child:
        proc = subprocess.run(
            _pure_v2_command(runtime, child, str(tmp_path / "state"), bundle, cid),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    if runtime == "crun" and "setrlimit (RLIM_MEMLOCK)" in proc.stderr:
        # crun raises RLIMIT_MEMLOCK to infinity before loading its device program, which
        # needs CAP_SYS_RESOURCE above the hard limit (this machine lacks it: testbed.md)
        pytest.skip(f"crun cannot load its device program here: {proc.stderr.strip()}")
    assert proc.returncode == 0, proc.stderr
    assert _tagged(proc.stdout, "OPEN") == [opened], proc.stdout
    if vendor == "amd":
        assert _tagged(proc.stdout, "KFD") == [
            "cat: can't open '/dev/kfd': No such device or address"
        ]
    other_line = _tagged(proc.stdout, "OTHER")
    assert len(other_line) == 1 and "Operation not permitted" in other_line[0], proc.stdout
    with open("/proc/self/mountinfo") as f:
        assert bundle not in f.read()


# --- the cgroup manager re-applies the spec's device rules --------------------------------

#: The devices runc always allows (libcontainer/specconv AllowedDevices), beside the spec's.
RUNC_DEFAULTS = [
    CgroupRule(True, "c", 1, 3, "rwm"),
    CgroupRule(True, "c", 1, 5, "rwm"),
    CgroupRule(True, "c", 1, 7, "rwm"),
    CgroupRule(True, "c", 1, 8, "rwm"),
    CgroupRule(True, "c", 1, 9, "rwm"),
    CgroupRule(True, "c", 5, 0, "rwm"),
    CgroupRule(True, "c", 5, 1, "rwm"),
    CgroupRule(True, "c", 5, 2, "rwm"),
    CgroupRule(True, "c", 136, None, "rwm"),
]


def _spec_rules(bundle: str) -> list[CgroupRule]:
    """The allow rules of the bundle's ``linux.resources.devices`` (what a cgroup manager
    that re-applies the spec has), after runc's defaults."""
    doc = json.loads(Path(bundle, "config.json").read_text())
    rules = list(RUNC_DEFAULTS)
    for r in doc["linux"].get("resources", {}).get("devices", []):
        if r.get("allow"):
            rules.append(
                CgroupRule(True, r.get("type", "a"), r.get("major"), r.get("minor"), r["access"])
            )
    return rules


def _reapply_v1(cgroup_dir: str, rules: list[CgroupRule]) -> None:
    with open(os.path.join(cgroup_dir, "devices.deny"), "w") as f:
        f.write("a")
    for r in rules:
        major = "*" if r.major is None else r.major
        minor = "*" if r.minor is None else r.minor
        with open(os.path.join(cgroup_dir, "devices.allow"), "w") as f:
            f.write(f"{r.type} {major}:{minor} {r.access}")


def _reapply_v2(cgroup_dir: str, rules: list[CgroupRule]) -> None:
    """Replace every device program of the cgroup with one built from ``rules`` (deny
    everything else), attaching the new one first."""
    from ocihook.linux import cgroupv2
    from ocihook.linux import syscalls as _linux

    old_ids = cgroupv2.attached_programs(cgroup_dir)
    new_fd = cgroupv2.load_program(cgroupv2.allow_rules_program(rules, None))
    old_fds = [cgroupv2._prog_fd_by_id(i) for i in old_ids]
    cg_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY)
    try:
        cgroupv2._replace(cg_fd, _linux.BPF_F_ALLOW_MULTI, [new_fd], old_fds)
    finally:
        for fd in (cg_fd, new_fd, *old_fds):
            os.close(fd)
    assert len(cgroupv2.attached_programs(cgroup_dir)) == 1


REAPPLY_SCRIPT = (
    "echo BEFORE $(cat /dev/nvidia0 2>&1 | head -n 1); "
    "while [ ! -e /tmp/go ]; do busybox sleep 0.05; done; "
    "echo AFTER $(cat /dev/nvidia0 2>&1 | head -n 1)"
)


@pytest.mark.parametrize("mode", ["spec", "hook", "legacy-wrapper"])
@pytest.mark.parametrize("version", ["v1", "v2"])
def test_reapplied_device_rules(
    sim: simhost.SimulatedHost,
    bundle_factory: Callable[..., str],
    tmp_path: Any,
    version: str,
    mode: str,
) -> None:
    """Spec mode's rules are in config.json and survive a re-apply; hook mode's were
    added behind the runtime's back and are lost (docs/guide/hook-mode.md: hook mode under
    the systemd cgroup driver); the wrapper runtime in ``legacy`` mode registers the hook *and* puts
    the rules in config.json, so they survive."""
    need_root_and("runc", "unshare")
    if version == "v2":
        _need_unified()
    bundle = bundle_factory(["sh", "-c", REAPPLY_SCRIPT], ["NVIDIA_VISIBLE_DEVICES=0"])
    if mode == "spec":
        assert edit_cli(bundle, sim.root).returncode == 0
    elif mode == "hook":
        register_hook(bundle, sim.root)
    else:
        from ocihook.commands.runtime import prepare_bundle
        from ocihook.config.load import load_config

        toml = tmp_path / "config.toml"
        toml.write_text(f'mode = "legacy"\ndriver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
        assert prepare_bundle(bundle, load_config(str(toml))) == "hook added"
    state = str(tmp_path / "state")
    cid = f"reapply-{version}-{mode}-{os.getpid()}"
    cg_name = f"ocihook-reapply-{version}-{mode}-{os.getpid()}"
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["linux"]["cgroupsPath"] = f"/{cg_name}/c"
    cfg.write_text(json.dumps(doc))
    with contextlib.ExitStack() as stack:
        if version == "v2":
            child = stack.enter_context(_child_cgroup("ocihook-reapply"))
            cmd = _pure_v2_command("runc", child, state, bundle, cid)
            cgroup_dir = os.path.join(child, cg_name, "c")
        else:
            cmd = ["runc", "--root", state, "run", "-b", bundle, cid]
            cgroup_dir = f"/sys/fs/cgroup/devices/{cg_name}/c"
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL
        )
        try:
            assert proc.stdout is not None
            before = proc.stdout.readline()
            assert before == "BEFORE cat: can't open '/dev/nvidia0': No such device or address\n", (
                before + (proc.stderr.read() if proc.stderr else "")
            )
            rules = _spec_rules(bundle)
            (_reapply_v2 if version == "v2" else _reapply_v1)(cgroup_dir, rules)
        finally:
            Path(bundle, "rootfs/tmp/go").write_text("")
            out, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err
    left = []
    for top in Path("/sys/fs/cgroup").glob(f"*/{cg_name}"):  # runc leaves the parents
        for d in sorted(top.glob("**/"), key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                d.rmdir()
        if top.exists():
            left.append(str(top))
    assert not left, f"cgroups left behind: {left}"
    after = _tagged(out, "AFTER")
    if mode != "hook":
        assert after == ["cat: can't open '/dev/nvidia0': No such device or address"]
    else:
        assert len(after) == 1 and "Operation not permitted" in after[0], out


def test_pure_cgroup2_hook_that_cannot_change_the_program_names_spec_mode(
    sim: simhost.SimulatedHost, bundle_factory: Callable[..., str], tmp_path: Any
) -> None:
    """Hook mode on a pure cgroup v2 host where ``bpf()`` is refused (strace injects
    EPERM): the start stops with one line naming the problem, what it needs and spec
    mode; nothing is left in the rootfs."""
    need_root_and("runc", "unshare", "strace")
    _need_unified()
    bundle = bundle_factory(["sh", "-c", "exit 0"], ["NVIDIA_VISIBLE_DEVICES=0"])
    register_hook(bundle, sim.root)
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    (hook,) = doc["hooks"]["prestart"]
    strace = shutil.which("strace")
    assert strace is not None
    hook["args"] = [strace, "-f", "-o", "/dev/null", "-e", "inject=bpf:error=EPERM", *hook["args"]]
    hook["path"] = strace
    cfg.write_text(json.dumps(doc))
    before = sorted(str(p) for p in Path(bundle, "rootfs").rglob("*"))
    cid = f"v2-eperm-{os.getpid()}"
    with _child_cgroup("ocihook-v2-eperm") as child:
        proc = subprocess.run(
            _pure_v2_command("runc", child, str(tmp_path / "state"), bundle, cid),
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
    assert proc.returncode != 0
    lines = [ln for ln in proc.stderr.split("\\n") if "error[apply-failed]" in ln]
    assert len(lines) == 1, proc.stderr
    assert "Operation not permitted" in lines[0] and "spec mode (ocihook edit" in lines[0]
    assert sorted(str(p) for p in Path(bundle, "rootfs").rglob("*")) == before
