"""The helper hook stages that ``config.json`` edits and CDI specs register: ``ocihook hook
create-container`` (soname links, the container's ``ld.so.cache``, the ``/proc/driver/nvidia``
mask, CUDA forward compatibility), ``hook cdi`` (the same with its links and libraries
grouped by directory: what ``ocihook cdi generate`` writes, :mod:`ocihook.cdi.hookargs`),
``hook create-symlinks`` and ``hook update-ldcache``.

``hook cdi`` runs on every start of a container given a device of ocihook's CDI spec, so
:func:`run_cdi_hook` is reached from :func:`ocihook._main.main` without the fast commands'
module (:mod:`ocihook.commands.fast`, its command table and the no-GPU exit): this module
imports its options' parser (:mod:`ocihook.commands.fastopts`) and, when it runs, only the
modules the work needs. The fast commands' table takes the options from here, so the two
parse one command line alike; anything :func:`~ocihook.commands.fastopts.parse_options`
leaves (help, a usage error) goes to the fast commands' argparse parser.
"""

from __future__ import annotations

import sys

from .fastopts import Option, parse_options

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any

    from ..oci.bundle import Bundle
    from ..plan.compat import CudaCompat
    from .fastopts import Namespace

__all__ = [
    "CDI_HOOK_OPTIONS",
    "CREATE_CONTAINER_OPTIONS",
    "HELPER_WORK",
    "helper_stage_error",
    "parse_cdi_hook",
    "parse_cuda_compat_arg",
    "run_cdi_hook",
    "run_helper_stage",
]

#: The options of ``hook create-container`` (``hook cdi`` takes them too, but ``--link``
#: and ``--lib``).
CREATE_CONTAINER_OPTIONS = (
    Option("--link", action="append", metavar="TARGET::LINK", help="link to create"),
    Option(
        "--lib",
        action="append",
        metavar="PATH[::FLAGS]",
        help="container path of a library (FLAGS: its ld.so.cache flags, 0x0303: "
        "its file is not read)",
    ),
    Option(
        "--cuda-compat",
        metavar="DIR::HOST_DRIVER[::HOST_CUDA]",
        help="use the image's CUDA compat libraries in DIR if newer than the host "
        "driver (version or branch; HOST_CUDA: the CUDA version it supports)",
    ),
    Option(
        "--mask-proc",
        metavar="HOST_DIR",
        help="mask /proc/driver/nvidia with copies from HOST_DIR",
    ),
    Option(
        "--proc-gpu",
        action="append",
        metavar="BUS_ID",
        help="gpus/ entry of HOST_DIR to show (with --mask-proc)",
    ),
    Option(
        "--proc-gpus-from-devices",
        action="store_true",
        help="also show the gpus/ entries of the GPUs whose /dev/nvidiaN nodes "
        "config.json gives the container (CDI specs)",
    ),
    Option(
        "--ld-so-conf",
        action="store_true",
        help="also list the --lib directories the image's ld.so.conf lacks in "
        "/etc/ld.so.conf.d/00-ocihook.conf, so that the image's own ldconfig keeps "
        "them (CDI specs)",
    ),
)

#: The options of ``hook cdi``: the writing version, the grouped links and libraries, and
#: :data:`CREATE_CONTAINER_OPTIONS` but ``--link`` and ``--lib``.
CDI_HOOK_OPTIONS = (
    Option(
        "--ocihook-version",
        metavar="VERSION",
        help="the ocihook that wrote the spec (for doctor and cdi list; not read here)",
    ),
    Option(
        "--links",
        action="append",
        metavar="DIR::NAME/TARGET[::...]",
        help="links DIR/NAME to TARGET",
    ),
    Option(
        "--libs",
        action="append",
        metavar="DIR::FLAGS::NAME[::...]",
        help="libraries DIR/NAME with ld.so.cache FLAGS (0x0303; empty: read the file)",
    ),
    *(o for o in CREATE_CONTAINER_OPTIONS if o.dest not in ("link", "lib")),
)

#: The option of each helper stage that gives it something to do (``dest`` names).
HELPER_WORK = {
    "create-container": ("link", "lib", "mask_proc", "cuda_compat"),
    "cdi": ("links", "libs", "mask_proc", "cuda_compat"),
    "create-symlinks": ("link",),
    "update-ldcache": ("lib",),
}


def helper_stage_error(ns: Any) -> str | None:
    """The usage error for a helper stage given nothing to do (``ocihook hook
    create-container`` without ``--link``, ``--lib``, ``--mask-proc`` or
    ``--cuda-compat``: most likely meant as the createContainer stage, which it is not)."""
    work = HELPER_WORK.get(ns.stage or "")
    if work is None or any(getattr(ns, dest) for dest in work):
        return None
    flags = ", ".join("--" + dest.replace("_", "-") for dest in work)
    return (
        f"hook {ns.stage} has nothing to do (none of {flags}): it is a helper that "
        "config.json edits and CDI specs register with arguments; to inject GPUs at the "
        "createContainer stage, register 'ocihook hook createContainer'"
    )


def parse_cuda_compat_arg(value: str) -> CudaCompat:
    """The :class:`~ocihook.plan.compat.CudaCompat` of ``--cuda-compat
    DIR::HOST_DRIVER[::HOST_CUDA]`` (``/usr/local/cuda/compat::550.127.05::12.4``);
    ``DIR::HOST_MAJOR`` (``...::550``), as
    registered by older versions, is accepted too.

    Raises:
        ApplyError: a relative ``DIR``, or versions that are not dot-separated numbers.
    """
    from ..core.errors import ApplyError
    from ..core.vocab import version_tuple
    from ..plan.compat import CudaCompat

    directory, _, rest = value.partition("::")
    host, _, cuda = rest.partition("::")
    driver_ok = (host.isascii() and host.isdigit() and len(host) <= 9) or version_tuple(
        host
    ) is not None
    cuda_ok = not cuda or version_tuple(cuda) is not None
    if not directory.startswith("/") or not driver_ok or not cuda_ok:
        raise ApplyError(
            "--cuda-compat must be DIR::HOST_DRIVER[::HOST_CUDA]",
            field="--cuda-compat",
            value=value,
        )
    major = int(host.split(".")[0])
    return CudaCompat(directory, major, host if "." in host else "", cuda)


def run_helper_stage(ns: Any, bundle: Bundle) -> None:
    """Run the helper stage ``ns.stage`` (``cdi``, ``create-container``, ``create-symlinks``
    or ``update-ldcache``; ``ns`` as :func:`~ocihook.commands.fastopts.parse_options` gives
    it) on ``bundle``: ``hook cdi`` expands its grouped arguments
    (:func:`ocihook.cdi.hookargs.expand_links`, :func:`~ocihook.cdi.hookargs.expand_libs`)
    and is ``hook create-container`` from there
    (:func:`ocihook.appliers.live.hooks.create_container_hook`).

    Raises:
        ApplyError: malformed arguments, or a change that cannot be made (undone first).
    """
    from ..appliers.live import hooks

    if ns.stage == "cdi":
        from ..cdi.hookargs import expand_libs, expand_links

        ns.link, ns.lib = expand_links(ns.links), expand_libs(ns.libs)
        ns.stage = "create-container"
    if ns.stage == "create-container":
        mask = None
        if ns.mask_proc:
            from ..plan.procmask import ProcMask

            gpu_dirs = tuple(ns.proc_gpu)
            if ns.proc_gpus_from_devices:
                from ..appliers.live.procmask import gpu_dirs_of_devices

                found = gpu_dirs_of_devices(ns.mask_proc, bundle.config)
                gpu_dirs += tuple(d for d in found if d not in gpu_dirs)
            mask = ProcMask(host_dir=ns.mask_proc, gpu_dirs=gpu_dirs)
        compat = parse_cuda_compat_arg(ns.cuda_compat) if ns.cuda_compat else None
        hooks.create_container_hook(bundle, ns.link, ns.lib, mask, compat, ns.ld_so_conf)
    elif ns.stage == "create-symlinks":
        hooks.create_symlinks_hook(bundle, ns.link)
    elif ns.stage == "update-ldcache":
        hooks.update_ldcache_hook(bundle, ns.lib)


def parse_cdi_hook(argv: list[str]) -> Namespace | None:
    """``argv`` (the arguments after ``ocihook``) parsed as ``hook cdi`` with
    :data:`CDI_HOOK_OPTIONS`; ``None`` for any other command line, or one with help, an
    unknown option or a missing value (the fast commands' parser reports it)."""
    return parse_options(("hook", "cdi"), CDI_HOOK_OPTIONS, argv)


def run_cdi_hook(ns: Namespace, stdin: bytes) -> int:
    """``ocihook hook cdi`` (``ns`` from :func:`parse_cdi_hook`) with the state JSON
    ``stdin``: the bundle the state names, then :func:`run_helper_stage`. Returns the exit
    code: 0; 2 for a hook given nothing to do (:func:`helper_stage_error`, one line);
    :data:`ocihook.core.errors.EXIT_CODES`'s for an error (one line,
    ``ocihook: error[<reference>]: <message>``), as ``ocihook hook create-container``."""
    from ..core.errors import OcihookError, exit_code_for
    from ..oci.bundle import load_bundle, parse_state

    try:
        state = parse_state(stdin)
        bundle = load_bundle(state.bundle, hint="the bundle comes from the state JSON on stdin")
        usage = helper_stage_error(ns)  # after the state: a runtime's call is judged as such
        if usage is not None:
            print(f"ocihook: error[usage]: {usage}", file=sys.stderr)
            return 2
        run_helper_stage(ns, bundle)
    except OcihookError as e:
        print(f"ocihook: error[{e.reference}]: {e}", file=sys.stderr)
        return exit_code_for(e)
    return 0
