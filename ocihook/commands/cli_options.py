"""The options the click commands share, made from the fast commands' own
(:data:`ocihook.commands.fast.COMMANDS`): one definition of each option, one meaning.

:func:`root_options` adds :data:`~ocihook.commands.fast.HOST_ROOT_OPTIONS` (``--config``,
``--driver-root``, ``--dev-root``, ``--ldcache``, ``--library-path``) to a command, and
:func:`host_root` turns their values into a :class:`~ocihook.core.hostroot.HostRoot` with
the functions ``ocihook cdi generate`` uses; :data:`GPU_BACKEND_OPTION` is
``--gpu-backend``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click

from ..core.hostroot import HostRoot
from . import fast
from .fastopts import Namespace, Option

F = TypeVar("F", bound=Callable[..., Any])

#: click settings of a command whose arguments go to another parser unread (the fast
#: commands' forwarders, ``runtime exec``).
PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}

#: The click parameter name of a fast option where it is not the option's ``dest``.
PARAMETER_NAMES = {"config": "config_path"}


def click_option(option: Option, *, help: str | None = None) -> Callable[[F], F]:
    """The click option of a fast command's ``option``: the same names, action
    (``store_true``: a flag; ``append``: ``multiple``), default, choices, metavar and help
    text (``help``, when given, in its place). The parameter is named as in
    :data:`PARAMETER_NAMES`, else by the option's ``dest``."""
    kwargs: dict[str, Any] = {"help": option.help if help is None else help}
    if option.action == "store_true":
        kwargs["is_flag"] = True
    elif option.action == "append":
        kwargs["multiple"] = True
    else:
        kwargs["default"] = option.default
    if option.metavar:
        kwargs["metavar"] = option.metavar
    if option.choices is not None:
        kwargs["type"] = click.Choice(list(option.choices))
    name = PARAMETER_NAMES.get(option.dest, option.dest)
    return click.option(*option.names, name, **kwargs)


def root_options(f: F) -> F:
    """Add :data:`~ocihook.commands.fast.HOST_ROOT_OPTIONS` to the command ``f`` (its
    parameters ``config_path``, ``driver_root``, ``dev_root``, ``ldcache``,
    ``library_path``), in the order ``--help`` lists them."""
    for option in reversed(fast.HOST_ROOT_OPTIONS):
        f = click_option(option)(f)
    return f


#: ``--gpu-backend`` (:data:`ocihook.commands.fast.GPU_BACKEND_OPTION`).
GPU_BACKEND_OPTION = click_option(fast.GPU_BACKEND_OPTION)


def host_root(
    driver_root: str | None,
    dev_root: str | None,
    ldcache: str | None,
    library_path: Sequence[str] = (),
    config_path: str | None = None,
) -> HostRoot:
    """The host to read, from the values of :func:`root_options`: the configuration's
    roots (``--config``, else ``$OCIHOOK_CONFIG``, else ``/etc/ocihook/config.toml``) with
    the command line's on top, as for the fast commands
    (:func:`~ocihook.commands.fast.load_settings`,
    :func:`~ocihook.commands.fast.host_root_from`).

    Raises:
        ConfigError: the configuration file is unreadable or wrong.
    """
    ns = Namespace(
        config=config_path,
        driver_root=driver_root,
        dev_root=dev_root,
        ldcache=ldcache,
        library_path=list(library_path),
    )
    return fast.host_root_from(ns, fast.load_settings(ns, trust_environment=True))


def root_option(name: str) -> Callable[[F], F]:
    """The click option of one of :data:`~ocihook.commands.fast.HOST_ROOT_OPTIONS`, by its
    long name (``"--config"``), for a command that takes only some of them.

    Raises:
        KeyError: no such option.
    """
    found = {o.names[-1]: o for o in fast.HOST_ROOT_OPTIONS}
    return click_option(found[name])


class FastCommand(click.Command):
    """A click command that hands its arguments to a fast command unread (``edit``,
    ``hook``, ``cdi generate``: :data:`PASS_THROUGH`) and completes them from that
    command's own table (:data:`ocihook.commands.fast.COMMANDS`): shell completion
    (``_OCIHOOK_COMPLETE=bash_source ocihook``) offers its options, the values of an
    option with choices, files for an option's value, and for ``hook`` the stages.

    ``fast_words`` are the fast command's words (``("cdi", "generate")``; ``("hook",)``
    for the hook, whose stage is the first argument).
    """

    def __init__(self, *args: Any, fast_words: tuple[str, ...], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fast_words = fast_words

    def shell_complete(
        self, ctx: click.Context, incomplete: str
    ) -> list[click.shell_completion.CompletionItem]:
        """The completions of ``incomplete`` after the words already given
        (``ctx.args``)."""
        from click.shell_completion import CompletionItem

        words, given = self.fast_words, list(ctx.args)
        if words == ("hook",):
            stages = [w[1] for w, _, _ in fast.COMMANDS if w[0] == "hook"]
            if not given:
                return [CompletionItem(s) for s in stages if s.startswith(incomplete)]
            words, given = ("hook", given[0]), given[1:]
        options = next((opts for w, _, opts in fast.COMMANDS if tuple(w) == words), ())
        previous = next((o for o in options if given and given[-1] in o.names), None)
        if previous is not None and previous.action != "store_true":
            if previous.choices is not None:
                return [CompletionItem(c) for c in previous.choices if c.startswith(incomplete)]
            return [CompletionItem(incomplete, type="file")]
        if incomplete.startswith("-"):
            names = [n for o in options for n in o.names if n.startswith(incomplete)]
            return [CompletionItem(n) for n in ["--help", *names] if n.startswith(incomplete)]
        return []
