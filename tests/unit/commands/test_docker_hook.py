"""ocihook's ``nvidia-container-runtime-hook`` entry point (Docker's ``--gpus``) and
``ocihook install docker-hook`` (ocihook.commands.dockerhook), without dockerd; the real
engine is in tests/e2e/test_e2e_docker.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

from ocihook._main import NVIDIA_HOOK_NAME, nvidia_hook_main
from ocihook.commands import dockerhook
from ocihook.core.errors import EngineConfigError

BIN = os.path.dirname(sys.executable)


def _ocihook(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(BIN, "ocihook"), *args], capture_output=True, text=True, env=env, check=False
    )


def test_console_script_is_installed() -> None:
    """pip put the entry point into the environment's bin directory, calling
    ocihook._main.nvidia_hook_main."""
    path = os.path.join(BIN, NVIDIA_HOOK_NAME)
    assert os.access(path, os.X_OK)
    assert dockerhook.is_ocihook_hook(path)


@pytest.mark.parametrize("stage", ["poststart", "poststop"])
def test_other_toolkit_stages_do_nothing(stage: str) -> None:
    assert nvidia_hook_main([stage]) == 0


@pytest.mark.parametrize("argv", [[], ["createContainer"], ["Prestart"], ["-debug"]])
def test_unknown_stage_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert nvidia_hook_main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("ocihook: error[usage]: nvidia-container-runtime-hook: unknown stage")
    assert "valid stages: prestart" in err


def _state(tmp_path: Any, env: list[str]) -> str:
    bundle = tmp_path / "bundle"
    (bundle / "rootfs").mkdir(parents=True)
    doc = {
        "ociVersion": "1.0.2",
        "process": {"env": env, "args": ["sh"]},
        "root": {"path": "rootfs"},
    }
    (bundle / "config.json").write_text(json.dumps(doc))
    return json.dumps(
        {
            "ociVersion": "1.0.2",
            "id": "c1",
            "status": "creating",
            "pid": 2147483647,
            "bundle": str(bundle),
        }
    )


def _run_hook(state: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.path.join(BIN, NVIDIA_HOOK_NAME), "prestart"],
        input=state,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )


def test_prestart_honours_ocihook_config(tmp_path: Any) -> None:
    """dockerd's environment is the operator's: $OCIHOOK_CONFIG is read (here a broken
    file, so the hook fails with exit 10 naming it), unlike for ``ocihook hook``."""
    cfg = tmp_path / "config.toml"
    cfg.write_text("no-such-key = 1\n")
    state = _state(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"])
    env = {"PATH": "/usr/bin:/bin", "OCIHOOK_CONFIG": str(cfg)}
    r = _run_hook(state, env)
    assert r.returncode == 10, r.stderr
    assert str(cfg) in r.stderr and "no-such-key" in r.stderr
    plain = subprocess.run(
        [os.path.join(BIN, "ocihook"), "hook", "prestart", "--driver-root", str(tmp_path)],
        input=state,
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert plain.returncode != 10 and "no-such-key" not in plain.stderr, plain.stderr


def test_prestart_nothing_requested_exits_zero(tmp_path: Any) -> None:
    r = _run_hook(_state(tmp_path, ["PATH=/bin"]), {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    assert (r.returncode, r.stderr) == (0, "")


def test_poisoned_environment_names_dockerd(tmp_path: Any) -> None:
    r = _run_hook(
        _state(tmp_path, ["NVIDIA_VISIBLE_DEVICES=0"]),
        {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/opt/x"},
    )
    assert r.returncode == 9
    assert "error[poisoned-environment]" in r.stderr and "LD_LIBRARY_PATH" in r.stderr
    assert "start dockerd without these variables" in r.stderr


def test_install_writes_an_isolated_script(tmp_path: Any) -> None:
    path, changed, notes = dockerhook.install_docker_hook(str(tmp_path), search=())
    assert (path, changed) == (str(tmp_path / NVIDIA_HOOK_NAME), True)
    assert any("restart" in n for n in notes)
    with open(path) as f:
        text = f.read()
    assert text.splitlines()[0] == f"#!{sys.executable} -I"
    assert os.stat(path).st_mode & 0o777 == 0o755
    assert dockerhook.is_ocihook_hook(path)
    # again: unchanged, no restart note
    assert dockerhook.install_docker_hook(str(tmp_path), search=()) == (path, False, [])
    # the script runs: an unknown stage is its usage error
    r = subprocess.run([path, "nope"], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "unknown stage 'nope'" in r.stderr


def test_install_creates_the_directory(tmp_path: Any) -> None:
    target = tmp_path / "a" / "bin"
    path, changed, _ = dockerhook.install_docker_hook(str(target), search=())
    assert changed and os.path.isfile(path)
    assert os.stat(target).st_mode & 0o777 == 0o755


def _toolkit_hook(directory: Any) -> str:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / NVIDIA_HOOK_NAME
    path.write_bytes(b"\x7fELF not ocihook's")
    path.chmod(0o755)
    return str(path)


def test_install_never_replaces_the_toolkit_hook_silently(tmp_path: Any) -> None:
    toolkit = _toolkit_hook(tmp_path / "bin")
    with pytest.raises(EngineConfigError) as e:
        dockerhook.install_docker_hook(str(tmp_path / "bin"), search=())
    assert "not ocihook's" in str(e.value) and toolkit in str(e.value) and "--force" in str(e.value)
    with open(toolkit, "rb") as f:
        assert f.read() == b"\x7fELF not ocihook's"
    path, changed, notes = dockerhook.install_docker_hook(
        str(tmp_path / "bin"), force=True, search=()
    )
    assert changed and dockerhook.is_ocihook_hook(path)
    assert any("was not ocihook's" in n for n in notes)


def test_install_refuses_beside_another_hook_on_the_path(tmp_path: Any) -> None:
    """The toolkit's hook in /usr/bin, ocihook's asked for /usr/local/bin: dockerd would
    run whichever comes first, so it is refused unless --force (and said then)."""
    toolkit = _toolkit_hook(tmp_path / "usr-bin")
    search = (str(tmp_path / "local-bin"), str(tmp_path / "usr-bin"))
    with pytest.raises(EngineConfigError) as e:
        dockerhook.install_docker_hook(str(tmp_path / "local-bin"), search=search)
    assert toolkit in str(e.value) and "first on its PATH" in str(e.value)
    assert not os.path.exists(tmp_path / "local-bin" / NVIDIA_HOOK_NAME)
    _, changed, notes = dockerhook.install_docker_hook(
        str(tmp_path / "local-bin"), search=search, force=True
    )
    assert changed and any(toolkit in n for n in notes)
    # ocihook's own hooks elsewhere (pip's console script) are no obstacle
    assert dockerhook.find_hooks((BIN,)) == [os.path.join(BIN, NVIDIA_HOOK_NAME)]
    dockerhook.install_docker_hook(str(tmp_path / "other"), search=(BIN,))


def test_install_dry_run_writes_nothing(tmp_path: Any) -> None:
    path, changed, _ = dockerhook.install_docker_hook(str(tmp_path), dry_run=True, search=())
    assert changed and not os.path.exists(path)


def test_remove_only_ocihook_s(tmp_path: Any) -> None:
    assert dockerhook.remove_docker_hook(str(tmp_path)) is False
    dockerhook.install_docker_hook(str(tmp_path), search=())
    assert dockerhook.remove_docker_hook(str(tmp_path)) is True
    assert not os.path.lexists(tmp_path / NVIDIA_HOOK_NAME)
    _toolkit_hook(tmp_path)
    with pytest.raises(EngineConfigError, match="not ocihook's"):
        dockerhook.remove_docker_hook(str(tmp_path))
    assert os.path.exists(tmp_path / NVIDIA_HOOK_NAME)


def test_cli_install_and_exit_code(tmp_path: Any) -> None:
    r = _ocihook("install", "docker-hook", "--bin-dir", str(tmp_path / "b"))
    assert r.returncode == 0, r.stderr
    assert f"{tmp_path / 'b' / NVIDIA_HOOK_NAME}: written" in r.stderr
    _toolkit_hook(tmp_path / "c")
    r = _ocihook("install", "docker-hook", "--bin-dir", str(tmp_path / "c"))
    assert r.returncode == 13 and "error[bad-engine-config]" in r.stderr
    r = _ocihook("install", "docker-hook", "--bin-dir", str(tmp_path / "b"), "--remove")
    assert r.returncode == 0 and "removed" in r.stderr


@pytest.mark.parametrize("python", ["python3", "/opt/my python/bin/python"])
def test_script_needs_an_absolute_interpreter(python: str) -> None:
    with pytest.raises(EngineConfigError):
        dockerhook.script_text(python)


def test_isolated_script_ignores_python_variables_not_the_loader_s(tmp_path: Any) -> None:
    """The -I script: PYTHONPATH in dockerd's environment was ignored by the interpreter,
    so it is no reason to refuse; LD_LIBRARY_PATH is (exit 9). The installed script
    (packaging/bin) starts its interpreter with -I too: the same there."""
    path, _, _ = dockerhook.install_docker_hook(str(tmp_path / "bin"), search=())
    state = _state(tmp_path, ["PATH=/bin"])

    def run(script: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [script, "prestart"],
            input=state,
            capture_output=True,
            text=True,
            env={"PATH": "/usr/bin:/bin", **env},
            check=False,
        )

    assert run(path, PYTHONPATH="/nonexistent").returncode == 0
    r = run(path, PYTHONPATH="/nonexistent", LD_LIBRARY_PATH="/opt/x")
    assert r.returncode == 9 and "LD_LIBRARY_PATH" in r.stderr and "PYTHONPATH" not in r.stderr
    installed = os.path.join(BIN, NVIDIA_HOOK_NAME)
    assert run(installed, PYTHONPATH="/nonexistent").returncode == 0
    r = run(installed, PYTHONPATH="/nonexistent", LD_LIBRARY_PATH="/opt/x")
    assert r.returncode == 9 and "LD_LIBRARY_PATH" in r.stderr and "PYTHONPATH" not in r.stderr


@pytest.mark.parametrize("older", [False, True])
def test_script_runs_this_or_an_older_ocihook(tmp_path: Any, older: bool) -> None:
    """The script's program runs ``run_nvidia_hook`` (exit 0 for ``poststart``, no
    output), and with an ocihook that predates it (a downgraded library) its
    ``nvidia_hook_main``."""
    script = tmp_path / NVIDIA_HOOK_NAME
    script.write_text(dockerhook.script_text(sys.executable))
    prelude = "import sys\n"
    if older:
        fake = tmp_path / "old" / "ocihook"
        fake.mkdir(parents=True)
        (fake / "__init__.py").write_text("")
        (fake / "_main.py").write_text(
            "import sys\ndef nvidia_hook_main():\n    print('older', sys.argv[1:])\n    return 5\n"
        )
        prelude += f"sys.path.insert(0, {str(tmp_path / 'old')!r})\n"
    program = prelude + f"sys.argv = ['hook', 'poststart']\nexec(open({str(script)!r}).read())\n"
    r = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True)
    expected = (5, "older ['poststart']\n") if older else (0, "")
    assert (r.returncode, r.stdout) == expected, r.stderr
