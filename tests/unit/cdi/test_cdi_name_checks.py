"""The CDI spec's character checks (``ocihook.cdi.spec``: written without :mod:`re`, which
costs milliseconds on a container's start path) accept exactly what the regular
expressions of the rules they implement accept."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from ocihook.cdi import spec

LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
RULES = [
    (spec._is_dns_subdomain, re.compile(rf"{LABEL}(?:\.{LABEL})*")),
    (spec._is_k8s_name, re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")),
    (spec._is_permissions, re.compile(r"none|[rwm]*")),
    (spec._is_ifname, re.compile(r"(?!\.\.?\Z)[!-.0-9;-~]{1,15}")),
]
# the characters that matter to the rules, and a few that do not
TEXT = st.text(alphabet="az09AZ-_.:/!~ rwmnoe\u00e9\t", max_size=18)


@given(TEXT)
def test_checks_are_the_regular_expressions(value: str) -> None:
    for check, rx in RULES:
        assert check(value) == (rx.fullmatch(value) is not None), (check.__name__, value)


def test_known_values() -> None:
    assert spec._is_dns_subdomain("nvidia.com") and not spec._is_dns_subdomain("Nvidia.com")
    assert not spec._is_dns_subdomain("a..b") and not spec._is_dns_subdomain("")
    assert spec._is_k8s_name("gpu_0.a-b") and not spec._is_k8s_name("-a")
    assert spec._is_permissions("") and spec._is_permissions("none")
    assert not spec._is_permissions("nonex")
    assert spec._is_ifname("eth0") and not spec._is_ifname("..")
    assert not spec._is_ifname("a" * 16) and not spec._is_ifname("a/b")
