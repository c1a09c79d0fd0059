"""The compact arguments of the ``createContainer`` hook that CDI specs register
(``ocihook hook cdi``), and their expansion back into the ``TARGET::LINK`` and
``PATH[::FLAGS]`` values of ``ocihook hook create-container``.

A spec written by ``ocihook cdi generate`` names one hook per edit set. Its links and
libraries sit mostly in a few directories (the driver's 64- and 32-bit library
directories), so each directory is written once:

* ``--links DIR::NAME/TARGET::NAME/TARGET...``: the links ``DIR/NAME`` to ``TARGET``
  (``NAME`` is a file name, so the first ``/`` ends it; ``TARGET`` is a name, a relative
  path or an absolute path);
* ``--libs DIR::FLAGS::NAME::NAME...``: the libraries ``DIR/NAME`` whose ``ld.so.cache``
  flags are ``FLAGS`` (``0x0303``; empty: the hook reads the file's ELF header);
* ``--ocihook-version VERSION``: the ocihook that wrote the spec (``ocihook doctor`` and
  ``ocihook cdi list`` compare it with the installed one; the hook does not read it).

Groups keep the order in which their directory first appears and, inside a group, the
order of the entries, so the hook meets the directories (its ``ld.so.conf.d`` drop-in) in
the order the long form gave them. ``/`` as ``DIR`` means the root directory.

This module is on the start path of ``ocihook hook cdi``: str methods only.
"""

from __future__ import annotations

from ..core.errors import ApplyError, CdiError

TYPE_CHECKING = False
if TYPE_CHECKING:  # collections.abc imports collections: milliseconds at start
    from collections.abc import Sequence

__all__ = [
    "HOOK_STAGE",
    "VERSION_FLAG",
    "expand_libs",
    "expand_links",
    "hook_data",
    "pack_libs",
    "pack_links",
]

#: The ``ocihook hook`` stage that reads these arguments.
HOOK_STAGE = "cdi"
#: The flag that records the writing ocihook's version.
VERSION_FLAG = "--ocihook-version"

_SEP = "::"


def _check_field(text: str, flag: str, value: str) -> None:
    """Refuse a field the encoding cannot carry: one holding ``::`` or starting or ending
    with ``:`` (it would merge with a neighbouring separator), or an empty one.

    Raises:
        CdiError: naming ``flag`` and the whole ``value`` it came from.
    """
    if not text or _SEP in text or text[0] == ":" or text[-1] == ":":
        raise CdiError(
            "a driver file's path cannot be given to the createContainer hook: a path "
            "component is empty, holds '::' or starts or ends with ':' ('::' separates the "
            "fields of the hook's arguments)",
            field=flag,
            value=value,
        )


def _split(path: str) -> tuple[str, str]:
    """``(DIR, NAME)`` of an absolute ``path`` (``DIR`` is ``/`` for the root)."""
    directory, _, name = path.rpartition("/")
    return directory or "/", name


def _join(directory: str, name: str) -> str:
    return ("" if directory == "/" else directory) + "/" + name


def pack_links(links: Sequence[str]) -> list[str]:
    """The ``--links`` values for ``links`` (``TARGET::LINK``, ``LINK`` absolute), one per
    directory of ``LINK``, in first-appearance order.

    Raises:
        CdiError: a value that is not ``TARGET::LINK`` with an absolute ``LINK``, or a
            field :func:`_check_field` refuses.
    """
    groups: dict[str, list[str]] = {}
    for value in links:
        target, sep, link = value.partition(_SEP)
        if not sep or not link.startswith("/"):
            raise CdiError("a link must be TARGET::LINK with an absolute LINK", value=value)
        directory, name = _split(link)
        for part in (target, name, directory):
            _check_field(part, "--links", value)
        groups.setdefault(directory, []).append(f"{name}/{target}")
    return [_SEP.join((d, *items)) for d, items in groups.items()]


def pack_libs(libraries: Sequence[str]) -> list[str]:
    """The ``--libs`` values for ``libraries`` (``PATH`` or ``PATH::FLAGS``, ``PATH``
    absolute), one per directory and flags, in first-appearance order.

    Raises:
        CdiError: a relative ``PATH``, or a field :func:`_check_field` refuses.
    """
    groups: dict[tuple[str, str], list[str]] = {}
    for value in libraries:
        path, _sep, flags = value.partition(_SEP)
        if not path.startswith("/"):
            raise CdiError("a library must be an absolute PATH[::FLAGS]", value=value)
        directory, name = _split(path)
        for part in (name, directory, *([flags] if flags else [])):
            _check_field(part, "--libs", value)
        groups.setdefault((directory, flags), []).append(name)
    return [_SEP.join((d, f, *names)) for (d, f), names in groups.items()]


def _bad(flag: str, value: str, what: str) -> ApplyError:
    return ApplyError(f"{flag} must be {what}", field=flag, value=value)


def expand_links(values: Sequence[str]) -> list[str]:
    """The ``TARGET::LINK`` values that ``--links`` ``values`` stand for (the inverse of
    :func:`pack_links`).

    Raises:
        ApplyError: a value that is not ``DIR::NAME/TARGET...`` with an absolute ``DIR``
            and at least one entry.
    """
    out: list[str] = []
    for value in values:
        directory, *items = value.split(_SEP)
        if not directory.startswith("/") or not items:
            raise _bad("--links", value, "DIR::NAME/TARGET[::NAME/TARGET...], DIR absolute")
        for item in items:
            name, slash, target = item.partition("/")
            if not name or not slash or not target:
                raise _bad("--links", value, "DIR::NAME/TARGET[::NAME/TARGET...], DIR absolute")
            out.append(f"{target}{_SEP}{_join(directory, name)}")
    return out


def expand_libs(values: Sequence[str]) -> list[str]:
    """The ``PATH[::FLAGS]`` values that ``--libs`` ``values`` stand for (the inverse of
    :func:`pack_libs`); the flags themselves are checked where they are used
    (:func:`ocihook.appliers.live.hooks.create_container_hook`).

    Raises:
        ApplyError: a value that is not ``DIR::FLAGS::NAME...`` with an absolute ``DIR``,
            at least one name and no ``/`` in a name.
    """
    out: list[str] = []
    for value in values:
        directory, *rest = value.split(_SEP)
        if not directory.startswith("/") or len(rest) < 2:
            raise _bad("--libs", value, "DIR::FLAGS::NAME[::NAME...], DIR absolute")
        flags, *names = rest
        for name in names:
            if not name or "/" in name:
                raise _bad("--libs", value, "DIR::FLAGS::NAME[::NAME...], DIR absolute")
            path = _join(directory, name)
            out.append(f"{path}{_SEP}{flags}" if flags else path)
    return out


def hook_data(args: Sequence[str]) -> tuple[str | None, list[str], list[str]] | None:
    """What a CDI spec's hook ``args`` give ocihook: ``(version, links, libraries)``, the
    links as ``TARGET::LINK`` and the libraries as ``PATH[::FLAGS]``, from either form
    (``hook cdi`` with :data:`VERSION_FLAG` — ``None`` when absent — or the long ``hook
    create-container`` / ``create-symlinks`` / ``update-ldcache``); ``None`` for a hook
    that is not ocihook's.

    Raises:
        ApplyError: a malformed ``--links`` or ``--libs`` value.
    """
    words = list(args)
    if "hook" not in words:
        return None
    stage = words[words.index("hook") + 1] if words.index("hook") + 1 < len(words) else ""
    if stage not in (HOOK_STAGE, "create-container", "create-symlinks", "update-ldcache"):
        return None
    version: str | None = None
    links: list[str] = []
    libs: list[str] = []
    for i in range(len(words) - 1):
        flag, value = words[i], words[i + 1]
        if flag == VERSION_FLAG:
            version = value
        elif flag == "--links":
            links += expand_links([value])
        elif flag == "--libs":
            libs += expand_libs([value])
        elif flag == "--link":
            links.append(value)
        elif flag == "--lib":
            libs.append(value)
    return version, links, libs
