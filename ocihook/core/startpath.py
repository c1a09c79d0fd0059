"""The start path: the entry points that run on every container start (and at boot), and
the modules each may load.

Each :class:`EntryPoint` names one way ocihook is started and the modules a fresh
interpreter (``python -I -S``: no ``site``, so nothing but the entry point's own imports)
has loaded when it is done, beyond the bare interpreter's: the ocihook modules exactly, and
the standard library's as measured on CPython 3.11. ``tests/contract/test_import_budget.py``
runs each entry point and checks what it loaded against this table; a module that is on
the start path (:data:`START_PATH_MODULES`) is written for it: it avoids the imports in
:data:`HEAVY` (``TYPE_CHECKING = False`` rather than importing :mod:`typing`, stdlib
imports inside the functions that need them).

Nothing on the start path imports this module.
"""

from __future__ import annotations

from typing import NamedTuple

#: Modules the start path does not load, and why: each costs a good part of an interpreter
#: start (``python -X importtime``), or belongs to a command that is not run per container.
HEAVY = {
    "json": "core.jsonfast reads and writes JSON with the C scanner (_json) alone",
    "re": "~10 ms with its compiler; the parsers here are str methods",
    "enum": "imported by re and signal; vocabularies are plain constants",
    "signal": "imports enum",
    "fnmatch": "imports re",
    "collections.abc": "annotations only, under TYPE_CHECKING",
    "typing": "~10 ms; annotations only, under TYPE_CHECKING",
    "dataclasses": "imports inspect and re; records are core.records classes",
    "argparse": "~5 ms; commands.fast parses well-formed fast commands itself",
    "base64": "imports re; appliers.editrecord uses binascii",
    "tomllib": "imports re, typing, datetime: a configuration file's parse is cached",
    "click": "the CLI of the commands that are not per container (commands.cli)",
    "jsonschema": "validation of files a person writes (config check, cdi validate)",
    "elftools": "pyelftools: ocihook list --check and doctor",
    "yaml": "PyYAML: CDI specs in YAML only",
    "tomlkit": "engine configuration files (runtime configure)",
    "grpc": "the Kubernetes plugins (ocihook.k8s)",
    "google": "protobuf, the Kubernetes plugins (ocihook.k8s)",
}


def _names(text: str) -> frozenset[str]:
    """The module names in ``text``, separated by spaces."""
    return frozenset(text.split())


#: What :mod:`tomllib` loads (CPython 3.11): the wrapper reads a configuration file with
#: it when the root-owned parse cache (``/run/ocihook``) has no entry for the file's text,
#: as for a test run as an ordinary user.
TOMLLIB_CLOSURE = _names(
    "_collections _datetime _functools _operator _sre _string _typing collections collections.abc "
    "contextlib copyreg datetime enum functools itertools keyword math operator re re._casefix "
    "re._compiler re._constants re._parser reprlib string tomllib tomllib._parser tomllib._re "
    "tomllib._types types typing typing.io typing.re warnings"
)


#: The modules of :data:`HEAVY` that :data:`TOMLLIB_CLOSURE` holds, and why.
TOMLLIB_HEAVY = {
    m: "tomllib imports it: the configuration file is parsed (no parse cache)"
    for m in ("tomllib", "re", "enum", "typing", "collections.abc")
}


class EntryPoint(NamedTuple):
    """One way the start path is entered.

    ``name`` is the key the budget test runs it by; ``command`` the command line (as a
    person would type it); ``what`` the case; ``ocihook`` the ocihook modules it loads
    (exactly); ``stdlib`` the standard library's modules it may load (measured; C modules
    such as ``_json`` and ``_struct`` included); ``heavy`` the modules of :data:`HEAVY` it
    loads all the same, each with the reason.
    """

    name: str
    command: str
    what: str
    ocihook: frozenset[str]
    stdlib: frozenset[str]
    heavy: dict[str, str] = {}  # noqa: RUF012 (a NamedTuple default is never mutated)


#: The entry points of the start path, in the order a container meets them.
ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint(
        "hook-void",
        "ocihook hook prestart",
        (
            "``ocihook hook prestart`` (any injecting stage) for a container that asks for "
            "nothing: the fast exit of :mod:`ocihook.commands.voidexit`"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook ocihook._main ocihook.commands ocihook.commands.voidexit ocihook.config "
            "ocihook.config.load ocihook.config.scan ocihook.core ocihook.core.errors "
            "ocihook.core.fastexit ocihook.core.lazy ocihook.core.vocab"
        ),
        stdlib=_names("__future__ _collections_abc _stat genericpath os os.path posixpath stat "),
    ),
    EntryPoint(
        "docker-hook-void",
        "nvidia-container-runtime-hook prestart",
        (
            "``nvidia-container-runtime-hook prestart`` (:mod:`ocihook.commands.dockerhook`'s "
            "script, what dockerd runs for ``--gpus``) for a container that asks for nothing"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook ocihook._main ocihook.commands ocihook.commands.voidexit ocihook.config "
            "ocihook.config.load ocihook.config.scan ocihook.core ocihook.core.errors "
            "ocihook.core.fastexit ocihook.core.lazy ocihook.core.vocab"
        ),
        stdlib=_names("__future__ _collections_abc _stat genericpath os os.path posixpath stat "),
    ),
    EntryPoint(
        "hook-gpu",
        "ocihook hook createRuntime --driver-root R --dev-root R",
        (
            "``ocihook hook createRuntime`` for a GPU container, roots on the command line, up to "
            "the check of the container's process (the rest needs root and a container)"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.live "
            "ocihook.appliers.live.cgroups ocihook.appliers.live.injection "
            "ocihook.appliers.live.libraries ocihook.appliers.live.procmask "
            "ocihook.appliers.live.procs ocihook.appliers.live.rootfs "
            "ocihook.appliers.live.undo ocihook.commands ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts "
            "ocihook.commands.voidexit ocihook.config ocihook.config.load "
            "ocihook.config.options ocihook.config.scan ocihook.config.validate ocihook.core "
            "ocihook.core.errors ocihook.core.fastexit ocihook.core.hostroot "
            "ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log ocihook.core.readfile "
            "ocihook.core.records ocihook.core.vocab ocihook.linux ocihook.linux.atomicfile "
            "ocihook.linux.ldcache ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci "
            "ocihook.oci.bundle ocihook.pipeline ocihook.pipeline.bundle ocihook.plan "
            "ocihook.plan.compat ocihook.plan.edits ocihook.request ocihook.request.drm "
            "ocihook.request.nvidia ocihook.request.policy ocihook.request.requirements "
            "ocihook.request.sources"
        ),
        stdlib=_names(
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _json _stat _struct errno fcntl "
            "genericpath os os.path posixpath stat struct"
        ),
    ),
    EntryPoint(
        "hook-create-container",
        "ocihook hook create-container --link ... --lib ...",
        (
            "the createContainer hook that CDI specs and ``ocihook edit`` register: links and the "
            "container's ld.so.cache"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.live "
            "ocihook.appliers.live.hooks ocihook.appliers.live.libraries "
            "ocihook.appliers.live.procmask ocihook.appliers.live.rootfs "
            "ocihook.appliers.live.undo ocihook.commands ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts "
            "ocihook.commands.voidexit ocihook.core ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log "
            "ocihook.core.records ocihook.core.vocab ocihook.linux ocihook.linux.atomicfile "
            "ocihook.linux.ldcache ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci "
            "ocihook.oci.bundle ocihook.plan ocihook.plan.compat ocihook.plan.procmask "
            # the image's loaders: which files each reads (ELF headers only)
            "ocihook.linux.elfscan ocihook.linux.loaders"
        ),
        stdlib=_names(
            "__future__ _collections_abc _contextvars _ctypes _json _stat _struct "
            "errno fcntl genericpath os os.path posixpath stat struct"
        ),
    ),
    EntryPoint(
        "hook-cdi",
        "ocihook hook cdi --links ... --libs ...",
        (
            "the createContainer hook that ``ocihook cdi generate`` writes into CDI specs: "
            "``hook create-container`` with its links and libraries grouped by directory"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook.linux.elfscan ocihook.linux.loaders "  # the image's loaders
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.live "
            "ocihook.appliers.live.hooks ocihook.appliers.live.libraries "
            "ocihook.appliers.live.procmask ocihook.appliers.live.rootfs "
            "ocihook.appliers.live.undo ocihook.cdi ocihook.cdi.hookargs ocihook.commands "
            "ocihook.commands.cdihook ocihook.commands.fastopts ocihook.core ocihook.core.errors "
            "ocihook.core.fastexit ocihook.core.jsonfast "
            "ocihook.core.lazy ocihook.core.log ocihook.core.records ocihook.core.vocab "
            "ocihook.linux ocihook.linux.atomicfile ocihook.linux.ldcache "
            "ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle "
            "ocihook.plan ocihook.plan.compat ocihook.plan.procmask"
        ),
        stdlib=_names(
            "__future__ _collections_abc _contextvars _ctypes _json _stat _struct "
            "errno fcntl genericpath os os.path posixpath stat struct"
        ),
    ),
    EntryPoint(
        "hook-poststop",
        "ocihook hook poststop",
        "``ocihook hook poststop``: remove what hook mode made in the rootfs",
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.live "
            "ocihook.appliers.live.leftovers ocihook.commands ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts "
            "ocihook.commands.voidexit ocihook.core ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log ocihook.core.records "
            "ocihook.linux ocihook.linux.atomicfile ocihook.linux.pathsafe ocihook.linux.syscalls "
            "ocihook.oci ocihook.oci.bundle"
        ),
        stdlib=_names(
            "__future__ _collections_abc _contextvars _json _stat errno fcntl "
            "genericpath os os.path posixpath stat"
        ),
    ),
    EntryPoint(
        "edit-void",
        "ocihook edit -b BUNDLE",
        "spec mode, ``ocihook edit`` of a bundle that asks for nothing",
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.spec ocihook.cdi ocihook.cdi.names ocihook.commands "
            "ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts ocihook.commands.voidexit "
            "ocihook.config "
            "ocihook.config.load ocihook.config.options ocihook.config.scan "
            "ocihook.config.validate ocihook.core ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.hostroot ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log "
            "ocihook.core.readfile ocihook.core.records ocihook.core.vocab ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.pathsafe ocihook.linux.syscalls "
            "ocihook.oci ocihook.oci.bundle ocihook.oci.edit ocihook.pipeline "
            "ocihook.pipeline.bundle ocihook.pipeline.cdinames ocihook.plan "
            "ocihook.plan.edits ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.sources"
        ),
        stdlib=_names(
            "__future__ _collections_abc _contextvars _json _stat errno fcntl "
            "genericpath os os.path posixpath stat"
        ),
    ),
    EntryPoint(
        "edit-gpu",
        "ocihook edit -b BUNDLE --driver-root R --dev-root R",
        (
            "spec mode, ``ocihook edit`` of a GPU bundle (links and ld.so.cache made in the "
            "rootfs), roots on the command line"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.live ocihook.appliers.live.hooks "
            "ocihook.appliers.live.libraries ocihook.appliers.live.procmask "
            "ocihook.appliers.live.rootfs ocihook.appliers.live.undo ocihook.appliers.spec "
            "ocihook.cdi ocihook.cdi.names ocihook.commands ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts "
            "ocihook.commands.voidexit ocihook.config ocihook.config.load "
            "ocihook.config.options ocihook.config.scan ocihook.config.validate ocihook.core "
            "ocihook.core.cudaversion ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.hostroot ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log "
            "ocihook.core.readfile ocihook.core.records ocihook.core.vocab ocihook.discovery "
            "ocihook.discovery.cache ocihook.discovery.devices ocihook.discovery.driverfiles "
            "ocihook.discovery.gpus ocihook.discovery.mig ocihook.discovery.nvidia "
            "ocihook.discovery.procfs ocihook.discovery.records ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.cachestore ocihook.linux.elfscan "
            "ocihook.linux.ldcache ocihook.linux.loaders ocihook.linux.pathsafe "
            "ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle ocihook.oci.edit "
            "ocihook.pipeline ocihook.pipeline.bundle ocihook.pipeline.cdinames "
            "ocihook.pipeline.compiled ocihook.pipeline.extras ocihook.plan "
            "ocihook.plan.build ocihook.plan.compat ocihook.plan.edits ocihook.plan.select "
            "ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.requirements ocihook.request.sources"
        ),
        stdlib=_names(
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _ctypes _json _stat _struct binascii "
            "errno fcntl genericpath os os.path posixpath stat "
            "struct zlib"
        ),
    ),
    EntryPoint(
        "edit-amd",
        "ocihook edit -b BUNDLE --driver-root R --dev-root R",
        (
            "spec mode, ``ocihook edit`` of a bundle asking for the AMD GPUs "
            "(AMD_VISIBLE_DEVICES=all)"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.spec ocihook.cdi ocihook.cdi.names ocihook.commands "
            "ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts ocihook.commands.voidexit "
            "ocihook.config "
            "ocihook.config.load ocihook.config.options ocihook.config.scan "
            "ocihook.config.validate ocihook.core ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.hostroot ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log "
            "ocihook.core.readfile ocihook.core.records ocihook.core.vocab ocihook.discovery "
            "ocihook.discovery.amd ocihook.discovery.devices ocihook.discovery.drm "
            "ocihook.discovery.procfs ocihook.discovery.records ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.pathsafe ocihook.linux.syscalls "
            "ocihook.oci ocihook.oci.bundle ocihook.oci.edit ocihook.pipeline "
            "ocihook.pipeline.bundle ocihook.pipeline.cdinames ocihook.plan "
            "ocihook.plan.build ocihook.plan.compat ocihook.plan.edits ocihook.plan.select "
            "ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.sources"
        ),
        stdlib=_names(
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _json _stat binascii errno "
            "fcntl genericpath os os.path posixpath stat"
        ),
    ),
    EntryPoint(
        "edit-intel",
        "ocihook edit -b BUNDLE --driver-root R --dev-root R",
        (
            "spec mode, ``ocihook edit`` of a bundle asking for the Intel GPUs "
            "(INTEL_VISIBLE_DEVICES=all)"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook._main ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.live ocihook.appliers.live.hooks "
            "ocihook.appliers.live.libraries ocihook.appliers.live.procmask "
            "ocihook.appliers.live.rootfs ocihook.appliers.live.undo ocihook.appliers.spec "
            "ocihook.cdi ocihook.cdi.names ocihook.commands ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts "
            "ocihook.commands.voidexit ocihook.config ocihook.config.load "
            "ocihook.config.options ocihook.config.scan ocihook.config.validate ocihook.core "
            "ocihook.core.errors ocihook.core.fastexit ocihook.core.hostroot "
            "ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log ocihook.core.readfile "
            "ocihook.core.records ocihook.core.vocab ocihook.discovery "
            "ocihook.discovery.devices ocihook.discovery.drm ocihook.discovery.intel "
            "ocihook.discovery.procfs ocihook.discovery.records ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.ldcache ocihook.linux.pathsafe "
            "ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle ocihook.oci.edit "
            "ocihook.pipeline ocihook.pipeline.bundle ocihook.pipeline.cdinames ocihook.plan "
            "ocihook.plan.build ocihook.plan.compat ocihook.plan.edits ocihook.plan.select "
            "ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.sources"
        ),
        stdlib=_names(
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _json _stat _struct binascii "
            "errno fcntl genericpath os os.path posixpath stat struct"
        ),
    ),
    EntryPoint(
        "cdi-generate",
        "ocihook cdi generate --output spec.json",
        "``ocihook cdi generate`` (boot and driver changes), JSON output",
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.core.readfile "
            "ocihook ocihook._main ocihook.cdi ocihook.cdi.generate ocihook.cdi.hookargs "
            "ocihook.cdi.names ocihook.cdi.spec ocihook.cdi.toolkitopts ocihook.core.version "
            "ocihook.commands "
            "ocihook.commands.cdihook "
            "ocihook.commands.fast ocihook.commands.fastopts ocihook.commands.voidexit "
            "ocihook.config ocihook.config.load ocihook.config.options ocihook.config.scan "
            "ocihook.config.validate ocihook.core ocihook.core.cudaversion ocihook.core.errors "
            "ocihook.core.fastexit ocihook.core.hostroot ocihook.core.jsonfast ocihook.core.lazy "
            "ocihook.core.log ocihook.core.records ocihook.core.vocab ocihook.discovery "
            "ocihook.discovery.devices ocihook.discovery.driverfiles ocihook.discovery.gpus "
            "ocihook.discovery.mig ocihook.discovery.nvidia ocihook.discovery.nvml "
            "ocihook.discovery.procfs ocihook.discovery.records ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.elfscan ocihook.linux.ldcache "
            "ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle "
            "ocihook.plan ocihook.plan.build ocihook.plan.compat ocihook.plan.edits "
            "ocihook.plan.select ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.sources"
        ),
        stdlib=_names(
            "__future__ _collections_abc _contextvars _json _stat _struct errno fcntl "
            "genericpath importlib importlib._bootstrap importlib._bootstrap_external os os.path "
            "posixpath stat struct warnings"
        ),
    ),
    EntryPoint(
        "runtime-void",
        "ocihook-runtime create -b BUNDLE ID",
        (
            "the ``ocihook-runtime`` wrapper for a container that asks for nothing, when it execs "
            "the runtime"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.core.readfile "
            "ocihook ocihook.commands ocihook.commands.runtime ocihook.config "
            "ocihook.config.load ocihook.config.scan ocihook.core ocihook.core.errors "
            "ocihook.core.fastexit ocihook.core.lazy ocihook.core.vocab ocihook.runtime"
        ),
        stdlib=_names("__future__ _collections_abc _stat genericpath os os.path posixpath stat "),
    ),
    EntryPoint(
        "runtime-gpu",
        "OCIHOOK_CONFIG=FILE ocihook-runtime create -b BUNDLE ID",
        (
            "the ``ocihook-runtime`` wrapper for a GPU container (spec mode) when it execs the "
            "runtime; roots from the file ``$OCIHOOK_CONFIG`` names"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.live ocihook.appliers.live.hooks "
            "ocihook.appliers.live.libraries ocihook.appliers.live.procmask "
            "ocihook.appliers.live.rootfs ocihook.appliers.live.undo ocihook.appliers.spec "
            "ocihook.cdi ocihook.cdi.names ocihook.commands ocihook.commands.runtime "
            "ocihook.config ocihook.config.load ocihook.config.options ocihook.config.scan "
            "ocihook.config.validate ocihook.core ocihook.core.cudaversion "
            "ocihook.core.errors ocihook.core.fastexit ocihook.core.hostroot "
            "ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log ocihook.core.readfile "
            "ocihook.core.records ocihook.core.vocab ocihook.discovery "
            "ocihook.discovery.cache ocihook.discovery.devices ocihook.discovery.driverfiles "
            "ocihook.discovery.gpus ocihook.discovery.mig ocihook.discovery.nvidia "
            "ocihook.discovery.procfs ocihook.discovery.records ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.cachestore ocihook.linux.elfscan "
            "ocihook.linux.ldcache ocihook.linux.loaders ocihook.linux.ociruntime "
            "ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle "
            "ocihook.oci.edit ocihook.pipeline ocihook.pipeline.bundle "
            "ocihook.pipeline.cdinames ocihook.pipeline.compiled ocihook.pipeline.extras "
            "ocihook.plan ocihook.plan.build ocihook.plan.compat ocihook.plan.edits "
            "ocihook.plan.select ocihook.request ocihook.request.drm ocihook.request.nvidia "
            "ocihook.request.policy ocihook.request.requirements ocihook.request.sources "
            "ocihook.runtime"
        ),
        stdlib=_names(
            "select "  # linux.ociruntime: runc --version, unless cached
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _ctypes _json _stat _struct binascii "
            "errno fcntl genericpath os os.path posixpath stat "
            "struct zlib"
        )
        | TOMLLIB_CLOSURE,
        heavy=TOMLLIB_HEAVY,
    ),
    EntryPoint(
        "runtime-cdi",
        "OCIHOOK_CONFIG=FILE ocihook-runtime create -b BUNDLE ID",
        (
            "the ``ocihook-runtime`` wrapper for a container with a CDI annotation (spec mode "
            "injects the CDI device from the spec directories the file ``$OCIHOOK_CONFIG`` names) "
            "when it execs the runtime"
        ),
        ocihook=_names(
            "ocihook.core.stdio "
            "ocihook.plan.procmask "
            "ocihook.linux.mounttargets "
            "ocihook ocihook.appliers ocihook.appliers.editrecord "
            "ocihook.appliers.spec ocihook.cdi ocihook.cdi.inject ocihook.cdi.names "
            "ocihook.cdi.registry ocihook.cdi.spec ocihook.commands ocihook.commands.runtime "
            "ocihook.config ocihook.config.load ocihook.config.options ocihook.config.scan "
            "ocihook.config.validate ocihook.core ocihook.core.errors ocihook.core.fastexit "
            "ocihook.core.hostroot ocihook.core.jsonfast ocihook.core.lazy ocihook.core.log "
            "ocihook.core.readfile ocihook.core.records ocihook.core.vocab ocihook.linux "
            "ocihook.linux.atomicfile ocihook.linux.cachestore ocihook.linux.ociruntime "
            "ocihook.linux.pathsafe ocihook.linux.syscalls ocihook.oci ocihook.oci.bundle "
            "ocihook.oci.edit ocihook.pipeline ocihook.pipeline.bundle "
            "ocihook.pipeline.cdinames ocihook.plan ocihook.plan.edits ocihook.request "
            "ocihook.request.drm ocihook.request.nvidia ocihook.request.policy "
            "ocihook.request.sources ocihook.runtime"
        ),
        stdlib=_names(
            "select "  # linux.ociruntime: runc --version, unless cached
            "_socket "  # the system log (core.log), where /dev/log exists
            "__future__ _collections_abc _contextvars _ctypes _json _stat _struct binascii "
            "errno fcntl genericpath os os.path posixpath stat "
            "struct zlib"
        )
        | TOMLLIB_CLOSURE,
        heavy=TOMLLIB_HEAVY,
    ),
)

#: ocihook modules on the start path that no entry point of :data:`ENTRY_POINTS` loads,
#: because the test cannot run that part unprivileged, and the part.
NOT_MEASURED = {
    "ocihook.linux.cgroupv2": "hook mode's device rules on cgroup v2 (root, a container)",
    "ocihook.core.modimage": (
        "the one-shot programs' module image (ocihook._main.run, run_nvidia_hook, "
        "ocihook.runtime.run load it first; the budget runs the main functions)"
    ),
}

#: Every ocihook module some entry point of :data:`ENTRY_POINTS` loads, and
#: :data:`NOT_MEASURED`.
START_PATH_MODULES = frozenset(m for e in ENTRY_POINTS for m in e.ocihook) | frozenset(NOT_MEASURED)
