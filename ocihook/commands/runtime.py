"""``ocihook-runtime``: a runc-compatible wrapper runtime (like ``nvidia-container-runtime``).

A container engine (containerd's ``BinaryName``, Docker's ``runtimes``, CRI-O's
``runtime_path``, podman's ``--runtime``) runs it where it would run ``runc``, with runc's
command line. For ``create`` and ``run`` it first gives the container what its
``<bundle>/config.json`` asks for, by the configuration's ``mode``:

* ``auto``, ``cdi``: spec mode, :func:`ocihook.appliers.spec.edit_bundle` (device nodes,
  cgroup rules, mounts, the links and ``ld.so.cache`` in the rootfs, a createContainer
  hook for what is left; CDI devices from the CDI registry);
* ``legacy``: the plan's device cgroup rules are added to ``linux.resources.devices``
  (where the runtime, and a systemd cgroup driver re-applying them, read them) and
  ocihook's prestart hook (the command line of
  ``packaging/config.json-hooks-snippet.json.in``) is added to ``hooks.prestart``, unless
  an ocihook injecting hook is registered already (by hooks.d, by hand, or an earlier
  run).

Then it replaces itself (``execve``) with the real runtime — the first of the
configuration's ``runtimes`` found (default ``runc`` then ``crun``; names looked up in
this process's ``PATH``, the engine's, never anything from the container) — with the
arguments unchanged. One exception: a spec-mode ``create`` with ``--pid-file`` whose edit
left only the ``/proc/driver/nvidia`` mask to do runs the runtime as a child instead and
then mounts the mask in the created container itself (:func:`_create_and_mask`), so that
no createContainer hook starts a second interpreter. Every other command (``start``,
``delete``, ``state``, ``kill``, ``--version``...) goes straight to the real runtime.

A ``config.json`` that asks for nothing is not rewritten. On an error the wrapper prints
one line (``ocihook-runtime: error[<reference>]: ...``), appends it to runc's ``--log``
file when one is given (containerd's shim reports the last error found there, in the
``--log-format`` given), leaves ``config.json`` as it was and exits with the code of
:data:`ocihook.core.errors.EXIT_CODES` (12 when no real runtime is found).

It runs on every container start, so like :mod:`ocihook._main` it imports neither click
nor jsonschema, and for a container that asks for nothing it reads ``config.json`` as
bytes (:data:`ocihook.core.fastexit.REQUEST_MARKERS`) and execs at once.

The configuration file: ``$OCIHOOK_CONFIG``, else ``/etc/ocihook/config.toml``. The
wrapper's environment is the engine's (the container's environment is only in
``config.json``), so the variable is honoured here, unlike in hooks.
"""

from __future__ import annotations

import os
import sys

from ..core.errors import ApplyError, OcihookError, RuntimeNotFound, exit_code_for

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence
    from typing import Any

    from ..config.validate import Config

__all__ = [
    "COMMANDS",
    "EXEC_MARKER",
    "Invocation",
    "find_runtime",
    "main",
    "parse_args",
    "prepare_bundle",
]

PROG = "ocihook-runtime"

#: The commands of runc 1.1 (``main.go``) and crun 1.8: the first word that is not an
#: option or an option's value. Used to tell an unknown global option's value from the
#: command.
COMMANDS = frozenset(
    {
        "checkpoint",
        "create",
        "delete",
        "events",
        "exec",
        "features",
        "help",
        "init",
        "kill",
        "list",
        "pause",
        "ps",
        "restore",
        "resume",
        "run",
        "spec",
        "start",
        "state",
        "update",
    }
)
#: Global options that take a value (runc ``main.go``; crun ``crun.c``). Go's flag
#: package accepts them with one or two dashes, the value after ``=`` or as the next word.
GLOBAL_VALUE_OPTIONS = frozenset(
    {"root", "log", "log-format", "log-level", "criu", "rootless", "cgroup-manager"}
)
#: Global options without a value.
GLOBAL_FLAGS = frozenset({"debug", "systemd-cgroup", "help", "h", "version", "v"})
#: Options of ``create`` / ``run`` that take a value (runc ``create.go``, ``run.go``);
#: ``bundle``/``b`` is read, the others skipped.
COMMAND_VALUE_OPTIONS = frozenset(
    {"bundle", "b", "console-socket", "pid-file", "preserve-fds", "config", "f"}
)
#: Commands for which the bundle is edited before the real runtime runs.
EDIT_COMMANDS = ("create", "run")

#: Set in the real runtime's environment (to the wrapper's path): a wrapper started with
#: it set was started by itself, through a ``runc`` on ``PATH`` that is a copy of it or
#: a script around it.
EXEC_MARKER = "OCIHOOK_RUNTIME_WRAPPED"
#: ``PATH`` searched when the wrapper's environment has none (runc's own default).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Invocation:
    """What :func:`parse_args` found in a runc command line.

    Attributes:
        command: the runc command (``"create"``), or ``None`` when there is none (only
            global options such as ``--version``).
        bundle: the ``-b``/``--bundle`` value as written (``None``: not given).
        log: the global ``--log`` file (``None``: not given).
        log_format: the global ``--log-format`` (``"text"`` when not given).
        config: crun's ``--config``/``-f`` file name, when given.
        help: ``-h``/``--help`` was given (the runtime prints help; no bundle to edit).
        pid_file: the command's ``--pid-file``, when given.
        container_id: the command's first positional word (the container id), if any.
        global_args: the words before the command (the global options), as given.
    """

    __slots__ = (
        "bundle",
        "command",
        "config",
        "container_id",
        "global_args",
        "help",
        "log",
        "log_format",
        "pid_file",
    )

    def __init__(
        self,
        command: str | None = None,
        bundle: str | None = None,
        log: str | None = None,
        log_format: str = "text",
        config: str | None = None,
        help: bool = False,
        pid_file: str | None = None,
        container_id: str | None = None,
        global_args: tuple[str, ...] = (),
    ) -> None:
        self.help = help
        self.command = command
        self.bundle = bundle
        self.log = log
        self.log_format = log_format
        self.config = config
        self.pid_file = pid_file
        self.container_id = container_id
        self.global_args = global_args

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"Invocation({fields})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Invocation):
            return NotImplemented
        return all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def bundle_dir(self, cwd: str | None = None) -> str:
        """The bundle directory, absolute: ``-b``/``--bundle`` relative to ``cwd``
        (default the current directory), or ``cwd`` itself (runc's default)."""
        base = cwd if cwd is not None else os.getcwd()
        return os.path.join(base, self.bundle) if self.bundle is not None else base


def _option(arg: str) -> tuple[str, str | None]:
    """``--name=value`` / ``-name`` -> (``name``, ``value`` or ``None``)."""
    name, eq, value = arg.lstrip("-").partition("=")
    return name, (value if eq else None)


#: The false spellings of a boolean flag's value (Go ``strconv.ParseBool``, which runc's
#: ``urfave/cli`` uses: ``--help=false`` is not help).
_FALSE = frozenset({"0", "f", "F", "false", "FALSE", "False"})


def _flag_on(value: str | None) -> bool:
    """Whether a boolean flag written ``--flag`` or ``--flag=value`` is set."""
    return value is None or value not in _FALSE


def parse_args(args: Sequence[str]) -> Invocation:
    """Find the command, the bundle and the log options in a runc command line, without
    changing it.

    Global options come before the command (runc's ``urfave/cli``): those of
    :data:`GLOBAL_VALUE_OPTIONS` consume the next word unless written ``--opt=value``. An
    unknown option consumes the next word unless that word is a runc command
    (:data:`COMMANDS`) or another option — so ``--new-flag create`` still finds
    ``create``. Command options may follow the container id (``urfave/cli`` reorders
    them); ``--`` ends the options.
    """
    inv = Invocation()
    i = 0
    n = len(args)
    while i < n:
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if not arg.startswith("-") or arg == "-":
            break
        name, value = _option(arg)
        if name in ("help", "h"):
            inv.help = _flag_on(value)
        takes_value = name in GLOBAL_VALUE_OPTIONS or (
            name not in GLOBAL_FLAGS
            and i + 1 < n
            and args[i + 1] not in COMMANDS
            and not args[i + 1].startswith("-")
        )
        if value is None and takes_value and i + 1 < n:
            i += 1
            value = args[i]
        if name == "log":
            inv.log = value
        elif name == "log-format" and value is not None:
            inv.log_format = value
        i += 1
    if i >= n:
        return inv
    inv.global_args = tuple(args[:i])
    inv.command = args[i]
    i += 1
    while i < n:
        arg = args[i]
        i += 1
        if arg == "--":
            break
        if not arg.startswith("-") or arg == "-":
            if inv.container_id is None:
                inv.container_id = arg
            continue
        name, value = _option(arg)
        if name in ("help", "h"):
            inv.help = _flag_on(value)
        if name not in COMMAND_VALUE_OPTIONS:
            continue
        if value is None and i < n:
            value = args[i]
            i += 1
        if name in ("bundle", "b"):
            inv.bundle = value
        elif name in ("config", "f"):
            inv.config = value
        elif name == "pid-file":
            inv.pid_file = value
    if inv.container_id is None and i < n:
        inv.container_id = args[i]  # after "--"
    return inv


def _self_paths() -> list[str]:
    """The files that are this wrapper: the script it was started as and the console
    scripts of this installation."""
    here = os.path.dirname(sys.executable)
    return [sys.argv[0], os.path.join(here, PROG), os.path.join(here, "ocihook")]


def _same_file(a: str, stats: list[os.stat_result]) -> bool:
    try:
        st = os.stat(a)
    except OSError:
        return False
    return any(st.st_dev == s.st_dev and st.st_ino == s.st_ino for s in stats)


def find_runtime(
    runtimes: Sequence[str],
    *,
    environ: Mapping[str, str] | None = None,
    exclude: Sequence[str] | None = None,
    source: str | None = None,
) -> str:
    """The real OCI runtime to run: the first of ``runtimes`` that is an executable file.

    Args:
        runtimes: names (looked up in ``PATH`` of ``environ``, or :data:`DEFAULT_PATH`)
            or absolute paths, in order of preference (config key ``runtimes``).
        environ: the environment (default :data:`os.environ`).
        exclude: files that are this wrapper (default: the script it runs as and the
            installation's console scripts): a ``runc`` on ``PATH`` that is one of them
            (a link or hard link to the wrapper) is skipped and the search goes on in the
            next ``PATH`` directory.
        source: the configuration file, for the error message.

    Returns:
        The absolute path of the runtime.

    Raises:
        RuntimeNotFound: none found.
    """
    env = os.environ if environ is None else environ
    stats = []
    for path in _self_paths() if exclude is None else exclude:
        try:  # noqa: SIM105 (contextlib is not imported on this path)
            stats.append(os.stat(path))
        except OSError:
            pass
    dirs = [d for d in (env.get("PATH") or DEFAULT_PATH).split(":") if d.startswith("/")]
    for name in runtimes:
        candidates = [name] if name.startswith("/") else [f"{d}/{name}" for d in dirs]
        for path in candidates:
            if os.path.isfile(path) and os.access(path, os.X_OK) and not _same_file(path, stats):
                return os.path.normpath(path)
    raise RuntimeNotFound(
        "no OCI runtime found to run",
        path=source,
        field="runtimes",
        value=list(runtimes),
        hint="install runc or crun, or set runtimes in the configuration to the real "
        "runtime's absolute path (names are looked up in PATH, ocihook-runtime itself skipped)",
    )


#: The hook stages an ocihook hook that injects GPUs may be registered under.
_INJECT_STAGES = ("prestart", "createRuntime", "createContainer")


def _is_ocihook_inject_hook(entry: object) -> bool:
    """Whether a ``hooks.<stage>`` entry runs ``ocihook hook prestart|createRuntime|
    createContainer`` (through the packaged ``-c`` program or an ``ocihook`` script)."""
    if not isinstance(entry, dict):
        return False
    args = entry.get("args")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return False
    from ..config.options import is_hook_program

    path = entry.get("path")
    ours = any(is_hook_program(a) for a in args) or any(
        os.path.basename(p).startswith("ocihook") for p in (path, *args[:1]) if isinstance(p, str)
    )
    return ours and any(
        a == "hook" and i + 1 < len(args) and args[i + 1] in _INJECT_STAGES
        for i, a in enumerate(args)
    )


def legacy_hook(config_file: str | None) -> dict[str, Any]:
    """The prestart hook entry ``legacy`` mode adds: ``packaging/config.json-hooks-snippet
    .json.in``'s command line with this interpreter, plus ``--config FILE`` when the
    wrapper read a file other than the default (hooks never read ``$OCIHOOK_CONFIG``)."""
    from ..config.options import HOOK_ENV, HOOK_TIMEOUT, hook_command

    args = [*hook_command(), "hook", "prestart"]
    if config_file is not None:
        args += ["--config", config_file]
    return {"path": args[0], "args": args, "env": list(HOOK_ENV), "timeout": HOOK_TIMEOUT}


def poststop_hook() -> dict[str, Any]:
    """The poststop hook entry ``legacy`` mode adds with :func:`legacy_hook`: ``ocihook
    hook poststop`` removes from a reused rootfs what the prestart hook made there
    (:mod:`ocihook.appliers.live.leftovers`)."""
    from ..config.options import HOOK_ENV, HOOK_TIMEOUT, hook_command

    args = [*hook_command(), "hook", "poststop"]
    return {"path": args[0], "args": args, "env": list(HOOK_ENV), "timeout": HOOK_TIMEOUT}


def _add_legacy_hook(bundle_dir: str, cfg: Config) -> bool:
    """``legacy`` mode: add :func:`legacy_hook` to ``hooks.prestart`` (and
    :func:`poststop_hook` to ``hooks.poststop``) of a bundle whose
    container asks for GPUs and has no ocihook injecting hook yet. Returns whether
    ``config.json`` was written.

    Raises:
        SpecError: ``config.json`` missing or malformed, or ``hooks`` of the wrong type.
        RequestError: a malformed request.
        ApplyError: ``config.json`` could not be replaced.
    """
    from ..config.load import DEFAULT_PATH as DEFAULT_CONFIG
    from ..config.options import options_from_config
    from ..core.errors import SpecError
    from ..oci.bundle import load_bundle, write_json_atomic
    from ..request.drm import drm_requests_from_spec
    from ..request.nvidia import request_from_spec

    b = load_bundle(bundle_dir)
    options = options_from_config(cfg)
    request = request_from_spec(b.config, path=b.config_path, policy=options.policy)
    drm = drm_requests_from_spec(b.config, path=b.config_path, policy=options.policy)
    if request.is_void and not drm:
        return False
    hooks = b.config.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        raise SpecError("hooks must be an object", path=b.config_path, field="hooks")
    for stage in _INJECT_STAGES:
        entries = (hooks or {}).get(stage)
        if entries is not None and not isinstance(entries, list):
            raise SpecError(f"hooks.{stage} must be a list", path=b.config_path, field=stage)
        if any(_is_ocihook_inject_hook(e) for e in entries or ()):
            return False
    source = cfg.source if cfg.source not in (None, DEFAULT_CONFIG) else None
    doc = _with_device_rules(b, request, cfg, options)
    new_hooks = dict(hooks or {})
    new_hooks["prestart"] = [*(new_hooks.get("prestart") or ()), legacy_hook(source)]
    poststop = new_hooks.get("poststop")
    if poststop is not None and not isinstance(poststop, list):
        raise SpecError("hooks.poststop must be a list", path=b.config_path, field="poststop")
    new_hooks["poststop"] = [*(poststop or ()), poststop_hook()]
    doc["hooks"] = new_hooks
    try:
        write_json_atomic(b.config_path, doc, indent=None)  # only runc reads it
    except OSError as e:
        raise ApplyError(f"cannot replace config.json: {e.strerror}", path=b.config_path) from None
    return True


def _asks_for_nothing(config_json: str, settings: _Settings) -> bool:
    """Whether ``config.json`` certainly asks for no GPU, decided from its bytes as the
    no-GPU hook exit does (:func:`ocihook.commands.voidexit.void_hook_exit`): none of the request
    markers, no ``\\u`` escape. Unreadable: ``False`` (the full path reports it)."""
    from ..core.fastexit import REQUEST_MARKERS
    from ..core.readfile import FileTooLarge, holds_any, read_regular

    raw: bytes | None
    try:
        raw = read_regular(config_json)
    except FileTooLarge:
        raw = None  # larger than the edit reads: scanned in pieces, as runc reads it
    except OSError:
        return False

    if holds_any(config_json, raw, (b"\\u", *REQUEST_MARKERS)):
        return False
    from ..config.scan import DEFAULT_REQUEST_MARKERS, REQUEST_DETECTION_KEYS

    # the defaults' markers too: spec mode reads cdi.k8s.io/ annotations
    if settings.may_set(REQUEST_DETECTION_KEYS):
        markers = settings.get().extra_request_markers()
    else:
        markers = DEFAULT_REQUEST_MARKERS
    return not holds_any(config_json, raw, tuple(markers))


class _Settings:
    """The operator's configuration, parsed only when needed (:func:`config_may_set`)."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        self.environ = environ
        self._cfg: Config | None = None
        #: Added to every log line (``container``, ``bundle``), set before :meth:`get`.
        self.log_context: dict[str, str] = {}

    def may_set(self, keys: Sequence[str]) -> bool:
        from ..config.load import config_may_set

        return self._cfg is not None or config_may_set(keys, environ=self.environ)

    def get(self) -> Config:
        if self._cfg is None:
            from ..config.load import load_config
            from ..core import log

            # a file not parsed before: parsed by a helper process, so that this start's
            # peak memory does not include tomllib's (the wrapper runs on the host)
            self._cfg = load_config(environ=self.environ, parse_helper=True)
            log.configure(
                self._cfg.log_file or None,
                self._cfg.log_level,
                syslog=self._cfg.log_syslog,
                **self.log_context,
            )
        return self._cfg

    def runtimes(self) -> tuple[tuple[str, ...], str | None]:
        if self.may_set(("runtimes",)):
            cfg = self.get()
            return cfg.runtimes, cfg.source
        return ("runc", "crun"), None


def _read_bytes(path: str) -> bytes | None:
    """The bytes of ``path`` (to put back if the real runtime cannot be started), or
    ``None`` when it cannot be read (the edit then reports why)."""
    from ..core.readfile import read_regular

    try:
        return read_regular(path)
    except OSError:
        return None


def _with_device_rules(b: Any, request: Any, cfg: Config, options: Any) -> dict[str, Any]:
    """A copy of the bundle's document with the plan's device cgroup rules appended to
    ``linux.resources.devices`` (each once), where the runtime reads them: rules only the
    hook writes are lost when a systemd cgroup driver or ``runc update`` re-applies the
    container's rules from its spec (docs/guide/hook-mode.md, "The systemd cgroup
    driver"). The nodes, mounts and links are still the hook's.

    Raises:
        DiscoveryError, RequestError: as planning; SpecError: ``linux`` of the wrong type.
    """
    import json

    from ..oci.edit import add_device_rules
    from ..pipeline.bundle import plan_for_bundle
    from ..request.drm import drm_requests_from_spec

    drm = drm_requests_from_spec(b.config, path=b.config_path)
    plan = plan_for_bundle(b, request, cfg.host_root(), options, "runtime legacy", drm)
    doc: dict[str, Any] = json.loads(json.dumps(b.config))
    if not plan.edits.cgroup_rules:
        return doc
    add_device_rules(doc, plan.edits.cgroup_rules, path=b.config_path)
    return doc


def prepare_bundle(bundle_dir: str, cfg: Config) -> str:
    """Give the container of ``bundle_dir`` what its ``config.json`` asks for, by
    ``cfg.mode`` (see the module docstring). Returns what was done, for the log:
    ``"edited"``, ``"hook added"`` or ``"unchanged"``.

    Raises:
        OcihookError: as :func:`ocihook.appliers.spec.edit_bundle` (or, in legacy mode,
            :class:`SpecError`, :class:`RequestError`, :class:`ApplyError`);
            ``config.json`` is then as it was.
    """
    return _prepare(bundle_dir, cfg)[0]


def _prepare(
    bundle_dir: str, cfg: Config, mask_by_caller: bool = False, hand_over: bool = False
) -> tuple[str, Any]:
    """:func:`prepare_bundle`, and the edit's result (spec mode; ``None`` in legacy mode).
    With ``mask_by_caller`` the ``/proc/driver/nvidia`` mask may be left to the caller
    (``result.caller_mask``); with ``hand_over`` the soname links and ``ld.so.cache`` made
    in the rootfs are handed over (``result.rootfs_edit``), to be made while the runtime
    creates the container when the mask is the caller's and ``config.json`` has no hook
    (see :func:`ocihook.appliers.spec.edit_bundle`'s ``defer_rootfs``)."""
    if cfg.mode == "legacy":
        return ("hook added" if _add_legacy_hook(bundle_dir, cfg) else "unchanged"), None
    from ..appliers.spec import edit_bundle
    from ..config.options import options_from_config

    # compact: only runc reads this config.json (the C encoder, no json import)
    result = edit_bundle(
        bundle_dir,
        cfg.host_root(),
        options=options_from_config(cfg),
        indent=None,
        mask_by_caller=mask_by_caller,
        durable=False,  # runc reads it at once; the engine remakes a bundle after a crash
        defer_rootfs=hand_over,  # taken back if the runtime fails
    )
    if result.ignored:
        from ..request.policy import policy_note

        print(
            f"{PROG}: {result.bundle.config_path}: {policy_note(result.ignored)}", file=sys.stderr
        )
    for warning in result.plan.warnings if result.plan is not None else ():
        if "not checked" in warning:  # requirements.UNCHECKED: a pass is never silent
            print(f"{PROG}: warning: {result.bundle.config_path}: {warning}", file=sys.stderr)
    done = "edited" if result.written else "unchanged"
    if result.written:
        from ..core import log

        if result.plan is not None:
            log.info("config.json edited", **result.plan.log_fields())
        else:
            log.info("config.json edited", cdi_devices=",".join(result.cdi_devices))
    return done, result


def _warn_mount_race(runtime: str) -> None:
    """Say on stderr and in the log when spec mode's bind mounts go to a runc that an
    image can race (:func:`ocihook.linux.ociruntime.mount_race_warning`)."""
    from ..core import log
    from ..linux.ociruntime import mount_race_warning

    warning = mount_race_warning(runtime)
    if warning is not None:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
        log.warning("runtime older than 1.1.14", runtime=runtime, detail=warning)


def _cannot_run(runtime: str, e: OSError) -> RuntimeNotFound:
    """The error for a runtime that ``execve`` or ``posix_spawn`` could not start: ENOENT
    for a file that exists is its ``#!`` interpreter missing (execve(2))."""
    why = e.strerror
    if isinstance(e, FileNotFoundError) and os.path.exists(runtime):
        try:
            with open(runtime, "rb") as f:
                script = f.read(2) == b"#!"
        except OSError:
            script = False
        why = (
            "the interpreter its #! line names is missing"
            if script
            else "the program loader (ELF interpreter) it names is missing"
        )
    return RuntimeNotFound(f"cannot run {runtime}: {why}", path=runtime)


def _restore(config_json: str, original: bytes | None) -> str | None:
    """Put ``original`` (the bytes ``config.json`` had before the edit) back at
    ``config_json``; ``None``, or a hint saying that it could not be."""
    if original is None:
        return f"config.json was edited and could not be read before: {config_json}"
    from ..oci.bundle import write_bytes_atomic

    try:
        write_bytes_atomic(config_json, original, durable=False)
    except OSError:
        return f"config.json was edited and could not be restored: {config_json}"
    return None


def _take_back(result: Any, original: bytes | None) -> str | None:
    """Undo what the edit of ``result`` (an :class:`~ocihook.appliers.spec.EditResult`)
    made for a runtime that failed: the soname links and ``ld.so.cache`` (rolled back),
    the bind-mount targets (removed), ``config.json`` (``original`` put back, when the
    edit wrote it).
    ``None``, or a hint naming what could not be undone."""
    from ..appliers.spec import remove_mount_targets, shown_paths

    made = result.rootfs_edit.changes if result.rootfs_edit is not None else None
    # either may have made the directories the other's files are in: targets first,
    # then the links, then the target directories the links kept from going
    left = remove_mount_targets(result.bundle.rootfs, result.targets)
    if made is not None:
        made.rollback()
        if left:
            left = remove_mount_targets(result.bundle.rootfs, left[::-1])  # as made
    hints = []
    if left:
        shown = shown_paths(left)
        hints.append(f"these paths the edit made are left in the rootfs (not empty?): {shown}")
    restored = _restore(result.bundle.config_path, original) if result.written else None
    if restored is not None:
        hints.append(restored)
    return "; ".join(hints) or None


def _create_and_mask(
    runtime: str,
    args: list[str],
    env: dict[str, str],
    inv: Invocation,
    result: Any,
    original: bytes | None,
) -> int:
    """Run the runtime's ``create`` as a child (``posix_spawn``, not ``execve``: the wrapper
    has work left; one that cannot be started is reported as by :func:`main`, exit 12),
    then mount ``result.caller_mask`` in the created container, whose init pid the
    runtime wrote to ``--pid-file``: the createContainer hook's last step without a second
    interpreter. While the runtime creates the container, the mask is made ready
    (:class:`~ocihook.appliers.live.procmask.PendingMask`: host files read, GPU directories
    cloned, the masking child forked) and ``result.rootfs_edit`` (the soname links and
    ``ld.so.cache``) is made in the rootfs, if the edit left it: the container is started
    only after the wrapper exits.

    SIGTERM, SIGINT, SIGHUP and SIGQUIT are passed on to the runtime while it runs; one
    that comes once it has exited or begun to (:func:`_exited`), before the wrapper is
    done, ends the ``create`` as a failure: the container is deleted (``<runtime> <global
    options> delete --force ID``) and the wrapper exits 128 + the signal's number (they
    are held from before the spawn until the handlers are set). If the runtime fails, its
    exit status is the wrapper's; if the rootfs edit or the mask fails, the container is
    deleted and the error reported (exit 7). On any failure the edit is taken back
    (:func:`_take_back`: the links and ``ld.so.cache`` rolled back, the mount targets
    removed, ``config.json`` given back ``original``, its bytes before the edit) once the
    container is deleted; a delete that fails leaves the container and its edit, and the
    message says so. Returns the exit status to leave with."""
    if TYPE_CHECKING:
        import signal
    else:  # not signal: its IntEnum wrappers import enum (milliseconds)
        import _signal as signal

    # an inherited SIG_IGN would have the kernel reap the runtime and the masking child
    # (ECHILD from waitpid); the runtime then inherits SIG_DFL too
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    late: list[int] = []  # signals that came once the runtime had exited
    waited = [False]
    child = 0

    def on_signal(signum: int, _frame: object) -> None:
        if not waited[0] and not _exited(child):
            os.kill(child, signum)
        else:
            late.append(signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    # held from before the spawn until the handlers are set: one that comes meanwhile is
    # passed on to the runtime, not the end of a wrapper whose runtime goes on creating
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, forwarded)
    try:
        try:  # not fork: posix_spawn copies no page table, and the runtime starts sooner
            child = os.posix_spawn(runtime, [runtime, *args], env, setsigmask=mask)
        except OSError as e:
            not_run = _cannot_run(runtime, e)
            not_run.hint = _take_back(result, original) or not_run.hint
            _report(not_run, inv)
            return exit_code_for(not_run)
        for sig in forwarded:
            signal.signal(sig, on_signal)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    try:
        return _create_with(runtime, env, inv, result, original, child, waited, late)
    finally:
        for sig in forwarded:
            signal.signal(sig, signal.SIG_DFL)


#: ``PF_EXITING`` of the flags in ``/proc/<pid>/stat`` (include/linux/sched.h): the
#: process has begun to exit, before ``waitid`` can see it.
_PF_EXITING = 0x4


def _exited(pid: int) -> bool:
    """Whether the child ``pid`` has exited or begun to (a signal passed to it now would be
    lost): ``waitid`` sees it exited, or ``/proc/<pid>/stat`` shows a zombie, a dead task
    or ``PF_EXITING``."""
    try:
        if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
            return True
    except ChildProcessError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
        return fields[0] in (b"Z", b"X", b"x") or bool(int(fields[6]) & _PF_EXITING)
    except (OSError, IndexError, ValueError):
        return False


def _create_with(
    runtime: str,
    env: dict[str, str],
    inv: Invocation,
    result: Any,
    original: bytes | None,
    child: int,
    waited: list[bool],
    late: list[int],
) -> int:
    """The body of :func:`_create_and_mask` once the runtime ``child`` runs and the
    signal handlers are set (they set ``late``; ``waited`` is set here once the child is
    reaped)."""
    from ..appliers.live.procmask import PendingMask
    from ..core import log

    nodes = [(n.path, n.minor) for n in result.plan.edits.device_nodes]
    prepared: PendingMask | OSError | OcihookError
    try:
        prepared = PendingMask(result.caller_mask, nodes)
    except (OSError, OcihookError) as e:  # reported once the runtime is done
        prepared = e
    changes = None
    edit_error: OcihookError | None = None
    if result.rootfs_edit is not None:
        try:
            changes = result.rootfs_edit.run()  # made already when config.json has hooks
        except OcihookError as e:  # it undid its own steps; reported once the runtime is done
            edit_error = e
    while True:
        try:
            _pid, status = os.waitpid(child, 0)
            break
        except InterruptedError:  # pragma: no cover - PEP 475 retries
            continue
    waited[0] = True
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        if isinstance(prepared, PendingMask):
            prepared.cancel()
        hint = _take_back(result, original)
        if hint is not None:
            print(f"{PROG}: warning: {hint}", file=sys.stderr)
        return code if code > 0 else 128 - code
    err: OcihookError | None = None
    try:
        if edit_error is not None:
            raise edit_error
        if not isinstance(prepared, PendingMask):
            raise prepared
        if not late:
            try:
                with open(inv.pid_file or "") as f:  # relative: to the cwd, as for the runtime
                    pid = int(f.read().strip() or "0")
            except (OSError, ValueError) as e:
                raise ApplyError(
                    f"cannot read the container's pid: {e}", path=inv.pid_file
                ) from None
            done = prepared.apply(pid)
            log.debug(f"{PROG} create: /proc/driver/nvidia masked", pid=pid, masked=done)
    except (OSError, OcihookError) as e:
        err = (
            e
            if isinstance(e, OcihookError)
            else ApplyError(f"cannot mask /proc/driver/nvidia: {e.strerror}")
        )
    if err is None and not late:
        if changes is not None:
            changes.close()
        return 0
    if isinstance(prepared, PendingMask):
        prepared.cancel()  # nothing once applied
    not_deleted = _delete(runtime, env, inv)
    if not_deleted is None:
        hint = _take_back(result, original)
        outcome = "the container was deleted"
    else:  # the container still uses the edit: it stays, and the error says so
        if changes is not None:
            changes.close()
        hint = None
        outcome = f"the container could not be deleted ({not_deleted}) and is left created"
    if err is None:  # a signal came once the runtime had created the container
        message = f"{PROG}: create interrupted by signal {late[0]}: {outcome}"
        print(message + (f"; {hint}" if hint else ""), file=sys.stderr)
        log.error(message, command=inv.command or "-")
        return 128 + late[0]
    if not_deleted is not None:
        err.hint = outcome
    else:
        err.hint = hint or err.hint
    _report(err, inv)
    return exit_code_for(err)


def _delete(runtime: str, env: dict[str, str], inv: Invocation) -> str | None:
    """``<runtime> <global options> delete --force ID``: ``None`` once it exited 0, else
    why it did not (its exit status, or why it could not be started)."""
    import subprocess

    try:
        done = subprocess.run(
            [runtime, *inv.global_args, "delete", "--force", inv.container_id or ""],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            check=False,
        )
    except OSError as e:
        return f"{runtime} delete could not be run: {e.strerror}"
    if done.returncode != 0:
        return f"{runtime} delete exited {done.returncode}"
    return None


def _log_file(value: str | None) -> str | None:
    """The file a global ``--log`` names: runc takes a path; crun also ``file:PATH`` and the
    drivers ``journald:ID`` / ``syslog:ID``, which are not files (crun(1))."""
    if not value:
        return None
    if value.startswith("file:"):
        return value[len("file:") :] or None
    if value.startswith(("journald:", "syslog:")):
        return None
    return value


def _report(err: OcihookError, inv: Invocation) -> None:
    """Print the error, and append it to runc's ``--log`` file when one was given, in its
    ``--log-format`` (containerd's shim reads the last ``error`` entry of that file)."""
    message = f"{PROG}: error[{err.reference}]: {err}"
    print(message, file=sys.stderr)
    from ..core import log

    log.error(message, command=inv.command or "-")
    path = _log_file(inv.log)
    if path is None:
        return
    import time

    now = time.time()
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e9):09d}Z"
    if inv.log_format == "json":
        import json

        line = json.dumps({"level": "error", "msg": message, "time": stamp})
    else:
        line = f'time="{stamp}" level=error msg="{message.replace(chr(34), chr(39))}"'
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            # backslashreplace: a bundle path from the command line may hold bytes that
            # are not UTF-8 (surrogateescape characters)
            os.write(fd, (line + "\n").encode("utf-8", "backslashreplace"))
        finally:
            os.close(fd)
    except OSError:
        pass


HELP = f"""\
usage: {PROG} [RUNC GLOBAL OPTIONS] COMMAND [OPTIONS] ...

A runc-compatible wrapper: for create and run it gives the container the GPUs its
config.json asks for (config key mode: auto/cdi edit config.json, legacy adds ocihook's
prestart hook), then runs the real runtime with the same arguments; every other command
goes straight to it. Configuration: $OCIHOOK_CONFIG, else /etc/ocihook/config.toml
(key runtimes, default ["runc", "crun"]). The real runtime's help: {PROG} help.
"""


def main(argv: Sequence[str] | None = None, *, environ: Mapping[str, str] | None = None) -> int:
    """Entry point of ``ocihook-runtime`` (and ``ocihook runtime exec``). Execs the real
    runtime and so returns only on an error (its exit code) or for ``--help``."""
    args = list(sys.argv[1:] if argv is None else argv)
    env = dict(os.environ if environ is None else environ)
    if args in (["--help"], ["-h"]):
        print(HELP, end="")
        return 0
    if args in (["--version"], ["-v"]):
        # as nvidia-container-runtime: its own version, a blank line, the real runtime's
        from ..core.version import version_line

        print(version_line(PROG) + "\n", flush=True)
    inv = parse_args(args)
    original: bytes | None = None
    done = "unchanged"
    edit = None
    config_json = ""
    try:
        if env.get(EXEC_MARKER):
            raise RuntimeNotFound(
                f"{PROG} was started by itself",
                value=env[EXEC_MARKER],
                hint="a runtime named in runtimes runs ocihook-runtime again: set runtimes "
                "to the real runtime's absolute path, e.g. /usr/sbin/runc",
            )
        settings = _Settings(env)
        if inv.command in EDIT_COMMANDS:
            settings.log_context = {
                "container": inv.container_id or "?",
                "bundle": inv.bundle_dir(),
            }
        runtimes, source = settings.runtimes()
        runtime = find_runtime(runtimes, environ=env, source=source)
        if inv.command in EDIT_COMMANDS and inv.config is None and not inv.help:
            bundle = inv.bundle_dir()
            config_json = os.path.join(bundle, "config.json")
            if not _asks_for_nothing(config_json, settings):
                from ..core import log

                original = _read_bytes(config_json)
                # create with --pid-file: the wrapper can mask /proc/driver/nvidia itself
                by_caller = inv.command == "create" and bool(inv.pid_file and inv.container_id)
                done, edit = _prepare(bundle, settings.get(), by_caller, hand_over=True)
                log.info(f"{PROG} {inv.command}", done=done, runtime=runtime)
                if done == "edited":
                    _warn_mount_race(runtime)
    except OcihookError as e:
        _report(e, inv)
        return exit_code_for(e)
    env[EXEC_MARKER] = sys.argv[0] if argv is None else PROG
    from ..core.stdio import flush_standard_streams

    flush_standard_streams()  # one that cannot be (a closed pipe) is the runtime's to meet
    if edit is not None and edit.caller_mask is not None:
        return _create_and_mask(runtime, args, env, inv, edit, original)
    try:
        os.execve(runtime, [runtime, *args], env)  # the edit's descriptors are close-on-exec
    except OSError as e:
        err = _cannot_run(runtime, e)
        if edit is not None and (edit.written or edit.rootfs_edit is not None):
            err.hint = _take_back(edit, original) or err.hint  # the bundle as it was
        elif edit is None and original is not None and done != "unchanged":
            err.hint = _restore(config_json, original) or err.hint  # legacy mode's hook
        _report(err, inv)
        return exit_code_for(err)
    return 1  # pragma: no cover  (execve does not return)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
