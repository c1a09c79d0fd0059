"""The fast commands of ``ocihook``: the ones that run on every container start —
``ocihook edit`` (spec mode) and ``ocihook hook ...`` (hook mode) — and ``ocihook cdi
generate`` (run at boot and whenever the driver changes). They never import click,
jsonschema or pyelftools: importing click alone costs more than starting the interpreter.

:data:`COMMANDS` is the one definition of their command words, help and options
(:class:`~ocihook.commands.fastopts.Option`; the helper hooks' come from
:mod:`ocihook.commands.cdihook`, which runs ``hook cdi`` without this module).
:func:`parse_fast` parses a well-formed command line from it with str methods alone
(:func:`~ocihook.commands.fastopts.parse_options`); anything else (``--help``, an unknown
option, a missing value) goes to an :mod:`argparse` parser built from the same table
(:func:`run_fast`), which prints the help or the usage error. The click commands that
read the host take the same options (:data:`HOST_ROOT_OPTIONS`, :data:`GPU_BACKEND_OPTION`;
:mod:`ocihook.commands.cli_options`).
Every other command is a click command (:mod:`ocihook.commands.cli`), which lists these
fast commands in its help as well.

Errors are printed as one line, ``ocihook: error[<reference>]: <message>``, and the exit
code comes from :data:`ocihook.core.errors.EXIT_CODES`.
"""

from __future__ import annotations

import os
import sys

from ..core.errors import OcihookError, exit_code_for
from ..core.readfile import read_stdin
from .cdihook import (
    CDI_HOOK_OPTIONS,
    CREATE_CONTAINER_OPTIONS,
    helper_stage_error,
    run_helper_stage,
)
from .fastopts import Namespace, Option, parse_options
from .voidexit import INJECT_STAGES

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    import argparse
    from collections.abc import Sequence
    from typing import Any

    from ..core.hostroot import HostRoot

FAST_COMMANDS = ("edit", "hook", "cdi generate")


def _print_error(err: OcihookError) -> None:
    print(f"ocihook: error[{err.reference}]: {err}", file=sys.stderr)


def _warn(messages: Sequence[str], verbose: bool) -> None:
    if verbose:
        for m in messages:
            print(f"ocihook: warning: {m}", file=sys.stderr)


#: The phrase of a requirement a host fact left unchecked
#: (:data:`ocihook.request.requirements.UNCHECKED`, not imported: a void start needs none
#: of that module): such a warning is printed without ``-v``, a pass is never silent.
_UNCHECKED = "not checked"


#: The options that say which host to read: the configuration file and the roots on top
#: of it (:func:`host_root_from`). The click commands that read the host
#: (:mod:`ocihook.commands.cli_options`) take these same options.
HOST_ROOT_OPTIONS = (
    Option(
        "--config",
        metavar="PATH",
        help="configuration file (default: $OCIHOOK_CONFIG, except for hooks; else "
        "/etc/ocihook/config.toml)",
    ),
    Option("--driver-root", help="root of the user-space driver (config; /)"),
    Option("--dev-root", help="root holding dev/, proc/, sys/ (config; /)"),
    Option("--ldcache", help="ld.so.cache path inside the driver root (config; /etc/ld.so.cache)"),
    Option(
        "--library-path",
        action="append",
        metavar="DIR",
        help="directory in the driver root to search for libraries ld.so.cache lacks",
    ),
)

#: The options of every fast command that reads the host: :data:`HOST_ROOT_OPTIONS` and
#: ``--verbose``.
ROOT_OPTIONS = (
    *HOST_ROOT_OPTIONS,
    Option("-v", "--verbose", action="store_true", help="print warnings"),
)

#: How NVIDIA GPUs are enumerated (:func:`ocihook.discovery.nvidia.discover`'s
#: ``gpu_backend``); ``cdi generate`` and the click commands that read the host take it.
GPU_BACKEND_OPTION = Option(
    "--gpu-backend",
    default="auto",
    choices=("auto", "procfs", "nvml"),
    help="GPU enumeration: NVML (nvidia-ml-py) when it works, else procfs (auto)",
)

#: The fast commands: (command words, help, options). The one source of both the argparse
#: parser (help and usage errors) and the fast parser (:func:`parse_fast`).
COMMANDS: tuple[tuple[tuple[str, ...], str, tuple[Option, ...]], ...] = (
    (
        ("edit",),
        "spec mode: edit a bundle's config.json before runc create/run",
        (
            Option("-b", "--bundle", default=".", help="bundle directory (current dir)"),
            Option("--dry-run", action="store_true", help="do not write config.json"),
            Option("--diff", action="store_true", help="print a unified diff of the change"),
            Option(
                "-q",
                "--quiet",
                action="store_true",
                help="no summary line (what was added, or why nothing was); warnings stay",
            ),
            *ROOT_OPTIONS,
        ),
    ),
    *(
        (
            ("hook", stage),
            f"{stage} hook: inject the requested GPUs into the container being created",
            (
                *ROOT_OPTIONS,
                Option(
                    "--no-cgroups",
                    action="store_true",
                    help="do not add device cgroup rules (rootless containers)",
                ),
            ),
        )
        for stage in INJECT_STAGES
    ),
    (
        ("hook", "poststop"),
        "poststop hook: remove what hook mode made in the container's rootfs (its record)",
        (),
    ),
    (
        ("hook", "create-container"),
        "createContainer hook: soname links, then the container's /etc/ld.so.cache",
        CREATE_CONTAINER_OPTIONS,
    ),
    (
        ("hook", "cdi"),
        "createContainer hook of CDI specs: hook create-container with its links and "
        "libraries grouped by directory (what ocihook cdi generate writes)",
        CDI_HOOK_OPTIONS,
    ),
    (
        ("cdi", "generate"),
        "generate a CDI spec for the host's NVIDIA GPUs (like nvidia-ctk cdi generate): each "
        "GPU by index and UUID, MIG devices, all; common edits for control nodes, driver "
        "files, IPC sockets and ocihook's create-container hook; the minimum cdiVersion",
        (
            Option(
                "--vendor",
                "--cdi-vendor",
                dest="vendor",
                default="nvidia.com",
                help="vendor part of the kind (nvidia.com; nvidia means nvidia.com); amd or "
                "intel: the spec of the host's AMD (amd.com/gpu) or Intel (intel.com/gpu) "
                "GPUs, each by index (Intel also card<N>) and all",
            ),
            Option(
                "--additional-gids",
                action="store_true",
                help="amd/intel: list the device nodes' groups in additionalGids "
                "(needs cdiVersion 0.7.0, which podman 4 and containerd 1.6/1.7 reject)",
            ),
            Option(
                "--class",
                "--cdi-class",
                dest="class",
                default="gpu",
                help="class part of the kind (gpu)",
            ),
            Option(
                "--device-name-strategy",
                action="append",
                choices=("index", "uuid", "type-index"),
                help="how devices are named; repeatable (index and uuid)",
            ),
            Option(
                "--format",
                choices=("json", "yaml"),
                help="output format (from --output's extension, else yaml)",
            ),
            Option("--output", metavar="PATH", help="write the spec here, atomically (stdout)"),
            Option(
                "--warm-cache",
                action="store_true",
                help=(
                    "also fill the start-path cache: discovery, the configuration file's "
                    "parse and the start path's compiled modules; root's /run/ocihook as "
                    "root (the boot unit), else the user's own /run/user/<uid>/ocihook"
                ),
            ),
            Option(
                "--mode",
                "--discovery-mode",
                dest="mode",
                default="auto",
                metavar="MODE",
                help="nvidia-ctk's discovery mode: auto (WSL2 or the GPUs, as the host has), "
                "nvml (--gpu-backend nvml) or wsl; its other modes are not generated (exit 2)",
            ),
            Option(
                "--device-id",
                "--device-ids",
                "--device",
                "--devices",
                dest="device_id",
                action="append",
                metavar="ID",
                help="only these GPUs and MIG devices: index, MIG i:j, GPU-/MIG- UUID, or all; "
                "repeatable or comma-separated (all)",
            ),
            Option(
                "--no-all-device",
                action="store_true",
                help="no device all (the union of the others)",
            ),
            Option(
                "--hook-free",
                action="store_true",
                help="a spec with no hook: each library mounted at DIR/<soname> for each "
                "--hook-free-dir DIR (/usr/lib, /usr/lib64); see docs/guide/cdi.md",
            ),
            Option("--hook-free-dir", action="append", metavar="DIR", help="see --hook-free"),
            Option(
                "--hook-path",
                metavar="PATH",
                help="the command the hooks run: an installed ocihook (default: this "
                "interpreter with -I -S, no launcher: about 1.4 ms less per container)",
            ),
            Option(
                "--disable-hook",
                "--disable-hooks",
                dest="disable_hook",
                action="append",
                metavar="NAME",
                help="leave out the part of the hook that stands for nvidia-ctk's hook NAME: "
                "create-symlinks, update-ldcache, enable-cuda-compat, "
                "disable-device-node-modification, or all; repeatable or comma-separated",
            ),
            Option(
                "--enable-hook",
                "--enable-hooks",
                dest="enable_hook",
                action="append",
                metavar="NAME",
                help="keep the part of nvidia-ctk's hook NAME although --disable-hook names it "
                "or all; repeatable or comma-separated",
            ),
            GPU_BACKEND_OPTION,
            *ROOT_OPTIONS,
        ),
    ),
    (
        ("hook", "create-symlinks"),
        "createContainer hook: create links inside the rootfs",
        (Option("--link", action="append", metavar="TARGET::LINK", help="link to create"),),
    ),
    (
        ("hook", "update-ldcache"),
        "createContainer hook: enter libraries into the container's /etc/ld.so.cache",
        (
            Option(
                "--lib",
                action="append",
                metavar="PATH[::FLAGS]",
                help="container path of a library (FLAGS: its ld.so.cache flags, 0x0303)",
            ),
        ),
    ),
)


def parse_fast(argv: Sequence[str]) -> Namespace | None:
    """Parse a well-formed fast command line without argparse (whose import costs ~5 ms).

    Returns ``None`` for anything unusual — help, an unknown command or option, a
    missing value — so that argparse parses it and prints its usual message
    (:func:`~ocihook.commands.fastopts.parse_options`).
    """
    found = [(w, o) for w, _h, o in COMMANDS if tuple(argv[: len(w)]) == w]
    return parse_options(*found[0], argv) if found else None


def load_settings(ns: Any, *, trust_environment: bool, **context: str) -> Any:
    """The operator's configuration for a fast command (:mod:`ocihook.config`): ``--config``,
    else ``$OCIHOOK_CONFIG`` — only when ``trust_environment`` (never for hooks: a
    createContainer hook registered without ``env`` inherits the image's environment) —,
    else ``/etc/ocihook/config.toml`` when it exists. Also points :mod:`ocihook.core.log` at the
    configured file and the system log (``log-syslog``), with ``context`` (``container``,
    ``bundle``) on every line.

    Raises:
        ConfigError: the file is unreadable or wrong.
    """
    from ..config.load import load_config
    from ..core import log

    cfg = load_config(ns.config, environ=None if trust_environment else {})
    log.configure(cfg.log_file or None, cfg.log_level, syslog=cfg.log_syslog, **context)
    return cfg


def host_root_from(ns: Any, cfg: Any = None) -> HostRoot:
    """The :class:`HostRoot` of the configuration with the root options given on the
    command line on top."""
    from ..core.hostroot import HostRoot

    base = cfg.host_root() if cfg is not None else HostRoot()
    return HostRoot(
        driver_root=os.path.abspath(ns.driver_root) if ns.driver_root else base.driver_root,
        dev_root=os.path.abspath(ns.dev_root) if ns.dev_root else base.dev_root,
        ldcache=ns.ldcache or base.ldcache,
        library_dirs=(*ns.library_path, *base.library_dirs),
    )


def _parsers() -> tuple[argparse.ArgumentParser, dict[tuple[str, ...], argparse.ArgumentParser]]:
    """The argparse parser of the fast commands, built from :data:`COMMANDS`, and each
    command's own parser by its words (``("cdi", "generate")``), whose usage line a usage
    error of that command shows."""
    import argparse

    p = argparse.ArgumentParser(
        prog="ocihook",
        description="GPU access for OCI containers (fast commands; `ocihook --help` lists all)",
    )
    sub = p.add_subparsers(dest="command", required=True)
    groups: dict[str, Any] = {}
    commands: dict[tuple[str, ...], argparse.ArgumentParser] = {}
    group_help = {
        "hook": (
            "hook mode: run as an OCI hook (state JSON on stdin)",
            "OCI hook entry points; the runtime writes the container state JSON on stdin.",
        ),
        "cdi": ("Container Device Interface specs", "CDI spec commands (see ocihook --help)."),
    }
    for words, help_text, options in COMMANDS:
        if len(words) == 1:
            cp = sub.add_parser(words[0], help=help_text, description=help_text)
        else:
            if words[0] not in groups:
                short, long = group_help[words[0]]
                group = sub.add_parser(words[0], help=short, description=long)
                groups[words[0]] = group.add_subparsers(dest="stage", required=True)
            cp = groups[words[0]].add_parser(words[1], help=help_text, description=help_text)
        commands[tuple(words)] = cp
        for o in options:
            kwargs: dict[str, Any] = {"action": o.action, "help": o.help, "dest": o.dest}
            if o.action != "store_true":
                kwargs["default"] = o.default
            if o.metavar:
                kwargs["metavar"] = o.metavar
            if o.choices is not None:
                kwargs["choices"] = o.choices
            cp.add_argument(*o.names, **kwargs)
    return p, commands


def parse_with_argparse(argv: Sequence[str]) -> Any:
    """Parse ``argv`` with argparse (help, and the usage errors :func:`parse_fast` leaves
    to it). An argument no command takes is reported by that command's parser, with its
    own usage line (``usage: ocihook edit [-h] [-b BUNDLE] ...``, ``ocihook edit: error:
    unrecognized arguments: --bogus``), exit 2.

    Raises:
        SystemExit: help was printed (0), or a usage error (2).
    """
    parser, commands = _parsers()
    ns, extra = parser.parse_known_args(list(argv))
    if extra:
        words = (ns.command, *([ns.stage] if getattr(ns, "stage", None) else []))
        commands.get(words, parser).error("unrecognized arguments: " + " ".join(extra))
    return ns


def _cmd_edit(ns: Any) -> int:
    from ..appliers.spec import edit_bundle
    from ..config.options import options_from_config

    cfg = load_settings(ns, trust_environment=True, bundle=ns.bundle)
    result = edit_bundle(
        ns.bundle, host_root_from(ns, cfg), dry_run=ns.dry_run, options=options_from_config(cfg)
    )
    if result.ignored and (result.cdi_devices or result.plan is not None):
        from ..request.policy import policy_note

        print(
            f"ocihook: {result.bundle.config_path}: {policy_note(result.ignored)}", file=sys.stderr
        )
    if result.cdi_devices:
        done = (
            "written"
            if result.written
            else ("not written (--dry-run)" if ns.dry_run else "already injected; unchanged")
        )
        names = ", ".join(result.cdi_devices)
        if not ns.quiet:
            print(
                f"ocihook: {result.bundle.config_path}: CDI devices {names}; {done}",
                file=sys.stderr,
            )
        return 0
    if result.plan is None and result.after != result.before:
        if not ns.quiet:
            done = "written" if result.written else "not written (--dry-run)"
            print(
                f"ocihook: {result.bundle.config_path}: nothing requested now; what ocihook "
                f"added earlier is taken out; {done}",
                file=sys.stderr,
            )
        return 0
    if result.plan is None:
        hooks = result.bundle.config.get("hooks")
        created = hooks.get("createContainer") if isinstance(hooks, dict) else None
        edited = isinstance(created, list) and any(
            isinstance(h, dict) and "create-container" in (h.get("args") or []) for h in created
        )
        if edited:
            why = "already edited by ocihook"
        elif result.ignored:
            from ..request.policy import policy_note

            why = "nothing requested: " + policy_note(result.ignored)
        else:
            why = (
                "nothing requested: NVIDIA_VISIBLE_DEVICES unset, empty or void"
                " (and no AMD_VISIBLE_DEVICES or INTEL_VISIBLE_DEVICES)"
            )
        if not ns.quiet:
            print(f"ocihook: {result.bundle.config_path}: {why}; unchanged", file=sys.stderr)
        return 0
    # An interactive command: what could not be given is always said (hooks stay quiet
    # unless -v, their stderr goes to the runtime's log).
    important = [w for w in result.plan.warnings if "not provided" in w or _UNCHECKED in w]
    _warn(result.plan.warnings if ns.verbose else important, True)
    edits = result.plan.edits
    count = len(result.plan.gpus) + len(result.plan.drm_gpus)
    summary = (
        f"{count} GPU{'' if count == 1 else 's'}, "
        f"{len(edits.device_nodes)} device nodes, "
        f"{len(edits.mounts)} mounts, {len(edits.symlinks)} links"
        + (
            f" ({'to be ' if ns.dry_run else ''}made in the rootfs, with its ld.so.cache)"
            if result.in_rootfs
            else ""
        )
    )
    if ns.diff:
        import difflib

        from ..oci.bundle import dump_json

        # compare documents, not formatting: the old one re-indented as the new one is
        # (dump_json: a lone surrogate from a \ud800 escape stays an escape)
        before = dump_json(result.bundle.config).decode()
        sys.stdout.writelines(
            difflib.unified_diff(
                before.splitlines(keepends=True),
                result.after.decode(errors="replace").splitlines(keepends=True),
                fromfile=result.bundle.config_path,
                tofile=result.bundle.config_path + (" (dry run)" if ns.dry_run else ""),
            )
        )
    elif ns.dry_run:
        print(f"ocihook: dry run, {result.bundle.config_path} unchanged; would add {summary}")
    if result.written:
        from ..core import log

        log.info("config.json edited", **result.plan.log_fields())
    if not ns.quiet and result.written:
        print(f"ocihook: {result.bundle.config_path}: added {summary}; written", file=sys.stderr)
    elif not ns.quiet and not ns.dry_run:
        print(
            f"ocihook: {result.bundle.config_path}: already edited by ocihook for this "
            f"request ({summary}); unchanged",
            file=sys.stderr,
        )
    return 0


def _toolkit_options(ns: Any) -> tuple[str, str, Any, Any] | None:
    """``cdi generate``'s options from ``nvidia-ctk cdi generate``, checked:
    ``(mode, gpu_backend, device_ids, hooks)`` (:mod:`ocihook.cdi.toolkitopts`'s
    ``check_mode``, ``parse_device_ids``, ``resolve_hooks``), or ``None`` after printing a
    usage error on stderr (one line; exit 2): a ``--mode`` ocihook does not generate, a
    malformed ``--device-id``, an unknown hook name, ``--enable-hook all``, or ``--mode
    nvml`` with ``--gpu-backend procfs``. A hook name that changes nothing in ocihook's
    spec is a note on stderr."""
    from ..cdi.toolkitopts import check_mode, parse_device_ids, resolve_hooks
    from ..core.errors import CdiError

    try:
        mode = check_mode(ns.mode)
        device_ids = parse_device_ids(ns.device_id)
        hooks, notes = resolve_hooks(ns.disable_hook, ns.enable_hook)
    except CdiError as e:
        print(f"ocihook: error[usage]: {e}", file=sys.stderr)
        return None
    backend = ns.gpu_backend
    if mode == "nvml" and backend == "procfs":
        print(
            "ocihook: error[usage]: --mode nvml enumerates the GPUs with NVML and "
            "--gpu-backend procfs without it: give one of them",
            file=sys.stderr,
        )
        return None
    for note in notes:
        print(f"ocihook: note: {note}", file=sys.stderr)
    return mode, "nvml" if mode == "nvml" else backend, device_ids, hooks


def _cmd_cdi_generate(ns: Any) -> int:
    from ..cdi.generate import (
        HOOK_FREE_DIRS,
        NAME_STRATEGIES,
        generate_spec,
        spec_bytes,
        spec_format,
        write_spec,
    )
    from ..cdi.names import validate_class, validate_vendor
    from ..core.errors import CdiError, DiscoveryError
    from ..discovery.nvidia import discover

    # --format, --gpu-backend and --device-name-strategy are checked by the parser (exit 2)
    assert set(ns.device_name_strategy) <= set(NAME_STRATEGIES)
    checked = _toolkit_options(ns)
    if checked is None:
        return 2
    mode, backend, device_ids, hooks = checked
    for flag, check, value in (
        ("--vendor", validate_vendor, ns.vendor),
        ("--class", validate_class, getattr(ns, "class")),
    ):
        try:
            check(value)
        except CdiError as e:
            raise CdiError(e.message, field=flag, value=value, hint=e.hint) from None
    if ns.output is not None and not ns.output:
        raise CdiError("must name a file", field="--output", value=ns.output)
    if ns.hook_path is not None and not os.path.isabs(ns.hook_path):
        raise CdiError("must be an absolute path", field="--hook-path", value=ns.hook_path)
    command = (ns.hook_path,) if ns.hook_path else None
    cfg = load_settings(ns, trust_environment=True)
    fmt = spec_format(ns.format, ns.output)
    drm_vendors = {"amd": "amd", "amd.com": "amd", "intel": "intel", "intel.com": "intel"}
    if ns.vendor in drm_vendors:
        from ..cdi.generate import generate_drm_spec
        from ..discovery.drm import discover_vendor

        if getattr(ns, "class") != "gpu" or set(ns.device_name_strategy) - {"index"}:
            raise CdiError(
                "AMD and Intel specs have class gpu and devices named by index",
                field="--class/--device-name-strategy",
            )
        nvidia_only = [
            flag
            for flag, given in (
                ("--mode", mode != "auto"),
                ("--device-id", device_ids is not None),
                ("--disable-hook", bool(ns.disable_hook)),
                ("--enable-hook", bool(ns.enable_hook)),
            )
            if given
        ]
        if nvidia_only:
            raise CdiError(
                "AMD and Intel specs have every GPU and no toolkit hooks: the option is "
                "for NVIDIA specs",
                field=", ".join(nvidia_only),
            )
        drm_host = discover_vendor(drm_vendors[ns.vendor], host_root_from(ns, cfg))
        drm_spec = generate_drm_spec(
            drm_host,
            additional_gids=ns.additional_gids,
            all_device=not ns.no_all_device,
            hook_command=command,
        )
        _warn(drm_host.warnings, ns.verbose)
        write_spec(spec_bytes(drm_spec, fmt), ns.output)
        return 0
    root = host_root_from(ns, cfg)
    host = discover(root, gpu_backend=backend)  # never the cache: this is the refresh
    wsl = host.wsl is not None and (mode == "wsl" or not host.gpus)
    if mode == "wsl" and host.wsl is None:
        raise DiscoveryError(
            "this host is not WSL2: it has no /dev/dxg",
            path=root.dev("/dev/dxg"),
            field="--mode",
            value=ns.mode,
            hint="leave --mode out (auto)",
        )
    if wsl:
        host = host.replace(gpus=())  # WSL2's spec: /dev/dxg serves every GPU
        if device_ids is not None or ns.no_all_device:
            print(
                "ocihook: note: --device-id and --no-all-device have no effect on WSL2: the "
                "spec's one device, all, is /dev/dxg, which serves every GPU",
                file=sys.stderr,
            )
    if ns.warm_cache:
        _warm_discovery_cache(root, cfg.source)
    vendor = "nvidia.com" if ns.vendor == "nvidia" else ns.vendor
    spec = generate_spec(
        host,
        vendor=vendor,
        device_class=getattr(ns, "class"),
        name_strategies=tuple(ns.device_name_strategy),
        device_ids=device_ids,
        all_device=not ns.no_all_device,
        hooks=hooks,
        hook_command=command,
        hook_free=(ns.hook_free_dir or list(HOOK_FREE_DIRS))
        if ns.hook_free or ns.hook_free_dir
        else None,
    )
    _warn(host.warnings, ns.verbose)
    write_spec(spec_bytes(spec, fmt), ns.output)
    return 0


def _warm_discovery_cache(root: HostRoot, config: str | None) -> None:
    """Fill the discovery cache (:mod:`ocihook.discovery.cache`) for the capability sets
    containers ask for most (the default ``utility,compute``, and ``all``), so that the
    next GPU container's start skips discovery, store the parse of the configuration
    file ``config`` (:func:`ocihook.config.load.store_config_parse`) and write the start
    path's module image (:func:`ocihook.core.modimage.write_image`), in the store this
    process fills (:func:`ocihook.linux.cachestore.own_store`): root's ``/run/ocihook``
    for the host's root (the boot unit), the user's own ``/run/user/<uid>/ocihook`` for
    anyone else, a rootless engine's user among them. A user without a store of their own
    is told so on stderr and nothing is cached; a failure is a debug log line, never an
    error."""
    from ..linux.cachestore import USER_RUNTIME_DIR, own_store

    directory = own_store()
    if directory is None:
        print(
            "ocihook: warning: --warm-cache: not root and no store of this user's own "
            f"({USER_RUNTIME_DIR}/<uid>, a directory of this user's with no group or other "
            "access, as systemd-logind makes it), so nothing was cached; the spec is "
            "written all the same",
            file=sys.stderr,
        )
        return
    from ..core.vocab import DRIVER_CAPABILITIES
    from ..discovery.nvidia import discover_cached

    for caps in (("compute", "utility"), tuple(DRIVER_CAPABILITIES)):
        try:
            discover_cached(root, capabilities=caps, cache_dir=directory, warm=True)
        except OcihookError:
            break
    if config is not None:
        from ..config.load import store_config_parse

        store_config_parse(config)
    from ..core.modimage import write_image
    from ..core.startpath import START_PATH_MODULES

    write_image(START_PATH_MODULES, directory)


def _refuse_cdi_names(config: dict[str, Any], path: str, policy: Any, request: Any) -> None:
    """Raise :class:`RequestError` when ``NVIDIA_VISIBLE_DEVICES`` (``request``),
    ``AMD_VISIBLE_DEVICES`` or ``INTEL_VISIBLE_DEVICES`` holds a qualified CDI name: the
    hook modes have no CDI path, and every vendor's name gets the same answer, before
    anything about the container is checked."""
    from ..core.errors import RequestError
    from ..request.drm import drm_cdi_entries
    from ..request.nvidia import classify_device

    nvidia_field = (
        "process.env[NVIDIA_VISIBLE_DEVICES]" if request.source == "process.env" else request.source
    )
    found = [(nvidia_field, d) for d in request.devices if classify_device(d) == "cdi"]
    found += [(f"process.env[{v}]", d) for v, d in drm_cdi_entries(config, policy=policy)]
    if found:
        field, entry = found[0]
        raise RequestError(
            "CDI device names are injected from the CDI registry by spec mode, not here",
            path=path,
            field=field,
            value=entry,
            hint="use spec mode (ocihook edit) or a CDI-aware runtime, or request the GPU by index",
        )


def _cmd_hook(ns: Any, stdin: bytes | None = None) -> int:
    from ..oci import bundle as _bundle

    state = _bundle.parse_state(read_stdin() if stdin is None else stdin)
    b = _bundle.load_bundle(state.bundle, hint="the bundle comes from the state JSON on stdin")
    usage = helper_stage_error(ns)  # after the state: a runtime's call is judged as such
    if usage is not None:
        print(f"ocihook: error[usage]: {usage}", file=sys.stderr)
        return 2
    if ns.stage in INJECT_STAGES:
        from ..config.options import options_from_config
        from ..core import log
        from ..request.drm import drm_requests_from_spec
        from ..request.nvidia import request_from_spec

        cfg = load_settings(ns, trust_environment=False, container=state.id, bundle=state.bundle)
        options = options_from_config(cfg)
        request = request_from_spec(b.config, path=b.config_path, policy=options.policy)
        drm_requests = drm_requests_from_spec(b.config, path=b.config_path, policy=options.policy)
        _refuse_cdi_names(b.config, b.config_path, options.policy, request)
        from ..request.policy import ignored_by_policy, policy_note

        # hook mode has no CDI path: annotations are never read here
        ignored = ignored_by_policy(b.config, options.policy, ())
        if ignored:
            note = policy_note(ignored)
            log.info("request ignored", stage=ns.stage, reason=note)
            print(f"ocihook: {b.config_path}: {note}", file=sys.stderr)
        if request.is_void and not drm_requests:
            from ..request.nvidia import void_reason

            log.debug(
                "nothing requested",
                stage=ns.stage,
                reason=policy_note(ignored) if ignored else void_reason(request, b.config),
                source=request.source,
            )
            return 0
        from ..appliers.live import inject

        cgroups = options.cgroups and not ns.no_cgroups
        if not cgroups:
            print("ocihook: --no-cgroups: no device cgroup rules added", file=sys.stderr)
        plan = inject(
            state,
            b,
            request,
            host_root_from(ns, cfg),
            cgroups=cgroups,
            stage=ns.stage,
            options=options,
            drm_requests=drm_requests,
        )
        log.info("gpus given", stage=ns.stage, **plan.log_fields())
        _warn([w for w in plan.warnings if ns.verbose or _UNCHECKED in w], True)
        return 0
    if ns.stage == "poststop":
        from ..appliers.live.leftovers import remove_recorded

        _removed, kept = remove_recorded(b)
        _warn(kept, True)
        return 0
    run_helper_stage(ns, b)
    return 0


def _fold(word: str) -> str:
    return word.lower().replace("-", "").replace("_", "")


#: Every ``ocihook hook`` stage word: the injecting stages, then the helpers that
#: ``config.json`` edits and CDI specs register.
HOOK_STAGES = tuple(words[1] for words, _h, _o in COMMANDS if words[0] == "hook")


def hook_stage_error(argv: Sequence[str]) -> str | None:
    """The usage error for ``ocihook hook STAGE ...`` when STAGE is missing or not one of
    :data:`HOOK_STAGES` (``None`` when it is, or for ``--help``): names the valid stages
    and, for a near miss (case, ``-`` or ``_``: ``createcontainer``, ``create_runtime``),
    the stage meant."""
    if list(argv[:1]) != ["hook"]:
        return None
    stage = argv[1] if len(argv) > 1 else ""
    if stage in HOOK_STAGES or stage in ("-h", "--help"):
        return None
    near = [s for s in HOOK_STAGES if _fold(s) == _fold(stage)]
    guess = f"; did you mean {near[0]}?" if near else ""
    said = f"hook stage {stage!r} is not" if stage else "no hook stage given: it must be"
    return (
        f"{said} one of {', '.join(INJECT_STAGES)} (inject the requested "
        f"GPUs; register under the OCI stage of the same name) or the helpers "
        f"{', '.join(s for s in HOOK_STAGES if s not in INJECT_STAGES)}{guess}"
    )


def run_fast(argv: Sequence[str], stdin: bytes | None = None) -> int:
    """Run a fast command (``edit`` or ``hook``) and return its exit code.

    ``ocihook hook`` with a missing or unknown stage, or a helper stage given nothing to
    do (:func:`hook_stage_error`, :func:`helper_stage_error`), is a usage error: one
    line, exit 2.

    Args:
        argv: the arguments after ``ocihook``.
        stdin: the hook's standard input when already read.
    """
    usage = hook_stage_error(argv)
    if usage is not None:
        print(f"ocihook: error[usage]: {usage}", file=sys.stderr)
        return 2
    ns: Any = parse_fast(argv) or parse_with_argparse(argv)
    try:
        if ns.command == "edit":
            return _cmd_edit(ns)
        if ns.command == "cdi":
            return _cmd_cdi_generate(ns)
        return _cmd_hook(ns, stdin)
    except OcihookError as e:
        _print_error(e)
        return exit_code_for(e)
