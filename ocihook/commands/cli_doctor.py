"""``ocihook doctor``: check each layer between the GPUs and a container."""

from __future__ import annotations

import json
from typing import Any

import click

from .cli_options import GPU_BACKEND_OPTION, host_root, root_options


@click.command()
@root_options
@GPU_BACKEND_OPTION
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON (the record).")
@click.option(
    "--runtime",
    "engines",
    type=click.Choice(["docker", "containerd", "crio", "podman"]),
    multiple=True,
    help="Check only this engine's configuration (repeatable; default: every installed one).",
)
@click.option("-b", "--bundle", default=None, help="Check what this bundle's container gets.")
@click.option(
    "--image-env",
    default=None,
    metavar="FILE",
    help="Check an image's environment: KEY=value lines, a JSON list, docker inspect output.",
)
@click.option(
    "--driver-version",
    default=None,
    metavar="X.Y[.Z]",
    help="Pre-upgrade: would the image (--image-env or --bundle) run on this driver?",
)
@click.option(
    "--record",
    default=None,
    metavar="FILE",
    help="Write the deployment record here (JSON; schema: ocihook.schemas doctor-record).",
)
@click.option(
    "--config-root",
    default="/",
    show_default=True,
    metavar="DIR",
    help="Root under which engine configuration files and CDI spec directories are read.",
)
@click.option("--no-container", is_flag=True, help="Skip the container layers (visibility, gpu).")
@click.option("--runc", default=None, metavar="PATH", help="runc for the container layers.")
@click.option("--busybox", default=None, metavar="PATH", help="Static busybox for the container.")
def doctor(
    config_path: str | None,
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: tuple[str, ...],
    gpu_backend: str,
    as_json: bool,
    engines: tuple[str, ...],
    bundle: str | None,
    image_env: str | None,
    driver_version: str | None,
    record: str | None,
    config_root: str,
    no_container: bool,
    runc: str | None,
    busybox: str | None,
) -> None:
    """Check each layer between the GPUs and a container: host (module, GPUs, nodes,
    persistenced, CUDA version, driver libraries), runtime (engine registrations, CDI
    specs), request (--bundle / --image-env and its requirements), visibility (a runc
    container ocihook edits, checked from inside) and gpu (a CUDA allocation, copy and
    kernel inside it; SKIP without a real GPU). Exits 14 when a check FAILs."""
    from ..config.load import load_config
    from ..config.options import options_from_config
    from ..core.errors import DoctorFailed
    from ..doctor import deployment_record, run_doctor

    if bundle is not None and image_env is not None:
        raise click.UsageError("give --bundle or --image-env, not both")
    root = host_root(driver_root, dev_root, ldcache, library_path, config_path)
    cfg = load_config(config_path)
    report = run_doctor(
        root,
        config_root=config_root,
        engines=engines or None,
        bundle=bundle,
        image_env=image_env,
        driver_version=driver_version,
        gpu_backend=gpu_backend,
        containers=not no_container,
        runc=runc,
        busybox=busybox,
        options=options_from_config(cfg),
    )
    doc = deployment_record(report, config=cfg)
    if record is not None:
        from ..oci.bundle import write_bytes_atomic

        try:
            write_bytes_atomic(record, (json.dumps(doc, indent=2) + "\n").encode())
        except OSError as e:
            raise click.FileError(record, e.strerror) from None
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        _print_report(report)
    failed = [c for c in report.checks if c.status == "FAIL"]
    if failed:
        raise DoctorFailed(
            f"{len(failed)} check(s) FAILed, first: {failed[0].layer}: {failed[0].name}"
        )


def _print_report(report: Any) -> None:
    from ..doctor import LAYERS

    for layer in LAYERS:
        click.echo(f"{layer:<11} {report.layer_status(layer)}")
        for c in report.checks:
            if c.layer != layer:
                continue
            click.echo(f"  {c.status:<5} {c.name}: {c.evidence}")
            if c.fix and c.status != "PASS":
                click.echo(f"        fix: {c.fix}")
    bad = sum(c.status == "FAIL" for c in report.checks)
    warn = sum(c.status == "WARN" for c in report.checks)
    click.echo(
        f"result: {'FAIL' if bad else 'WARN' if warn else 'PASS'} ({bad} failed, {warn} warnings)"
    )
