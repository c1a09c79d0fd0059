"""The click commands and the fast commands take the host's options from one table
(:data:`ocihook.commands.fast.HOST_ROOT_OPTIONS`, ``GPU_BACKEND_OPTION``): the same names,
actions, defaults and choices, and the same values mean the same host."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from ocihook.commands import cli_host, fast
from ocihook.commands.cli import cli
from ocihook.commands.cli_options import PARAMETER_NAMES, host_root
from ocihook.commands.fastopts import Option
from ocihook.core.hostroot import HostRoot


def _commands(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from _commands(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


COMMANDS = dict(_commands(cli))


def _param(command: click.Command, option: Option) -> click.Option | None:
    name = PARAMETER_NAMES.get(option.dest, option.dest)
    found = [p for p in command.params if p.name == name]
    return found[0] if found and isinstance(found[0], click.Option) else None


def _same(param: click.Option, option: Option) -> None:
    assert tuple(param.opts + param.secondary_opts) == option.names
    assert param.multiple == (option.action == "append")
    assert param.is_flag == (option.action == "store_true")
    if option.action == "store":
        assert param.default == option.default
    if option.choices is not None:
        assert isinstance(param.type, click.Choice)
        assert tuple(param.type.choices) == option.choices
    if option.metavar:
        assert param.metavar == option.metavar


def test_the_commands_that_read_the_host_take_the_fast_options() -> None:
    readers = [n for n, c in COMMANDS.items() if any(p.name == "driver_root" for p in c.params)]
    assert {"info", "list", "plan", "doctor", "k8s device-plugin", "k8s features"} <= set(readers)
    for name in readers:
        for option in fast.HOST_ROOT_OPTIONS:
            param = _param(COMMANDS[name], option)
            assert param is not None, (name, option.names)
            _same(param, option)


def test_partial_takers_and_gpu_backend_are_the_fast_options() -> None:
    dev_root = next(o for o in fast.HOST_ROOT_OPTIONS if o.names == ("--dev-root",))
    config = next(o for o in fast.HOST_ROOT_OPTIONS if o.names == ("--config",))
    for name in ("system create-dev-char-symlinks", "config show", "config check"):
        param = _param(COMMANDS[name], config)
        assert param is not None, name
        _same(param, config)
    param = _param(COMMANDS["system create-dev-char-symlinks"], dev_root)
    assert param is not None
    _same(param, dev_root)
    backends = [n for n, c in COMMANDS.items() if any(p.name == "gpu_backend" for p in c.params)]
    assert {"info", "list", "doctor", "k8s dra-plugin"} <= set(backends)
    for name in backends:
        param = _param(COMMANDS[name], fast.GPU_BACKEND_OPTION)
        assert param is not None
        _same(param, fast.GPU_BACKEND_OPTION)


def test_the_fast_commands_have_no_click_options() -> None:
    """``edit``, ``hook`` and ``cdi generate`` are parsed by the fast parser alone; click
    forwards their arguments unread."""
    for name in ("edit", "hook", "cdi generate"):
        assert COMMANDS[name].params == []
        assert COMMANDS[name].context_settings["ignore_unknown_options"] is True


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["--driver-root", "drv", "--dev-root", "/dev-root", "--ldcache", "/etc/other.cache"],
        ["--library-path", "/x", "--library-path", "/y", "--gpu-backend", "procfs"],
        ["--driver-root=/d", "--dev-root", "d2", "--library-path=/z"],
    ],
)
def test_both_parsers_give_the_same_host(
    args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("OCIHOOK_CONFIG", raising=False)
    conf = tmp_path / "ocihook.toml"
    conf.write_text('driver-root = "/cfg-driver"\nlibrary-path = ["/cfg-lib"]\n')
    argv = ["--config", str(conf), *args]
    ns = fast.parse_fast(["cdi", "generate", *argv])
    assert ns is not None
    params = cli_host.info.make_context("info", list(argv)).params
    for option in (*fast.HOST_ROOT_OPTIONS, fast.GPU_BACKEND_OPTION):
        clicked = params[PARAMETER_NAMES.get(option.dest, option.dest)]
        fasted = getattr(ns, option.dest)
        assert (list(clicked) if option.action == "append" else clicked) == fasted, option.names
    expected = fast.host_root_from(ns, fast.load_settings(ns, trust_environment=True))
    got = host_root(
        params["driver_root"],
        params["dev_root"],
        params["ldcache"],
        params["library_path"],
        params["config_path"],
    )
    assert got == expected
    assert isinstance(got, HostRoot) and "/cfg-lib" in got.library_dirs
    assert got.driver_root == (
        "/cfg-driver" if params["driver_root"] is None else str(tmp_path / "drv")
        if params["driver_root"] == "drv" else params["driver_root"]
    )  # fmt: skip
