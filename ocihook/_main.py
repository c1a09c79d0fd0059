"""The ``ocihook`` console entry point (``ocihook._main:main``, written into hooks.d files,
bundles and engine configurations on installed hosts, so its name is stable).

It only dispatches: the fast commands (``edit``, ``hook``, ``cdi generate``) to
:mod:`ocihook.commands.fast` (no click), ``runtime exec`` to
:mod:`ocihook.commands.runtime`, everything else to the click CLI
(:mod:`ocihook.commands.cli`). A hook whose environment sets code-loading variables is
refused before anything is imported.

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

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Sequence


#: Variables the C library and its dynamic loader honour that load code, or read or write
#: a file or directory the variable names: glibc's secure-execution list
#: (``UNSECURE_ENVVARS``, ``sysdeps/generic/unsecvars.h``; what ``ld.so(8)`` drops for a
#: setuid program), less its entries that do neither (``LD_DEBUG``, ``LD_DYNAMIC_WEAK``,
#: ``LD_HWCAP_MASK``, ``LD_SHOW_AUXV``, ``LD_USE_LOAD_BIAS``, ``LOCALDOMAIN``,
#: ``RES_OPTIONS``, ``NIS_PATH``: output or lookups, no file) and ``TMPDIR`` (no hook path
#: makes a temporary file; dockerd's environment often sets it). ``GLIBC_TUNABLES`` is kept:
#: the loader parses it before any code runs (CVE-2023-4911). ``-I`` does not affect these.
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
        "LOCPATH",
        "MALLOC_TRACE",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "TZDIR",
    }
)

#: Variables the interpreter honours that load or redirect code (all but
#: :data:`PYTHON_UNISOLATED_VARIABLES` ignored under ``-I``): the module path and prefix
#: (``PYTHONPATH``, ``PYTHONHOME``, ``PYTHONUSERBASE``, ``PYTHONPLATLIBDIR``), where the
#: ``.pyc`` files are read from (``PYTHONPYCACHEPREFIX``: an image's ``.pyc`` tree would
#: replace ocihook's own modules), a ``-W`` category ``module.Class`` (``PYTHONWARNINGS``
#: imports ``module``), ``breakpoint()``'s hook (``PYTHONBREAKPOINT``) and the interactive
#: ones (``PYTHONSTARTUP``, ``PYTHONINSPECT``). (Python's command-line documentation,
#: "Environment variables".)
PYTHON_VARIABLES = frozenset(
    {
        "PYTHONBREAKPOINT",
        "PYTHONHOME",
        "PYTHONINSPECT",
        "PYTHONPATH",
        "PYTHONPLATLIBDIR",
        "PYTHONPYCACHEPREFIX",
        "PYTHONSTARTUP",
        "PYTHONUSERBASE",
        "PYTHONWARNINGS",
    }
)

#: The interpreter's variables it honours even under ``-I``: ``PYTHONEXECUTABLE`` sets
#: ``sys.executable`` and so where the interpreter looks for ``pyvenv.cfg`` and its
#: ``site-packages`` (measured with Python 3.11's ``getpath``).
PYTHON_UNISOLATED_VARIABLES = frozenset({"PYTHONEXECUTABLE"})

#: Variables that make a process load or run other code, or use files they name: the
#: loader's (:data:`LOADER_VARIABLES`) and the interpreter's (:data:`PYTHON_VARIABLES`,
#: :data:`PYTHON_UNISOLATED_VARIABLES`). A
#: hook must not run with them (CVE-2025-23266: an image's ``LD_PRELOAD`` reached the
#: NVIDIA toolkit's hook through an inherited environment). No Python code can undo what
#: the loader did before the interpreter started (an ``LD_PRELOAD`` constructor has run),
#: nor what the interpreter did before the first line of a script (``sitecustomize`` from
#: ``PYTHONPATH``): the refusal only keeps the hook from doing host-side work, and the
#: registrations ocihook writes avoid both with an explicit ``env`` and ``-I``.
POISON_VARIABLES = LOADER_VARIABLES | PYTHON_VARIABLES | PYTHON_UNISOLATED_VARIABLES

#: What an interpreter started with ``-I`` still honours.
ISOLATED_POISON_VARIABLES = LOADER_VARIABLES | PYTHON_UNISOLATED_VARIABLES


def _poisoned_environment() -> list[str]:
    """Names of code-loading variables set (non-empty) in this process's environment."""
    return sorted(k for k in POISON_VARIABLES if os.environ.get(k))


_POISON_HINT = (
    "register the hook with an explicit env, as `ocihook runtime configure` "
    "does, since inherited variables can come from the container image"
)


def _refuse_poisoned_hook(hint: str = _POISON_HINT, *, loader_only: bool = False) -> int | None:
    """Exit code 9 and a one-line error (ending in ``hint``) when a hook runs with an
    inherited environment that sets code-loading variables (:data:`POISON_VARIABLES`; it
    was registered without ``env``): it does no host-side work then. ``None`` when the
    environment is clean. ``loader_only``: only :data:`ISOLATED_POISON_VARIABLES` count
    (every one the C library honours, and ``PYTHONEXECUTABLE``) — for an interpreter
    started with ``-I``, which ignored :data:`PYTHON_VARIABLES`.

    An interpreter that honoured ``PYTHONINSPECT`` (the installed scripts start without
    ``-I``) would turn ``sys.exit(9)`` into a traceback, exit 1, and an interactive prompt:
    there the process ends here, with ``os._exit(9)`` after the message."""
    bad = [v for v in _poisoned_environment() if not loader_only or v in ISOLATED_POISON_VARIABLES]
    if not bad:
        return None
    print(
        "ocihook: error[poisoned-environment]: refusing to run a hook whose environment sets "
        + ", ".join(bad)
        + "; hint: "
        + hint,
        file=sys.stderr,
    )
    if sys.flags.inspect:
        sys.stderr.flush()
        os._exit(9)
    return 9


def _stdout_error(err: UnicodeError) -> tuple[str | bytes, int]:
    """The ``"ocihook-stdout"`` codec error handler: a file name byte that is not UTF-8
    (a ``surrogateescape`` character from the command line or a directory listing) is
    written as that byte, as ``ls`` would; a lone surrogate (a ``\\ud800`` JSON escape),
    which no byte spells, as a ``\\ud800`` escape."""
    import codecs

    try:
        return codecs.lookup_error("surrogateescape")(err)
    except UnicodeError:
        return codecs.lookup_error("backslashreplace")(err)


def tolerant_stdout() -> None:
    """Make printing a name that is not valid UTF-8 on stdout never raise
    ``UnicodeEncodeError`` (Python's stdout is ``strict`` outside the C locale, and even
    ``surrogateescape`` refuses a lone surrogate); stderr already uses
    ``backslashreplace``."""
    import codecs

    stream = sys.stdout
    if getattr(stream, "errors", None) in ("strict", "surrogateescape"):
        codecs.register_error("ocihook-stdout", _stdout_error)
        try:  # noqa: SIM105 (contextlib is not imported on the start path)
            stream.reconfigure(errors="ocihook-stdout")  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            pass  # a replaced sys.stdout (tests, embedding): leave it


class _Stderr:
    """``sys.stderr`` while a command runs (:func:`tolerant_stderr`): text encoded as the
    real stream would (its encoding, ``backslashreplace``), written with ``os.write`` to
    its descriptor one line at a time (a partial line on :meth:`flush`); a message that
    cannot be written (ENOSPC, EIO, EPIPE, EAGAIN) is dropped, never raised."""

    def __init__(self, fd: int, encoding: str, errors: str) -> None:
        self.fd = fd
        self.encoding = encoding
        self.errors = errors
        self.dropped = 0  # messages (writes) lost
        self._pending = bytearray()

    def write(self, text: str) -> int:
        """Queue ``text``; write out every complete line."""
        if not isinstance(text, str):  # click probes for a binary stream with b""
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self._pending += text.encode(self.encoding, self.errors)
        end = self._pending.rfind(b"\n") + 1
        if end:
            self._emit(end)
        return len(text)

    def flush(self) -> None:
        """Write out what is queued, a partial line included."""
        if self._pending:
            self._emit(len(self._pending))

    def _emit(self, end: int) -> None:
        view = memoryview(self._pending)[:end]
        try:
            while view:
                view = view[os.write(self.fd, view) :]
        except OSError:
            self.dropped += 1
        finally:
            view.release()
            del self._pending[:end]

    def fileno(self) -> int:
        """The descriptor written to."""
        return self.fd

    def isatty(self) -> bool:
        """Whether that descriptor is a terminal."""
        return os.isatty(self.fd)

    def writable(self) -> bool:
        """Always: it is an output stream."""
        return True


def tolerant_stderr() -> Callable[[], None]:
    """Make a failure to write a message to stderr never fail a command: while it runs,
    ``sys.stderr`` is a :class:`_Stderr` over the same descriptor, which drops what it
    cannot write (a full disk under the log ENOSPC, EIO, a closed pipe EPIPE). A file
    the command replaced stays replaced, and the exit status says what happened — 0
    after a successful write, the documented code after an error — with no traceback
    (``ocihook edit``'s and ``runtime configure``'s closing message, written after the
    file, cannot turn a done change into exit 1). Not done for a replaced
    ``sys.stderr`` (tests' capture, embedding), which is left as it is.

    Returns:
        A function that flushes the stream and puts the original ``sys.stderr`` back (the
        interpreter's own last words, a traceback of a bug, go there).
    """
    original = sys.stderr
    if original is not sys.__stderr__ or original is None:
        return _nothing
    try:
        fd = original.fileno()
        original.flush()
    except (AttributeError, ValueError, OSError):
        return _nothing  # no descriptor (closed, or not a file): leave it
    stream = _Stderr(fd, original.encoding or "utf-8", "backslashreplace")
    sys.stderr = stream

    def restore() -> None:
        stream.flush()
        if sys.stderr is stream:
            sys.stderr = original

    return restore


def _nothing() -> None:
    return None


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
    from .commands.voidexit import INJECT_STAGES, void_hook_exit

    try:
        if len(args) >= 2 and args[0] == "hook" and args[1] in INJECT_STAGES:
            code, stdin = void_hook_exit(args)
            if code is not None:
                return code
            from .commands.fast import run_fast

            return run_fast(args, stdin)
        from .commands.fast import FAST_COMMANDS, run_fast

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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
