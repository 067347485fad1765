"""What users type and write: plain integers in options, YAML with repeated keys or hostile
structure, and values quoted back in error messages."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pdmux_cli.util.errors import SHORT_REPR_CHARS, InputError, short_repr
from pdmux_cli.util.numbers import MAX_DIGITS, plain_int
from pdmux_cli.util.yaml_input import load_yaml


@pytest.mark.parametrize(("text", "value"),
                         [("132", 132), (" 8 ", 8), ("0", 0), ("9" * MAX_DIGITS, int("9" * MAX_DIGITS))])
def test_plain_int_accepts(text, value) -> None:
    assert plain_int(text) == value


@pytest.mark.parametrize("text",
                         ["", "²", "٣", "1_000", "-1", "+1", "1.0", "1e3", "9" * (MAX_DIGITS + 1), "1 2"])
def test_plain_int_refuses(text) -> None:
    assert plain_int(text) is None


@given(st.integers(min_value=0, max_value=10**MAX_DIGITS - 1))
def test_plain_int_round_trips(n) -> None:
    assert plain_int(str(n)) == n


def test_short_repr_bounds_any_value() -> None:
    assert short_repr("H100") == "'H100'"
    assert short_repr(3.5) == "3.5"
    assert len(short_repr("x" * 10_000)) <= SHORT_REPR_CHARS
    assert short_repr(10**5000) == "<a number too long to print>"
    nested = ["lol"] * 9
    for _ in range(8):  # 9**9 strings through shared references
        nested = [nested] * 9
    assert len(short_repr(nested)) <= SHORT_REPR_CHARS


def test_load_yaml_reports_every_repeated_key() -> None:
    data, duplicates = load_yaml("a: 1\nb: {c: 1, c: 2}\na: 3\n", "f.yaml")
    assert data == {"a": 3, "b": {"c": 2}}
    assert sorted(duplicates) == [("a", 3), ("c", 2)]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a: [1\n", "f.yaml is not valid YAML (expected ',' or ']'"),
        ("when: 2025-02-30\n", "a value YAML cannot read (day is out of range"),
        ("n: " + "9" * 5000 + "\n", "a value YAML cannot read"),
        ("[" * 5000, "nested too deeply"),
        ("!!python/object:os.system {}\n", "not valid YAML"),
    ],
)
def test_load_yaml_errors_are_one_line(text, fragment) -> None:
    with pytest.raises(InputError) as err:
        load_yaml(text, "f.yaml")
    assert fragment in str(err.value) and "\n" not in str(err.value)
