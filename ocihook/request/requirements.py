"""``NVIDIA_REQUIRE_*``: what an image demands of the driver and the GPUs it is given.

The rules follow the NVIDIA Container Toolkit so that images need no change. The
environment side (which variables count, the legacy-image rule, ``NVIDIA_DISABLE_REQUIRE``)
is the toolkit's ``internal/config/image/cuda_image.go``; the expression language and its
evaluation are libnvidia-container's ``src/cli/dsl.c`` and ``src/cli/configure.c``, which
``nvidia-container-cli configure --require=EXPR`` runs for every such variable (the Go
re-implementation in the toolkit's ``internal/requirements`` agrees on everything below
except where noted).

Expression language (one variable's value)::

    value      := term ( " " term )*        terms are ORed
    term       := constraint ( "," constraint )*   constraints are ANDed
    constraint := key op value

* Empty terms and empty constraints (repeated spaces or commas) are ignored; a value
  with no constraint at all always holds. Any run of whitespace separates terms.
* ``key`` (case-insensitive): ``cuda`` — the CUDA version the driver supports
  (``"12.2"``); ``driver`` — the driver version (``"535.261.03"``); ``arch`` — the GPU's
  compute capability (``"9.0"``); ``brand`` — the GPU's NVML brand (``"tesla"``).
* ``op``: ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=``; ``brand`` takes ``=`` and ``!=``
  only and compares ignoring case.
* versions (``cuda``, ``driver``, ``arch``) are dotted decimal numbers compared component
  by component as integers; a missing component counts as ``0``, so ``12 == 12.0`` and
  ``535 < 535.54`` (``dsl_compare_version`` skips trailing ``.0`` runs; the Go path's
  semver comparison pads with zeros the same way). Leading zeros do not matter
  (``535.261.03`` has component ``3``).

An unknown key or operator, an empty value, or a value that is not a dotted version is an
error (libnvidia-container: "invalid expression"; the Go path silently ignores unknown
keys, ocihook does not). Parsing is eager: every constraint is checked, not only those
evaluation reaches.

Evaluation (:func:`check`) is per selected GPU, as ``configure.c`` does it: every
requirement must hold for every selected GPU, with ``arch`` and ``brand`` taken from that
GPU and ``cuda`` and ``driver`` from the host. With no GPU selected (``none``) each
requirement is evaluated once, with ``arch`` and ``brand`` unknown. A constraint whose fact
is unknown (``None``, or a host value that is not a dotted version) holds: missing data
passes, as in both toolkit paths — but never silently: :func:`unchecked` gives the warning
each such requirement earns, which the plan carries to stderr and the log.

This module is on the path of every container start: it imports neither ``typing``,
``dataclasses`` nor ``re``.
"""

from __future__ import annotations

from ..core.errors import RequestError
from ..core.records import Record

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: this module is on every container start
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping, Sequence

    from ..discovery.records import Gpu

__all__ = [
    "DISABLE_REQUIRE_TRUE",
    "ENV_CUDA_VERSION",
    "ENV_DISABLE_REQUIRE",
    "ENV_REQUIRE_PREFIX",
    "KEYS",
    "LEGACY_REQUIREMENT_NAME",
    "OPERATORS",
    "Constraint",
    "Requirement",
    "check",
    "compare_versions",
    "parse_requirement",
    "require_disabled",
    "requirements_from_env",
    "unchecked",
    "version_key",
]

ENV_REQUIRE_PREFIX = "NVIDIA_REQUIRE_"
#: Variables with this prefix are Jetson-only and never checked (``cuda_image.go``).
ENV_REQUIRE_JETPACK_PREFIX = "NVIDIA_REQUIRE_JETPACK"
ENV_REQUIRE_CUDA = "NVIDIA_REQUIRE_CUDA"
ENV_CUDA_VERSION = "CUDA_VERSION"
ENV_DISABLE_REQUIRE = "NVIDIA_DISABLE_REQUIRE"
#: The values of ``NVIDIA_DISABLE_REQUIRE`` that turn the checks off: exactly what Go's
#: ``strconv.ParseBool`` reads as true (case-sensitive, no surrounding spaces).
DISABLE_REQUIRE_TRUE: frozenset[str] = frozenset({"1", "t", "T", "true", "TRUE", "True"})
#: Name under which :func:`requirements_from_env` reports the implicit requirement of a
#: legacy image (``CUDA_VERSION`` set, ``NVIDIA_REQUIRE_CUDA`` unset or empty).
LEGACY_REQUIREMENT_NAME = ENV_CUDA_VERSION

#: The keys a constraint may test.
KEYS = ("arch", "brand", "cuda", "driver")
#: The comparison operators, as written.
OPERATORS = ("=", "!=", "<", "<=", ">", ">=")
_STRING_OPERATORS = ("=", "!=")
_OPERATOR_CHARS = frozenset("<>=!")
_DIGITS = frozenset("0123456789")
#: Longest accepted version component; bounds ``int()`` on hostile input.
_MAX_COMPONENT_DIGITS = 18
#: Operators in words, for hints.
_OP_WORDS = {
    "=": "equal to",
    "!=": "other than",
    "<": "below",
    "<=": "at most",
    ">": "above",
    ">=": "at least",
}
#: What each key means, for messages.
_KEY_MEANING = {
    "arch": "GPU compute capability",
    "brand": "GPU brand",
    "cuda": "CUDA version the driver supports",
    "driver": "driver version",
}


def version_key(text: str) -> tuple[int, ...] | None:
    """The comparison key of a dotted version, or ``None`` when ``text`` is not one.

    Args:
        text: ``"535.261.03"``: ASCII decimal components (at most 18 digits each)
            separated by single dots, no sign, no surrounding space.

    Returns:
        The components as integers with trailing zeros removed (``"12.0"`` -> ``(12,)``,
        ``"0"`` -> ``()``), so that plain tuple comparison is the toolkit's comparison,
        where a missing component counts as ``0`` (libnvidia-container
        ``dsl_compare_version``).
    """
    parts = text.split(".")
    for part in parts:
        if not part or len(part) > _MAX_COMPONENT_DIGITS or not set(part) <= _DIGITS:
            return None
    numbers = [int(p) for p in parts]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)


def compare_versions(a: str, b: str) -> int:
    """Compare two dotted versions: ``-1``, ``0`` or ``1`` as ``a`` is lower, equal, higher.

    Components compare as integers, a missing component counts as ``0``
    (``"12" == "12.0"``, ``"535.54" < "535.261.03"``). This is a total order on valid
    versions.

    Raises:
        ValueError: ``a`` or ``b`` is not a dotted version (see :func:`version_key`).
    """
    ka, kb = version_key(a), version_key(b)
    if ka is None or kb is None:
        raise ValueError(f"not a dotted version: {a if ka is None else b!r}")
    return (ka > kb) - (ka < kb)


class Constraint(Record):
    """One ``key op value`` comparison, such as ``cuda>=12.2``. Immutable.

    Attributes:
        key: one of :data:`KEYS`, lowercase.
        op: one of :data:`OPERATORS` (``brand``: ``=`` or ``!=``).
        value: the required value as written (a dotted version, or a brand name).
    """

    key: str
    op: str
    value: str

    def describe(self) -> str:
        """The constraint as written in an ``NVIDIA_REQUIRE_*`` value: ``cuda>=12.2``."""
        return f"{self.key}{self.op}{self.value}"

    def __str__(self) -> str:
        return self.describe()

    def holds(self, fact: str | None) -> bool:
        """Whether the host or GPU fact satisfies this constraint.

        Args:
            fact: the fact named by :attr:`key` (``"12.2"``, ``"535.261.03"``, ``"9.0"``,
                ``"tesla"``), or ``None`` when unknown.

        Returns:
            ``True`` when the comparison holds, and when the fact is unknown (``None``, or
            a version fact that is not a dotted version): missing data passes, as in the
            toolkit.
        """
        if fact is None:
            return True
        if self.key == "brand":
            same = fact.lower() == self.value.lower()
            return same if self.op == "=" else not same
        have, want = version_key(fact), version_key(self.value)
        if have is None or want is None:
            return True
        if self.op == "=":
            return have == want
        if self.op == "!=":
            return have != want
        if self.op == "<":
            return have < want
        if self.op == "<=":
            return have <= want
        if self.op == ">":
            return have > want
        return have >= want


class Requirement(Record):
    """One parsed ``NVIDIA_REQUIRE_*`` value: an OR of AND-lists of constraints. Immutable.

    Attributes:
        terms: the OR terms in the order written, each a non-empty tuple of
            :class:`Constraint` that must all hold. ``()`` always holds.
    """

    terms: tuple[tuple[Constraint, ...], ...] = ()

    @staticmethod
    def parse(
        text: str, *, name: str = ENV_REQUIRE_CUDA, source: str = "process.env"
    ) -> Requirement:
        """Same as :func:`parse_requirement`."""
        return parse_requirement(text, name=name, source=source)

    def describe(self) -> str:
        """The requirement in canonical form, which :func:`parse_requirement` reads back
        to an equal value: terms joined by a space, constraints by a comma, keys lowercase
        (``"cuda>=11.0 brand=tesla,driver>=450"``); ``""`` for no constraint."""
        return " ".join(",".join(c.describe() for c in term) for term in self.terms)

    def __str__(self) -> str:
        return self.describe()

    def keys(self) -> frozenset[str]:
        """The keys the requirement tests."""
        return frozenset(c.key for term in self.terms for c in term)

    def holds(self, facts: Mapping[str, str | None]) -> bool:
        """Whether some term has all its constraints satisfied by ``facts`` (key -> fact,
        ``None`` or absent = unknown). A requirement without terms holds."""
        if not self.terms:
            return True
        return any(all(c.holds(facts.get(c.key)) for c in term) for term in self.terms)


def _parse_constraint(text: str, term: str, field: str) -> Constraint:
    """``key op value`` -> :class:`Constraint` (libnvidia-container ``evaluate_rule``: the
    key ends at the first operator character, the operator is the whole run of them)."""

    def bad(message: str, hint: str) -> RequestError:
        return RequestError(message, field=field, value=term, hint=hint)

    start = next((i for i, ch in enumerate(text) if ch in _OPERATOR_CHARS), -1)
    if start < 0:
        raise bad(
            f"requirement {text!r} has no comparison operator",
            "write key, operator and value without spaces, such as cuda>=12.2",
        )
    end = start
    while end < len(text) and text[end] in _OPERATOR_CHARS:
        end += 1
    raw_key, op, value = text[:start], text[start:end], text[end:]
    key = raw_key.lower() if raw_key.isascii() else raw_key
    if key not in KEYS:
        raise bad(
            f"unknown requirement key {raw_key!r} in {text!r}",
            "the keys are " + ", ".join(KEYS),
        )
    if op not in OPERATORS:
        raise bad(
            f"unknown comparison operator {op!r} in {text!r}",
            "the operators are " + " ".join(OPERATORS),
        )
    if not value:
        raise bad(f"requirement {text!r} has no value", f"write a value after {key}{op}")
    if key == "brand":
        if op not in _STRING_OPERATORS:
            raise bad(
                f"operator {op!r} cannot compare a brand in {text!r}",
                "brands compare with = or != only (brand=tesla)",
            )
    elif version_key(value) is None:
        raise bad(
            f"{key} value {value!r} in {text!r} is not a dotted version",
            f"write the {_KEY_MEANING[key]} as numbers separated by dots, such as "
            + {"arch": "arch>=8.0", "cuda": "cuda>=12.2", "driver": "driver>=535.54"}[key],
        )
    return Constraint(key, op, value)


def parse_requirement(
    text: str, *, name: str = ENV_REQUIRE_CUDA, source: str = "process.env"
) -> Requirement:
    """Parse one ``NVIDIA_REQUIRE_*`` value (grammar in the module docstring).

    Args:
        text: the variable's value, ``"cuda>=11.0 brand=tesla,driver>=450"``.
        name: the variable's name, for error fields.
        source: where the variable came from, for error fields (``process.env``).

    Returns:
        The :class:`Requirement`; ``Requirement(terms=())`` for a blank value.

    Raises:
        RequestError: an unknown key or operator, a missing value, a version that is not
            dotted decimal, or ``<``/``>`` on ``brand``. ``field`` is
            ``<source>[<name>]``, ``value`` the offending OR term as written.
    """
    field = f"{source}[{name}]"
    terms: list[tuple[Constraint, ...]] = []
    for term in text.split():
        constraints = tuple(_parse_constraint(c, term, field) for c in term.split(",") if c)
        if constraints:
            terms.append(constraints)
    return Requirement(tuple(terms))


def require_disabled(env: Mapping[str, str]) -> bool:
    """Whether ``NVIDIA_DISABLE_REQUIRE`` turns the checks off: one of
    :data:`DISABLE_REQUIRE_TRUE` (toolkit ``CUDA.HasDisableRequire``, ``strconv.ParseBool``);
    any other value, including ``yes`` or `` true``, leaves them on."""
    return env.get(ENV_DISABLE_REQUIRE) in DISABLE_REQUIRE_TRUE


_U32_MAX = (1 << 32) - 1
_IDENT_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-")


def _semver_number(text: str) -> tuple[str, str] | None:
    """The leading decimal number of ``text`` (no leading zero unless it is ``0``) and the
    rest, or ``None`` (Go ``golang.org/x/mod/semver`` ``parseInt``)."""
    i = 0
    while i < len(text) and "0" <= text[i] <= "9":
        i += 1
    if i == 0 or (text[0] == "0" and i != 1):
        return None
    return text[:i], text[i:]


def _semver_idents(text: str, *, numeric_rule: bool) -> bool:
    """Whether ``text`` is a dot list of non-empty ``[0-9A-Za-z-]`` identifiers; with
    ``numeric_rule`` (pre-release) a numeric identifier has no leading zero."""
    for ident in text.split("."):
        if not ident or not set(ident) <= _IDENT_CHARS:
            return False
        if numeric_rule and len(ident) > 1 and ident[0] == "0" and ident.isdigit():
            return False
    return True


def semver_major_minor(version: str) -> tuple[str, str] | None:
    """``(major, minor)`` of a version string as the NVIDIA Container Toolkit reads
    ``CUDA_VERSION`` (``parseMajorMinorVersion``): one leading ``v`` dropped, then a Go
    semantic version (``golang.org/x/mod/semver.IsValid``): ``MAJOR``, ``MAJOR.MINOR`` or
    ``MAJOR.MINOR.PATCH``, decimal numbers without leading zeros, and only the full form
    may carry a ``-pre.release`` and ``+build`` suffix. ``None`` when not valid. The
    numbers are returned as written (any length); the caller bounds them."""
    rest = version[1:] if version.startswith("v") else version
    parts: list[str] = []
    for position in range(3):
        got = _semver_number(rest)
        if got is None:
            return None
        number, rest = got
        parts.append(number)
        if rest == "" and position < 2:
            return parts[0], (parts[1] if len(parts) > 1 else "0")
        if position < 2:
            if not rest.startswith("."):
                return None
            rest = rest[1:]
    if rest.startswith("-"):
        pre, plus, build = rest[1:].partition("+")
        if not _semver_idents(pre, numeric_rule=True):
            return None
        rest = plus + build
    if rest.startswith("+"):
        if not _semver_idents(rest[1:], numeric_rule=False):
            return None
        rest = ""
    if rest:
        return None
    return parts[0], parts[1]


def _legacy_major_minor(raw: str, source: str) -> str:
    """``major.minor`` of a ``CUDA_VERSION`` value (``"10.0.130"`` -> ``"10.0"``,
    ``"12"`` -> ``"12.0"``), by the toolkit's rule (:func:`semver_major_minor`): an
    optional ``v``, a semver pre-release or build suffix on a full version ignored; the
    major and the minor must each fit in 32 bits (``strconv.ParseUint(.., 10, 32)``).

    Raises:
        RequestError: not such a version, or a number too large (``field`` =
            ``<source>[CUDA_VERSION]``).
    """
    field = f"{source}[{ENV_CUDA_VERSION}]"
    got = semver_major_minor(raw)
    if got is None:
        raise RequestError(
            "CUDA_VERSION is not a version",
            field=field,
            value=raw,
            hint="a CUDA image without NVIDIA_REQUIRE_CUDA must set CUDA_VERSION to "
            "major[.minor[.patch]] without leading zeros (12.2.0); set NVIDIA_REQUIRE_CUDA "
            "to state the requirement instead, or NVIDIA_DISABLE_REQUIRE=true to skip it",
        )
    for what, number in zip(("major", "minor"), got, strict=True):
        if len(number) > 10 or int(number) > _U32_MAX:
            raise RequestError(
                f"CUDA_VERSION {what} version does not fit in 32 bits",
                field=field,
                value=raw,
                hint=f"the {what} version must be at most {_U32_MAX} (the NVIDIA Container "
                "Toolkit refuses larger ones too); fix CUDA_VERSION, or set "
                "NVIDIA_DISABLE_REQUIRE=true to skip the check",
            )
    return f"{int(got[0])}.{int(got[1])}"


def requirements_from_env(
    env: Mapping[str, str], *, source: str = "process.env"
) -> list[tuple[str, Requirement]]:
    """The requirements a container's environment states.

    Every ``NVIDIA_REQUIRE_*`` variable counts except ``NVIDIA_REQUIRE_JETPACK*``; blank
    values are left out. On a *legacy* image — ``CUDA_VERSION`` non-empty and
    ``NVIDIA_REQUIRE_CUDA`` unset or empty (the toolkit's ``CUDA.IsLegacy``) — an implicit
    ``cuda>=<major.minor of CUDA_VERSION>`` is added under the name
    :data:`LEGACY_REQUIREMENT_NAME`. ``NVIDIA_DISABLE_REQUIRE`` true (see
    :func:`require_disabled`) disables everything. Source: toolkit
    ``internal/config/image/cuda_image.go`` (``GetRequirements``).

    Args:
        env: the container process's variables (:func:`ocihook.request.sources.parse_env`).
        source: where ``env`` came from, for error fields.

    Returns:
        ``(variable name, requirement)`` pairs, variables in name order, the legacy
        requirement last; ``[]`` when nothing is required or checks are disabled.

    Raises:
        RequestError: a malformed ``NVIDIA_REQUIRE_*`` value (:func:`parse_requirement`),
            or, on a legacy image, a ``CUDA_VERSION`` that is not a version.
    """
    if require_disabled(env):
        return []
    out: list[tuple[str, Requirement]] = []
    for name in sorted(env):
        if not name.startswith(ENV_REQUIRE_PREFIX) or name.startswith(ENV_REQUIRE_JETPACK_PREFIX):
            continue
        requirement = parse_requirement(env[name], name=name, source=source)
        if requirement.terms:
            out.append((name, requirement))
    if env.get(ENV_CUDA_VERSION) and not env.get(ENV_REQUIRE_CUDA):
        minimum = _legacy_major_minor(env[ENV_CUDA_VERSION], source)
        out.append((LEGACY_REQUIREMENT_NAME, Requirement(((Constraint("cuda", ">=", minimum),),))))
    return out


def _hint(constraint: Constraint, fact: str | None, gpu: Gpu | None) -> str:
    """What to do about ``constraint`` failing with ``fact``."""
    key, op, value = constraint.key, constraint.op, constraint.value
    if key == "cuda":
        if op in (">=", ">"):
            newer = "or newer" if op == ">=" else "or a newer one"
            return (
                f"update the driver to a version supporting CUDA {value} {newer}, "
                f"or use an image built for CUDA {fact} or older"
            )
        return (
            f"the driver supports CUDA {fact}; use a driver whose CUDA version is "
            f"{_OP_WORDS[op]} {value}, or an image built for CUDA {fact}"
        )
    if key == "driver":
        if op in (">=", ">"):
            newer = "or newer" if op == ">=" else "or a newer one"
            return f"update the driver to version {value} {newer}"
        return (
            f"the host runs driver {fact}; use a driver version {_OP_WORDS[op]} {value}, "
            "or another image"
        )
    which = f"GPU {gpu.index} ({gpu.uuid})" if gpu is not None else "the GPU"
    if key == "arch":
        return (
            f"{which} has compute capability {fact}; select GPUs whose compute capability is "
            f"{_OP_WORDS[op]} {value} in NVIDIA_VISIBLE_DEVICES"
        )
    return (
        f"{which} is a {fact} GPU; select GPUs whose brand is {_OP_WORDS[op]} {value} "
        "in NVIDIA_VISIBLE_DEVICES"
    )


def _facts_text(keys: Iterable[str], facts: Mapping[str, str | None], gpu: Gpu | None) -> str:
    """``"the host has cuda=12.2; GPU 1 has brand=geforce"`` for the keys a requirement
    tests (``unknown`` when a fact is ``None``)."""
    host = [f"{k}={facts.get(k) or 'unknown'}" for k in ("cuda", "driver") if k in keys]
    dev = [f"{k}={facts.get(k) or 'unknown'}" for k in ("arch", "brand") if k in keys]
    parts = []
    if host:
        parts.append("the host has " + ", ".join(host))
    if dev and gpu is not None:
        parts.append(f"GPU {gpu.index} ({gpu.uuid}) has " + ", ".join(dev))
    return "; ".join(parts)


def _fail(
    name: str,
    requirement: Requirement,
    facts: Mapping[str, str | None],
    gpu: Gpu | None,
    source: str,
) -> RequestError:
    first = requirement.terms[0]
    culprit = next(c for c in first if not c.holds(facts.get(c.key)))
    condition = ",".join(c.describe() for c in first)
    others = len(requirement.terms) - 1
    if others:
        condition += f" ({others} more alternative{'s' if others > 1 else ''} also unmet)"
    facts_text = _facts_text(requirement.keys(), facts, gpu)
    if name == LEGACY_REQUIREMENT_NAME:
        what = "legacy CUDA image (CUDA_VERSION set, NVIDIA_REQUIRE_CUDA unset)"
        value = None
    else:
        what = name
        value = requirement.describe()
    return RequestError(
        f"{what} not met: unsatisfied condition: {condition}; {facts_text}",
        field=f"{source}[{name}]",
        value=value,
        hint=_hint(culprit, facts.get(culprit.key), gpu),
    )


def check(
    requirements: Iterable[tuple[str, Requirement]],
    *,
    cuda_version: str | None,
    driver_version: str | None,
    gpus: Sequence[Gpu],
    source: str = "process.env",
) -> None:
    """Check a container's requirements against the host and the GPUs it will get.

    Each requirement must hold for every GPU in ``gpus`` (``arch`` and ``brand`` from the
    GPU, ``cuda`` and ``driver`` from the host); with no GPU it is evaluated once with
    ``arch`` and ``brand`` unknown. Unknown facts pass. Source: libnvidia-container
    ``src/cli/configure.c`` (``configure_command``) and ``src/cli/dsl.c``.

    Args:
        requirements: ``(variable name, requirement)`` pairs from
            :func:`requirements_from_env`.
        cuda_version: CUDA version the driver supports (``"12.2"``), ``None`` if unknown
            (:attr:`ocihook.discovery.nvidia.NvidiaHost.cuda_version`: NVML, the driver's
            ``libcuda`` note or the driver-branch table; :func:`unchecked` says what an
            unknown one leaves unchecked).
        driver_version: ``"535.261.03"``, ``None`` if unknown.
        gpus: the *selected* GPUs (:func:`ocihook.request.select_gpus`); each needs
            ``index``, ``uuid``, ``brand`` and ``architecture`` (``None`` = unknown).
        source: where the variables came from, for error fields.

    Raises:
        RequestError: the first requirement (in the given order) that some GPU fails, on
            the first such GPU. The message names the variable, the first OR term (as the
            toolkit reports it) and the host's and GPU's values; ``field`` is
            ``<source>[<name>]``, ``value`` the requirement, ``hint`` what to do.
    """
    host: dict[str, str | None] = {"cuda": cuda_version, "driver": driver_version}
    targets: Sequence[Gpu | None] = tuple(gpus) or (None,)
    for name, requirement in requirements:
        if not requirement.terms:
            continue
        for gpu in targets:
            facts = dict(host)
            facts["arch"] = gpu.architecture if gpu is not None else None
            facts["brand"] = gpu.brand if gpu is not None else None
            if not requirement.holds(facts):
                raise _fail(name, requirement, facts, gpu, source)


#: The phrase every warning of :func:`unchecked` holds (commands print such warnings
#: without ``-v``).
UNCHECKED = "not checked"


def unchecked(
    requirements: Iterable[tuple[str, Requirement]],
    *,
    cuda_version: str | None,
    driver_version: str | None,
) -> list[str]:
    """What :func:`check` let pass because a host fact is unknown, one warning per
    requirement.

    Args:
        requirements: ``(variable name, requirement)`` pairs from
            :func:`requirements_from_env`.
        cuda_version: as for :func:`check`; ``None`` = unknown (no NVML, no CUDA note in
            the driver's ``libcuda``, a driver branch outside the driver-branch table).
        driver_version: as for :func:`check`; ``None`` or ``""`` = unknown.

    Returns:
        For each requirement that tests ``cuda`` or ``driver`` while that fact is unknown,
        one line naming the variable, the requirement and the unknown fact, containing
        :data:`UNCHECKED` (``"NVIDIA_REQUIRE_CUDA=cuda>=13.0 not checked: the CUDA
        version driver 600.10 supports is unknown (...)"``); ``[]`` when everything
        tested is known.
    """
    out: list[str] = []
    for name, requirement in requirements:
        keys = requirement.keys()
        unknown = []
        if "cuda" in keys and not cuda_version:
            driver = f"driver {driver_version}" if driver_version else "the driver"
            unknown.append(
                f"the CUDA version {driver} supports is unknown (no NVML, no CUDA note in "
                "its libcuda.so, a branch outside the driver-branch table)"
            )
        if "driver" in keys and not driver_version:
            unknown.append("the driver version is unknown")
        if not unknown:
            continue
        what = (
            f"{LEGACY_REQUIREMENT_NAME} (legacy image: {requirement.describe()})"
            if name == LEGACY_REQUIREMENT_NAME
            else f"{name}={requirement.describe()}"
        )
        out.append(f"{what} {UNCHECKED}: " + "; ".join(unknown))
    return out
