"""The container engines ocihook registers with: each one's configuration read (which
runtimes and hooks it registers, for ``ocihook doctor``) and edited (``ocihook runtime
configure``, as ``nvidia-ctk runtime configure`` does for the NVIDIA toolkit), one module
per engine: :mod:`.docker`, :mod:`.containerd`, :mod:`.crio` and :mod:`.hooksd` (podman,
and CRI-O's OCI hooks); :mod:`.common` and :mod:`.tomledit` hold what they share.

=============  ==========================================  ===================================
engine         file (``--config``)                         what is written
=============  ==========================================  ===================================
docker         ``/etc/docker/daemon.json``                 ``runtimes.ocihook.path`` = the
                                                           wrapper; ``default-runtime``
                                                           (``--set-as-default``);
                                                           ``features.cdi`` (``--cdi``)
containerd     ``/etc/containerd/config.toml``             a CRI runtime ``ocihook``
                                                           (``runtime_type``
                                                           ``io.containerd.runc.v2``,
                                                           ``options.BinaryName`` = the
                                                           wrapper; other settings copied
                                                           from the ``runc`` runtime when it
                                                           is configured, else a ``runc``
                                                           entry is added too: the file's
                                                           ``runtimes`` table replaces
                                                           containerd's built-in one);
                                                           ``default_runtime_name``
                                                           (``--set-as-default``);
                                                           ``enable_cdi``, ``cdi_spec_dirs``
                                                           (``--cdi``). Config versions 2
                                                           (containerd 1.x, plugin
                                                           ``io.containerd.grpc.v1.cri``) and
                                                           3 (2.x, ``io.containerd.cri.v1.
                                                           runtime``); comments and layout
                                                           kept (tomlkit)
crio           ``/etc/crio/crio.conf.d/99-ocihook.conf``   ``crio.runtime.runtimes.ocihook``
                                                           (``runtime_path`` = the wrapper,
                                                           ``runtime_type = "oci"``);
                                                           ``crio.runtime.default_runtime``
                                                           (``--set-as-default``);
                                                           ``crio.runtime.cdi_spec_dirs``
                                                           (``--cdi``; CRI-O always reads CDI)
podman         ``/usr/share/containers/oci/hooks.d/        the hooks.d 1.0.0 file of
               ocihook-prestart.json``                     ``packaging/hooks.d/ocihook-
                                                           prestart.json.in`` with this
                                                           interpreter, and beside it
                                                           ``ocihook-poststop.json``
                                                           (:func:`configure_all`; CRI-O
                                                           reads the same directory)
=============  ==========================================  ===================================

An existing file that says the same already is left byte-identical. A file that is not
valid JSON (RFC 8259: no ``NaN``) / TOML, or has a value of the wrong type where ocihook
writes, is refused with :class:`~ocihook.core.errors.EngineConfigError` (exit 13) and left
untouched; so is a TOML layout tomlkit cannot edit faithfully (tables written with dotted
keys or inline on the path ocihook writes: every TOML edit is read back with
:mod:`tomllib` and must differ from the file only by what ocihook meant to write), and a
containerd file whose ``imports`` bring in a file that configures the CRI plugin (that
file would override the registration: it is the one to configure). Writes are atomic
and keep the file's mode (:func:`ocihook.oci.bundle.write_bytes_atomic`).

:mod:`tomlkit` is imported only by the TOML edits, only when a TOML file is edited.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from . import containerd, crio, docker, hooksd
from .common import (
    CDI_SPEC_DIRS,
    NVIDIA_TOOLKIT_PROGRAMS,
    RUNTIME_NAME,
    Change,
    EngineConfig,
    Registration,
    default_runtime_path,
    describe,
    read_file,
    write_change,
)
from .containerd import CONTAINERD_PLUGINS, configure_containerd, read_containerd, resolve_imports
from .crio import configure_crio, read_crio
from .docker import configure_docker, read_docker
from .hooksd import (
    HOOKS_D_DIRS,
    HOOKS_D_STAGES,
    configure_hooks_d,
    hooks_d_document,
    poststop_path,
    read_hooks_d,
)

__all__ = [
    "CDI_SPEC_DIRS",
    "CONTAINERD_PLUGINS",
    "DEFAULT_PATHS",
    "ENGINES",
    "HOOKS_D_DIRS",
    "HOOKS_D_STAGES",
    "NVIDIA_TOOLKIT_PROGRAMS",
    "READERS",
    "RUNTIME_NAME",
    "RUNTIME_NAME_CHARS",
    "Change",
    "EngineConfig",
    "Registration",
    "check_runtime_name",
    "configure",
    "configure_all",
    "configure_containerd",
    "configure_crio",
    "configure_docker",
    "configure_hooks_d",
    "default_runtime_path",
    "describe",
    "hooks_d_document",
    "poststop_path",
    "read_containerd",
    "read_crio",
    "read_docker",
    "read_hooks_d",
    "resolve_imports",
    "write_change",
]

#: The engines, by the names ``--runtime`` takes.
ENGINES = ("docker", "containerd", "crio", "podman")
#: The file each engine's configuration is written to when ``--config`` is not given.
DEFAULT_PATHS = {
    "docker": docker.DEFAULT_PATH,
    "containerd": containerd.DEFAULT_PATH,
    "crio": crio.DEFAULT_PATH,
    "podman": hooksd.DEFAULT_PATH,
}
#: Each engine's reader: ``reader(config_root)`` -> :class:`EngineConfig`.
READERS: dict[str, Callable[[str], EngineConfig]] = {
    "docker": read_docker,
    "containerd": read_containerd,
    "crio": read_crio,
    "podman": read_hooks_d,
}


def configure(
    engine: str,
    *,
    path: str | None = None,
    runtime_path: str | None = None,
    set_as_default: bool = False,
    cdi: bool = False,
    python: str | None = None,
    runtime_name: str = RUNTIME_NAME,
) -> Change:
    """Compute the change ``ocihook runtime configure`` makes to ``engine``'s file;
    nothing is written (:func:`write_change` does).

    Args:
        engine: one of :data:`ENGINES`.
        path: the file (default :data:`DEFAULT_PATHS`; a symbolic link: its target);
            for ``podman`` a directory, or a missing path whose name does not end in
            ``.json`` (the only files hooks.d directories are read for), means
            ``ocihook-prestart.json`` inside it.
        runtime_path: the wrapper's absolute path (default :func:`default_runtime_path`).
        set_as_default: make ocihook the engine's default runtime (docker, containerd,
            crio).
        cdi: enable CDI in the engine (docker, containerd, crio).
        python: the hook's interpreter for ``podman`` (default this one).
        runtime_name: the name the runtime is registered under (docker, containerd,
            crio): ``ocihook`` by default, ``nvidia`` to stand in for the NVIDIA toolkit's
            (``--runtime=nvidia``, a RuntimeClass ``handler: nvidia``); see
            :func:`check_runtime_name`.

    Raises:
        EngineConfigError: the existing file is unreadable or malformed (it is left as it
            was), or the wrapper is not found.
        ValueError: an unknown engine, ``set_as_default`` or a runtime name other than the
            default for podman, or a runtime name :func:`check_runtime_name` refuses.
    """
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r}")
    check_runtime_name(runtime_name)
    # a link (a config kept elsewhere) is followed: its target is edited, the link stays
    given = os.path.abspath(path or DEFAULT_PATHS[engine])
    path = os.path.realpath(given)
    if engine == "podman":
        if runtime_name != RUNTIME_NAME:
            raise ValueError(
                "--nvidia-runtime-name: podman has no runtime entry here; ocihook registers "
                "as a hooks.d hook"
            )
        if set_as_default:
            raise ValueError(
                "--set-as-default: podman has no runtime entry here; ocihook registers "
                "as a hooks.d hook (to run the wrapper, use podman --runtime ocihook-runtime)"
            )
        # podman and CRI-O read only *.json files of a hooks.d directory: any other name
        # is a directory, made when missing
        if os.path.isdir(path) or (not os.path.exists(path) and not path.endswith(".json")):
            path = os.path.join(path, os.path.basename(DEFAULT_PATHS["podman"]))
        before = read_file(path)
        after, notes = configure_hooks_d(before, path=path, python=python)
        if cdi:
            notes = (*notes, "podman reads CDI specs itself: --device nvidia.com/gpu=0")
        return Change(engine, path, before, after, notes)
    runtime_path = os.path.abspath(runtime_path) if runtime_path else default_runtime_path()
    before = read_file(path)
    edit = {
        "docker": configure_docker,
        "containerd": configure_containerd,
        "crio": configure_crio,
    }[engine]
    extra = {"config_path": given} if engine == "containerd" else {}
    after, notes = edit(
        before,
        path=path,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=cdi,
        runtime_name=runtime_name,
        **extra,
    )
    return Change(engine, path, before, after, notes)


#: What a runtime name may be: a TOML bare key and a JSON key every engine takes as is
#: (letters, digits, ``-``, ``_``; containerd and CRI-O name runtimes by TOML table keys,
#: a Kubernetes RuntimeClass ``handler`` must be a DNS label).
RUNTIME_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_")


def check_runtime_name(name: str) -> None:
    """Refuse a runtime name an engine or a RuntimeClass ``handler`` cannot take: empty,
    longer than 63 characters (a DNS label), or with characters outside
    :data:`RUNTIME_NAME_CHARS`, or starting or ending with ``-`` or ``_``.

    Raises:
        ValueError: naming the value and the rule.
    """
    if (
        not name
        or len(name) > 63
        or not set(name) <= RUNTIME_NAME_CHARS
        or name[0] in "-_"
        or name[-1] in "-_"
    ):
        raise ValueError(
            f"invalid runtime name {name!r}: use 1 to 63 lower-case letters, digits, '-' "
            "or '_', starting and ending with a letter or digit (e.g. ocihook, nvidia)"
        )


def configure_all(
    engine: str,
    *,
    path: str | None = None,
    runtime_path: str | None = None,
    set_as_default: bool = False,
    cdi: bool = False,
    python: str | None = None,
    runtime_name: str = RUNTIME_NAME,
) -> tuple[Change, ...]:
    """Every file ``ocihook runtime configure`` changes for ``engine``: the one of
    :func:`configure` (same arguments), and for ``podman`` also the poststop hooks.d file
    beside it (:func:`poststop_path`; ``ocihook hook poststop``, which removes what the
    prestart hook made in a reused rootfs). Nothing is written.

    Raises:
        EngineConfigError: an existing file is unreadable or malformed (:func:`configure`).
        ValueError: as :func:`configure`.
    """
    first = configure(
        engine,
        path=path,
        runtime_path=runtime_path,
        set_as_default=set_as_default,
        cdi=cdi,
        python=python,
        runtime_name=runtime_name,
    )
    if engine != "podman":
        return (first,)
    other = poststop_path(first.path)
    before = read_file(other)
    after, _notes = configure_hooks_d(before, path=other, python=python, stage="poststop")
    return first, Change(engine, other, before, after)
