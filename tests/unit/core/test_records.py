"""``ocihook.core.records.Record``: the base of ocihook's immutable value types.

Its docstring promises a frozen dataclass's behaviour: fields from annotations (in order,
inherited ones first, optional defaults), keyword or positional construction, immutable
instances, equality and hash by value, a readable ``repr`` and ``replace``. The
hypothesis tests use a frozen :mod:`dataclasses` class with the same fields as the oracle.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from typing import Any, ClassVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

import ocihook
from ocihook.core.records import Record


class Point(Record):
    x: int
    y: int = 0
    label: str = ""


@dataclasses.dataclass(frozen=True)
class PointDataclass:
    x: int
    y: int = 0
    label: str = ""


class Point3(Point):
    z: int = 0


class Counted(Record):
    name: str
    kinds: ClassVar[tuple[str, ...]] = ("a", "b")


class Checked(Record):
    low: int
    high: int

    def __post_init__(self) -> None:
        if self.low > self.high:
            raise ValueError(f"low {self.low} > high {self.high}")


class Other(Record):
    x: int
    y: int = 0
    label: str = ""


POINTS = st.builds(
    lambda x, y, label: (x, y, label),
    st.integers(),
    st.integers(),
    st.text(max_size=8),
)


# --- fields --------------------------------------------------------------------------------


def test_fields_in_annotation_order_with_defaults() -> None:
    assert Point.__fields__ == ("x", "y", "label")
    assert Point.__field_defaults__ == {"y": 0, "label": ""}


def test_subclass_fields_follow_the_inherited_ones() -> None:
    assert Point3.__fields__ == ("x", "y", "label", "z")
    assert Point3(1, 2, "p", 3) == Point3(x=1, y=2, label="p", z=3)
    assert Point3(1).z == 0


def test_redeclared_field_keeps_its_place_and_takes_the_new_default() -> None:
    class Moved(Point):
        y: int = 7

    assert Moved.__fields__ == ("x", "y", "label")
    assert Moved(1).y == 7
    assert Point(1).y == 0


def test_classvar_is_not_a_field() -> None:
    assert Counted.__fields__ == ("name",)
    assert Counted("n").kinds == ("a", "b")
    with pytest.raises(TypeError, match="takes 1 arguments"):
        Counted("n", ("c",))  # type: ignore[call-arg]


def test_field_without_default_after_one_with_is_refused() -> None:
    with pytest.raises(TypeError, match="field 'b' needs a default"):

        class Bad(Record):
            a: int = 0
            b: int


# --- construction --------------------------------------------------------------------------


def test_positional_keyword_and_default_arguments() -> None:
    p = Point(1, label="a")
    assert (p.x, p.y, p.label) == (1, 0, "a")
    assert Point(x=1, y=2) == Point(1, 2)


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((1, 2, "a", 4), {}, "Point takes 3 arguments"),
        ((1,), {"colour": 1}, "Point has no field 'colour'"),
        ((1,), {"x": 2}, "Point: 'x' given twice"),
        ((), {"y": 2}, "Point is missing field 'x'"),
    ],
)
def test_bad_arguments_are_type_errors(
    args: tuple[Any, ...], kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        Point(*args, **kwargs)


def test_post_init_runs_after_the_fields_are_set() -> None:
    assert Checked(1, 2).high == 2
    with pytest.raises(ValueError, match="low 3 > high 2"):
        Checked(3, 2)


# --- immutability --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x", "label", "not_a_field"])
def test_instances_cannot_be_changed(name: str) -> None:
    p = Point(1, 2, "a")
    with pytest.raises(AttributeError, match="Point is immutable"):
        setattr(p, name, 5)
    with pytest.raises(AttributeError, match="Point is immutable"):
        delattr(p, name)
    assert p == Point(1, 2, "a")


def test_replace_makes_a_copy_and_checks_names() -> None:
    p = Point(1, 2, "a")
    q = p.replace(y=5)
    assert (p, q) == (Point(1, 2, "a"), Point(1, 5, "a"))
    assert type(Point3(1).replace(z=2)) is Point3
    with pytest.raises(TypeError, match="Point has no field 'colour'"):
        p.replace(colour=1)


def test_replace_runs_post_init() -> None:
    with pytest.raises(ValueError, match="low 5 > high 2"):
        Checked(1, 2).replace(low=5)


# --- equality, hash, repr ------------------------------------------------------------------


def test_equality_needs_the_same_type() -> None:
    assert Point(1) != Other(1)
    assert Point(1, 0, "") != Point3(1, 0, "", 0)
    assert Point(1) != (1, 0, "")
    assert Point(1).__eq__((1, 0, "")) is NotImplemented


def test_records_are_dictionary_keys() -> None:
    table = {Point(1): "one", Point(2): "two"}
    assert table[Point(1, 0, "")] == "one"
    assert len({Point(1), Point(1), Point(1, 1)}) == 2


def test_repr_names_every_field() -> None:
    assert repr(Point(1, label="a b")) == "Point(x=1, y=0, label='a b')"
    assert repr(Point3(1, z=4)) == "Point3(x=1, y=0, label='', z=4)"


@given(POINTS, POINTS)
def test_equality_and_hash_agree_with_a_frozen_dataclass(
    a: tuple[int, int, str], b: tuple[int, int, str]
) -> None:
    ra, rb = Point(*a), Point(*b)
    da, db = PointDataclass(*a), PointDataclass(*b)
    assert (ra == rb) is (da == db) is (a == b)
    if ra == rb:
        assert hash(ra) == hash(rb)


@given(POINTS)
def test_repr_agrees_with_a_frozen_dataclass(values: tuple[int, int, str]) -> None:
    assert repr(Point(*values)) == repr(PointDataclass(*values)).replace("PointDataclass", "Point")


@given(POINTS, st.integers(), st.text(max_size=8))
def test_replace_agrees_with_dataclasses_replace(
    values: tuple[int, int, str], y: int, label: str
) -> None:
    got = Point(*values).replace(y=y, label=label)
    want = dataclasses.replace(PointDataclass(*values), y=y, label=label)
    assert (got.x, got.y, got.label) == dataclasses.astuple(want)


@given(POINTS)
def test_round_trips(values: tuple[int, int, str]) -> None:
    """Through its fields (positional and keyword), ``replace()`` and ``repr``."""
    p = Point(*values)
    fields = tuple(getattr(p, name) for name in Point.__fields__)
    assert fields == values
    assert Point(*fields) == p
    assert Point(**dict(zip(Point.__fields__, fields, strict=True))) == p
    assert p.replace() == p and p.replace() is not p
    assert eval(repr(p), {"Point": Point}) == p


# --- ocihook's own records -----------------------------------------------------------------


def _record_classes() -> list[type[Record]]:
    """Every Record subclass defined in an ocihook module that imports here (programs run
    as scripts, ``__main__`` and the probes, are left out: importing one runs it)."""
    for info in pkgutil.walk_packages(ocihook.__path__, "ocihook."):
        last = info.name.rsplit(".", 1)[-1]
        if last == "__main__" or "probe" in last or last.endswith(("_pb2", "_pb2_grpc")):
            continue
        try:
            importlib.import_module(info.name)
        except ImportError:  # an optional extra (grpc) not installed
            continue
    found: list[type[Record]] = []
    todo = list(Record.__subclasses__())
    while todo:
        cls = todo.pop()
        todo += cls.__subclasses__()
        if cls.__module__.startswith("ocihook."):
            found.append(cls)
    return found


def test_ocihook_records_are_well_formed() -> None:
    """Each of ocihook's record types has fields, its defaults are for its fields only and
    come last (construction with the required fields alone works for each)."""
    classes = _record_classes()
    assert len(classes) >= 40, len(classes)
    for cls in classes:
        fields = cls.__fields__
        assert fields, cls
        assert set(cls.__field_defaults__) <= set(fields), cls
        required = [f for f in fields if f not in cls.__field_defaults__]
        assert fields[: len(required)] == tuple(required), cls
        for name in cls.__field_defaults__:
            assert name not in vars(cls), (cls, name)
