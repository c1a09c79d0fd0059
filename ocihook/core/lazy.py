"""Names of a package loaded from its submodules on first use (PEP 562, module
``__getattr__`` and ``__dir__``).

A package that re-exports the public names of its submodules lists them in a table,
``name -> submodule`` (relative to the package), and gets its ``__getattr__`` and
``__dir__`` from :func:`lazy_exports`: ``import package`` then loads none of the
submodules, and importing one submodule loads only what that one needs. This module is on
the start path (``ocihook``, ``ocihook.cdi`` and ``ocihook.appliers.live`` use it), so it
imports nothing.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing.TYPE_CHECKING: importing typing costs milliseconds
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, MutableMapping, Sequence


def lazy_exports(
    package: str,
    exports: Mapping[str, str],
    public: Sequence[str],
    namespace: MutableMapping[str, object],
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` (PEP 562).

    Args:
        package: the package's ``__name__`` (``"ocihook.cdi"``).
        exports: public name -> the submodule that defines it, relative to ``package``
            (``{"Registry": "registry"}``; dotted for deeper ones: ``"appliers.live"``).
        public: the package's ``__all__``.
        namespace: the package's ``globals()``; a name, once loaded, is stored there, so
            that ``__getattr__`` runs once per name.

    Returns:
        ``(__getattr__, __dir__)``. ``__getattr__(name)`` imports
        ``package.exports[name]`` and returns its ``name``; it raises
        :class:`AttributeError` (``module 'PACKAGE' has no attribute 'NAME'``) for a name
        not in ``exports``. ``__dir__()`` is the sorted union of the names defined in the
        package and ``public``.
    """

    def __getattr__(name: str) -> object:
        """Load a public name from its submodule on first use (PEP 562)."""
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(__import__(f"{package}.{module}", fromlist=[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        """The package's names: those defined in it and its public ones."""
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__
