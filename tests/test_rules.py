"""Rule sets: names, explicit strings, round trips, and clear errors."""
from __future__ import annotations

import pytest

from tengen.go.rules import (
    CHINESE,
    KATAGO,
    TROMP_TAYLOR,
    IllegalMoveError,
    Rules,
    parse_rules,
)


def test_named_rules() -> None:
    assert parse_rules("tromp-taylor") == Rules("positional", True, "area")
    assert parse_rules("chinese") == Rules("positional", False, "katago") == CHINESE
    assert parse_rules(" KataGo ") == KATAGO
    assert TROMP_TAYLOR.scoring == "area" and KATAGO.scoring == "katago"


def test_explicit_rules_in_any_order() -> None:
    assert parse_rules("ko=situational,suicide=yes") == Rules("situational", True, "katago")
    assert parse_rules("suicide=no, ko=simple, scoring=area") == Rules("simple", False, "area")


@pytest.mark.parametrize("ko", ["simple", "positional", "situational"])
@pytest.mark.parametrize("suicide", [True, False])
@pytest.mark.parametrize("scoring", ["area", "katago"])
def test_round_trip(ko: str, suicide: bool, scoring: str) -> None:
    rules = Rules(ko, suicide, scoring)
    assert parse_rules(rules.to_string()) == rules


def test_ko_code() -> None:
    assert [Rules(k).ko_code for k in ("simple", "positional", "situational")] == [0, 1, 2]


@pytest.mark.parametrize(
    "text, message",
    [
        ("japanese", "unknown rules"),
        ("ko=super,suicide=no", "unknown ko rule"),
        ("ko=simple,suicide=maybe", "suicide must be yes or no"),
        ("ko=simple", "lack suicide"),
        ("suicide=no", "lack ko"),
        ("ko=simple,suicide=no,colour=red", "unknown rules key"),
        ("ko=simple,ko=positional,suicide=no", "given twice"),
        ("ko=simple,suicide", "bad rules item"),
        ("ko=simple,suicide=no,scoring=japanese", "unknown scoring"),
        ("", "unknown rules"),
    ],
)
def test_bad_rules_text(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_rules(text)


def test_bad_rules_values() -> None:
    with pytest.raises(ValueError, match="must be a string"):
        parse_rules(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="suicide must be a bool"):
        Rules("simple", "yes")  # type: ignore[arg-type]


def test_illegal_move_error() -> None:
    error = IllegalMoveError("superko", 40, "position repeats")
    assert isinstance(error, ValueError)
    assert (error.reason, error.move) == ("superko", 40)
    assert "superko" in str(error) and "position repeats" in str(error)
