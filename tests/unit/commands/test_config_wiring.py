"""The configuration file drives the commands: roots, request policy, requirement checks,
capabilities, logging; hooks never take it from the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from support import REPO, make_bundle, run_cli, run_cli_process

from ocihook.sim import host as simhost
from ocihook.sim.demo import default_config


def _conf(tmp_path: Any, text: str) -> str:
    p = tmp_path / "config.toml"
    p.write_text(text)
    return str(p)


def test_roots_from_the_config_file(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], indent=None))
    conf = _conf(tmp_path, f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n')
    proc = run_cli("edit", "-b", bundle, "--dry-run", "--config", conf)
    assert proc.returncode == 0, proc.stderr
    assert "would add 1 GPU" in proc.stdout
    # OCIHOOK_CONFIG works for edit ...
    proc = run_cli("edit", "-b", bundle, "--dry-run", env={**os.environ, "OCIHOOK_CONFIG": conf})
    assert proc.returncode == 0, proc.stderr
    # ... but a hook never reads it (an image could set it for a createContainer hook)
    state = json.dumps({"id": "c", "pid": os.getpid(), "bundle": bundle}).encode()
    proc = run_cli("hook", "prestart", stdin=state, env={**os.environ, "OCIHOOK_CONFIG": conf})
    assert proc.returncode != 0
    assert "OCIHOOK_CONFIG" not in proc.stderr and sim.root not in proc.stderr
    # flags win over the file
    proc = run_cli(
        "edit", "-b", bundle, "--dry-run", "--config", conf, "--driver-root", "/nonexistent"
    )
    assert proc.returncode == 6 and "/nonexistent" in proc.stderr


def test_policy_keys(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    roots = f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n'
    mount = {
        "destination": "/var/run/nvidia-container-devices/2",
        "source": "/dev/null",
        "type": "bind",
        "options": ["bind"],
    }
    mounts = [*default_config(["sh"], [])["mounts"], mount]
    bundle = str(
        make_bundle(tmp_path, ["NVIDIA_DRIVER_CAPABILITIES=all"], indent=None, mounts=mounts)
    )
    off = run_cli("edit", "-b", bundle, "--dry-run", "--config", _conf(tmp_path, roots))
    assert "nothing requested" in off.stderr
    on = run_cli(
        "edit",
        "-b",
        bundle,
        "--dry-run",
        "--config",
        _conf(tmp_path, roots + "accept-nvidia-visible-devices-as-volume-mounts = true\n"),
    )
    assert on.returncode == 0 and "would add 1 GPU" in on.stdout, on.stderr


def test_disable_require_and_capabilities(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    roots = f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n'
    bundle = str(
        make_bundle(
            tmp_path, ["NVIDIA_VISIBLE_DEVICES=0", "NVIDIA_REQUIRE_DRIVER=driver>=999"], indent=None
        )
    )
    strict = run_cli("edit", "-b", bundle, "--dry-run", "--config", _conf(tmp_path, roots))
    assert strict.returncode == 5 and "driver>=999" in strict.stderr
    relaxed = run_cli(
        "edit",
        "-b",
        bundle,
        "--dry-run",
        "--diff",
        "--config",
        _conf(
            tmp_path, roots + 'disable-require = true\nsupported-driver-capabilities = "utility"\n'
        ),
    )
    assert relaxed.returncode == 0, relaxed.stderr
    assert "libnvidia-ml.so" in relaxed.stdout and "libcuda.so" not in relaxed.stdout


def test_cuda_compat_disabled(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    """``cuda-compat = "disabled"`` keeps the image's newer CUDA compat libcuda out of the
    container's ld.so.cache that spec mode writes; the default enters it (its
    ``libcuda.so.999.1`` is newer than the host's driver)."""
    from ocihook.linux import ldcache
    from ocihook.sim.elfwrite import make_shared_object

    roots = f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n'
    seen = {}
    for name, extra in (("default", ""), ("off", 'cuda-compat = "disabled"\n')):
        bundle = str(make_bundle(tmp_path / name, ["NVIDIA_VISIBLE_DEVICES=0"], indent=None))
        compat = os.path.join(bundle, "rootfs/usr/local/cuda/compat")
        os.makedirs(compat)
        with open(os.path.join(compat, "libcuda.so.999.1"), "wb") as f:
            f.write(make_shared_object("libcuda.so.1"))
        os.symlink("libcuda.so.999.1", os.path.join(compat, "libcuda.so.1"))
        r = run_cli("edit", "-b", bundle, "--config", _conf(tmp_path / name, roots + extra))
        assert r.returncode == 0, r.stderr
        with open(os.path.join(bundle, "rootfs/etc/ld.so.cache"), "rb") as f:
            entries = ldcache.parse(f.read())
        seen[name] = [e.path for e in entries if e.soname == "libcuda.so.1"]
    assert seen["default"][0] == "/usr/local/cuda/compat/libcuda.so.1", seen
    assert "/usr/local/cuda/compat/libcuda.so.1" not in seen["off"], seen
    assert seen["off"] and seen["off"][0].endswith("/libcuda.so.1"), seen


def test_log_file_records_the_decisions(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    log = tmp_path / "ocihook.core.log"
    conf = _conf(
        tmp_path,
        f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n'
        f'log-file = "{log}"\nlog-level = "debug"\n',
    )
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=3"], indent=None))
    assert run_cli("edit", "-b", bundle, "--config", conf).returncode == 0
    text = log.read_text()
    minor = sim.gpus[3].minor
    assert "request mode=spec kind=list devices=3" in text
    assert f"gpus chosen gpus=3:{sim.gpus[3].uuid}:minor{minor}" in text
    assert f"device node path=/dev/nvidia{minor} major=195 minor={minor}" in text
    assert "mount destination=/usr/lib64/libcuda.so." in text


def test_config_show_and_default(tmp_path: Any) -> None:
    shown = run_cli("config", "show", "--config", _conf(tmp_path, "no-cgroups = true\n"))
    assert shown.returncode == 0
    assert "no-cgroups = true" in shown.stdout and 'mode = "auto"' in shown.stdout
    default = run_cli("config", "default")
    assert default.returncode == 0
    assert default.stdout == Path(REPO, "packaging/config.toml.example").read_text()
    # the default file is a valid configuration with every key at its default
    again = run_cli("config", "show", "--config", _conf(tmp_path, default.stdout))
    assert again.returncode == 0
    assert (
        again.stdout.split("\n", 1)[1]
        == run_cli("config", "show", "--config", _conf(tmp_path, "")).stdout.split("\n", 1)[1]
    )
    bad = run_cli("config", "show", "--config", _conf(tmp_path, "colour = 1\n"))
    assert bad.returncode == 10 and "field colour" in bad.stderr


def test_log_file_never_follows_a_link_or_blocks(sim: simhost.SimulatedHost, tmp_path: Any) -> None:
    victim = tmp_path / "victim"
    victim.write_text("secret\n")
    link = tmp_path / "log-link"
    link.symlink_to(victim)
    fifo = tmp_path / "log-fifo"
    os.mkfifo(fifo)
    bundle = str(make_bundle(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"], indent=None))
    for target in (link, fifo):
        conf = _conf(
            tmp_path,
            f'driver-root = "{sim.root}"\ndev-root = "{sim.root}"\n'
            f'log-file = "{target}"\nlog-level = "debug"\n',
        )
        # a process with a timeout: reading a FIFO would block
        proc = run_cli_process("edit", "-b", bundle, "--dry-run", "--config", conf)
        assert proc.returncode == 0, proc.stderr
    assert victim.read_text() == "secret\n"
