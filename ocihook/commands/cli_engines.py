"""The click commands that set a host up for the container engines: ``runtime`` (the
wrapper runtime, and registering ocihook with an engine), ``install`` (the Docker hook) and
``system`` (the ``/dev/char`` links)."""

from __future__ import annotations

import os

import click

from .cli_options import PASS_THROUGH, host_root, root_option


@click.group()
def runtime() -> None:
    """The wrapper runtime (ocihook-runtime) and registering ocihook with an engine."""


@runtime.command(name="exec", context_settings=PASS_THROUGH, add_help_option=False)
@click.pass_context
def runtime_exec(ctx: click.Context) -> None:
    """Run as ocihook-runtime: edit the bundle on create/run, then exec the real runtime
    with the same arguments (see ocihook-runtime --help)."""
    from .runtime import main as runtime_main

    ctx.exit(runtime_main(list(ctx.args)))


@runtime.command()
@click.option(
    "--runtime",
    "engine",
    type=click.Choice(["docker", "containerd", "crio", "podman"]),
    required=True,
    help="The container engine to configure.",
)
@click.option(
    "--config",
    "config_path",
    default=None,
    metavar="PATH",
    help="Its configuration file (default: /etc/docker/daemon.json, "
    "/etc/containerd/config.toml, /etc/crio/crio.conf.d/99-ocihook.conf, "
    "/usr/share/containers/oci/hooks.d/ocihook-prestart.json; podman: "
    "ocihook-poststop.json is written beside it).",
)
@click.option("--dry-run", is_flag=True, help="Print the change as a diff; write nothing.")
@click.option(
    "--set-as-default",
    "--nvidia-set-as-default",
    is_flag=True,
    help="Make ocihook the default runtime (not podman).",
)
@click.option(
    "--cdi",
    "--enable-cdi",
    "--cdi.enabled",
    "--cdi.enable",
    is_flag=True,
    help="Enable CDI in the engine.",
)
@click.option(
    "--runtime-path",
    "--nvidia-runtime-path",
    default=None,
    metavar="PATH",
    help="ocihook-runtime to register (default: this installation's).",
)
@click.option(
    "--nvidia-runtime-name",
    "--runtime-name",
    "runtime_name",
    default="ocihook",
    show_default=True,
    metavar="NAME",
    help="The name to register the runtime under: 'nvidia' stands in for the NVIDIA "
    "toolkit's (docker --runtime=nvidia, RuntimeClass handler nvidia). Not podman.",
)
def configure(
    engine: str,
    config_path: str | None,
    dry_run: bool,
    set_as_default: bool,
    cdi: bool,
    runtime_path: str | None,
    runtime_name: str,
) -> None:
    """Register ocihook with a container engine, like nvidia-ctk runtime configure:
    docker and containerd and crio get the ocihook runtime (ocihook-runtime), podman the
    hooks.d files (prestart, and poststop beside it). Comments and formatting of TOML
    files are kept; an up-to-date file is left byte-identical; a malformed one is refused
    (exit 13) and left untouched."""
    from ..engines import configure_all, describe, write_change

    try:
        changes = configure_all(
            engine,
            path=config_path,
            runtime_path=runtime_path,
            set_as_default=set_as_default,
            cdi=cdi,
            runtime_name=runtime_name,
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from None
    if dry_run:
        for change in changes:
            if change.changed:
                click.echo(change.diff(), nl=False)
    else:
        # the poststop file first: no prestart hook is registered without its cleanup
        for change in reversed(changes):
            write_change(change)
    notes: list[str] = []
    for change in changes:
        said = describe(change, dry_run=dry_run)
        click.echo(f"ocihook: {'dry run: ' if dry_run else ''}{said}", err=True)
        if change.changed:
            notes += [n for n in change.notes if n not in notes]
    for note in notes:
        click.echo(f"ocihook: {note}", err=True)
    if set_as_default and engine != "podman":
        click.echo(f"ocihook: {DEFAULT_RUNTIME_COST}", err=True)
    if engine == "podman" and any(c.changed for c in changes):
        click.echo(f"ocihook: {HOOKS_D_COST}", err=True)


#: What ``runtime configure --set-as-default`` tells the operator every container pays.
DEFAULT_RUNTIME_COST = (
    "as the default runtime, ocihook-runtime runs before every container this engine starts, "
    "GPU or not: one Python interpreter start (about 1.2x a bare `python -I -c pass`, "
    "25-35 ms on a 2-core machine) for a container that asks for nothing; "
    "a per-container --runtime, a Kubernetes RuntimeClass or CDI devices cost such "
    "containers nothing"
)

#: What the hooks.d files tell the operator every podman and CRI-O container pays: their
#: ``when`` can only say ``always`` (hooks.d matches annotations, commands and bind mounts,
#: never the environment that carries NVIDIA_VISIBLE_DEVICES).
HOOKS_D_COST = (
    "the hooks.d prestart hook runs for every container podman and CRI-O start, GPU or not "
    "(a hooks.d `when` cannot match NVIDIA_VISIBLE_DEVICES): one Python interpreter start "
    "(about 1.1x a bare `python -I -c pass`) for a container that asks for nothing; "
    "CDI devices (podman --device nvidia.com/gpu=all, with a spec from `ocihook cdi "
    "generate`) cost such containers nothing"
)


@click.group()
def install() -> None:
    """Install ocihook's entry points where container engines look for them."""


@install.command(name="docker-hook")
@click.option(
    "--bin-dir",
    default="/usr/local/bin",
    show_default=True,
    metavar="DIR",
    help="A directory on dockerd's PATH.",
)
@click.option(
    "--python",
    default=None,
    metavar="PATH",
    help="Interpreter with ocihook installed (default: this one).",
)
@click.option(
    "--force",
    is_flag=True,
    help="Replace a nvidia-container-runtime-hook that is not ocihook's (the NVIDIA "
    "toolkit's), or install beside one elsewhere on the PATH.",
)
@click.option("--remove", is_flag=True, help="Remove ocihook's hook from --bin-dir.")
@click.option("--dry-run", is_flag=True, help="Check and say what would be done.")
def docker_hook(bin_dir: str, python: str | None, force: bool, remove: bool, dry_run: bool) -> None:
    """Write nvidia-container-runtime-hook into --bin-dir: dockerd enables docker run
    --gpus (and compose's nvidia device reservations) when it finds a program of that
    name on its PATH, and runs it as a prestart hook. A hook of that name that is not
    ocihook's (the NVIDIA Container Toolkit's) is never replaced silently: refused
    (exit 13) unless --force. Restart dockerd afterwards."""
    from .dockerhook import install_docker_hook, remove_docker_hook

    would = "would be " if dry_run else ""
    if remove:
        found = remove_docker_hook(bin_dir, dry_run=dry_run)
        target = os.path.join(os.path.abspath(bin_dir), "nvidia-container-runtime-hook")
        click.echo(
            f"ocihook: {target}: {would + 'removed' if found else 'not installed'}", err=True
        )
        return
    path, changed, notes = install_docker_hook(bin_dir, python=python, force=force, dry_run=dry_run)
    click.echo(f"ocihook: {path}: {would + 'written' if changed else 'up to date'}", err=True)
    for note in notes:
        click.echo(f"ocihook: {note}", err=True)


@click.group()
def system() -> None:
    """Host set-up tasks (run as root on the host, not in a container)."""


@system.command(name="create-dev-char-symlinks")
@root_option("--dev-root")
@click.option(
    "--create-all",
    is_flag=True,
    help="First create the NVIDIA nodes procfs says should exist (GPUs, nvidiactl, uvm).",
)
@root_option("--config")
def create_dev_char_symlinks(
    dev_root: str | None, create_all: bool, config_path: str | None
) -> None:
    """Make /dev/char/MAJOR:MINOR links for the NVIDIA device nodes, which udev does not
    make for them: runc's systemd cgroup driver names devices by those paths, and systemd
    drops a rule whose path is missing when it re-applies a unit (daemon-reload)."""
    from ..appliers.devchar import create_dev_char_symlinks as create

    root = host_root(None, dev_root, None, (), config_path)
    report = create(root, create_all=create_all)
    for line in report:
        click.echo(line)
    if not report:
        click.echo(f"nothing to do: every NVIDIA node under {root.dev('/dev')} has its link")
