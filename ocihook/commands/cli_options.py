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

F = TypeVar("F", bound=Callable[..., Any])

#: click settings of a command whose arguments go to another parser unread (the fast
#: commands' forwarders, ``runtime exec``).
PASS_THROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}

#: The click parameter name of a fast option where it is not the option's ``dest``.
PARAMETER_NAMES = {"config": "config_path"}


def click_option(option: fast.Option, *, help: str | None = None) -> Callable[[F], F]:
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
    ns = fast.Namespace(
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
