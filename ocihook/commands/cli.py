"""The ``ocihook`` command line (click): the group, and every command that is not on a
container's start path.

The fast commands (``edit``, ``hook``, ``cdi generate``) are run by
:mod:`ocihook.commands.fast` without click (:func:`ocihook._main.main` sends them there);
they are listed here too so that ``ocihook --help`` shows them, and forward their arguments
unread. The other commands are in one module per concern, added to :func:`cli` here:

* :mod:`.cli_host` — ``info``, ``list``, ``plan``, ``demo``, ``simhost``;
* :mod:`.cli_config` — ``config``;
* :mod:`.cli_cdi` — ``cdi``;
* :mod:`.cli_engines` — ``runtime``, ``install``, ``system``;
* :mod:`.cli_doctor` — ``doctor``;
* :mod:`.cli_k8s` — ``k8s``.

The options they share are made from the fast commands' (:mod:`.cli_options`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import click

from ..core.errors import OcihookError, exit_code_for
from ..core.version import VERSION, version_line
from . import cli_cdi, cli_config, cli_doctor, cli_engines, cli_host, cli_k8s, globalopts
from .cli_options import PASS_THROUGH, FastCommand
from .fast import run_fast


class _PipeClosed(Exception):
    """Standard output was closed by its reader; carried past click, which turns EPIPE
    into exit status 1."""


class _Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            raise _PipeClosed() from None
        except OcihookError as e:
            click.echo(f"ocihook: error[{e.reference}]: {e}", err=True)
            ctx.exit(exit_code_for(e))


@click.group(cls=_Group)
@click.version_option(VERSION, "--version", "-v", message=version_line("%(prog)s"))
@click.option(
    "--debug", "-d", is_flag=True, help="Also write the debug log to stderr (ocihook: log: ...)."
)
@click.option(
    "--quiet", is_flag=True, help="Only errors on stderr (wins over --debug); stdout is kept."
)
def cli(debug: bool, quiet: bool) -> None:
    """GPU access for OCI containers: an OCI hook, a bundle editor and a library."""
    if debug or quiet:
        globalopts.apply(debug, quiet)


@cli.command(
    cls=FastCommand, fast_words=("edit",), context_settings=PASS_THROUGH, add_help_option=False
)
@click.pass_context
def edit(ctx: click.Context) -> None:
    """Spec mode: edit a bundle's config.json before runc create/run (see edit --help)."""
    ctx.exit(run_fast(["edit", *ctx.args]))


@cli.command(
    cls=FastCommand, fast_words=("hook",), context_settings=PASS_THROUGH, add_help_option=False
)
@click.pass_context
def hook(ctx: click.Context) -> None:
    """Hook mode: run as an OCI hook, state JSON on stdin (see hook --help)."""
    ctx.exit(run_fast(["hook", *ctx.args]))


for _command in (
    cli_host.info,
    cli_host.list_cmd,
    cli_host.plan,
    cli_host.demo,
    cli_host.simhost,
    cli_config.config,
    cli_cdi.cdi,
    cli_engines.runtime,
    cli_engines.install,
    cli_engines.system,
    cli_doctor.doctor,
    cli_k8s.k8s,
):
    cli.add_command(_command)


def cli_main(args: Sequence[str]) -> int:
    """Run the click CLI with ``args`` and return the exit code. A closed standard output
    (``ocihook list | head``) propagates as :class:`BrokenPipeError` (exit 0 in
    :func:`ocihook._main.main`), not click's exit 1."""
    try:
        result = cli.main(args=list(args), prog_name="ocihook", standalone_mode=False)
    except _PipeClosed:
        raise BrokenPipeError() from None
    except click.exceptions.ClickException as e:
        e.show()
        return e.exit_code
    except click.exceptions.Abort:
        click.echo("Aborted!", err=True)
        return 1
    except SystemExit as e:
        code = e.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    return result if isinstance(result, int) else 0
