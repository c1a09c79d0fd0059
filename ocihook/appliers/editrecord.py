"""What spec mode added to a ``config.json``, recorded in the document itself, so that a
second ``ocihook edit`` of the same bundle re-plans instead of piling GPUs up.

:func:`record_edit` compares the document before and after an edit and stores, in the
annotation :data:`ANNOTATION` (a JSON object as a string: annotations are strings,
runtime-spec ``config.md``; base64 of compact JSON, so that a text edit of the
document — ``sed`` on a variable or a path — does not also change the record), the
entries the edit added to each list of
:data:`LIST_FIELDS` and the environment entries it replaced (``NVIDIA_VISIBLE_DEVICES=1``
before it became ``...=void``). :func:`undo_recorded_edit` takes them out again before the
next plan is made.

The annotation is in ``config.json``, which whoever can set annotations can write (a
Kubernetes pod's annotations can reach it), so undoing it may only ever take access away,
never give any: it removes an entry only when the document holds that exact entry and it
is of a kind whose removal grants nothing — a device, an *allow* device-cgroup rule, a
bind mount, an additional gid, an environment entry, a hook that runs ocihook — and it
restores only environment entries (the container's own environment, which it controls
anyway), each only when the variable still holds what ocihook set. Entries ocihook
replaced other than environment entries (a device node the engine had given at the same
path) are not put back. ``intelRdt`` and ``netDevices`` from CDI specs are not recorded.
"""

from __future__ import annotations

from ..core import jsonfast
from ..core.errors import SpecError
from ..oci.edit import copy_json

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every GPU container start
if TYPE_CHECKING:
    from typing import Any

__all__ = [
    "ANNOTATION",
    "LIST_FIELDS",
    "edited_without_record",
    "record_edit",
    "undo_recorded_edit",
]

#: The annotation holding the record.
ANNOTATION = "ocihook.edits"
#: The record's format version.
VERSION = 1
#: The list fields an edit adds to, as paths of keys in the document.
LIST_FIELDS: tuple[tuple[str, ...], ...] = (
    ("process", "env"),
    ("process", "user", "additionalGids"),
    ("linux", "devices"),
    ("linux", "resources", "devices"),
    ("mounts",),
    *(
        ("hooks", stage)
        for stage in (
            "prestart",
            "createRuntime",
            "createContainer",
            "startContainer",
            "poststart",
            "poststop",
        )
    ),
)


def _get(doc: Any, keys: tuple[str, ...]) -> list[Any] | None:
    for k in keys:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(k)
    return doc if isinstance(doc, list) else None


def _has(doc: Any, keys: tuple[str, ...]) -> bool:
    for k in keys:
        if not isinstance(doc, dict) or k not in doc:
            return False
        doc = doc[k]
    return True


def _is_ocihook_hook(entry: Any) -> bool:
    if not isinstance(entry, dict):
        return False
    args = entry.get("args")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        return False
    path = entry.get("path")
    commands = [a for a in (path, *args[:1]) if isinstance(a, str)]
    runs_ocihook = (
        any("ocihook._main" in a for a in args)
        or "ocihook" in args
        # the installed command a CDI spec's hook names (/usr/bin/ocihook hook cdi ...)
        or any(c.rsplit("/", 1)[-1] == "ocihook" for c in commands)
    )
    return runs_ocihook and "hook" in args


def _removable(keys: tuple[str, ...], entry: Any) -> bool:
    """Whether removing ``entry`` from the list at ``keys`` can only take access away."""
    field = ".".join(keys)
    if field == "process.env":
        return isinstance(entry, str)
    if field == "process.user.additionalGids":
        return isinstance(entry, int) and not isinstance(entry, bool)
    if field == "linux.devices":
        return isinstance(entry, dict)
    if field == "linux.resources.devices":
        return isinstance(entry, dict) and entry.get("allow") is True
    if field == "mounts":
        opts = entry.get("options") if isinstance(entry, dict) else None
        return isinstance(opts, list) and ("bind" in opts or "rbind" in opts)
    return _is_ocihook_hook(entry)


def _key(s: str) -> str:
    return s.partition("=")[0]


def record_edit(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after`` (not modified) with :data:`ANNOTATION` set to what the edit from
    ``before`` added (``"added"``: field -> entries) and which environment entries it
    replaced (``"replaced_env"``). ``after`` itself when the edit added nothing."""
    added: dict[str, list[Any]] = {}
    for keys in LIST_FIELDS:
        old = _get(before, keys) or []
        new = _get(after, keys) or []
        extra = [e for e in new if e not in old]
        if extra:
            added[".".join(keys)] = extra
    old_env = [e for e in _get(before, ("process", "env")) or [] if isinstance(e, str)]
    new_env = [e for e in _get(after, ("process", "env")) or [] if isinstance(e, str)]
    replaced = [e for e in old_env if e not in new_env]
    if not added and not replaced:
        return after
    created: list[str] = []  # objects and lists the edit made, removed again when empty
    for keys in LIST_FIELDS:
        for n in range(1, len(keys) + 1):
            name = ".".join(keys[:n])
            if name not in created and _has(after, keys[:n]) and not _has(before, keys[:n]):
                created.append(name)
    doc: dict[str, Any] = copy_json(after)
    record = {"version": VERSION, "added": added, "replaced_env": replaced, "created": created}
    annotations = doc.get("annotations")
    if not isinstance(annotations, dict):
        annotations = doc["annotations"] = {}
    annotations[ANNOTATION] = _encode(record)
    return doc


def _encode(record: dict[str, Any]) -> str:
    import binascii  # not base64: it imports re, on every GPU container start

    # ASCII escapes: a lone surrogate from the image's config.json (JSON allows the escape
    # "\ud800") survives as the same escape, where UTF-8 could not encode it
    text = jsonfast.dumps(record, sort_keys=True, ensure_ascii=True)
    return binascii.b2a_base64(text.encode("ascii"), newline=False).decode()


def _decode(raw: object) -> Any:
    import binascii

    if not isinstance(raw, str):
        return None
    try:
        # strict: what base64.b64decode(validate=True) refuses, and data after the padding
        return jsonfast.loads(binascii.a2b_base64(raw.encode(), strict_mode=True).decode())
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return None


def read_record(doc: dict[str, Any]) -> Any:
    """The decoded record of :data:`ANNOTATION` in ``doc`` (``None`` without one or when
    it cannot be decoded), to look at what an earlier edit added."""
    annotations = doc.get("annotations")
    if not isinstance(annotations, dict):
        return None
    return _decode(annotations.get(ANNOTATION))


def undo_recorded_edit(doc: dict[str, Any], *, path: str) -> tuple[dict[str, Any], bool]:
    """A copy of ``doc`` with the edit recorded in :data:`ANNOTATION` taken out (see the
    module docstring for what is and is not) and the annotation removed, and whether
    there was a record. ``doc`` itself (and ``False``) without one.

    Raises:
        SpecError: the annotation is not a record this module writes (``field`` =
            ``annotations["ocihook.edits"]``).
    """
    annotations = doc.get("annotations")
    if not isinstance(annotations, dict) or ANNOTATION not in annotations:
        return doc, False
    field = f'annotations["{ANNOTATION}"]'
    record = _decode(annotations[ANNOTATION])
    ok = (
        isinstance(record, dict)
        and record.get("version") == VERSION
        and isinstance(record.get("added"), dict)
        and all(isinstance(v, list) for v in record["added"].values())
        and isinstance(record.get("replaced_env"), list)
        and all(isinstance(e, str) for e in record["replaced_env"])
        and isinstance(record.get("created"), list)
        and all(isinstance(e, str) for e in record["created"])
    )
    if not ok:
        raise SpecError(
            "not the record of an earlier ocihook edit",
            path=path,
            field=field,
            hint="remove the annotation (and what the edit added), or start from the "
            "engine's original config.json",
        )
    assert isinstance(record, dict)
    out: dict[str, Any] = copy_json(doc)
    for keys in LIST_FIELDS[1:]:  # the environment below
        current = _get(out, keys)
        if current is None:
            continue
        for entry in record["added"].get(".".join(keys), []):
            if entry in current and _removable(keys, entry):
                current.remove(entry)
    env = _get(out, ("process", "env"))
    if env is not None:
        ours = [e for e in record["added"].get("process.env", []) if isinstance(e, str)]
        kept = [e for e in env if e not in ours]
        restore = {
            _key(e): e
            for e in record["replaced_env"]
            if not any(isinstance(k, str) and _key(k) == _key(e) for k in kept)
        }
        new_env: list[Any] = []
        for e in env:
            if e in ours:  # ours: the variable's earlier value goes back in its place
                back = restore.pop(_key(e), None)
                if back is not None:
                    new_env.append(back)
            else:
                new_env.append(e)
        # a variable whose entry is gone altogether was unset since: not put back
        env[:] = new_env
    creatable = {".".join(k[:n]) for k in LIST_FIELDS for n in range(1, len(k) + 1)}
    for name in sorted(record["created"], key=lambda n: -n.count(".")):
        if name not in creatable:
            continue  # only the lists above and the objects holding them
        keys = tuple(name.split("."))
        parent: Any = out
        for k in keys[:-1]:
            parent = parent.get(k) if isinstance(parent, dict) else None
        if isinstance(parent, dict) and parent.get(keys[-1]) in ([], {}):
            del parent[keys[-1]]  # an empty list or object the edit made
    del out["annotations"][ANNOTATION]
    if not out["annotations"]:
        del out["annotations"]
    return out, True


def edited_without_record(doc: dict[str, Any]) -> bool:
    """Whether ``doc`` holds ocihook's createContainer hook (``ocihook hook
    create-container``) but no :data:`ANNOTATION`: edited by an ocihook that kept no
    record (or the record was removed), so what it added cannot be told apart."""
    annotations = doc.get("annotations")
    if isinstance(annotations, dict) and ANNOTATION in annotations:
        return False
    created = _get(doc, ("hooks", "createContainer")) or []
    return any(_is_ocihook_hook(h) and "create-container" in h["args"] for h in created)
