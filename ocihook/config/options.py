"""The operator's settings as the pipeline uses them: :class:`Options` (from a loaded
:class:`~ocihook.config.validate.Config`) and how ocihook registers its own hooks
(:func:`hook_command`, the hooks' environment and timeout)."""

from __future__ import annotations

import os
import sys

from ..core.records import Record
from ..request.policy import RequestPolicy

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Sequence

    from .validate import Config

__all__ = [
    "HOOK_ENV",
    "HOOK_PROGRAM",
    "HOOK_TIMEOUT",
    "Options",
    "cdi_hook_command",
    "hook_command",
    "hook_program",
    "hook_program_dirs",
    "is_hook_program",
    "missing_program_module",
    "options_from_config",
    "package_dir",
    "program_dirs",
    "start_path_dirs",
]


#: Environment given to every hook ocihook registers: nothing from the container.
HOOK_ENV = ("PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",)


#: The program the hook command runs: ``ocihook``'s entry point, given with ``-c`` rather
#: than ``-m ocihook`` because ``-m`` imports runpy and importlib.util (~5 ms per start).
HOOK_PROGRAM = "import sys; from ocihook._main import run; run()"
_HOOK_TAIL = HOOK_PROGRAM.removeprefix("import sys; ")
#: The program's text in registrations written before :func:`ocihook._main.run` ended a
#: hook without the interpreter's finalization: still recognized as ocihook's.
_EARLIER_HOOK_TAIL = "from ocihook._main import main; sys.exit(main())"


def start_path_dirs() -> list[str]:
    """The directories a hook started without ``site`` (``-S``) needs on ``sys.path``: the
    one holding the ``ocihook`` package, then the entries of this process's ``sys.path``
    that come after the standard library (its zip, its directory, ``lib-dynload``), which
    is where ``site`` puts what it adds: the site directories, a virtual environment's
    system site directories, what ``.pth`` files add. Entries before the standard library
    (``PYTHONPATH``, a script's directory, what a program inserted at the front) are not
    named: a hook runs as root on every container start. Read from ``sys.path`` as it is,
    so a virtual environment's directories are the ones named (``site.getsitepackages()``
    under ``-S`` names the base interpreter's). An installed command that deferred
    ``site`` (``packaging/bin``: an ``ocihook_run_site`` finder on ``sys.meta_path``) has
    it run first. Only existing absolute directories, each once."""
    for finder in list(sys.meta_path):
        # an installed command defers site (packaging/bin): run it now, so that sys.path
        # holds what site adds
        run_site = getattr(finder, "ocihook_run_site", None)
        if callable(run_site):
            run_site()
    # os is the standard library's (sysconfig would cost an import on the start path)
    stdlib = os.path.normpath(os.path.dirname(os.__file__))

    def is_stdlib(norm: str) -> bool:
        return (
            norm == stdlib
            or norm.endswith(".zip")
            or (os.path.basename(norm) == "lib-dynload" and os.path.dirname(norm) == stdlib)
        )

    entries = [os.path.normpath(e) for e in sys.path if e and os.path.isabs(e)]
    last = max((i for i, e in enumerate(entries) if is_stdlib(e)), default=-1)
    dirs = [package_dir()]
    for norm in entries[last + 1 :]:
        if norm not in dirs and os.path.isdir(norm):
            dirs.append(norm)
    return dirs


def hook_program(dirs: list[str] | None = None) -> str:
    """:data:`HOOK_PROGRAM` for an interpreter started with ``-S``: ``dirs`` (default
    :func:`start_path_dirs`) appended to ``sys.path`` first."""
    return f"import sys; sys.path += {dirs if dirs is not None else start_path_dirs()!r}; " + (
        _HOOK_TAIL
    )


def is_hook_program(arg: str) -> bool:
    """Whether ``arg`` is ocihook's ``-c`` program: :data:`HOOK_PROGRAM` or a
    :func:`hook_program` (or either as registrations made before :func:`ocihook._main.run`
    wrote it: ``...; from ocihook._main import main; sys.exit(main())``)."""
    return any(
        arg == "import sys; " + tail
        or (arg.startswith("import sys; sys.path += [") and arg.endswith("; " + tail))
        for tail in (_HOOK_TAIL, _EARLIER_HOOK_TAIL)
    )


def hook_program_dirs(arg: str) -> list[str] | None:
    """The directories a :func:`hook_program` text ``arg`` appends to ``sys.path``, in its
    order; ``None`` for any other text (:data:`HOOK_PROGRAM` itself, which relies on
    ``site``, among them). The list is the text between ``sys.path += `` and the
    program's known tail, so a directory may hold any character ``repr`` quotes."""
    prefix = "import sys; sys.path += "
    if not (is_hook_program(arg) and arg.startswith(prefix)):
        return None
    tail = next(t for t in (_HOOK_TAIL, _EARLIER_HOOK_TAIL) if arg.endswith("; " + t))
    text = arg[len(prefix) : len(arg) - len(tail) - 2]
    dirs = _plain_str_list(text)
    if dirs is None:
        from ast import literal_eval  # escapes: a CDI spec edited or written elsewhere

        try:
            dirs = literal_eval(text)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            return None
    if not isinstance(dirs, list) or not all(isinstance(d, str) for d in dirs):
        return None
    return dirs


def _plain_str_list(text: str) -> list[str] | None:
    """``text`` read as ``repr`` writes a list of strings holding no backslash (``['/a',
    "/b'c"]``: each item in single quotes, or double quotes when it holds a single one);
    ``None`` for anything else (an escape among them), which the caller reads with
    :func:`ast.literal_eval` (not imported here: the wrapper's ``cdi`` mode checks its
    specs' hooks on every start)."""
    if "\\" in text or not (text.startswith("[") and text.endswith("]")):
        return None
    out: list[str] = []
    at, end = 1, len(text) - 1
    while at < end:
        quote = text[at]
        close = text.find(quote, at + 1) if quote in "'\"" else -1
        if close < 0 or close >= end:
            return None
        out.append(text[at + 1 : close])
        at = close + 1
        if at < end:
            if not text.startswith(", ", at):
                return None
            at += 2
            if at >= end:
                return None
    return out


def program_dirs(args: Sequence[str]) -> list[str] | None:
    """The ``sys.path`` directories of ocihook's ``-c`` program among a hook's ``args``
    (``[interpreter, -I, -S, -c, PROGRAM, ...]``: :func:`hook_program_dirs`), or ``None``
    when they hold no such program."""
    if "-c" not in args[1:4]:
        return None
    at = list(args).index("-c", 1) + 1
    return hook_program_dirs(args[at]) if at < len(args) else None


def missing_program_module(args: Sequence[str], root: str = "/") -> str | None:
    """For a hook whose ``args`` run ocihook's ``-c`` program (:func:`program_dirs`), what
    stops it from importing ocihook, as a host path: a directory that is not absolute
    (the runtime's working directory would decide: it may be the bundle), else, when none
    of the directories (looked up below ``root``) holds ``ocihook/_main.py``, that file
    in the first (in none: ``ocihook/_main.py``); ``None`` when nothing does or the hook
    runs no such program. The interpreter surviving is not enough: a virtual environment
    rebuilt for another Python, or an uninstalled package, leaves it in place."""
    dirs = program_dirs(args)
    if dirs is None:
        return None
    for d in dirs:
        if not d.startswith("/"):
            return d
    for d in dirs:
        where = os.path.join(root, d.lstrip("/")) if root != "/" else d
        if os.path.isfile(os.path.join(where, "ocihook", "_main.py")):
            return None
    return os.path.join(dirs[0] if dirs else "", "ocihook", "_main.py")


def hook_command() -> tuple[str, ...]:
    """argv prefix that runs ocihook from this installation: the real interpreter
    (``sys.executable``, never a shim) isolated (``-I``: no ``PYTHON*`` variables, no user
    site, no current directory on ``sys.path``) and without ``site`` (``-S``: no ``.pth``
    file runs; about 2.5 ms of each start, a quarter of the interpreter's), with
    :func:`hook_program` naming the directories ``site`` would have added."""
    return (sys.executable, "-I", "-S", "-c", hook_program())


def package_dir() -> str:
    """The directory holding the ``ocihook`` package this process runs (a virtual
    environment's ``site-packages``, Debian's ``/usr/lib/python3/dist-packages``, a source
    tree): the one entry of ``sys.path`` the start path needs, as it imports nothing but
    the standard library and ocihook."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cdi_hook_command() -> tuple[str, ...]:
    """The command a CDI spec names for its hooks: this interpreter (``sys.executable``:
    ``/usr/bin/python3`` for the Debian package, ``<venv>/bin/python3`` for pip's) with
    ``-I -S`` and :func:`hook_program` naming :func:`package_dir` alone, the form the hooks
    ``ocihook runtime configure`` registers take. The runtime starts the interpreter
    itself: no ``/bin/sh`` and no launcher script to compile, about 1.4 ms of each
    container's start (the installed ``ocihook`` command costs that over the interpreter
    run directly, Debian's Python 3.11, this 2-core machine).

    The spec holds the interpreter's path and the package's directory: a virtual
    environment recreated in place with the same Python keeps it working; one moved, or
    rebuilt for another Python version, does not (``ocihook doctor`` and ``ocihook cdi
    list`` say so, and ``cdi generate`` writes it again: the boot unit does at every boot).
    ``ocihook cdi generate --hook-path /usr/bin/ocihook`` names an installed command
    instead, at that cost per container.

    Returns:
        ``(interpreter, "-I", "-S", "-c", program)``.
    """
    return (sys.executable, "-I", "-S", "-c", hook_program([package_dir()]))


#: Seconds a runtime gives each hook ocihook registers before killing it: a hook stuck
#: on something the image planted must not hang the container start forever.
HOOK_TIMEOUT = 30


class Options(Record):
    """The operator's settings that shape a plan (from a :class:`~ocihook.config.validate.Config`).

    Attributes:
        policy: which request sources are honoured (:class:`ocihook.request.policy.RequestPolicy`).
        supported: driver capabilities containers may have (``None``: all).
        check_requirements: check ``NVIDIA_REQUIRE_*`` (off with ``disable-require``).
        cuda_compat: use the image's CUDA forward-compatibility libraries when newer
            (``cuda-compat = "ldconfig"``; off with ``"disabled"``).
        cgroups: add device cgroup rules in hook mode (off with ``no-cgroups``).
        mode: ``"auto"`` (CDI when the request names CDI devices), ``"cdi"`` (every
            requested device is a CDI device) or ``"legacy"`` (never CDI).
        cdi_spec_dirs: CDI spec directories, lowest priority first.
        default_kind: CDI kind given to unqualified device names in CDI requests.
        annotation_prefixes: OCI annotation key prefixes that request CDI devices.
    """

    policy: RequestPolicy = RequestPolicy()
    supported: frozenset[str] | None = None
    check_requirements: bool = True
    cuda_compat: bool = True
    cgroups: bool = True
    mode: str = "auto"
    cdi_spec_dirs: tuple[str, ...] = ("/etc/cdi", "/var/run/cdi")
    default_kind: str = "nvidia.com/gpu"
    annotation_prefixes: tuple[str, ...] = ("cdi.k8s.io/",)


def options_from_config(cfg: Config) -> Options:
    """The :class:`Options` of a loaded configuration."""
    return Options(
        policy=RequestPolicy(
            accept_env_unprivileged=cfg.accept_nvidia_visible_devices_envvar_when_unprivileged,
            accept_volume_mounts=cfg.accept_nvidia_visible_devices_as_volume_mounts,
            swarm_resource=cfg.swarm_envvars,
            accept_annotations_unprivileged=cfg.accept_cdi_annotations_when_unprivileged,
        ),
        supported=cfg.driver_capabilities,
        check_requirements=not cfg.disable_require,
        cuda_compat=cfg.cuda_compat != "disabled",
        cgroups=not cfg.no_cgroups,
        mode=cfg.mode,
        cdi_spec_dirs=cfg.cdi_spec_dirs,
        default_kind=cfg.default_kind,
        annotation_prefixes=cfg.annotation_prefixes,
    )
