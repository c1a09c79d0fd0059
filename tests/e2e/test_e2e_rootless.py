"""Rootless end to end, with a real unprivileged user made for the test (subuid/subgid
ranges, removed at the end): ``runc`` run by that user (``runc spec --rootless``: a user
namespace mapping the container's root to the user) in hook mode and spec mode, and
rootless podman (its own user namespace, shared with the container) with ocihook's
hooks.d file.

In a user namespace other than the initial one ``mknod`` is refused, so the GPUs' nodes
are bind mounts of the host's nodes (hook mode: detached clones; spec mode: ``mounts``
entries instead of ``linux.devices``), and no device cgroup is ocihook's to write:
``no-cgroups = true`` skips it, and without it the hook stops with one line naming that
setting. Oracle: the container's view (``c 195:0``, libcuda linked, ENXIO on open).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from support import RootlessUser, mounts_under, need_root_and, tagged

from ocihook.sim.demo import make_busybox_bundle

SCRIPT = (
    "for n in /dev/nvidia*; do echo NODE $n $(stat -c '%t:%T' $n); done; "
    "L=${LIBDIR:-/usr/lib64}; echo LINK $(readlink $L/libcuda.so.1); "
    "echo MAGIC $(hexdump -n 4 -e '4/1 \"%02x\"' $L/libcuda.so.1); "
    "echo OPEN0 $(cat /dev/nvidia0 2>&1 | head -n 1); "
    "echo UIDMAP $(head -n 1 /proc/self/uid_map)"
)


def _check_view(out: str, user: RootlessUser, minor: int = 0) -> None:
    want = [f"/dev/nvidia{minor} c3:{minor:x}", "/dev/nvidiactl c3:ff"]
    want += ["/dev/nvidia-uvm ed:0", "/dev/nvidia-uvm-tools ed:1"]
    assert sorted(tagged(out, "NODE")) == sorted(want), out
    assert tagged(out, "LINK") == [f"libcuda.so.{user.sim.driver_version}"], out
    assert tagged(out, "MAGIC") == ["7f454c46"], out
    assert tagged(out, "OPEN0") == ["cat: can't open '/dev/nvidia0': No such device or address"]
    assert tagged(out, "UIDMAP")[0].split()[:2] == ["0", str(user.uid)], out


def _config_toml(user: RootlessUser, *, no_cgroups: bool) -> str:
    path = os.path.join(user.top, f"config-{no_cgroups}.toml")
    root = user.sim.root
    with open(path, "w") as f:
        f.write(f'driver-root = "{root}"\ndev-root = "{root}"\n')
        if no_cgroups:
            f.write("no-cgroups = true\n")
    return path


def _hook(user: RootlessUser, stage: str, config: str) -> dict[str, Any]:
    args = [user.python, "-I", "-m", "ocihook", "hook", stage, "--config", config]
    # an explicit env, as the shipped registrations have: a createContainer hook without
    # one gets the container's process.env under runc, and ocihook refuses that (exit 9)
    env = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]
    return {"path": user.python, "args": args, "env": env, "timeout": 30}


def _rootless_bundle(user: RootlessUser, name: str, env: list[str]) -> str:
    """A busybox bundle owned by the user, with ``runc spec --rootless``'s config
    (user namespace mapping the container's root to the user, no resources)."""
    bundle = os.path.join(user.top, "work", name)
    make_busybox_bundle(bundle, ["sh", "-c", SCRIPT], env)
    os.remove(os.path.join(bundle, "config.json"))
    subprocess.run(["runc", "spec", "--rootless"], cwd=bundle, check=True)
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["process"].update(terminal=False, args=["sh", "-c", SCRIPT])
    doc["process"]["env"] += env
    doc["linux"]["uidMappings"] = [{"containerID": 0, "hostID": user.uid, "size": 1}]
    doc["linux"]["gidMappings"] = [{"containerID": 0, "hostID": user.gid, "size": 1}]
    cfg.write_text(json.dumps(doc))
    user.chown(bundle)
    return bundle


def _runc(user: RootlessUser, bundle: str, cid: str) -> subprocess.CompletedProcess[str]:
    state = os.path.join(user.top, "xdg", "runc")
    proc = user.run("runc", "--root", state, "run", "-b", bundle, cid)
    assert not mounts_under(bundle)
    return proc


@pytest.mark.parametrize("stage", ["prestart", "createRuntime", "createContainer"])
def test_rootless_runc_hook_mode(rootless_user: RootlessUser, stage: str) -> None:
    """runc run by the user, ocihook registered at ``stage`` with ``no-cgroups = true``:
    the hook runs unprivileged (prestart/createRuntime: it joins the container's user
    namespace, which the user owns) and gives GPU 0."""
    need_root_and("runc")
    user = rootless_user
    bundle = _rootless_bundle(user, f"hook-{stage}", ["NVIDIA_VISIBLE_DEVICES=0"])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {stage: [_hook(user, stage, _config_toml(user, no_cgroups=True))]}
    cfg.write_text(json.dumps(doc))
    proc = _runc(user, bundle, f"rl-{stage}-{os.getpid()}")
    assert proc.returncode == 0, proc.stderr
    _check_view(proc.stdout, user)


def test_rootless_runc_without_no_cgroups_names_the_setting(rootless_user: RootlessUser) -> None:
    """Without ``no-cgroups`` the hook cannot write a device cgroup for a rootless
    container: one line naming the problem and the setting, exit 7, the rootfs as before."""
    need_root_and("runc")
    user = rootless_user
    bundle = _rootless_bundle(user, "no-setting", ["NVIDIA_VISIBLE_DEVICES=0"])
    cfg = Path(bundle, "config.json")
    doc = json.loads(cfg.read_text())
    doc["hooks"] = {"prestart": [_hook(user, "prestart", _config_toml(user, no_cgroups=False))]}
    cfg.write_text(json.dumps(doc))
    before = sorted(str(p) for p in Path(bundle, "rootfs").rglob("*"))
    proc = _runc(user, bundle, f"rl-nocg-{os.getpid()}")
    assert proc.returncode != 0
    assert "exit status 7" in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.split("\\n") if "error[apply-failed]" in ln]
    assert len(lines) == 1, proc.stderr
    assert "rootless" in lines[0] and "no-cgroups = true" in lines[0], lines[0]
    assert sorted(str(p) for p in Path(bundle, "rootfs").rglob("*")) == before


def test_rootless_runc_spec_mode(rootless_user: RootlessUser) -> None:
    """``ocihook edit`` of a rootless bundle: the nodes become bind mounts of the host's
    nodes under the dev root (runc's own fallback for linux.devices would bind
    ``/dev/nvidia0`` of the host), and the user's runc starts it."""
    need_root_and("runc")
    user = rootless_user
    bundle = _rootless_bundle(user, "spec", ["NVIDIA_VISIBLE_DEVICES=0"])
    config = _config_toml(user, no_cgroups=True)
    edit = user.run(user.python, "-I", "-m", "ocihook", "edit", "--config", config, "-b", bundle)
    assert edit.returncode == 0, edit.stderr
    doc = json.loads(Path(bundle, "config.json").read_text())
    assert not [d for d in doc["linux"].get("devices", []) if "nvidia" in d["path"]]
    nodes = {m["destination"]: m for m in doc["mounts"] if m["destination"].startswith("/dev/")}
    assert nodes["/dev/nvidia0"] == {
        "destination": "/dev/nvidia0",
        "type": "bind",
        "source": os.path.join(user.sim.root, "dev/nvidia0"),
        "options": ["bind", "nosuid", "noexec"],
    }
    proc = _runc(user, bundle, f"rl-spec-{os.getpid()}")
    assert proc.returncode == 0, proc.stderr
    _check_view(proc.stdout, user)


def _podman_argv(user: RootlessUser, *args: str) -> list[str]:
    store = os.path.join(user.top, "xdg", "p")
    base = ["podman", "--root", f"{store}/root", "--runroot", f"{store}/runroot"]
    base += ["--tmpdir", f"{store}/tmp", "--storage-driver", "vfs"]
    base += ["--cgroup-manager=cgroupfs", "--events-backend=file", "--runtime", "runc"]
    return [*base, *args]


def _podman(user: RootlessUser, *args: str) -> subprocess.CompletedProcess[str]:
    return user.run(*_podman_argv(user, *args), timeout=120)


def _podman_rootfs(user: RootlessUser, name: str) -> str:
    work = os.path.join(user.top, "work")
    make_busybox_bundle(os.path.join(work, f"{name}-bundle"), ["true"], [])
    rootfs = os.path.join(work, name)
    os.rename(os.path.join(work, f"{name}-bundle", "rootfs"), rootfs)
    user.chown(rootfs)
    return rootfs


def test_rootless_podman_hooks_d(rootless_user: RootlessUser) -> None:
    """Rootless podman (the user, newuidmap ranges; the container shares podman's user
    namespace, so the hook runs as that namespace's root) with ocihook's hooks.d file and
    ``no-cgroups = true``: GPU 0 as bind-mounted host nodes."""
    need_root_and("podman", "runc", "newuidmap")
    user = rootless_user
    hooks = Path(user.top, "hooks.d")
    hooks.mkdir()
    config = _config_toml(user, no_cgroups=True)
    hook = _hook(user, "prestart", config)
    (hooks / "ocihook.json").write_text(
        json.dumps({"version": "1.0.0", "hook": hook, "when": {"always": True}}).replace(
            '"when"', '"stages": ["prestart"], "when"'
        )
    )
    rootfs = _podman_rootfs(user, "podman-rootfs")
    proc = _podman(
        user,
        "--hooks-dir",
        str(hooks),
        "run",
        "--rm",
        "--network=none",
        "--env",
        "NVIDIA_VISIBLE_DEVICES=0",
        "--rootfs",
        rootfs,
        "sh",
        "-c",
        SCRIPT,
    )
    assert proc.returncode == 0, proc.stderr
    _check_view(proc.stdout, user)


#: Run as root in a private mount namespace: /run becomes a tmpfs holding the CDI spec at
#: /run/cdi (= /var/run/cdi; podman 4.3 has no spec-dir setting), and /dev a tmpfs copy
#: of the host's basic nodes plus the simulated host's NVIDIA nodes — runc in a user
#: namespace binds a CDI node from its *container* path on the host (/dev/nvidia0), as on
#: a real GPU host. Then "$@" (podman as the user). Nothing of it outlives the namespace.
CDI_PRIVATE = """
set -eu
mount --make-rprivate /
mount -t tmpfs -o mode=0755 ocihook-cdi-test /run
mkdir /run/cdi
cp "$SPEC" /run/cdi/
mount -t tmpfs -o mode=0755 ocihook-dev-test "$DEVCOPY"
cp -a /dev/null /dev/zero /dev/full /dev/random /dev/urandom /dev/tty /dev/ptmx "$DEVCOPY"/
ln -s /proc/self/fd "$DEVCOPY"/fd
mkdir "$DEVCOPY"/pts "$DEVCOPY"/shm "$DEVCOPY"/mqueue
chmod 1777 "$DEVCOPY"/shm
cp -a "$SIMDEV"/. "$DEVCOPY"/
mount --bind "$DEVCOPY" /dev
exec "$@"
"""


def test_rootless_podman_cdi_device(rootless_user: RootlessUser) -> None:
    """Rootless podman with ``--device nvidia.com/gpu=0`` from ``ocihook cdi generate``'s
    spec: podman injects the spec's nodes (runc bind-mounts them in the user namespace)
    and mounts; the spec's createContainer hook (ocihook, run as the container's root in
    the user namespace) makes the soname links."""
    need_root_and("podman", "runc", "newuidmap", "unshare")
    user = rootless_user
    user.kill_processes()  # a pause process from an earlier test holds the old namespaces
    spec = os.path.join(user.top, "nvidia.json")
    gen = subprocess.run(
        [
            *(user.python, "-I", "-m", "ocihook", "cdi", "generate", "--format", "json"),
            *("--output", spec, "--driver-root", user.sim.root, "--dev-root", user.sim.root),
        ],
        capture_output=True,
        text=True,
    )
    assert gen.returncode == 0, gen.stderr
    os.chmod(spec, 0o644)
    with open(spec) as f:
        mounts = json.load(f)["containerEdits"]["mounts"]
    (libcuda,) = [
        m["containerPath"]
        for m in mounts
        if os.path.basename(m["containerPath"]) == f"libcuda.so.{user.sim.driver_version}"
        and "/i386-linux-gnu/" not in m["containerPath"]  # the 64-bit one
    ]
    rootfs = _podman_rootfs(user, "cdi-rootfs")
    devcopy = os.path.join(user.top, "devcopy")
    os.mkdir(devcopy)
    podman = _podman_argv(
        user,
        *("run", "--rm", "--network=none", "--device", "nvidia.com/gpu=0"),
        *("--env", f"LIBDIR={os.path.dirname(libcuda)}", "--rootfs", rootfs, "sh", "-c", SCRIPT),
    )
    env = {
        **user.env(),
        "SPEC": spec,
        "DEVCOPY": devcopy,
        "SIMDEV": os.path.join(user.sim.root, "dev"),
    }
    proc = subprocess.run(
        ["unshare", "-m", "sh", "-c", CDI_PRIVATE, "sh", *user.user_command(*podman)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=user.top,
        stdin=subprocess.DEVNULL,
    )
    user.kill_processes()  # its pause process lives in the private namespace
    assert proc.returncode == 0, proc.stderr
    nodes = tagged(proc.stdout, "NODE")
    for want in ("/dev/nvidia0 c3:0", "/dev/nvidiactl c3:ff", "/dev/nvidia-uvm ed:0"):
        assert want in nodes, proc.stdout
    assert not [n for n in nodes if n.startswith("/dev/nvidia1 ")], proc.stdout
    assert tagged(proc.stdout, "LINK") == [f"libcuda.so.{user.sim.driver_version}"], proc.stdout
    assert tagged(proc.stdout, "MAGIC") == ["7f454c46"]
    assert tagged(proc.stdout, "OPEN0") == [
        "cat: can't open '/dev/nvidia0': No such device or address"
    ]
    assert tagged(proc.stdout, "UIDMAP")[0].split()[:2] == ["0", str(user.uid)]
    assert not mounts_under(devcopy)


def test_rootless_edits_keep_a_store_of_their_own(rootless_user: RootlessUser) -> None:
    """An unprivileged user with a login session's runtime directory (``/run/user/<uid>``,
    0700, as systemd-logind makes it) keeps the configuration's parse, discovery and the
    compiled plan in ``/run/user/<uid>/ocihook`` (0700, entries 0600, the user's), not
    root's ``/run/ocihook``; root of a user namespace mapped to the user (a rootless
    engine's runtime) finds the same store, and its edit from the stored values equals
    the first one, computed. ``cdi generate --warm-cache`` run as the user writes the
    start path's module image there, which the wrapper's start then imports from."""
    need_root_and("unshare")
    user = rootless_user
    runtime_dir = f"/run/user/{user.uid}"
    if os.path.exists(runtime_dir):
        pytest.skip(f"{runtime_dir} exists: it is not this test's to make")
    os.makedirs(runtime_dir, mode=0o700)
    os.chown(runtime_dir, user.uid, user.gid)
    try:
        config = _config_toml(user, no_cgroups=True)
        edited = []
        for n, prefix in enumerate([(), ("unshare", "-Ur")]):
            bundle = _rootless_bundle(user, f"store{n}", ["NVIDIA_VISIBLE_DEVICES=0"])
            argv = [*prefix, user.python, "-I", "-m", "ocihook", "edit", "--config", config]
            edit = user.run(*argv, "-b", bundle)
            assert edit.returncode == 0, edit.stderr
            edited.append(json.loads(Path(bundle, "config.json").read_text()))
        store = os.path.join(runtime_dir, "ocihook")
        names = sorted(os.listdir(store))
        for prefix in ("compiled-", "config-", "discovery-"):
            assert [n for n in names if n.startswith(prefix)], names
        st = os.stat(store)
        assert (st.st_uid, st.st_mode & 0o777) == (user.uid, 0o700)
        for name in names:
            st = os.stat(os.path.join(store, name))
            assert (st.st_uid, st.st_mode & 0o777) == (user.uid, 0o600), name
        code = "from ocihook.linux import cachestore; print(cachestore.store_dir())"
        inside = user.run("unshare", "-Ur", user.python, "-I", "-c", code)
        assert inside.stdout.split() == [store], inside.stderr
        # the second edit, from the stored values, equals the first (the bundle paths differ)
        assert edited[0]["mounts"] == edited[1]["mounts"]
        assert edited[0]["process"]["env"] == edited[1]["process"]["env"]
        # the user's own module image: cdi generate --warm-cache run as the user writes it
        # there, and the start path, as the user and as root of a user namespace mapped to
        # the user, imports its modules from it
        spec = os.path.join(user.top, "work", "nvidia.json")
        roots = ["--driver-root", user.sim.root, "--dev-root", user.sim.root]
        generate = [user.python, "-I", "-m", "ocihook", "cdi", "generate", *roots]
        gen = user.run(*generate, "--output", spec, "--warm-cache")
        assert gen.returncode == 0 and "nothing was cached" not in gen.stderr, gen.stderr
        images = [n for n in os.listdir(store) if n.startswith("modules-")]
        assert len(images) == 1 and images[0].endswith(".img"), images
        st = os.stat(os.path.join(store, images[0]))
        assert (st.st_uid, st.st_mode & 0o777) == (user.uid, 0o600)
        probe = (
            "import sys, ocihook.runtime as r\n"
            "def shot(main):\n"
            "    import ocihook.commands.runtime as w\n"
            "    print(type(w.__spec__.loader).__name__)\n"
            "    sys.exit(0)\n"
            "r.run_one_shot = shot\n"
            "r.run()\n"
        )
        for prefix in [(), ("unshare", "-Ur")]:
            loaded = user.run(*prefix, user.python, "-I", "-c", probe)
            assert loaded.stdout.split() == ["ImageLoader"], (prefix, loaded.stderr)
        # a process with more than the user's privileges never uses the user's store: root
        # lowered to the user's effective id only, a setgid context, ambient or inheritable
        # capabilities, root's group kept. -B: such a process could write bytecode beside
        # the sources, which would make the image stale for every later run; after each,
        # the user's own start still imports from the image, so the refusal is the rule's
        ids = [f"--reuid={user.uid}", f"--regid={user.gid}"]
        for how in (
            [f"--euid={user.uid}", f"--egid={user.gid}", "--clear-groups"],
            [f"--reuid={user.uid}", f"--rgid={user.gid}", "--egid=0", "--clear-groups"],
            [*ids, "--clear-groups", "--inh-caps=+dac_override", "--ambient-caps=+dac_override"],
            [*ids, "--clear-groups", "--inh-caps=+dac_override"],
            [*ids, "--groups=0"],
            [f"--reuid={user.uid}", "--regid=0", "--clear-groups"],  # a group not the user's
            [f"--reuid={user.uid}", "--regid=0", "--clear-groups", "unshare", "-Ur"],
        ):
            cmd = ["setpriv", *how, "--", user.python, "-I", "-B", "-c", probe]
            if "unshare" in how:  # ... mapped into a namespace of the user's own
                cmd = ["setpriv", *how[:-2], "--", *how[-2:], user.python, "-I", "-B", "-c", probe]
            proc = subprocess.run(cmd, capture_output=True, text=True, env=user.env(), cwd=user.top)
            assert proc.stdout.split() == ["SourceFileLoader"], (how, proc.stderr)
            again = user.run(user.python, "-I", "-B", "-c", probe)
            assert again.stdout.split() == ["ImageLoader"], (how, again.stderr)
        # ... nor root that joins a namespace of the user's where root is not mapped (its
        # ids read as the overflow id, which the user mapped to themselves), with a
        # capability from a copy of the interpreter (file capabilities) that reaches the
        # user's private directories
        real = os.path.realpath(user.python)
        capy = os.path.join(user.top, "capy")
        shutil.copy2(real, capy)
        capable = subprocess.run(["setcap", "cap_dac_override+ep", capy], capture_output=True)
        src = os.path.join(user.top, "src")
        capy_probe = f"import sys; sys.path[:0] = [{src!r}]\n" + probe
        holder = subprocess.Popen(
            user.user_command(
                "unshare", "--user", "--map-user=65534", "--map-group=65534", "sleep", "60"
            ),
            env=user.env(),
        )
        try:
            deadline = time.monotonic() + 10
            while not _ns_made(holder.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert _ns_made(holder.pid), "unshare made no user namespace"
            join = ["nsenter", "-U", "--preserve-credentials", "-t", str(holder.pid)]
            joined = subprocess.run(
                [*join, user.python, "-I", "-B", "-c", probe],
                capture_output=True,
                text=True,
                env=user.env(),
                cwd=user.top,
            )
            assert joined.stdout.split() == ["SourceFileLoader"], joined.stderr
            if capable.returncode == 0:
                joined = subprocess.run(
                    [*join, capy, "-I", "-B", "-c", capy_probe],
                    capture_output=True,
                    text=True,
                    env=user.env(),
                    cwd=user.top,
                )
                assert joined.stdout.split() == ["SourceFileLoader"], joined.stderr
            else:
                print(f"no file capabilities here ({capable.stderr!r}): that case is not run")
        finally:
            holder.kill()
            holder.wait()
            user.kill_processes()
    finally:
        shutil.rmtree(runtime_dir, ignore_errors=True)


def _ns_made(pid: int) -> bool:
    """Whether the process ``pid`` is in a user namespace of its own (its uid_map is no
    longer the initial namespace's)."""
    try:
        with open(f"/proc/{pid}/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False
