"""The ``ocihook`` commands that are not on a container's start path (click).

``ocihook edit`` and ``ocihook hook`` are parsed by :mod:`ocihook._main` without click;
they appear here too so that ``ocihook --help`` lists them, and forward to it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click

from .errors import OcihookError, exit_code_for
from .hostroot import HostRoot

_PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


def _root_options(f: Any) -> Any:
    f = click.option(
        "--library-path",
        multiple=True,
        metavar="DIR",
        help="Directory in the driver root to search for libraries ld.so.cache lacks.",
    )(f)
    f = click.option(
        "--ldcache",
        default="/etc/ld.so.cache",
        show_default=True,
        help="ld.so.cache path inside the driver root.",
    )(f)
    f = click.option(
        "--dev-root", default="/", show_default=True, help="Root holding dev/, proc/, sys/."
    )(f)
    f = click.option(
        "--driver-root", default="/", show_default=True, help="Root of the user-space driver."
    )(f)
    return f


def _root(
    driver_root: str, dev_root: str, ldcache: str, library_path: tuple[str, ...] = ()
) -> HostRoot:
    import os

    return HostRoot(
        os.path.abspath(driver_root),
        os.path.abspath(dev_root),
        ldcache=ldcache,
        library_dirs=tuple(library_path),
    )


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except OcihookError as e:
            click.echo(f"ocihook: error[{e.reference}]: {e}", err=True)
            ctx.exit(exit_code_for(e))


@click.group(cls=_Group)
@click.version_option(package_name="ocihook")
def cli() -> None:
    """GPU access for OCI containers: an OCI hook, a bundle editor and a library."""


@cli.command(context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def edit(ctx: click.Context) -> None:
    """Spec mode: edit a bundle's config.json before runc create/run (see edit --help)."""
    from ._main import run_fast

    ctx.exit(run_fast(["edit", *ctx.args]))


@cli.command(context_settings=_PASS_THROUGH, add_help_option=False)
@click.pass_context
def hook(ctx: click.Context) -> None:
    """Hook mode: run as an OCI hook, state JSON on stdin (see hook --help)."""
    from ._main import run_fast

    ctx.exit(run_fast(["hook", *ctx.args]))


def _info_dict(root: HostRoot) -> dict[str, Any]:
    from .discovery.nvidia import discover

    host = discover(root)
    return {
        "driverVersion": host.driver_version,
        "driverRoot": root.driver_root,
        "devRoot": root.dev_root,
        "gpus": [
            {
                "index": g.index,
                "minor": g.minor,
                "model": g.model,
                "uuid": g.uuid,
                "busId": g.bus_id,
            }
            for g in host.gpus
        ],
        "libraries": [
            {"capability": lib.capability, "soname": lib.soname, "path": lib.host_path}
            for lib in host.libraries
        ],
        "warnings": list(host.warnings),
    }


@cli.command()
@_root_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info(
    driver_root: str, dev_root: str, ldcache: str, library_path: tuple[str, ...], as_json: bool
) -> None:
    """Print the driver version, the GPUs and the driver libraries found."""
    data = _info_dict(_root(driver_root, dev_root, ldcache, library_path))
    if as_json:
        click.echo(json.dumps(data, indent=2))
        return
    click.echo(f"NVRM version:   {data['driverVersion']}")
    for g in data["gpus"]:
        click.echo("")
        click.echo(f"Device Index:   {g['index']}")
        click.echo(f"Device Minor:   {g['minor']}")
        click.echo(f"Model:          {g['model']}")
        click.echo(f"GPU UUID:       {g['uuid']}")
        click.echo(f"Bus Location:   {g['busId']}")
    click.echo("")
    for lib in data["libraries"]:
        click.echo(f"{lib['capability']:8} {lib['soname']:32} {lib['path']}")
    for w in data["warnings"]:
        click.echo(f"ocihook: warning: {w}", err=True)


@cli.command(name="list")
@_root_options
def list_cmd(driver_root: str, dev_root: str, ldcache: str, library_path: tuple[str, ...]) -> None:
    """List the device nodes and driver files a container with all GPUs would get."""
    from .discovery.nvidia import discover

    host = discover(_root(driver_root, dev_root, ldcache, library_path))
    for node in host.control_nodes:
        click.echo(node.host_path)
    for g in host.gpus:
        click.echo(host.gpu_nodes[g.minor].host_path)
    for lib in host.libraries:
        click.echo(lib.host_path)


@cli.command()
@_root_options
@click.option("-b", "--bundle", default=".", show_default=True, help="Bundle directory.")
def plan(
    driver_root: str, dev_root: str, ldcache: str, library_path: tuple[str, ...], bundle: str
) -> None:
    """Print the plan (container edits) for a bundle as JSON, without changing anything."""
    from .appliers.spec import layout_for_rootfs
    from .bundle import load_bundle
    from .discovery.nvidia import discover
    from .plan import make_plan
    from .request import request_from_spec

    b = load_bundle(bundle)
    request = request_from_spec(b.config, path=b.config_path)
    host = discover(_root(driver_root, dev_root, ldcache, library_path))
    p = make_plan(host, request, layout_for_rootfs(b.rootfs))
    click.echo(json.dumps(p.to_dict(), indent=2))


@cli.command()
@click.option("--devices", default="0,3", show_default=True, help="NVIDIA_VISIBLE_DEVICES.")
@click.option(
    "--mode",
    type=click.Choice(["spec", "hook"]),
    default="spec",
    show_default=True,
    help="spec: edit config.json; hook: register ocihook as a prestart hook.",
)
@click.option("--workdir", default=None, help="Build here and keep it (default: temporary).")
def demo(devices: str, mode: str, workdir: str | None) -> None:
    """Run a busybox container under runc with two GPUs of the simulated host."""
    from .demo import run_demo

    sys.exit(run_demo(devices=devices, mode=mode, workdir=workdir))


@cli.command()
@click.argument("dest")
@click.option("--gpus", default=8, show_default=True, help="Number of GPUs (1-8).")
@click.option("--no-dev-nodes", is_flag=True, help="Do not mknod /dev nodes.")
def simhost(dest: str, gpus: int, no_dev_nodes: bool) -> None:
    """Write the built-in simulated GPU host into DEST."""
    from . import simhost as sim

    host = sim.build(dest, gpus=gpus, make_dev_nodes=False if no_dev_nodes else None)
    click.echo(host.root)


def cli_main(args: Sequence[str]) -> int:
    """Run the click CLI with ``args`` and return the exit code."""
    try:
        cli.main(args=list(args), prog_name="ocihook", standalone_mode=True)
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return 0
