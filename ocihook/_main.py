"""The ``ocihook`` console entry point (``ocihook._main:main``, written into hooks.d files,
bundles and engine configurations on installed hosts, so its name is stable).

It only dispatches: the CDI specs' hook (``hook cdi``) to :mod:`ocihook.commands.cdihook`,
the other fast commands (``edit``, ``hook``, ``cdi generate``) to
:mod:`ocihook.commands.fast` (no click), ``runtime exec`` to
:mod:`ocihook.commands.runtime`, everything else to the click CLI
(:mod:`ocihook.commands.cli`). A hook whose environment sets code-loading variables is
refused before anything is imported, and one whose environment is the container's
(registered without ``env``) before it does any host-side work (docs/security.md).

:func:`nvidia_hook_main` is the ``nvidia-container-runtime-hook`` console script: the
program dockerd looks for on its ``PATH`` to enable ``docker run --gpus`` (moby
``daemon/nvidia_linux.go``). dockerd runs it as a prestart hook with the arguments
``nvidia-container-runtime-hook prestart`` and its own whole environment, so there it
honours ``$OCIHOOK_CONFIG`` (a prestart hook runs in the runtime's process, never with the
image's environment).
"""

from __future__ import annotations

import os
import sys

from .core.stdio import run_one_shot, tolerant_stderr, tolerant_stdout

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import NoReturn


#: Variables the C library and its dynamic loader honour that load code, or read or write
#: a file or directory the variable names: glibc's secure-execution list
#: (``UNSECURE_ENVVARS``, ``sysdeps/generic/unsecvars.h``; what ``ld.so(8)`` drops for a
#: setuid program), less its entries that do neither (``LD_DEBUG``, ``LD_DYNAMIC_WEAK``,
#: ``LD_HWCAP_MASK``, ``LD_SHOW_AUXV``, ``LD_USE_LOAD_BIAS``, ``LOCALDOMAIN``,
#: ``RES_OPTIONS``, ``NIS_PATH``: output or lookups, no file; glibc 2.39 added
#: ``LD_BIND_NOT``, ``LD_BIND_NOW``, ``LD_VERBOSE``, ``LD_WARN`` and the ``MALLOC_*``
#: tunables' aliases, none of which names a file) and ``TMPDIR`` (no hook path makes a
#: temporary file; dockerd's environment often sets it); and ``LD_PROFILE_OUTPUT``, the
#: directory ``LD_PROFILE`` writes to (``elf/rtld.c`` reads it itself, outside that list).
#: ``GLIBC_TUNABLES`` is kept: the loader parses it before any code runs (CVE-2023-4911).
#: ``-I`` does not affect these.
LOADER_VARIABLES = frozenset(
    {
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LD_AUDIT",
        "LD_DEBUG_OUTPUT",
        "LD_LIBRARY_PATH",
        "LD_ORIGIN_PATH",
        "LD_PRELOAD",
        "LD_PROFILE",
        "LD_PROFILE_OUTPUT",
        "LOCPATH",
        "MALLOC_TRACE",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "TZDIR",
    }
)

#: Variables the C library reads a file from only when the value is a path rather than a
#: name: ``TZ`` (``:/file`` or ``/file``, or a name with ``..`` that climbs out of
#: ``TZDIR``: glibc ``time/tzfile.c`` checks that only for setuid programs), and the
#: locale variables (``LANG``, ``LANGUAGE``, ``LC_*``: glibc ``locale/findlocale.c``
#: loads a locale from an absolute path, which the interpreter's ``setlocale`` at start
#: does). ``TZ=Europe/Paris`` and ``LANG=C.UTF-8`` are fine (:func:`names_a_file`).
PATH_VALUED_VARIABLES = frozenset({"TZ", "LANG", "LANGUAGE"})
#: The prefix of the locale category variables (``LC_ALL``, ``LC_CTYPE``...), each read
#: as :data:`PATH_VALUED_VARIABLES` are.
LOCALE_PREFIX = "LC_"

#: Variables that make a POSIX shell run code before its first command: ``ENV`` (an
#: interactive sh's startup file), bash's ``BASH_ENV``, ``SHELLOPTS``/``BASHOPTS``
#: (``xtrace`` then expands ``PS4``, which can hold a command substitution), ``PS4``, and
#: exported functions (:data:`SHELL_FUNCTION_PREFIX`). The installed commands start
#: through ``/bin/sh`` (``packaging/bin``); Debian's dash reads none of these when it is
#: not interactive, bash started as ``sh`` reads some.
SHELL_VARIABLES = frozenset({"BASH_ENV", "BASHOPTS", "ENV", "PS4", "SHELLOPTS"})
#: The prefix of the variables bash imports functions from (``BASH_FUNC_name%%``).
SHELL_FUNCTION_PREFIX = "BASH_FUNC_"

#: Variables the interpreter honours that load or redirect code, or read or write a file
#: they name (all but :data:`PYTHON_UNISOLATED_VARIABLES` ignored under ``-I``): the
#: module path and prefix (``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONUSERBASE``,
#: ``PYTHONPLATLIBDIR``), where the ``.pyc`` files are read from (``PYTHONPYCACHEPREFIX``:
#: an image's ``.pyc`` tree would replace ocihook's own modules), a ``-W`` category
#: ``module.Class`` (``PYTHONWARNINGS`` imports ``module``), ``breakpoint()``'s hook
#: (``PYTHONBREAKPOINT``), the interactive ones (``PYTHONSTARTUP``, ``PYTHONINSPECT``,
#: 3.13's ``PYTHON_HISTORY`` file), a module imported before ``site`` (3.13's
#: ``PYTHON_PRESITE``, debug builds), and the files written on request (``perf`` maps
#: ``PYTHONPERFSUPPORT`` 3.12, ``PYTHON_PERF_JIT_SUPPORT`` 3.13; 3.11's
#: ``PYTHONDUMPREFSFILE``, debug builds). The others of Python 3.11-3.13's list
#: (``PYTHONHASHSEED``, ``PYTHONIOENCODING``, ``PYTHONUTF8``, ``PYTHONMALLOC``,
#: ``PYTHONDEVMODE``, ``PYTHON_GIL``...) change behaviour but load no code and name no
#: file. (Python's command-line documentation, "Environment variables".)
PYTHON_VARIABLES = frozenset(
    {
        "PYTHONBREAKPOINT",
        "PYTHONDUMPREFSFILE",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONPATH",
        "PYTHONPERFSUPPORT",
        "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
        "PYTHON_HISTORY",
        "PYTHON_PERF_JIT_SUPPORT",
        "PYTHON_PRESITE",
    }
)

#: The interpreter's variables it honours even under ``-I``: ``PYTHONEXECUTABLE`` sets
#: ``sys.executable`` and so where the interpreter looks for ``pyvenv.cfg`` and its
#: ``site-packages`` (measured with Python 3.11's ``getpath``).
PYTHON_UNISOLATED_VARIABLES = frozenset({"PYTHONEXECUTABLE"})

#: Variables that make a process load or run other code, or use files they name: the
#: loader's (:data:`LOADER_VARIABLES`), the shell's (:data:`SHELL_VARIABLES`) and the
#: interpreter's (:data:`PYTHON_VARIABLES`, :data:`PYTHON_UNISOLATED_VARIABLES`); with
#: :data:`PATH_VALUED_VARIABLES` and ``LC_*`` when their value is a path and
#: ``BASH_FUNC_*`` (:func:`poisoned_environment`). A hook must not run with them
#: (CVE-2025-23266: an image's ``LD_PRELOAD`` reached the NVIDIA toolkit's hook through an
#: inherited environment). No Python code can undo what the loader did before the
#: interpreter started (an ``LD_PRELOAD`` constructor has run), nor what the interpreter
#: did before the first line of a script (``sitecustomize`` from ``PYTHONPATH``): the
#: refusal only keeps the hook from doing host-side work, and the registrations ocihook
#: writes avoid both with an explicit ``env`` and ``-I`` (docs/security.md).
POISON_VARIABLES = (
    LOADER_VARIABLES | SHELL_VARIABLES | PYTHON_VARIABLES | PYTHON_UNISOLATED_VARIABLES
)

#: What an interpreter started with ``-I`` still honours (and what the shell and the C
#: library before it did).
ISOLATED_POISON_VARIABLES = LOADER_VARIABLES | SHELL_VARIABLES | PYTHON_UNISOLATED_VARIABLES


#: The ``TZ`` files glibc reads even for a setuid program (``time/tzfile.c``): its
#: default zone file, and the files of its zone directory.
TZ_SYSTEM_FILES = ("/etc/localtime", "/usr/share/zoneinfo/")


def names_a_file(name: str, value: str) -> bool:
    """Whether ``value`` makes the C library read a file of the caller's choosing for the
    variable ``name`` of :data:`PATH_VALUED_VARIABLES` or ``LC_*``: an absolute path (after
    ``TZ``'s optional ``:``; for ``TZ`` one outside :data:`TZ_SYSTEM_FILES`, which glibc
    reads for setuid programs too), or a ``..`` component. ``False`` for any other
    variable."""
    if name not in PATH_VALUED_VARIABLES and not name.startswith(LOCALE_PREFIX):
        return False
    if name == "LANGUAGE":  # a list of names: a path anywhere in it counts
        return "/" in value or ".." in value
    if name == "TZ":
        value = value.removeprefix(":")
        if ".." not in value.split("/") and (
            value == TZ_SYSTEM_FILES[0] or value.startswith(TZ_SYSTEM_FILES[1])
        ):
            return False
    return value.startswith("/") or ".." in value.split("/")


def poisoned_environment(environ: Mapping[str, str], *, isolated: bool = False) -> list[str]:
    """The names, sorted, of the variables of ``environ`` (non-empty) that make a process
    load code or use a file they name (:data:`POISON_VARIABLES`, ``BASH_FUNC_*``, and
    :func:`names_a_file`). ``isolated``: only what an interpreter started with ``-I``
    still honours (:data:`ISOLATED_POISON_VARIABLES` and the C library's)."""
    names = ISOLATED_POISON_VARIABLES if isolated else POISON_VARIABLES
    return sorted(
        k
        for k, v in environ.items()
        if v and (k in names or k.startswith(SHELL_FUNCTION_PREFIX) or names_a_file(k, v))
    )


_POISON_HINT = (
    "register the hook with an explicit env, as `ocihook runtime configure` "
    "does, since inherited variables can come from the container image"
)


def _refuse_poisoned_hook(hint: str = _POISON_HINT, *, loader_only: bool = False) -> int | None:
    """Exit code 9 and a one-line error (ending in ``hint``) when a hook runs with an
    inherited environment that sets code-loading variables (:func:`poisoned_environment`;
    it was registered without ``env``): it does no host-side work then. ``None`` when the
    environment is clean. ``loader_only``: only what an interpreter started with ``-I``
    still honours counts (:data:`ISOLATED_POISON_VARIABLES`: every one the C library and
    the shell honour, and ``PYTHONEXECUTABLE``), for an interpreter started so, which
    ignored the rest of :data:`PYTHON_VARIABLES`.

    An interpreter that honoured ``PYTHONINSPECT`` (one started without ``-I``) would
    turn ``sys.exit(9)`` into a traceback, exit 1, and an interactive prompt: there the
    process ends here, with ``os._exit(9)`` after the message."""
    bad = poisoned_environment(os.environ, isolated=loader_only)
    if not bad:
        return None
    return _refuse(
        "poisoned-environment",
        "refusing to run a hook whose environment sets " + ", ".join(bad),
        hint,
    )


def _refuse(code: str, message: str, hint: str) -> int:
    """Print ``ocihook: error[<code>]: <message>; hint: <hint>`` and return 9 (or end the
    process with 9 under ``PYTHONINSPECT``: see :func:`_refuse_poisoned_hook`)."""
    print(f"ocihook: error[{code}]: {message}; hint: {hint}", file=sys.stderr)
    if sys.flags.inspect:
        sys.stderr.flush()
        os._exit(9)
    return 9


#: The variables a hook ocihook registers has (``HOOK_ENV`` of
#: :mod:`ocihook.config.options`: ``PATH``; and ``LC_CTYPE``, which the interpreter sets
#: when it coerces the C locale to UTF-8, PEP 538), which a container's environment may
#: hold too without the registration lacking ``env``.
REGISTRATION_VARIABLES = frozenset({"LC_CTYPE", "PATH"})


def container_environment(config: bytes, environ: Mapping[str, str]) -> tuple[int, int] | None:
    """Whether ``environ`` (a hook's environment) is the container's: every entry of
    ``process.env`` of ``config`` (the bytes of the bundle's ``config.json``) is set in
    it to the same value, and at least one of them is not a variable of
    :data:`REGISTRATION_VARIABLES` (``PATH``, ``LC_CTYPE``). That is what runc gives a
    hook registered without ``env`` at ``createContainer`` (it runs it with the
    container's ``process.env``: docs/security.md); a runtime may add variables of its
    own (runc adds ``HOME`` before ``startContainer``), so a superset counts.

    ``config`` is parsed (:func:`ocihook.core.jsonfast.loads`) only when a variable of
    ``environ`` other than those occurs in it as ``"NAME=``, or when bytes cannot tell
    (a ``\\u`` escape in it, a name JSON would escape): ocihook's registrations pay
    nothing.

    Returns:
        ``(len(process.env), len(environ))`` when it is the container's, else ``None``
        (also for a ``config`` that is not a JSON object with a list ``process.env``: the
        hook itself reports a malformed file).
    """
    extra = [k for k in environ if k not in REGISTRATION_VARIABLES]
    if not extra:
        return None
    plain = all(k.isascii() and k.isprintable() and '"' not in k and "\\" not in k for k in extra)
    if (
        plain
        and b"\\u" not in config
        and not any(b'"' + k.encode() + b"=" in config for k in extra)
    ):
        return None
    from .core.jsonfast import loads

    try:
        doc = loads(config.decode("utf-8", "surrogateescape"))
    except ValueError:
        return None
    process = doc.get("process") if isinstance(doc, dict) else None
    env = process.get("env") if isinstance(process, dict) else None
    if not isinstance(env, list):
        return None
    wanted: dict[str, str] = {}
    for entry in env:
        if isinstance(entry, str):
            name, _, value = entry.partition("=")
            wanted[name] = value
    if not any(k not in REGISTRATION_VARIABLES for k in wanted):
        return None
    if all(environ.get(k) == v for k, v in wanted.items()):
        return len(env), len(environ)
    return None


def _refuse_container_environment(stdin: bytes) -> int | None:
    """Exit code 9 and one line when this hook's environment is the container's
    (:func:`container_environment` of the ``config.json`` of the state's bundle): it was
    registered without ``env`` and the image chose its environment. ``None`` otherwise,
    or when the state or ``config.json`` cannot be read (the hook reports that)."""
    if not any(k not in REGISTRATION_VARIABLES for k in os.environ):
        return None
    from .core.fastexit import bundle_from_state

    bundle = bundle_from_state(stdin)
    if bundle is None:
        return None
    path = bundle.rstrip("/") + "/config.json"
    from .core.readfile import read_regular

    try:
        config = read_regular(path)
    except OSError:
        return None
    found = container_environment(config, os.environ)
    if found is None:
        return None
    return _refuse(
        "container-environment",
        f"refusing to run a hook whose environment is the container's: all {found[0]} "
        f"entries of process.env in {path} are set in it ({found[1]} variables), so it "
        "was registered without an explicit env",
        _POISON_HINT,
    )


#: The name dockerd looks up on its ``PATH`` to enable ``--gpus`` (moby
#: ``daemon/nvidia_linux.go``), and the stages the NVIDIA toolkit's hook of that name
#: accepts: only ``prestart`` does anything (``poststart``, ``poststop``: nothing to do).
NVIDIA_HOOK_NAME = "nvidia-container-runtime-hook"
NVIDIA_HOOK_STAGES = ("prestart", "poststart", "poststop")


def nvidia_hook_main(argv: Sequence[str] | None = None) -> int:
    """The ``nvidia-container-runtime-hook`` console script (Docker's ``--gpus``).

    ``nvidia-container-runtime-hook prestart [OPTIONS]`` is ``ocihook hook prestart
    [OPTIONS]`` (state JSON on stdin; the GPUs named by the ``NVIDIA_VISIBLE_DEVICES``
    dockerd put in the container's environment), with ``--config $OCIHOOK_CONFIG`` added
    when the variable is set and no ``--config`` is given: dockerd passes its whole
    environment to the hook, which is the operator's, not the image's. ``poststart`` and
    ``poststop`` do nothing and exit 0, as the toolkit's hook does. Anything else is a
    usage error (exit 2) naming the valid stages. An environment setting a variable of
    :data:`POISON_VARIABLES` is refused (exit 9): for Docker that is dockerd's own
    environment, so the message says to start dockerd without it. Under ``-I`` (the
    script ``ocihook install docker-hook`` writes) the interpreter has ignored the
    ``PYTHON*`` ones, so only those it still honours are refused
    (:data:`ISOLATED_POISON_VARIABLES`: ``LD_PRELOAD``, ``GCONV_PATH``,
    ``PYTHONEXECUTABLE``...): a dockerd started from a shell with ``PYTHONPATH``
    set still serves ``--gpus``.

    Returns:
        The process exit code.
    """
    restore = tolerant_stderr()
    try:
        return _nvidia_hook(list(sys.argv[1:] if argv is None else argv))
    finally:
        restore()


#: ``nvidia-container-runtime-hook -help``: the toolkit hook's flags, as its Go ``flag``
#: package prints them, with what each does here.
NVIDIA_HOOK_HELP = (
    f"Usage of {NVIDIA_HOOK_NAME}:\n"
    "  -config string\n"
    "    \tconfiguration file (ocihook's TOML; default $OCIHOOK_CONFIG, else\n"
    "    \t/etc/ocihook/config.toml)\n"
    "  -debug\n"
    "    \tenable debug output (the debug log on stderr)\n"
    "  -version\n"
    "    \tenable version output\n"
    "\n"
    "Commands:\n"
    "  prestart\n"
    "    \tgive the container the GPUs of NVIDIA_VISIBLE_DEVICES (state JSON on stdin)\n"
    "  poststart, poststop\n"
    "    \tnothing to do (exit 0)\n"
)


def _nvidia_hook_flags(args: list[str]) -> tuple[list[str], bool, bool, bool]:
    """The toolkit hook's Go-style flags before the stage (``-config FILE``,
    ``-config=FILE``, ``-debug``, ``-version``, ``-help``; one or two dashes):
    ``(rest, debug, version, help)``, ``-config`` turned into ``--config FILE`` after the
    stage. A flag ``-config`` without a value is left for the stage check to refuse."""
    debug = version = show_help = False
    config: list[str] = []
    while args and args[0].startswith("-"):
        name, eq, value = args[0].lstrip("-").partition("=")
        if name == "config" and (eq or len(args) > 1):
            config = ["--config", value if eq else args[1]]
            args = args[1:] if eq else args[2:]
            continue
        if name not in ("debug", "version", "help", "h"):
            break
        debug |= name == "debug"
        version |= name == "version"
        show_help |= name in ("help", "h")
        args = args[1:]
    if config and args:
        args = [args[0], *config, *args[1:]]
    return args, debug, version, show_help


def _nvidia_hook(args: list[str]) -> int:
    """:func:`nvidia_hook_main` with stderr made tolerant."""
    args, debug, version, show_help = _nvidia_hook_flags(args)
    if version:
        from .core.version import version_line

        print(version_line(NVIDIA_HOOK_NAME) + " (ocihook)")
        return 0
    if show_help:
        print(NVIDIA_HOOK_HELP, end="")
        return 0
    stage = args[0] if args else ""
    if stage in ("poststart", "poststop"):
        return 0
    if stage != "prestart":
        print(
            f"ocihook: error[usage]: {NVIDIA_HOOK_NAME}: unknown stage {stage!r}; valid "
            "stages: prestart (poststart, poststop: nothing to do); hint: dockerd runs "
            f"'{NVIDIA_HOOK_NAME} prestart'",
            file=sys.stderr,
        )
        return 2
    refused = _refuse_poisoned_hook(
        "dockerd passes its whole environment to nvidia-container-runtime-hook: start "
        "dockerd without these variables",
        loader_only=bool(sys.flags.isolated),
    )
    if refused is not None:
        return refused
    rest = args[1:]
    config = os.environ.get("OCIHOOK_CONFIG")
    if config and not any(a == "--config" or a.startswith("--config=") for a in rest):
        rest = ["--config", config, *rest]
    tolerant_stdout()
    return _dispatch([*(["--debug"] if debug else []), "hook", "prestart", *rest])


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point. Returns the process exit code.

    A message that cannot be written to stderr is dropped (:func:`tolerant_stderr`): it
    changes no exit status and is no traceback."""
    args = list(sys.argv[1:] if argv is None else argv)
    tolerant_stdout()
    restore = tolerant_stderr()
    try:
        if args and args[0] == "hook":
            refused = _refuse_poisoned_hook()
            if refused is not None:
                return refused
        return _dispatch(args)
    finally:
        restore()


def _dispatch(args: list[str]) -> int:
    """Run the command ``args`` (the environment already checked)."""
    if args and args[0] in ("--debug", "-d", "--quiet"):
        from .commands import globalopts

        debug, quiet, args = globalopts.split_global_options(args)
        globalopts.apply(debug, quiet)
    if args[:2] == ["runtime", "exec"]:
        from .commands.runtime import main as runtime_main

        return runtime_main(args[2:])
    from .core.readfile import read_stdin

    try:
        if args[:2] == ["hook", "cdi"]:  # CDI specs' hook: its own parser and imports
            from .commands.cdihook import parse_cdi_hook, run_cdi_hook

            ns = parse_cdi_hook(args)
            if ns is not None:
                given = read_stdin()
                refused = _refuse_container_environment(given)
                return refused if refused is not None else run_cdi_hook(ns, given)
        from .commands.voidexit import INJECT_STAGES, void_hook_exit

        if len(args) >= 2 and args[0] == "hook" and args[1] in INJECT_STAGES:
            code, stdin = void_hook_exit(args)
            refused = _refuse_container_environment(stdin)
            if refused is not None:
                return refused
            if code is not None:
                return code
            from .commands.fast import run_fast

            return run_fast(args, stdin)
        from .commands.fast import FAST_COMMANDS, HOOK_STAGES, run_fast

        if len(args) >= 2 and args[0] == "hook" and args[1] in HOOK_STAGES:
            if "-h" in args or "--help" in args:
                return run_fast(args)
            given = read_stdin()
            refused = _refuse_container_environment(given)
            if refused is not None:
                return refused
            return run_fast(args, given)
        if args and (args[0] in FAST_COMMANDS or " ".join(args[:2]) in FAST_COMMANDS):
            return run_fast(args)
        from .commands.cli import cli_main

        return cli_main(args)
    except BrokenPipeError:
        # The reader went away (``ocihook list | head``): the work is done, only the
        # printing stopped. Quiet, and no second error when Python flushes at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return 0


def run() -> NoReturn:
    """The ``ocihook`` program (the installed command, ``python -m ocihook`` and the ``-c``
    program of the hooks ocihook registers, :data:`ocihook.config.options.HOOK_PROGRAM`):
    :func:`main` with the process's arguments, then the exit. The one-shot commands of
    :data:`ocihook.commands.fast.FAST_COMMANDS` (a hook: the start path; ``edit``; ``cdi
    generate``) go through :func:`ocihook.core.stdio.run_one_shot`: no cyclic garbage
    collector, no interpreter finalization (about 5 ms of ``cdi generate``), their modules
    from the start path's module image when there is one
    (:func:`ocihook.core.modimage.install`: root's, else the user's own,
    :func:`ocihook.linux.cachestore.install_user_module_image`); any other
    command (a daemon among them) keeps the collector and exits through ``sys.exit``."""
    args = sys.argv[1:]
    one_shot = args[:1] == ["hook"]  # decided without importing commands.fast (void hooks)
    if not one_shot and args:
        from .commands.fast import FAST_COMMANDS

        one_shot = args[0] in FAST_COMMANDS or " ".join(args[:2]) in FAST_COMMANDS
    if one_shot:
        from .core import modimage

        if not modimage.install() and not modimage.host_root():  # the user's own
            from .linux.cachestore import install_user_module_image

            install_user_module_image()
        run_one_shot(main)
    sys.exit(main())


def run_nvidia_hook() -> NoReturn:
    """The ``nvidia-container-runtime-hook`` program: :func:`nvidia_hook_main` through
    :func:`ocihook.core.stdio.run_one_shot` (every stage of it is on the start path), its
    modules from the start path's module image when there is one (root's, else the user's
    own: :func:`ocihook.linux.cachestore.install_user_module_image`)."""
    from .core import modimage

    if not modimage.install() and not modimage.host_root():  # the user's own
        from .linux.cachestore import install_user_module_image

        install_user_module_image()
    run_one_shot(nvidia_hook_main)


if __name__ == "__main__":  # pragma: no cover
    run()
