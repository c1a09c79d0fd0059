"""The hooks of the CDI specs on this host: does each hook command still exist, and was
the spec written by this ocihook? (``ocihook doctor``'s runtime layer and ``ocihook cdi
list``.) And does any qualified device name have two producers
(:func:`check_spec_collisions`)?

A CDI spec names its ``createContainer`` hooks by absolute path; the runtime runs that
path for every container given one of the spec's devices. A path that is gone (ocihook
uninstalled, a virtual environment moved) makes every such container fail to start. A spec
that ocihook wrote records the writing version (``--ocihook-version``,
:mod:`ocihook.cdi.hookargs`); a spec from another version still runs, but may lack what
this version's generator puts in (regenerate it). Specs from before that flag (``hook
create-container``) are reported as written by another version. A hook that runs ocihook
as an interpreter with a ``-c`` program (what ``cdi generate`` writes) is checked for the
``ocihook`` package in the directories the program names.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from ..cdi.hookargs import hook_data
from ..cdi.spec import Spec
from ..config.options import missing_program_module, program_dirs
from ..core.errors import OcihookError
from ..core.version import VERSION
from ..engines import CDI_SPEC_DIRS
from .context import Context
from .report import Check

__all__ = ["SPEC_HOOK_FIX", "check_spec_collisions", "check_spec_hooks", "spec_hook_problems"]

#: What to do about a spec whose hooks :func:`spec_hook_problems` finds fault with.
SPEC_HOOK_FIX = (
    "regenerate the spec with the installed ocihook: systemctl start ocihook-cdi-refresh.service, "
    "or ocihook cdi generate --output <the spec file>"
)


def spec_hook_problems(spec: Spec, root: str = "/") -> tuple[list[str], list[str]]:
    """What is wrong with ``spec``'s hooks, as ``(failures, warnings)``, each a list of
    sentences (one per distinct finding, in the order met; empty lists: nothing).

    Failures: a hook ``path`` that does not exist under ``root`` or is not an executable
    file (the runtime cannot start it); for ocihook's own hooks
    (:func:`ocihook.cdi.hookargs.hook_data`) run as an interpreter with ocihook's ``-c``
    program (:func:`ocihook.config.options.cdi_hook_command`), no directory the program puts
    on ``sys.path`` holding ``ocihook`` under ``root`` (a virtual environment moved or
    rebuilt for another Python: the import fails on every start). Warnings, for ocihook's
    own hooks: a ``--ocihook-version`` other than :data:`ocihook.core.version.VERSION`, or
    none at all (an older ocihook wrote it).

    Args:
        spec: a loaded spec.
        root: the root the hook paths are looked up under (``"/"``: this host).
    """
    failures: list[str] = []
    warnings: list[str] = []

    def note(found: list[str], text: str) -> None:
        if text not in found:
            found.append(text)

    edits = [spec.container_edits, *(d.container_edits for d in spec.devices)]
    for hook in (h for e in edits for h in e.hooks):
        where = os.path.join(root, hook.path.lstrip("/")) if root != "/" else hook.path
        if not os.path.isfile(where):
            note(failures, f"hook command {hook.path} does not exist")
        elif not os.access(where, os.X_OK):
            note(failures, f"hook command {hook.path} is not executable")
        try:
            data = hook_data(hook.args)
        except OcihookError:
            data = None  # malformed arguments: the spec loader's and the hook's concern
        if data is None:
            continue
        version = data[0]
        if version is None:
            note(warnings, "written by an older ocihook (its hook has no --ocihook-version)")
        elif version != VERSION:
            note(warnings, f"written by ocihook {version}; this is ocihook {VERSION}")
        missing = missing_program_module(hook.args, root)
        dirs = program_dirs(hook.args) or []
        if missing is not None and any(not d.startswith("/") for d in dirs):
            note(
                failures,
                f"its hook runs ocihook with {hook.path} from the relative directory "
                f"{missing!r}, which the runtime's working directory would decide",
            )
        elif missing is not None:
            note(
                failures,
                f"its hook runs ocihook with {hook.path} from {', '.join(dirs) or 'nowhere'}, "
                "which holds no ocihook (moved, removed, or installed for another Python)",
            )
    return failures, warnings


def check_spec_hooks(ctx: Context, spec_dirs: Sequence[str] = CDI_SPEC_DIRS) -> list[Check]:
    """One check per CDI spec in ``spec_dirs`` (under the config root) that has hooks
    (named ``CDI hooks of <path>``; the hook commands are looked up on this host):
    FAIL when a hook command is missing or its ``-c`` program finds no ocihook, WARN when
    another ocihook version wrote it (:func:`spec_hook_problems`), else PASS. Specs that do
    not load are left to :func:`ocihook.doctor.runtime.check_cdi`."""
    from ..cdi.registry import Registry

    registry = Registry.load([ctx.etc(d) for d in spec_dirs])
    checks: list[Check] = []
    for _priority, path, spec in registry.specs:
        edits = (spec.container_edits, *(d.container_edits for d in spec.devices))
        if not any(e.hooks for e in edits):
            continue
        failures, warnings = spec_hook_problems(spec)  # host paths, as check_cdi reads them
        name = f"CDI hooks of {path}"
        if failures or warnings:
            status = "FAIL" if failures else "WARN"
            checks.append(
                Check("runtime", name, status, "; ".join(failures + warnings), SPEC_HOOK_FIX)
            )
        else:
            checks.append(
                Check(
                    "runtime",
                    name,
                    "PASS",
                    f"every hook command exists; written by ocihook {VERSION}",
                )
            )
    return checks


def check_spec_collisions(ctx: Context, spec_dirs: Sequence[str] = CDI_SPEC_DIRS) -> list[Check]:
    """Qualified device names that two spec files in ``spec_dirs`` (under the config root)
    define (:meth:`ocihook.cdi.registry.Registry.collisions`), one check per set of files,
    named ``CDI device names of <files>``: FAIL when the files share a priority (a CDI
    registry uses none of those devices: a container asking for one does not start), WARN
    when a later directory's file overrides an earlier one (the earlier one is dead
    weight, or a second producer left behind). One PASS when specs loaded and no name has
    two producers; nothing without specs."""
    from ..cdi.registry import Registry

    registry = Registry.load([ctx.etc(d) for d in spec_dirs])
    checks = [
        Check(
            "runtime",
            f"CDI device names of {', '.join(c.paths)}",
            "WARN" if c.overrides else "FAIL",
            c.message(),
            c.hint(),
        )
        for c in registry.collisions()
    ]
    if not checks and registry.specs:
        n = len(registry.list_devices())
        checks.append(
            Check(
                "runtime",
                "CDI device names",
                "PASS",
                f"{n} devices in {len(registry.specs)} spec files, each defined by one file",
            )
        )
    return checks
