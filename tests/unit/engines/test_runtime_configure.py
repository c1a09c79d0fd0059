"""``ocihook runtime configure``: Docker's daemon.json, containerd's config.toml, CRI-O
drop-ins and the podman/CRI-O hooks.d file, on missing, empty, default, commented and
already configured files; results checked by parsing them back and, where the program
runs here, by the program itself (``containerd config dump``, podman ``--hooks-dir``).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import REPO, busybox_rootfs, need_root_and, run_cli

from ocihook.config.options import start_path_dirs
from ocihook.core.errors import EXIT_CODES, EngineConfigError
from ocihook.engines import (
    CDI_SPEC_DIRS,
    Change,
    configure,
    configure_all,
    configure_containerd,
    configure_docker,
    hooks_d_document,
    poststop_path,
    write_change,
)

WRAPPER = "/opt/ocihook/bin/ocihook-runtime"
CRI = "io.containerd.grpc.v1.cri"


def run_configure(engine: str, path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "runtime",
        "configure",
        "--runtime",
        engine,
        "--config",
        str(path),
        "--runtime-path",
        WRAPPER,
        *flags,
    )


def containerd_default() -> str:
    """``containerd config default`` of the containerd installed here."""
    if shutil.which("containerd") is None:
        pytest.skip("needs containerd (apt-get install containerd)")
    return subprocess.run(
        ["containerd", "config", "default"], capture_output=True, text=True, check=True
    ).stdout


def containerd_dump(path: Path) -> dict[str, Any]:
    """What containerd itself makes of a config file (``config dump``), parsed."""
    proc = subprocess.run(
        ["containerd", "--config", str(path), "config", "dump"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return tomllib.loads(proc.stdout)


def is_subsequence(lines: list[str], of: list[str]) -> bool:
    it = iter(of)
    return all(any(line == other for other in it) for line in lines)


# --- Docker ----------------------------------------------------------------------------


def test_docker_missing_file_created(tmp_path: Path) -> None:
    path = tmp_path / "docker" / "daemon.json"
    proc = run_configure("docker", path, "--set-as-default", "--cdi")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(path.read_text()) == {
        "runtimes": {"ocihook": {"path": WRAPPER}},
        "default-runtime": "ocihook",
        "features": {"cdi": True},
    }
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert "created" in proc.stderr and "restart dockerd" in proc.stderr
    # what every container then pays is said
    assert "runs before every container this engine starts" in proc.stderr
    assert "asks for nothing" in proc.stderr
    plain = run_configure("docker", tmp_path / "other.json", "--cdi")
    assert plain.returncode == 0 and "every container" not in plain.stderr


def test_docker_existing_settings_kept_and_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    original = {
        "log-driver": "json-file",
        "runtimes": {"ocihook": {"path": "/old", "runtimeArgs": ["--debug"]}, "x": {"path": "/x"}},
        "features": {"buildkit": True},
        "default-runtime": "runc",
    }
    path.write_text(json.dumps(original, indent=2))
    path.chmod(0o600)
    assert run_configure("docker", path, "--cdi").returncode == 0
    doc = json.loads(path.read_text())
    assert list(doc) == list(original)
    assert doc["runtimes"] == {
        "ocihook": {"path": WRAPPER, "runtimeArgs": ["--debug"]},
        "x": {"path": "/x"},
    }
    assert doc["features"] == {"buildkit": True, "cdi": True}
    assert doc["default-runtime"] == "runc"  # only --set-as-default changes it
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    once = path.read_bytes()
    proc = run_configure("docker", path, "--cdi")
    assert proc.returncode == 0 and "already configured" in proc.stderr
    assert path.read_bytes() == once
    # a file written by hand in another style that says the same: left as it is
    path.write_text(json.dumps(doc, separators=(",", ":")))
    hand = path.read_bytes()
    assert run_configure("docker", path, "--cdi").returncode == 0
    assert path.read_bytes() == hand


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"runtimes": {', "not valid JSON"),
        ("[]", "must hold a JSON object"),
        ('{"runtimes": []}', "runtimes must be an object"),
        ('{"runtimes": {"ocihook": "/x"}}', "runtimes.ocihook must be an object"),
        ('{"features": true}', "features must be an object"),
        (b"\xff{}", "not UTF-8"),
    ],
)
def test_docker_malformed_refused_untouched(tmp_path: Path, content: Any, message: str) -> None:
    path = tmp_path / "daemon.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    before = path.read_bytes()
    proc = run_configure("docker", path, "--cdi")
    assert proc.returncode == EXIT_CODES[EngineConfigError] == 13, proc.stderr
    assert "error[bad-engine-config]" in proc.stderr and message in proc.stderr
    assert str(path) in proc.stderr and proc.stderr.count("\n") == 1
    assert path.read_bytes() == before


_json_scalars = st.one_of(st.booleans(), st.integers(), st.text(max_size=5), st.none())
_json = st.recursive(
    _json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
_daemon = st.dictionaries(
    st.sampled_from(["log-driver", "runtimes", "features", "default-runtime", "data-root", "x"]),
    _json,
    max_size=4,
)


@settings(max_examples=300, deadline=None)
@given(doc=_daemon, set_default=st.booleans(), cdi=st.booleans())
def test_docker_property(doc: dict[str, Any], set_default: bool, cdi: bool) -> None:
    """Any daemon.json: either refused with a field named, or ocihook's entry is there,
    every other setting is unchanged, and a second run changes nothing."""
    before = json.dumps(doc).encode()
    kwargs = {"path": "d.json", "runtime_path": WRAPPER, "set_as_default": set_default, "cdi": cdi}
    try:
        after, _notes = configure_docker(before, **kwargs)  # type: ignore[arg-type]
    except EngineConfigError as e:
        assert e.field in ("runtimes", "runtimes.ocihook", "features")
        return
    new = json.loads(after)
    assert new["runtimes"]["ocihook"]["path"] == WRAPPER
    assert (new.get("default-runtime") == "ocihook") or not set_default
    assert not cdi or new["features"]["cdi"] is True
    for key, value in doc.items():
        if key not in ("runtimes", "features", "default-runtime"):
            assert new[key] == value
    again, _ = configure_docker(after, **kwargs)  # type: ignore[arg-type]
    assert again == after


# --- containerd -------------------------------------------------------------------------


def test_containerd_default_config(tmp_path: Path) -> None:
    """The file ``containerd config default`` writes: only additions and the one changed
    line; containerd reads the result and shows the runtime."""
    default = containerd_default()
    path = tmp_path / "config.toml"
    path.write_text(default)
    proc = run_configure("containerd", path, "--set-as-default", "--cdi")
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    old_lines = default.splitlines()
    changed = [ln for ln in old_lines if ln not in text.splitlines()]
    assert [ln.strip() for ln in changed] == ['default_runtime_name = "runc"'], changed
    doc = tomllib.loads(text)
    cri = doc["plugins"][CRI]
    assert cri["containerd"]["default_runtime_name"] == "ocihook"
    assert cri["enable_cdi"] is True and cri["cdi_spec_dirs"] == list(CDI_SPEC_DIRS)
    ours = cri["containerd"]["runtimes"]["ocihook"]
    assert ours == {"runtime_type": "io.containerd.runc.v2", "options": {"BinaryName": WRAPPER}}
    assert set(cri["containerd"]["runtimes"]) == {"runc", "ocihook"}
    # the new tables are indented as runc's
    assert '\n        [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.ocihook]\n' in text
    dump = containerd_dump(path)["plugins"][CRI]["containerd"]
    assert dump["default_runtime_name"] == "ocihook"
    assert dump["runtimes"]["ocihook"]["runtime_type"] == "io.containerd.runc.v2"
    assert dump["runtimes"]["ocihook"]["options"]["BinaryName"] == WRAPPER
    assert "runc" in dump["runtimes"]
    # idempotent, byte for byte
    once = path.read_bytes()
    proc = run_configure("containerd", path, "--set-as-default", "--cdi")
    assert proc.returncode == 0 and "already configured" in proc.stderr
    assert path.read_bytes() == once


@pytest.mark.parametrize("content", [None, "", "\n", "# only a comment\n"])
def test_containerd_missing_or_empty(tmp_path: Path, content: str | None) -> None:
    path = tmp_path / "etc" / "containerd" / "config.toml"
    if content is not None:
        path.parent.mkdir(parents=True)
        path.write_text(content)
    proc = run_configure("containerd", path)
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(path.read_text())
    assert doc["version"] == 2
    runtime = doc["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]
    assert runtime["options"]["BinaryName"] == WRAPPER
    if content and content.strip():
        assert path.read_text().count("# only a comment") == 1
    if shutil.which("containerd"):
        dump = containerd_dump(path)["plugins"][CRI]["containerd"]["runtimes"]
        assert dump["ocihook"]["options"]["BinaryName"] == WRAPPER
        assert dump["runc"]["runtime_type"] == "io.containerd.runc.v2"  # defaults merged


COMMENTED = """\
# containerd for the GPU nodes -- managed by hand
version = 2
root = "/var/lib/containerd"   # keep on the big disk

[plugins."io.containerd.grpc.v1.cri"]
  # the pause image from our mirror
  sandbox_image = "registry.example/pause:3.9"

  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"

    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      # we run systemd
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = true
        BinaryName = "/usr/sbin/runc"

[grpc]
  address = "/run/containerd/containerd.sock"  # default
"""


def test_containerd_comments_kept_and_runc_settings_copied(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(COMMENTED)
    proc = run_configure("containerd", path, "--cdi")
    assert proc.returncode == 0, proc.stderr
    text = path.read_text()
    assert is_subsequence(COMMENTED.splitlines(), text.splitlines()), text
    doc = tomllib.loads(text)
    ours = doc["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]
    # a runtime that differs from runc only in its binary: the systemd cgroup driver kept
    assert ours["options"] == {"BinaryName": WRAPPER, "SystemdCgroup": True}
    assert doc["plugins"][CRI]["containerd"]["default_runtime_name"] == "runc"
    dump = containerd_dump(path) if shutil.which("containerd") else None
    if dump is not None:
        opts = dump["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]["options"]
        assert opts["SystemdCgroup"] is True and opts["BinaryName"] == WRAPPER
    # an existing entry pointing elsewhere is updated in place, its other settings kept
    moved = text.replace(WRAPPER, "/old/ocihook-runtime")
    after, _ = configure_containerd(moved.encode(), path="c", runtime_path=WRAPPER, cdi=True)
    assert after.decode() == text


def test_containerd_version_3(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(
        "version = 3\n\n[plugins.'io.containerd.cri.v1.images']\n  snapshotter = 'overlayfs'\n"
    )
    proc = run_configure("containerd", path, "--set-as-default", "--cdi")
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(path.read_text())
    runtime = doc["plugins"]["io.containerd.cri.v1.runtime"]
    assert runtime["containerd"]["runtimes"]["ocihook"]["options"]["BinaryName"] == WRAPPER
    assert runtime["containerd"]["default_runtime_name"] == "ocihook"
    assert runtime["enable_cdi"] is True
    assert CRI not in doc["plugins"]
    assert doc["plugins"]["io.containerd.cri.v1.images"] == {"snapshotter": "overlayfs"}


def test_containerd_disabled_cri_is_noted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('version = 2\ndisabled_plugins = ["cri"]\n')
    proc = run_configure("containerd", path)
    assert proc.returncode == 0
    assert "CRI plugin is disabled" in proc.stderr


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('version = 2\n[plugins."io.containerd.grpc.v1.cri"\n', "not valid TOML"),
        ('[plugins.cri.containerd]\nsnapshotter = "overlayfs"\n', "version 1"),
        ("version = 4\n", "unsupported containerd config version"),
        ('version = "2"\n', "unsupported containerd config version"),
        ('version = 2\nplugins = "x"\n', "plugins must be a table"),
        (
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\nruntimes = 1\n',
            'plugins."io.containerd.grpc.v1.cri".containerd.runtimes must be a table',
        ),
    ],
)
def test_containerd_malformed_refused_untouched(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "config.toml"
    path.write_text(content)
    proc = run_configure("containerd", path)
    assert proc.returncode == 13, proc.stderr
    assert message in proc.stderr and str(path) in proc.stderr, proc.stderr
    assert path.read_text() == content


@settings(max_examples=150, deadline=None)
@given(
    runc_options=st.dictionaries(
        st.sampled_from(["SystemdCgroup", "BinaryName", "Root", "NoPivotRoot"]),
        st.one_of(st.booleans(), st.sampled_from(["", "/usr/sbin/runc", "/run/x"])),
        max_size=3,
    ),
    other=st.sampled_from(["", "[grpc]\n  address = '/s'\n", "# comment\n", "oom_score = -999\n"]),
    set_default=st.booleans(),
    cdi=st.booleans(),
)
def test_containerd_property(
    runc_options: dict[str, Any], other: str, set_default: bool, cdi: bool
) -> None:
    """The runtime entry carries runc's non-empty options with our BinaryName; the rest
    of the file is unchanged; a second run keeps the bytes."""
    lines = ["version = 2", other]
    if runc_options:
        lines.append(f'[plugins."{CRI}".containerd.runtimes.runc.options]')
        lines += [f"  {k} = {json.dumps(v)}" for k, v in runc_options.items()]
    before = "\n".join(lines) + "\n"
    kwargs = {"path": "c", "runtime_path": WRAPPER, "set_as_default": set_default, "cdi": cdi}
    after, _ = configure_containerd(before.encode(), **kwargs)  # type: ignore[arg-type]
    doc = tomllib.loads(after.decode())
    old = tomllib.loads(before)
    ours = doc["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]
    want = {k: v for k, v in runc_options.items() if v and k != "BinaryName"}
    assert ours["options"] == {"BinaryName": WRAPPER, **want}
    old_runc = old.get("plugins", {}).get(CRI, {}).get("containerd", {}).get("runtimes", {})
    # runc kept as it was, or added: the file's runtimes table replaces the built-in one
    want_runc = old_runc.get("runc") or {"runtime_type": "io.containerd.runc.v2"}
    assert doc["plugins"][CRI]["containerd"]["runtimes"]["runc"] == want_runc
    for key in old:
        if key != "plugins":
            assert doc[key] == old[key]
    assert is_subsequence(before.splitlines(), after.decode().splitlines())
    again, _ = configure_containerd(after, **kwargs)  # type: ignore[arg-type]
    assert again == after


# --- CRI-O -------------------------------------------------------------------------------


def test_crio_drop_in(tmp_path: Path) -> None:
    path = tmp_path / "crio" / "crio.conf.d" / "99-ocihook.conf"
    proc = run_configure("crio", path, "--set-as-default", "--cdi")
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(path.read_text())
    assert doc == {
        "crio": {
            "runtime": {
                "default_runtime": "ocihook",
                "cdi_spec_dirs": list(CDI_SPEC_DIRS),
                "runtimes": {"ocihook": {"runtime_path": WRAPPER, "runtime_type": "oci"}},
            }
        }
    }
    once = path.read_bytes()
    assert run_configure("crio", path, "--set-as-default", "--cdi").returncode == 0
    assert path.read_bytes() == once
    # an existing drop-in with the admin's own settings and comments
    path.write_text(
        "# tuned by ops\n[crio.runtime]\nconmon_cgroup = 'pod'  # keep\n\n"
        "[crio.runtime.runtimes.ocihook]\nruntime_path = '/old'\nruntime_root = '/run/ocihook'\n"
    )
    before = path.read_text()
    assert run_configure("crio", path).returncode == 0
    text = path.read_text()
    assert "# tuned by ops" in text and "conmon_cgroup = 'pod'  # keep" in text
    entry = tomllib.loads(text)["crio"]["runtime"]["runtimes"]["ocihook"]
    assert entry == {"runtime_path": WRAPPER, "runtime_root": "/run/ocihook", "runtime_type": "oci"}
    assert len(text.splitlines()) == len(before.splitlines()) + 1  # one key added
    path.write_text("[crio.runtime\n")
    proc = run_configure("crio", path)
    assert proc.returncode == 13 and path.read_text() == "[crio.runtime\n"


# --- podman / hooks.d -------------------------------------------------------------------------


def _packaged(stage: str) -> dict[str, Any]:
    with open(os.path.join(REPO, f"packaging/hooks.d/ocihook-{stage}.json.in")) as f:
        text = f.read().replace("@SYSPATH@", repr(start_path_dirs()))  # this process's
        doc: dict[str, Any] = json.loads(text.replace("@PYTHON@", sys.executable))
    return doc


def test_hooks_d_file_is_the_packaged_one(tmp_path: Path) -> None:
    """podman gets the packaged prestart file and, beside it, the poststop one (same
    ``when``): written poststop first, re-run byte-identical, refused when malformed."""
    prestart, poststop = _packaged("prestart"), _packaged("poststop")
    assert hooks_d_document() == prestart
    assert hooks_d_document(stage="poststop") == poststop
    assert poststop["when"] == prestart["when"] == {"always": True}
    assert poststop["hook"]["args"][-2:] == ["hook", "poststop"]
    assert poststop["stages"] == ["poststop"]
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    proc = run_cli("runtime", "configure", "--runtime", "podman", "--config", str(hooks))
    assert proc.returncode == 0, proc.stderr
    path, after = hooks / "ocihook-prestart.json", hooks / "ocihook-poststop.json"
    assert sorted(os.listdir(hooks)) == ["ocihook-poststop.json", "ocihook-prestart.json"]
    assert json.loads(path.read_text()) == prestart
    assert json.loads(after.read_text()) == poststop
    assert proc.stderr.splitlines()[:2] == [
        f"ocihook: {path}: created",
        f"ocihook: {after}: created",
    ]
    once = path.read_bytes(), after.read_bytes()
    proc = run_cli("runtime", "configure", "--runtime", "podman", "--config", str(path))
    assert proc.returncode == 0 and (path.read_bytes(), after.read_bytes()) == once
    assert f"{after}: already configured; unchanged" in proc.stderr
    proc = run_cli(
        "runtime", "configure", "--runtime", "podman", "--config", str(path), "--set-as-default"
    )
    assert proc.returncode == 2 and "--set-as-default" in proc.stderr
    path.write_text("{")
    assert (
        run_cli("runtime", "configure", "--runtime", "podman", "--config", str(path)).returncode
        == 13
    )
    assert path.read_text() == "{" and after.read_bytes() == once[1]
    after.write_text("[")
    path.unlink()
    assert (
        run_cli("runtime", "configure", "--runtime", "podman", "--config", str(path)).returncode
        == 13
    )
    assert not path.exists() and after.read_text() == "["  # nothing written


def test_podman_dry_run_shows_both_files(tmp_path: Path) -> None:
    proc = run_cli(
        "runtime",
        "configure",
        "--runtime",
        "podman",
        "--config",
        str(tmp_path / "gpu.json"),
        "--dry-run",
    )
    assert proc.returncode == 0 and os.listdir(tmp_path) == []
    assert f"+++ {tmp_path / 'gpu.json'}\n" in proc.stdout
    assert f"+++ {tmp_path / 'gpu-poststop.json'}\n" in proc.stdout
    assert f"ocihook: dry run: {tmp_path / 'gpu-poststop.json'}: would be created" in proc.stderr
    # what every podman container then pays is said (hooks.d cannot match the environment)
    assert "runs for every container podman and CRI-O start" in proc.stderr
    assert "CDI devices" in proc.stderr and "cost such containers nothing" in proc.stderr
    again = run_cli(
        "runtime", "configure", "--runtime", "podman", "--config", str(tmp_path / "gpu.json")
    )
    assert again.returncode == 0 and "runs for every container" in again.stderr
    same = run_cli(
        "runtime", "configure", "--runtime", "podman", "--config", str(tmp_path / "gpu.json")
    )
    assert same.returncode == 0 and "runs for every container" not in same.stderr  # unchanged


@pytest.mark.parametrize(
    ("prestart", "poststop"),
    [
        ("/d/ocihook-prestart.json", "/d/ocihook-poststop.json"),
        ("/d/gpu.json", "/d/gpu-poststop.json"),
        ("/d/10-prestart-gpu.json", "/d/10-poststop-gpu.json"),
        ("/prestart/hook", "/prestart/hook-poststop"),
    ],
)
def test_poststop_path_is_beside_the_prestart_file(prestart: str, poststop: str) -> None:
    assert poststop_path(prestart) == poststop


def test_configure_all_is_one_file_for_the_other_engines(tmp_path: Path) -> None:
    changes = configure_all("docker", path=str(tmp_path / "d.json"), runtime_path=WRAPPER)
    assert [c.path for c in changes] == [str(tmp_path / "d.json")]
    changes = configure_all("podman", path=str(tmp_path))
    assert [os.path.basename(c.path) for c in changes] == [
        "ocihook-prestart.json",
        "ocihook-poststop.json",
    ]
    assert [c.before for c in changes] == [None, None]


@pytest.mark.e2e
def test_podman_reads_the_hooks_d_file(
    tmp_path: Path, bundle_factory: Any, request: pytest.FixtureRequest
) -> None:
    """podman runs the hook of the written file: a container asking for nothing starts
    (the hook's fast exit); one asking for GPU 0 on this GPU-less host is stopped by
    ocihook's discovery error — the hook ran, from the file."""
    need_root_and("podman", "runc")
    engine = request.getfixturevalue("podman")
    hooks = tmp_path / "hooks.d"
    hooks.mkdir()
    assert (
        run_cli("runtime", "configure", "--runtime", "podman", "--config", str(hooks)).returncode
        == 0
    )
    proc = engine.run(hooks, busybox_rootfs(bundle_factory))
    assert proc.returncode == 0, proc.stderr
    if os.path.exists("/proc/driver/nvidia/version"):
        pytest.skip("this host has an NVIDIA driver: the GPU container would start")
    # as Podman.run, but the failed container stays in the store until removed
    cmd = [*engine.base, "--hooks-dir", str(hooks), "run", "--rm", "--network=none"]
    cmd += ["--cgroup-parent", engine.cgroup_parent, "--env", "NVIDIA_VISIBLE_DEVICES=0"]
    cmd += ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=32768:32768"]
    cmd += ["--rootfs", busybox_rootfs(bundle_factory), "true"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    subprocess.run([*engine.base, "rm", "--all", "--force"], capture_output=True, timeout=60)
    assert proc.returncode != 0
    assert "error[host-discovery]" in proc.stderr, proc.stderr


# --- writing ------------------------------------------------------------------------------


def test_symlinked_config_edits_the_target(tmp_path: Path) -> None:
    real = tmp_path / "managed" / "config.toml"
    real.parent.mkdir()
    real.write_text(COMMENTED)
    real.chmod(0o640)
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    proc = run_configure("containerd", link)
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert "ocihook" in tomllib.loads(real.read_text())["plugins"][CRI]["containerd"]["runtimes"]
    assert stat.S_IMODE(real.stat().st_mode) == 0o640
    assert sorted(os.listdir(real.parent)) == ["config.toml"]  # no temporary file left


def test_dry_run_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    proc = run_configure("containerd", path, "--dry-run")
    assert proc.returncode == 0 and not path.exists()
    assert proc.stdout.startswith("--- /dev/null\n+++ " + str(path))
    assert (
        f'+    BinaryName = "{WRAPPER}"' in proc.stdout
        or f'+BinaryName = "{WRAPPER}"' in proc.stdout
    )
    assert "would be created" in proc.stderr
    path.write_text(COMMENTED)
    proc = run_configure("containerd", path, "--dry-run", "--set-as-default")
    assert proc.returncode == 0 and path.read_text() == COMMENTED
    assert '-    default_runtime_name = "runc"' in proc.stdout
    assert '+    default_runtime_name = "ocihook"' in proc.stdout


def test_write_failure_leaves_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    path = str(blocker / "docker" / "daemon.json")
    with pytest.raises(EngineConfigError, match="Not a directory"):
        configure("docker", path=path, runtime_path=WRAPPER)
    change = Change("docker", path, None, b"{}\n")
    with pytest.raises(EngineConfigError) as e:
        write_change(change)
    assert e.value.path == path
    assert os.listdir(tmp_path) == ["file"] and blocker.read_text() == "x"


def test_tomlkit_only_for_toml(tmp_path: Path) -> None:
    from support import modules_after

    code = (
        "from ocihook.engines import configure\n"
        f"configure('docker', path={str(tmp_path / 'd.json')!r}, runtime_path='/x')\n"
    )
    assert "tomlkit" not in modules_after(code)
    assert "tomlkit" not in modules_after("import ocihook.commands.cli")


# --- containerd imports and the read-back check ---------------------------------------------------


def test_containerd_empty_imports_no_note(tmp_path: Path) -> None:
    """``containerd config default`` writes ``imports = []``; the edit then notes
    "this file imports : a file there that configures the CRI plugin would override this
    registration" — an empty list named as if files were imported."""
    path = tmp_path / "config.toml"
    path.write_text(containerd_default())
    assert "imports = []" in path.read_text()
    proc = run_configure("containerd", path)
    assert proc.returncode == 0, proc.stderr
    assert "this file imports" not in proc.stderr, proc.stderr


def test_containerd_import_glob_matching_the_file_itself(tmp_path: Path) -> None:
    """``imports = ["<dir>/*.toml"]`` in ``<dir>/config.toml`` matches the main file itself;
    containerd skips a file already loaded (``LoadConfig``: circular imports) and reads this
    file fine (``config dump``). ocihook refuses it as "the imported file config.toml
    configures the CRI plugin" and hints to configure that same file — a false refusal
    with a circular hint."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            f"""\
            version = 2
            imports = ["{tmp_path}/*.toml"]

            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
            """
        )
    )
    if shutil.which("containerd") is not None:
        dump = containerd_dump(path)
        assert dump["imports"] == [str(path)]
        assert "runc" in dump["plugins"][CRI]["containerd"]["runtimes"]
    after, _notes = configure_containerd(
        path.read_bytes(), path=str(path), runtime_path="/opt/ocihook/bin/ocihook-runtime"
    )
    assert b"runtimes.ocihook" in after


def test_containerd_relative_import_of_a_linked_config(tmp_path: Path) -> None:
    """``configure`` follows a linked config file to its target and resolves the relative
    ``imports`` against the target's directory; containerd resolves them against the
    directory of the path it was given (the link's: ``resolveImports`` joins
    ``filepath.Dir(parent)``). An imported drop-in that configures the CRI plugin (which
    replaces the main file's table in containerd 1.x) is then missed: the registration is
    written and silently undone."""
    need_root_and("containerd")
    etc, real = tmp_path / "etc", tmp_path / "managed"
    (etc / "conf.d").mkdir(parents=True)
    real.mkdir()
    (real / "config.toml").write_text('version = 2\nimports = ["conf.d/cri.toml"]\n')
    (etc / "config.toml").symlink_to(real / "config.toml")
    (etc / "conf.d/cri.toml").write_text(
        f'version = 2\n[plugins."{CRI}".containerd]\ndefault_runtime_name = "runc"\n'
    )
    assert str(etc / "conf.d/cri.toml") in containerd_dump(etc / "config.toml")["imports"]
    with pytest.raises(EngineConfigError) as e:
        configure("containerd", path=str(etc / "config.toml"), runtime_path="/x/ocihook-runtime")
    assert e.value.field == "imports"


def test_containerd_import_with_nul_is_a_file_error(tmp_path: Path) -> None:
    """A TOML string may hold ``\\u0000``: an import naming one made ``os.open`` raise
    ValueError, which the CLI shows as a usage error ("Error: embedded null byte", exit
    2) instead of the file's error (exit 13, naming the file and ``imports``)."""
    path = tmp_path / "config.toml"
    path.write_text('version = 2\nimports = ["a\\u0000b.toml"]\n')
    with pytest.raises(EngineConfigError) as e:
        configure_containerd(path.read_bytes(), path=str(path), runtime_path="/x/ocihook-runtime")
    assert e.value.field == "imports"
    proc = run_configure("containerd", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr


def test_containerd_runc_table_with_a_datetime_no_traceback(tmp_path: Path) -> None:
    """runc's settings are copied to the new runtime; a TOML date-time among them reaches
    ``_check_toml``'s ``json.dumps`` without ``default=`` and escapes as TypeError (a
    traceback from ``ocihook runtime configure``)."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            """\
            version = 2
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
              since = 1979-05-27T07:32:00Z
            """
        )
    )
    proc = run_configure("containerd", path)
    assert "Traceback" not in proc.stderr, proc.stderr
    # a plain TOML value: copied to the new runtime like runc's other settings, exit 0
    assert proc.returncode == 0, proc.stderr
    doc = tomllib.loads(path.read_text())
    ours = doc["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]
    assert str(ours["since"]) == "1979-05-27 07:32:00+00:00"
    assert ours["options"] == {"BinaryName": WRAPPER}


# --- malformed and hostile engine configuration files ---------------------------------------------


RUNTIME_PATH = "/usr/local/bin/ocihook-runtime"


def _configure(engine: str, path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "runtime",
        "configure",
        "--runtime",
        engine,
        "--config",
        str(path),
        "--runtime-path",
        RUNTIME_PATH,
        *extra,
    )


def _containerd_dump(path: Path) -> str:
    if shutil.which("containerd") is None:
        pytest.skip("containerd is not installed")
    proc = subprocess.run(
        ["containerd", "--config", str(path), "config", "dump"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _cri_runtimes(dump: str) -> dict[str, Any]:
    doc = tomllib.loads(dump)
    runtimes: dict[str, Any] = doc["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]["runtimes"]
    return runtimes


def test_containerd_runc_entry_of_the_wrong_type_is_exit_13(tmp_path: Path) -> None:
    """A containerd config whose ``runtimes.runc`` is a string (malformed) must be refused
    with exit 13 and left untouched. Found: ``AttributeError: 'str' object has no
    attribute 'items'`` (traceback, exit 1) in ``configure_containerd``."""
    path = tmp_path / "config.toml"
    text = 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\nrunc = "x"\n'
    path.write_text(text)
    proc = _configure("containerd", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
    assert "Traceback" not in proc.stderr
    assert path.read_text() == text


@pytest.mark.parametrize(
    "body",
    [
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes = { runc = { runtime_type = "io.containerd.runc.v2" } }\n',
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes]\n'
        'ocihook = { runtime_type = "io.containerd.runc.v2" }\n',
        'plugins = { "io.containerd.internal.v1.opt" = { path = "/opt" } }\n',
    ],
    ids=["inline-runtimes", "inline-ocihook-entry", "inline-plugins"],
)
def test_containerd_inline_tables_are_edited_or_refused_with_13(tmp_path: Path, body: str) -> None:
    """Inline tables on the path ocihook writes (``runtimes = { runc = {...} }``, an
    ``ocihook = {...}`` entry, ``plugins = {...}``) are valid containerd configs
    (``config dump`` reads them): the runtime is added, or exit 13 names the file and
    leaves it untouched; never a usage error (exit 2) for a right command line (tomlkit's
    ``ValueError: Inline tables cannot contain a table``)."""
    path = tmp_path / "config.toml"
    text = "version = 2\n" + body
    path.write_text(text)
    _containerd_dump(path)  # valid for containerd
    proc = _configure("containerd", path)
    if proc.returncode == 0:
        runtimes = _cri_runtimes(_containerd_dump(path))
        assert runtimes["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert str(path) in proc.stderr
        assert path.read_text() == text


def test_containerd_dotted_keys_keep_runc_and_register_ocihook(tmp_path: Path) -> None:
    """A containerd config that writes the runc runtime with dotted keys::

        [plugins."io.containerd.grpc.v1.cri".containerd]
        runtimes.runc.runtime_type = "io.containerd.runc.v2"
        runtimes.runc.options.SystemdCgroup = true

    Found: exit 0 "updated", but tomlkit writes ``[runtimes.ocihook]`` as a top-level
    table between the two dotted lines, so ``runtimes.runc.options.SystemdCgroup`` lands
    inside the new table: containerd's ``config dump`` then shows no ``ocihook`` runtime
    and runc without ``SystemdCgroup`` (a cgroup-driver mismatch for kubelet). Expected:
    the runtime registered and runc's settings kept, or exit 13 and the file untouched."""
    path = tmp_path / "config.toml"
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'runtimes.runc.runtime_type = "io.containerd.runc.v2"\n'
        "runtimes.runc.options.SystemdCgroup = true\n"
    )
    path.write_text(text)
    assert _cri_runtimes(_containerd_dump(path))["runc"]["options"]["SystemdCgroup"] is True
    proc = _configure("containerd", path)
    if proc.returncode == 0:
        runtimes = _cri_runtimes(_containerd_dump(path))
        assert runtimes["runc"]["options"].get("SystemdCgroup") is True, path.read_text()
        assert "ocihook" in runtimes, path.read_text()
        assert runtimes["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_containerd_out_of_order_tables_with_set_as_default(tmp_path: Path) -> None:
    """A valid containerd config whose ``[plugins."io.containerd.grpc.v1.cri".containerd]``
    header comes after its sub-table ``...containerd.runtimes.runc.options`` and another
    plugin's table (TOML allows it; ``config dump`` reads it). With ``--set-as-default``
    (or ``--cdi``): ``AttributeError: 'dict' object has no attribute 'body'`` in
    ``_key_indent`` (tomlkit gives an out-of-order table proxy), exit 1 with a traceback.
    Expected: ``default_runtime_name = "ocihook"`` written (or exit 13)."""
    path = tmp_path / "config.toml"
    text = (
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "SystemdCgroup = true\n"
        '[plugins."io.containerd.internal.v1.opt"]\n'
        'path = "/opt"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'snapshotter = "native"\n'
    )
    path.write_text(text)
    _containerd_dump(path)  # valid for containerd
    proc = _configure("containerd", path, "--set-as-default", "--cdi")
    assert "Traceback" not in proc.stderr, proc.stderr[-600:]
    if proc.returncode == 0:
        dump = tomllib.loads(_containerd_dump(path))
        cri = dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert cri["default_runtime_name"] == "ocihook"
        assert cri["snapshotter"] == "native"
        assert cri["runtimes"]["ocihook"]["options"]["BinaryName"] == RUNTIME_PATH
        assert cri["runtimes"]["runc"]["options"]["SystemdCgroup"] is True
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


@pytest.mark.parametrize(
    "text",
    [
        '[crio.runtime]\nruntimes.runc.runtime_path = "/usr/bin/runc"\n'
        'runtimes.runc.monitor_env = ["A=1"]\n',
        '[crio]\nruntime.default_runtime = "runc"\n',
    ],
    ids=["dotted-runtimes", "dotted-runtime"],
)
def test_crio_dotted_keys_register_ocihook_under_crio_runtime(tmp_path: Path, text: str) -> None:
    """A CRI-O drop-in written with dotted keys. Found: exit 0, but the entry is written
    as ``[runtimes.ocihook]`` / ``[runtime.runtimes.ocihook]`` at the top level (CRI-O
    never sees it), and in the first file ``runtimes.runc.monitor_env`` moves into the
    new table. Expected: ``crio.runtime.runtimes.ocihook.runtime_path`` set with the rest
    kept, or exit 13 and the file untouched."""
    path = tmp_path / "99-ocihook.conf"
    path.write_text(text)
    before = tomllib.loads(text)
    proc = _configure("crio", path)
    if proc.returncode == 0:
        after = tomllib.loads(path.read_text())
        assert set(after) == {"crio"}, path.read_text()
        entry = after["crio"]["runtime"]["runtimes"]["ocihook"]
        assert entry["runtime_path"] == RUNTIME_PATH
        old_runtime = before["crio"]["runtime"]
        for key, value in old_runtime.items():
            if key != "runtimes":
                assert after["crio"]["runtime"][key] == value
        for name, value in old_runtime.get("runtimes", {}).items():
            assert after["crio"]["runtime"]["runtimes"][name] == value
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_docker_cdi_feature_number_is_not_already_configured(tmp_path: Path) -> None:
    """``features.cdi`` must be a JSON boolean for dockerd (``map[string]bool``). With
    ``"cdi": 1`` and ``--cdi``, ``new == doc`` holds in Python (``1 == True``) and the file
    is reported "already configured; unchanged". Expected: ``true`` written (or exit
    13)."""
    path = tmp_path / "daemon.json"
    doc = {"features": {"cdi": 1}, "runtimes": {"ocihook": {"path": RUNTIME_PATH}}}
    path.write_text(json.dumps(doc))
    proc = _configure("docker", path, "--cdi")
    if proc.returncode == 0:
        assert json.loads(path.read_text())["features"]["cdi"] is True
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr


def test_docker_nan_is_malformed_json(tmp_path: Path) -> None:
    """``{"x": NaN}`` is not JSON (RFC 8259; dockerd's encoding/json refuses it). Found:
    Python's json accepts it and the file is rewritten with ``NaN`` in it, exit 0.
    Expected: exit 13, file untouched, as for any other malformed daemon.json."""
    path = tmp_path / "daemon.json"
    text = '{"x": NaN}'
    path.write_text(text)
    proc = _configure("docker", path)
    assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
    assert path.read_text() == text


def test_containerd_imports_do_not_undo_the_registration(tmp_path: Path) -> None:
    """A main ``config.toml`` with ``imports = ["conf.d/*.toml"]`` whose drop-in
    configures the CRI plugin (``default_runtime_name = "runc"``, runc's
    ``SystemdCgroup``). ``configure --set-as-default`` edits only the main file and says
    "updated"; containerd's merged configuration (``config dump``) then has no
    ``ocihook`` runtime and ``default_runtime_name = "runc"`` (containerd 1.6 replaces a
    plugin's table by the imported one; 2.x merges keys, the drop-in still wins).
    Expected: ocihook registered in the configuration containerd uses (a drop-in of its
    own in an imported directory, or the import considered), or exit 13 / a note."""
    conf_d = tmp_path / "conf.d"
    conf_d.mkdir()
    (conf_d / "10-base.toml").write_text(
        "version = 2\n"
        '[plugins."io.containerd.grpc.v1.cri".containerd]\n'
        'default_runtime_name = "runc"\n'
        '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]\n'
        "SystemdCgroup = true\n"
    )
    path = tmp_path / "config.toml"
    text = f'version = 2\nimports = ["{conf_d}/*.toml"]\n'
    path.write_text(text)
    proc = _configure("containerd", path, "--set-as-default")
    notes = proc.stderr.replace(str(tmp_path), "")
    if proc.returncode == 0 and "import" not in notes:
        dump = tomllib.loads(_containerd_dump(path))
        cri = dump["plugins"]["io.containerd.grpc.v1.cri"]["containerd"]
        assert (
            cri["runtimes"].get("ocihook", {}).get("options", {}).get("BinaryName") == RUNTIME_PATH
        ), path.read_text()
        assert cri["default_runtime_name"] == "ocihook"
    elif proc.returncode != 0:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_crio_out_of_order_tables_with_set_as_default(tmp_path: Path) -> None:
    """The CRI-O twin of the containerd case: ``[crio.runtime]`` defined after
    ``[crio.runtime.runtimes.runc]`` and ``[crio.api]`` (valid TOML). ``--set-as-default``
    dies with ``AttributeError`` in ``_key_indent`` (exit 1, traceback). Expected:
    ``crio.runtime.default_runtime = "ocihook"`` with the rest kept, or exit 13."""
    path = tmp_path / "crio.conf"
    text = (
        "[crio.runtime.runtimes.runc]\n"
        'runtime_path = "/usr/bin/runc"\n'
        "[crio.api]\n"
        'listen = "/x"\n'
        "[crio.runtime]\n"
        'cgroup_manager = "systemd"\n'
    )
    path.write_text(text)
    proc = _configure("crio", path, "--set-as-default")
    assert "Traceback" not in proc.stderr, proc.stderr[-600:]
    if proc.returncode == 0:
        runtime = tomllib.loads(path.read_text())["crio"]["runtime"]
        assert runtime["default_runtime"] == "ocihook"
        assert runtime["cgroup_manager"] == "systemd"
        assert runtime["runtimes"]["runc"] == {"runtime_path": "/usr/bin/runc"}
        assert runtime["runtimes"]["ocihook"]["runtime_path"] == RUNTIME_PATH
    else:
        assert proc.returncode == EXIT_CODES[EngineConfigError], proc.stderr
        assert path.read_text() == text


def test_containerd_existing_entry_keeps_the_users_options(tmp_path: Path) -> None:
    """An ocihook entry that is already there is edited in place: only ``BinaryName``
    changes; the user's options and settings stay (it is not rebuilt from runc's)."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            """\
            version = 2
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
              runtime_type = "io.containerd.runc.v2"
            [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.ocihook]
              runtime_type = "io.containerd.runc.v2"
              privileged_without_host_devices = true
              [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.ocihook.options]
                BinaryName = "/old/ocihook-runtime"
                SystemdCgroup = true
                Root = "/run/my-ocihook"
            """
        )
    )
    proc = run_configure("containerd", path)
    assert proc.returncode == 0, proc.stderr
    ours = tomllib.loads(path.read_text())["plugins"][CRI]["containerd"]["runtimes"]["ocihook"]
    assert ours == {
        "runtime_type": "io.containerd.runc.v2",
        "privileged_without_host_devices": True,
        "options": {"BinaryName": WRAPPER, "SystemdCgroup": True, "Root": "/run/my-ocihook"},
    }


def test_containerd_cdi_keeps_the_users_cdi_spec_dirs(tmp_path: Path) -> None:
    """``--cdi`` turns ``enable_cdi`` on and adds ``cdi_spec_dirs`` only when missing: the
    operator's own list is not overwritten."""
    path = tmp_path / "config.toml"
    path.write_text(
        textwrap.dedent(
            """\
            version = 2
            [plugins."io.containerd.grpc.v1.cri"]
              enable_cdi = false
              cdi_spec_dirs = ["/srv/cdi"]
            """
        )
    )
    proc = run_configure("containerd", path, "--cdi")
    assert proc.returncode == 0, proc.stderr
    cri = tomllib.loads(path.read_text())["plugins"][CRI]
    assert cri["enable_cdi"] is True
    assert cri["cdi_spec_dirs"] == ["/srv/cdi"]


# --- The runtime's name (--nvidia-runtime-name) -----------------------------------------


def test_the_runtime_name_is_the_operators_choice_in_every_engine(tmp_path: Path) -> None:
    """``--nvidia-runtime-name nvidia`` registers the wrapper as ``nvidia`` (a drop-in for
    the toolkit's ``--runtime=nvidia`` and RuntimeClass ``handler: nvidia``), as the
    default with ``--set-as-default``; containerd itself reads the entry back."""
    docker = tmp_path / "daemon.json"
    r = run_configure("docker", docker, "--nvidia-runtime-name", "nvidia", "--set-as-default")
    assert r.returncode == 0, r.stderr
    assert json.loads(docker.read_text()) == {
        "runtimes": {"nvidia": {"path": WRAPPER}},
        "default-runtime": "nvidia",
    }
    crio = tmp_path / "99-ocihook.conf"
    assert run_configure("crio", crio, "--runtime-name", "nvidia").returncode == 0
    entry = tomllib.loads(crio.read_text())["crio"]["runtime"]["runtimes"]
    assert set(entry) == {"nvidia"} and entry["nvidia"]["runtime_path"] == WRAPPER
    containerd = tmp_path / "config.toml"
    r = run_configure(
        "containerd", containerd, "--nvidia-runtime-name", "nvidia", "--set-as-default"
    )
    assert r.returncode == 0, r.stderr
    cri = tomllib.loads(containerd.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert cri["containerd"]["default_runtime_name"] == "nvidia"
    assert cri["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == WRAPPER
    assert "ocihook" not in cri["containerd"]["runtimes"]
    if shutil.which("containerd") is not None:
        dumped = containerd_dump(containerd)["plugins"]["io.containerd.grpc.v1.cri"]
        assert dumped["containerd"]["runtimes"]["nvidia"]["options"]["BinaryName"] == WRAPPER


@pytest.mark.parametrize(
    ("engine", "name", "text", "old"),
    [
        (
            "docker",
            "daemon.json",
            '{"runtimes": {"nvidia": {"path": "nvidia-container-runtime",'
            ' "runtimeArgs": ["--debug"]}}}',
            "nvidia-container-runtime",
        ),
        (
            "crio",
            "99-nvidia.conf",
            '[crio.runtime.runtimes.nvidia]\nruntime_path = "/usr/bin/nvidia-container-runtime"\n',
            "/usr/bin/nvidia-container-runtime",
        ),
        (
            "containerd",
            "config.toml",
            'version = 2\n[plugins."io.containerd.grpc.v1.cri".'
            'containerd.runtimes.nvidia.options]\nBinaryName = "/usr/bin/nvidia-container-runtime"'
            "\n",
            "/usr/bin/nvidia-container-runtime",
        ),
    ],
)
def test_taking_over_the_toolkits_entry_says_what_it_ran(
    tmp_path: Path, engine: str, name: str, text: str, old: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    r = run_configure(engine, path, "--nvidia-runtime-name", "nvidia")
    assert r.returncode == 0, r.stderr
    assert f"ocihook: runtime 'nvidia' ran {old}; it now runs {WRAPPER}" in r.stderr
    assert WRAPPER in path.read_text() and old not in path.read_text()
    again = run_configure(engine, path, "--nvidia-runtime-name", "nvidia")
    assert "ran" not in again.stderr  # nothing replaced the second time
    if engine == "docker":  # the entry's other keys are kept
        assert json.loads(path.read_text())["runtimes"]["nvidia"]["runtimeArgs"] == ["--debug"]


@pytest.mark.parametrize("bad", ["", "Nvidia", "a b", "-x", "x_", "a" * 64, 'x"]', "é"])
def test_a_runtime_name_an_engine_cannot_take_is_a_usage_error(tmp_path: Path, bad: str) -> None:
    path = tmp_path / "daemon.json"
    r = run_configure("docker", path, "--nvidia-runtime-name", bad)
    assert r.returncode == 2 and "invalid runtime name" in r.stderr
    assert not path.exists()


def test_podman_takes_no_runtime_name(tmp_path: Path) -> None:
    r = run_configure("podman", tmp_path / "hooks.d", "--nvidia-runtime-name", "nvidia")
    assert r.returncode == 2 and "podman has no runtime entry" in r.stderr
