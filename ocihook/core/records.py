"""Immutable value classes that are cheap to define.

:mod:`dataclasses` costs about 10 ms to import and about 1 ms per class it builds (it
generates code with ``exec``); ocihook defines a dozen value types on the path of every
container start, so it uses this small base instead. A subclass lists its fields as
annotations, with optional defaults, exactly like a frozen dataclass; type checkers see it
as one through :func:`typing.dataclass_transform` (PEP 681).

Instances are immutable, compare and hash by value (field by field, in order) and have a
readable ``repr``.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from typing import Any, ClassVar, Self, dataclass_transform
else:

    def dataclass_transform(**_kwargs: object) -> object:
        return lambda cls: cls


__all__ = ["Record"]

_MISSING = object()


@dataclass_transform(frozen_default=True, eq_default=True)
class Record:
    """Base of ocihook's immutable value types (see the module docstring)."""

    __fields__: ClassVar[tuple[str, ...]] = ()
    __field_defaults__: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = list(cls.__fields__)
        defaults = dict(cls.__field_defaults__)
        annotations = cls.__dict__.get("__annotations__", {})  # noqa: RUF063 (no inspect import)
        for name, annotation in annotations.items():
            if isinstance(annotation, str) and annotation.startswith("ClassVar"):
                continue
            if name not in fields:
                fields.append(name)
            value = cls.__dict__.get(name, _MISSING)
            if value is not _MISSING:
                defaults[name] = value
                delattr(cls, name)
            elif name in defaults and name not in cls.__dict__:
                pass  # inherited default
        seen_default = False
        for name in fields:
            if name in defaults:
                seen_default = True
            elif seen_default:
                raise TypeError(f"{cls.__name__}: field {name!r} needs a default")
        cls.__fields__ = tuple(fields)
        cls.__field_defaults__ = defaults

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self.__fields__
        setter = object.__setattr__
        if not kwargs and len(args) == len(fields):  # every field, in order (the store)
            for name, value in zip(fields, args, strict=True):
                setter(self, name, value)
        else:
            self._set_fields(args, kwargs)
        post_init = getattr(self, "__post_init__", None)
        if post_init is not None:
            post_init()

    def _set_fields(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Set the fields from ``args`` and ``kwargs`` as :meth:`__init__` takes them,
        defaults for the rest. Raises ``TypeError`` as a dataclass does."""
        fields = self.__fields__
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__} takes {len(fields)} arguments")
        values = dict(zip(fields, args, strict=False))
        for name, value in kwargs.items():
            if name not in fields:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            if name in values:
                raise TypeError(f"{type(self).__name__}: {name!r} given twice")
            values[name] = value
        setter = object.__setattr__
        defaults = self.__field_defaults__
        for name in fields:
            if name in values:
                setter(self, name, values[name])
            elif name in defaults:
                setter(self, name, defaults[name])
            else:
                raise TypeError(f"{type(self).__name__} is missing field {name!r}")

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def replace(self, **changes: Any) -> Self:
        """A copy with ``changes`` applied (as :func:`dataclasses.replace`).

        Raises:
            TypeError: a name that is not a field.
        """
        values = {name: getattr(self, name) for name in self.__fields__}
        for name, value in changes.items():
            if name not in values:
                raise TypeError(f"{type(self).__name__} has no field {name!r}")
            values[name] = value
        return type(self)(**values)

    def _astuple(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__fields__)

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return self._astuple() == other._astuple()

    def __hash__(self) -> int:
        return hash((type(self).__name__, self._astuple()))

    def __repr__(self) -> str:
        inner = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.__fields__)
        return f"{type(self).__name__}({inner})"
