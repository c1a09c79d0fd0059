"""Entry point of the ``ocihook`` command.

The commands that run on every container start — ``ocihook edit`` (spec mode) and
``ocihook hook ...`` (hook mode) — are parsed here with :mod:`argparse` so that they never
import click, jsonschema, PyYAML or pyelftools; importing click alone costs more than
starting the interpreter. Every other command is a click command in
:mod:`ocihook.cli`, which lists these fast commands in its help as well.

Errors are printed as one line, ``ocihook: error[<reference>]: <message>``, and the exit
code comes from :data:`ocihook.errors.EXIT_CODES`.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from .errors import OcihookError, exit_code_for
from .hostroot import HostRoot

FAST_COMMANDS = ("edit", "hook")


def _print_error(err: OcihookError) -> None:
    print(f"ocihook: error[{err.reference}]: {err}", file=sys.stderr)


def _warn(messages: Sequence[str], verbose: bool) -> None:
    if verbose:
        for m in messages:
            print(f"ocihook: warning: {m}", file=sys.stderr)


def add_root_options(p: argparse.ArgumentParser) -> None:
    """Add ``--driver-root``, ``--dev-root`` and ``--ldcache`` to a parser."""
    p.add_argument("--driver-root", default="/", help="root of the user-space driver (/)")
    p.add_argument("--dev-root", default="/", help="root holding dev/, proc/, sys/ (/)")
    p.add_argument(
        "--ldcache",
        default="/etc/ld.so.cache",
        help="ld.so.cache path inside the driver root (/etc/ld.so.cache)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print warnings")


def host_root_from(ns: argparse.Namespace) -> HostRoot:
    """The :class:`HostRoot` named by parsed root options."""
    return HostRoot(
        driver_root=os.path.abspath(ns.driver_root),
        dev_root=os.path.abspath(ns.dev_root),
        ldcache=ns.ldcache,
    )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ocihook", description="GPU access for OCI containers")
    sub = p.add_subparsers(dest="command", required=True)

    edit = sub.add_parser(
        "edit",
        help="spec mode: edit a bundle's config.json before runc create/run",
        description="Give the container of a bundle the GPUs and driver libraries its "
        "process.env asks for, by rewriting config.json atomically.",
    )
    edit.add_argument("-b", "--bundle", default=".", help="bundle directory (current dir)")
    edit.add_argument("--dry-run", action="store_true", help="do not write config.json")
    edit.add_argument("--diff", action="store_true", help="print a unified diff of the change")
    add_root_options(edit)

    hook = sub.add_parser(
        "hook",
        help="hook mode: run as an OCI hook (state JSON on stdin)",
        description="OCI hook entry points. The runtime writes the container state on stdin.",
    )
    hsub = hook.add_subparsers(dest="stage", required=True)
    for stage in ("prestart", "createRuntime"):
        hp = hsub.add_parser(
            stage,
            help=f"{stage} hook: inject the requested GPUs into the container being created",
        )
        add_root_options(hp)
        hp.add_argument(
            "--no-cgroups",
            action="store_true",
            help="do not add device cgroup rules (rootless containers)",
        )
    links = hsub.add_parser(
        "create-symlinks", help="createContainer hook: create links inside the rootfs"
    )
    links.add_argument(
        "--link", action="append", default=[], metavar="TARGET::LINK", help="link to create"
    )
    ldc = hsub.add_parser(
        "update-ldcache",
        help="createContainer hook: enter libraries into the container's /etc/ld.so.cache",
    )
    ldc.add_argument(
        "--lib", action="append", default=[], metavar="PATH", help="container path of a library"
    )
    return p


def _read_stdin() -> bytes:
    try:
        return sys.stdin.buffer.read()
    except (OSError, ValueError, AttributeError):
        return b""


def _cmd_edit(ns: argparse.Namespace) -> int:
    from .appliers.spec import edit_bundle

    result = edit_bundle(ns.bundle, host_root_from(ns), dry_run=ns.dry_run)
    if result.plan is None:
        print(
            f"ocihook: nothing requested in {result.bundle.config_path} "
            "(NVIDIA_VISIBLE_DEVICES unset, empty or void); config.json unchanged",
            file=sys.stderr,
        )
        return 0
    _warn(result.plan.warnings, ns.verbose)
    if ns.diff:
        import difflib

        sys.stdout.writelines(
            difflib.unified_diff(
                result.before.decode(errors="replace").splitlines(keepends=True),
                result.after.decode(errors="replace").splitlines(keepends=True),
                fromfile=result.bundle.config_path,
                tofile=result.bundle.config_path + (" (dry run)" if ns.dry_run else ""),
            )
        )
    return 0


def _cmd_hook(ns: argparse.Namespace) -> int:
    from . import bundle as _bundle

    state = _bundle.parse_state(_read_stdin())
    if ns.stage in ("prestart", "createRuntime"):
        b = _bundle.load_bundle(state.bundle)
        from .request import request_from_spec

        request = request_from_spec(b.config, path=b.config_path)
        if request.is_void:
            return 0  # the fast exit: not a GPU container
        from .appliers.live import inject

        plan = inject(state, b, request, host_root_from(ns), cgroups=not ns.no_cgroups)
        _warn(plan.warnings, ns.verbose)
        return 0
    from .appliers import live

    b = _bundle.load_bundle(state.bundle)
    if ns.stage == "create-symlinks":
        live.create_symlinks_hook(b, ns.link)
    elif ns.stage == "update-ldcache":
        live.update_ldcache_hook(b, ns.lib)
    return 0


def run_fast(argv: Sequence[str]) -> int:
    """Run a fast command (``edit`` or ``hook``) and return its exit code."""
    ns = _parser().parse_args(list(argv))
    try:
        if ns.command == "edit":
            return _cmd_edit(ns)
        return _cmd_hook(ns)
    except OcihookError as e:
        _print_error(e)
        return exit_code_for(e)


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point. Returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in FAST_COMMANDS:
        return run_fast(args)
    from .cli import cli_main

    return cli_main(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
