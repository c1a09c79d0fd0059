"""NVIDIA_REQUIRE_* requirements (NVIDIA Container Toolkit / libnvidia-container semantics)."""

from __future__ import annotations

import functools
import itertools
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ocihook.core.errors import RequestError
from ocihook.discovery.records import Gpu
from ocihook.request.requirements import (
    DISABLE_REQUIRE_TRUE,
    KEYS,
    OPERATORS,
    Constraint,
    Requirement,
    check,
    compare_versions,
    parse_requirement,
    require_disabled,
    requirements_from_env,
    version_key,
)

EXAMPLE = "cuda>=11.0 brand=tesla,driver>=450"
#: NVIDIA_REQUIRE_CUDA of a real nvidia/cuda:12.2 image (shortened).
CUDA_12_2 = (
    "cuda>=12.2 brand=tesla,driver>=470,driver<471 brand=unknown,driver>=470,driver<471 "
    "brand=nvidia,driver>=470,driver<471 brand=geforce,driver>=470,driver<471 "
    "brand=tesla,driver>=525,driver<526 brand=geforce,driver>=525,driver<526"
)


def gpu(index: int, brand: str | None = "tesla", arch: str | None = "9.0") -> Gpu:
    uuid = f"GPU-{index:08x}-0000-0000-0000-000000000000"
    return Gpu(index, index, uuid, f"00000000:{index:02x}:00.0", "T", "/x", brand, arch)


def passes(
    text: str,
    *,
    cuda: str | None = "12.2",
    driver: str | None = "535.261.03",
    gpus: tuple[Gpu, ...] = (),
) -> bool:
    try:
        check(
            [("NVIDIA_REQUIRE_CUDA", parse_requirement(text))],
            cuda_version=cuda,
            driver_version=driver,
            gpus=gpus,
        )
    except RequestError:
        return False
    return True


def failure(text: str, **kwargs: object) -> RequestError:
    with pytest.raises(RequestError) as info:
        check([("NVIDIA_REQUIRE_CUDA", parse_requirement(text))], **kwargs)  # type: ignore[arg-type]
    return info.value


# --- parsing -------------------------------------------------------------------------------


def test_example_is_or_of_ands() -> None:
    r = parse_requirement(EXAMPLE)
    assert r.terms == (
        (Constraint("cuda", ">=", "11.0"),),
        (Constraint("brand", "=", "tesla"), Constraint("driver", ">=", "450")),
    )
    assert r.describe() == str(r) == EXAMPLE


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("", ""),
        ("   ", ""),
        (",, ,", ""),
        ("  cuda>=11.0   driver>=450 ", "cuda>=11.0 driver>=450"),
        ("cuda>=11.0,,driver>=450,", "cuda>=11.0,driver>=450"),
        ("CUDA>=11.0 Brand=Tesla", "cuda>=11.0 brand=Tesla"),
        ("cuda>=11.0\tdriver>=450", "cuda>=11.0 driver>=450"),
        ("arch=9.0", "arch=9.0"),
        ("driver!=535.54.03", "driver!=535.54.03"),
    ],
)
def test_parse_canonical_form(text: str, canonical: str) -> None:
    assert parse_requirement(text).describe() == canonical


def test_real_cuda_image_requirement_parses() -> None:
    r = parse_requirement(CUDA_12_2)
    assert len(r.terms) == 7
    assert r.keys() == {"cuda", "brand", "driver"}
    assert parse_requirement(r.describe()) == r


@pytest.mark.parametrize(
    ("text", "bad_term", "message", "hint"),
    [
        ("cuda", "cuda", "no comparison operator", "cuda>=12.2"),
        ("cuda>=11 vram>=8", "vram>=8", "unknown requirement key 'vram'", "arch, brand, cuda"),
        ("=11", "=11", "unknown requirement key ''", "the keys are"),
        ("cuda==11", "cuda==11", "unknown comparison operator '=='", ">="),
        ("cuda=>11", "cuda=>11", "unknown comparison operator '=>'", ">="),
        ("cuda<>11", "cuda<>11", "unknown comparison operator '<>'", ">="),
        ("cuda>=", "cuda>=", "has no value", "after cuda>="),
        ("driver>=450,cuda>=x", "driver>=450,cuda>=x", "not a dotted version", "cuda>=12.2"),
        ("driver>=4..5", "driver>=4..5", "not a dotted version", "driver>=535.54"),
        ("arch>=8.", "arch>=8.", "not a dotted version", "arch>=8.0"),
        ("arch>=-8", "arch>=-8", "not a dotted version", "compute capability"),
        ("cuda>= 11", "cuda>=", "has no value", "after cuda>="),
        ("brand>tesla", "brand>tesla", "cannot compare a brand", "= or !="),
        ("brand<=tesla", "brand<=tesla", "cannot compare a brand", "= or !="),
        ("driver>=1" + "0" * 40, "driver>=1" + "0" * 40, "not a dotted version", "driver"),
        ("cud\u0430>=11", "cud\u0430>=11", "unknown requirement key", "the keys are"),  # Cyrillic a
    ],
)
def test_parse_errors_name_variable_and_term(
    text: str, bad_term: str, message: str, hint: str
) -> None:
    with pytest.raises(RequestError) as info:
        parse_requirement(text, name="NVIDIA_REQUIRE_ARCH", source="config.json")
    err = info.value
    assert err.field == "config.json[NVIDIA_REQUIRE_ARCH]"
    assert err.value == bad_term
    assert message in err.message
    assert err.hint is not None and hint in err.hint


def test_requirement_parse_method() -> None:
    assert Requirement.parse(EXAMPLE) == parse_requirement(EXAMPLE)


# --- versions --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "sign"),
    [
        ("535.261.03", "535.54", 1),  # component-wise, not as decimals or strings
        ("535.54.03", "535.261.03", -1),
        ("535.261.03", "535.261.3", 0),  # leading zeros do not matter
        ("12", "12.0", 0),  # a missing component counts as 0
        ("12", "12.0.0", 0),
        ("12", "12.0.1", -1),
        ("12.1", "12", 1),
        ("9.0", "10.0", -1),
        ("0", "0.0", 0),
        ("470", "471", -1),
    ],
)
def test_compare_versions(a: str, b: str, sign: int) -> None:
    assert compare_versions(a, b) == sign
    assert compare_versions(b, a) == -sign


@pytest.mark.parametrize("bad", ["", "1.", ".1", "1..2", "v1", "1.x", "1 .2", "+1", "\u0661"])
def test_version_key_rejects(bad: str) -> None:
    assert version_key(bad) is None
    with pytest.raises(ValueError):
        compare_versions(bad, "1")


# --- evaluation ----------------------------------------------------------------------------

#: (host fact, operator, required value, expected) — run for every version key.
VERSION_TABLE = [
    ("12.2", "=", "12.2", True),
    ("12.2", "=", "12.2.0", True),
    ("12.2", "=", "12.3", False),
    ("12.2", "!=", "12.3", True),
    ("12.2", "!=", "12.2.0", False),
    ("12.2", "<", "12.3", True),
    ("12.2", "<", "12.2", False),
    ("12.2", "<", "12.10", True),
    ("12.2", "<=", "12.2", True),
    ("12.2", "<=", "12.1", False),
    ("12.2", ">", "12.1", True),
    ("12.2", ">", "12.2", False),
    ("12.2", ">", "12", True),
    ("12.2", ">=", "12.2", True),
    ("12.2", ">=", "12.10", False),
    ("12.2", ">=", "9.9", True),
]


@pytest.mark.parametrize("key", ["cuda", "driver", "arch"])
@pytest.mark.parametrize(("fact", "op", "value", "expected"), VERSION_TABLE)
def test_every_operator_on_every_version_key(
    key: str, fact: str, op: str, value: str, expected: bool
) -> None:
    text = f"{key}{op}{value}"
    facts = {"cuda": "99.9", "driver": "999.99", "arch": "99.9"} | {key: fact}
    g = (gpu(0, arch=facts["arch"]),)
    assert passes(text, cuda=facts["cuda"], driver=facts["driver"], gpus=g) is expected
    assert Constraint(key, op, value).holds(fact) is expected


def test_operator_table_covers_every_operator() -> None:
    assert {op for _, op, _, _ in VERSION_TABLE} == set(OPERATORS)


@pytest.mark.parametrize(
    ("brand", "text", "expected"),
    [
        ("tesla", "brand=tesla", True),
        ("tesla", "brand=TESLA", True),
        ("Tesla", "brand=tEsLa", True),
        ("geforce", "brand=tesla", False),
        ("geforce", "brand!=tesla", True),
        ("tesla", "brand!=Tesla", False),
        ("nvidiartx", "BRAND=NvidiaRTX", True),
    ],
)
def test_brand_is_case_insensitive(brand: str, text: str, expected: bool) -> None:
    assert passes(text, gpus=(gpu(0, brand=brand),)) is expected


@pytest.mark.parametrize(
    ("cuda", "driver", "brand", "expected"),
    [
        ("11.0", "450.36", "geforce", True),  # first term
        ("12.2", "535.54", "geforce", True),
        ("10.2", "450.80", "tesla", True),  # second term
        ("10.2", "450.80", "TESLA", True),
        ("10.2", "440.33", "tesla", False),  # second term: driver too old
        ("10.2", "450.80", "geforce", False),  # second term: wrong brand
        ("10.2", "418.87", "quadro", False),
    ],
)
def test_example_evaluation(cuda: str, driver: str, brand: str, expected: bool) -> None:
    assert passes(EXAMPLE, cuda=cuda, driver=driver, gpus=(gpu(0, brand=brand),)) is expected


@pytest.mark.parametrize(
    ("cuda", "driver", "brand", "expected"),
    [
        ("12.2", "535.104.05", "geforce", True),
        ("11.4", "470.82.01", "tesla", True),
        ("11.4", "470.82.01", "GeForce", True),
        ("11.4", "470.82.01", "quadro", False),
        ("12.0", "525.60.13", "tesla", True),
        ("12.0", "525.60.13", "nvidia", False),
        ("12.1", "530.30.02", "tesla", False),
    ],
)
def test_real_cuda_image_requirement(cuda: str, driver: str, brand: str, expected: bool) -> None:
    assert passes(CUDA_12_2, cuda=cuda, driver=driver, gpus=(gpu(0, brand=brand),)) is expected


def test_every_gpu_must_satisfy() -> None:
    good, bad = gpu(0, arch="9.0"), gpu(1, arch="7.5")
    assert passes("arch>=8.0", gpus=(good,))
    assert not passes("arch>=8.0", gpus=(good, bad))
    assert not passes("arch>=8.0", gpus=(bad, good))
    err = failure("arch>=8.0", cuda_version="12.2", driver_version="535.54.03", gpus=(good, bad))
    assert "GPU 1 (GPU-00000001-" in err.message and "arch=7.5" in err.message
    assert err.hint is not None and "GPU 1" in err.hint and "NVIDIA_VISIBLE_DEVICES" in err.hint


def test_or_is_evaluated_per_gpu() -> None:
    """Each GPU may satisfy a different term, as libnvidia-container evaluates per GPU."""
    gpus = (gpu(0, brand="tesla", arch="7.0"), gpu(1, brand="geforce", arch="8.6"))
    assert passes("brand=tesla arch>=8.0", gpus=gpus)
    assert not passes("brand=tesla,arch>=8.0", gpus=gpus)


def test_every_requirement_must_hold() -> None:
    reqs = requirements_from_env(
        {"NVIDIA_REQUIRE_CUDA": "cuda>=12.0", "NVIDIA_REQUIRE_DRIVER": "driver>=550"}
    )
    with pytest.raises(RequestError) as info:
        check(reqs, cuda_version="12.2", driver_version="535.54.03", gpus=(gpu(0),))
    assert info.value.field == "process.env[NVIDIA_REQUIRE_DRIVER]"
    check(reqs, cuda_version="12.4", driver_version="550.54.14", gpus=(gpu(0),))


@pytest.mark.parametrize(
    "text", ["cuda>=99", "driver>=999", "arch>=99", "brand=tesla", "cuda<1,driver<1"]
)
def test_unknown_facts_pass(text: str) -> None:
    unknown = (gpu(0, brand=None, arch=None),)
    assert passes(text, cuda=None, driver=None, gpus=unknown)


@pytest.mark.parametrize("text", ["arch>=99", "brand=tesla", "arch<1 brand!=geforce"])
def test_no_selected_gpu_makes_gpu_facts_unknown(text: str) -> None:
    assert passes(text, gpus=())


def test_no_selected_gpu_still_checks_host_facts() -> None:
    assert not passes("cuda>=12.4", cuda="12.2", gpus=())
    assert not passes("brand=tesla,driver>=999", gpus=())


def test_unparsable_host_fact_counts_as_unknown() -> None:
    assert passes("driver>=999", driver="535.54.03-custom")
    assert passes("arch>=9.0", gpus=(gpu(0, arch="sm_86"),))


def test_known_fact_still_fails_beside_unknown_one() -> None:
    assert not passes("cuda>=12.4,driver>=1", cuda="12.2", driver=None)


def test_empty_requirement_always_holds() -> None:
    check([("NVIDIA_REQUIRE_X", Requirement())], cuda_version="1", driver_version="1", gpus=())
    assert Requirement().holds({})


# --- error messages ------------------------------------------------------------------------


def test_cuda_failure_message() -> None:
    err = failure(
        EXAMPLE.replace("11.0", "12.4"),
        cuda_version="12.2",
        driver_version="535.54.03",
        gpus=(gpu(0, brand="geforce"),),
    )
    assert err.field == "process.env[NVIDIA_REQUIRE_CUDA]"
    assert err.value == "cuda>=12.4 brand=tesla,driver>=450"
    assert "NVIDIA_REQUIRE_CUDA not met" in err.message
    assert "unsatisfied condition: cuda>=12.4 (1 more alternative also unmet)" in err.message
    assert "the host has cuda=12.2, driver=535.54.03" in err.message
    assert "GPU 0 (GPU-00000000-0000-0000-0000-000000000000) has brand=geforce" in err.message
    assert err.hint is not None
    assert err.hint.startswith("update the driver to a version supporting CUDA 12.4 or newer")
    assert "hint: update the driver" in str(err)


@pytest.mark.parametrize(
    ("text", "condition", "facts", "hint"),
    [
        ("cuda>12.2", "cuda>12.2", "cuda=12.2", "supporting CUDA 12.2 or a newer"),
        ("cuda<12.0", "cuda<12.0", "cuda=12.2", "CUDA version is below 12.0"),
        ("cuda=11.8", "cuda=11.8", "cuda=12.2", "CUDA version is equal to 11.8"),
        ("driver>=550", "driver>=550", "driver=535.54.03", "to version 550 or newer"),
        ("driver>550", "driver>550", "driver=535.54.03", "version 550 or a newer one"),
        ("driver<=470", "driver<=470", "driver=535.54.03", "driver version at most 470"),
        ("driver!=535.54.03", "driver!=535.54.03", "driver=535.54.03", "other than"),
        ("arch>=9.0", "arch>=9.0", "arch=8.6", "compute capability is at least 9.0"),
        ("arch=8.0", "arch=8.0", "arch=8.6", "compute capability is equal to 8.0"),
        ("brand=tesla", "brand=tesla", "brand=geforce", "brand is equal to tesla"),
        ("brand!=geforce", "brand!=geforce", "brand=geforce", "brand is other than"),
        ("driver>=999,cuda>=1 arch>=99", "driver>=999,cuda>=1", "driver=535", "999 or newer"),
    ],
)
def test_failure_messages(text: str, condition: str, facts: str, hint: str) -> None:
    err = failure(
        text,
        cuda_version="12.2",
        driver_version="535.54.03",
        gpus=(gpu(3, brand="geforce", arch="8.6"),),
    )
    assert f"unsatisfied condition: {condition}" in err.message
    assert facts in err.message
    assert err.hint is not None and hint in err.hint, err.hint
    assert err.field == "process.env[NVIDIA_REQUIRE_CUDA]"
    assert err.value == parse_requirement(text).describe()


def test_failure_names_first_or_term_even_when_another_fails_differently() -> None:
    err = failure(
        "brand=tesla,driver>=450 cuda>=13.0",
        cuda_version="12.2",
        driver_version="535.54.03",
        gpus=(gpu(0, brand="geforce"),),
    )
    assert "unsatisfied condition: brand=tesla,driver>=450 (1 more" in err.message
    assert err.hint is not None and "brand is equal to tesla" in err.hint


# --- environment -----------------------------------------------------------------------------


def test_requirements_from_env_collects_every_require_variable() -> None:
    env = {
        "NVIDIA_REQUIRE_CUDA": "cuda>=12.0",
        "NVIDIA_REQUIRE_ARCH": "arch>=8.0",
        "NVIDIA_REQUIRE_": "driver>=1",
        "NVIDIA_REQUIRE_BLANK": "  ",
        "NVIDIA_VISIBLE_DEVICES": "all",
        "CUDA_VERSION": "12.0.1",
    }
    got = requirements_from_env(env)
    assert [name for name, _ in got] == [
        "NVIDIA_REQUIRE_",
        "NVIDIA_REQUIRE_ARCH",
        "NVIDIA_REQUIRE_CUDA",
    ]
    assert dict(got)["NVIDIA_REQUIRE_ARCH"] == parse_requirement("arch>=8.0")


@pytest.mark.parametrize(
    "name",
    ["NVIDIA_REQUIRE_JETPACK", "NVIDIA_REQUIRE_JETPACK_HOST_MOUNTS", "NVIDIA_REQUIRE_JETPACKX"],
)
def test_jetpack_variables_are_ignored(name: str) -> None:
    assert requirements_from_env({name: "csv-mounts=all not an expression"}) == []


def test_parse_error_from_env_names_variable() -> None:
    with pytest.raises(RequestError) as info:
        requirements_from_env({"NVIDIA_REQUIRE_GPU": "cuda>=12 gpu=h100"})
    assert info.value.field == "process.env[NVIDIA_REQUIRE_GPU]"
    assert info.value.value == "gpu=h100"


@pytest.mark.parametrize(
    ("cuda_version", "minimum"),
    [
        ("10.0.130", "10.0"),
        ("12.2.2", "12.2"),
        ("9.0", "9.0"),
        ("12", "12.0"),
        ("v11.8.0", "11.8"),
        ("12.4.0-rc1", "12.4"),
    ],
)
def test_legacy_image_implies_cuda_minimum(cuda_version: str, minimum: str) -> None:
    got = requirements_from_env({"CUDA_VERSION": cuda_version})
    assert got == [("CUDA_VERSION", parse_requirement(f"cuda>={minimum}"))]


def test_legacy_rule_applies_beside_other_requirements_and_empty_require_cuda() -> None:
    """The toolkit's ``IsLegacy`` tests for an empty value, not for presence."""
    got = requirements_from_env(
        {"CUDA_VERSION": "11.8.0", "NVIDIA_REQUIRE_CUDA": "", "NVIDIA_REQUIRE_ARCH": "arch>=7.0"}
    )
    assert [name for name, _ in got] == ["NVIDIA_REQUIRE_ARCH", "CUDA_VERSION"]


@pytest.mark.parametrize(
    "env",
    [
        {"CUDA_VERSION": "12.2.0", "NVIDIA_REQUIRE_CUDA": "cuda>=12.2"},
        {"CUDA_VERSION": ""},
        {"NVIDIA_REQUIRE_CUDA": "cuda>=12.2"},
    ],
)
def test_no_implicit_rule_without_legacy_image(env: dict[str, str]) -> None:
    assert all(name != "CUDA_VERSION" for name, _ in requirements_from_env(env))


def test_legacy_failure_message() -> None:
    reqs = requirements_from_env({"CUDA_VERSION": "12.4.1"})
    with pytest.raises(RequestError) as info:
        check(reqs, cuda_version="12.2", driver_version="535.54.03", gpus=(gpu(0),))
    err = info.value
    assert err.field == "process.env[CUDA_VERSION]"
    assert "legacy CUDA image" in err.message and "cuda>=12.4" in err.message
    assert err.hint is not None and "supporting CUDA 12.4 or newer" in err.hint
    check(reqs, cuda_version="12.4", driver_version="550.54.14", gpus=(gpu(0),))


@pytest.mark.parametrize("bad", ["latest", "12.x", "1.2.3.4", "v"])
def test_legacy_bad_cuda_version(bad: str) -> None:
    with pytest.raises(RequestError) as info:
        requirements_from_env({"CUDA_VERSION": bad})
    assert info.value.field == "process.env[CUDA_VERSION]"
    assert info.value.value == bad
    assert info.value.hint is not None and "NVIDIA_DISABLE_REQUIRE" in info.value.hint


@pytest.mark.parametrize("value", sorted(DISABLE_REQUIRE_TRUE))
def test_disable_require_skips_everything(value: str) -> None:
    env = {
        "NVIDIA_DISABLE_REQUIRE": value,
        "NVIDIA_REQUIRE_CUDA": "cuda>=99 not-even-valid",
        "CUDA_VERSION": "garbage",
    }
    assert require_disabled(env)
    assert requirements_from_env(env) == []


@pytest.mark.parametrize("value", ["", "0", "false", "False", "f", "yes", "on", " true", "tRUE"])
def test_disable_require_other_values_keep_checks(value: str) -> None:
    env = {"NVIDIA_DISABLE_REQUIRE": value, "NVIDIA_REQUIRE_CUDA": "cuda>=12"}
    assert not require_disabled(env)
    assert len(requirements_from_env(env)) == 1


def test_disable_require_spellings_are_go_parse_bool_true() -> None:
    assert {"1", "t", "T", "true", "TRUE", "True"} == DISABLE_REQUIRE_TRUE


def test_import_adds_no_heavy_modules() -> None:
    code = (
        "import sys\n"
        "import ocihook.core.errors, ocihook.core.records\n"
        "before = set(sys.modules)\n"
        "import ocihook.request.requirements\n"
        "print(sorted({'dataclasses', 'typing', 're'} & (set(sys.modules) - before)))"
    )
    out = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


# --- properties ----------------------------------------------------------------------------

EXPRESSION_ALPHABET = "cudarivehbnt<>=!.,0123456789 \tCUDA-x"


@given(st.text() | st.text(alphabet=EXPRESSION_ALPHABET))
def test_parser_raises_only_request_error(text: str) -> None:
    try:
        r = parse_requirement(text)
    except RequestError:
        return
    assert parse_requirement(r.describe()) == r


def _version_text(parts: list[int], zeros: list[int]) -> str:
    return ".".join("0" * z + str(p) for p, z in zip(parts, zeros, strict=False))


versions = st.builds(
    _version_text,
    st.lists(st.integers(0, 10**6) | st.sampled_from([0, 1, 2]), min_size=1, max_size=5),
    st.lists(st.integers(0, 2), min_size=5, max_size=5),
)
version_values = versions
brand_values = st.text(
    alphabet=st.characters(blacklist_characters="<>=!,", blacklist_categories=("Z", "C")),
    min_size=1,
    max_size=12,
)
constraints = st.one_of(
    st.builds(
        Constraint,
        st.sampled_from(["cuda", "driver", "arch"]),
        st.sampled_from(OPERATORS),
        version_values,
    ),
    st.builds(Constraint, st.just("brand"), st.sampled_from(["=", "!="]), brand_values),
)
requirements = st.builds(
    Requirement,
    st.lists(st.lists(constraints, min_size=1, max_size=4).map(tuple), max_size=4).map(tuple),
)


@given(requirements)
def test_describe_parse_round_trip(r: Requirement) -> None:
    assert parse_requirement(r.describe()) == r
    assert parse_requirement(str(r)) == r


def reference_compare(a: str, b: str) -> int:
    """Independent reference: pad both with zero components to the same length, compare
    the padded integer lists element by element."""
    xs = [int(p) for p in a.split(".")]
    ys = [int(p) for p in b.split(".")]
    width = max(len(xs), len(ys))
    xs += [0] * (width - len(xs))
    ys += [0] * (width - len(ys))
    for x, y in zip(xs, ys, strict=True):
        if x != y:
            return -1 if x < y else 1
    return 0


@given(versions, versions)
def test_version_comparison_matches_reference(a: str, b: str) -> None:
    assert compare_versions(a, b) == reference_compare(a, b)
    assert compare_versions(a, b) == -compare_versions(b, a)
    assert compare_versions(a, a) == 0


@given(st.lists(versions, min_size=1, max_size=8))
def test_version_comparison_is_a_total_order(vs: list[str]) -> None:
    ordered = sorted(vs, key=functools.cmp_to_key(compare_versions))
    reference = sorted(vs, key=functools.cmp_to_key(reference_compare))
    assert [version_key(v) for v in ordered] == [version_key(v) for v in reference]
    for a, b in itertools.pairwise(ordered):
        assert compare_versions(a, b) <= 0
    for a, b, c in itertools.product(vs, repeat=3):
        if compare_versions(a, b) <= 0 and compare_versions(b, c) <= 0:
            assert compare_versions(a, c) <= 0


@given(versions, st.sampled_from(OPERATORS), versions, st.sampled_from(["cuda", "driver", "arch"]))
def test_operators_agree_with_reference(fact: str, op: str, value: str, key: str) -> None:
    sign = reference_compare(fact, value)
    expected = {
        "=": sign == 0,
        "!=": sign != 0,
        "<": sign < 0,
        "<=": sign <= 0,
        ">": sign > 0,
        ">=": sign >= 0,
    }[op]
    assert Constraint(key, op, value).holds(fact) is expected


def test_keys_constant() -> None:
    assert set(KEYS) == {"cuda", "driver", "arch", "brand"}
