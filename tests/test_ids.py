"""tengen.loop.ids: what a game id or player name may be."""
from __future__ import annotations

import pytest

from tengen.loop.ids import MAX_ID_LENGTH, id_problem

REFUSED = [chr(i) for i in range(32)] + ["\x7f", "\x85", "\xa0", "\u200b", "\u2028", "\u2029", "\ufeff",
                                          "/", "\\", " ", "<", ">", "&", '"', "'", "%", "é"]


@pytest.mark.parametrize("char", REFUSED, ids=[f"U+{ord(c):04X}" for c in REFUSED])
def test_every_control_character_separator_and_markup_character_is_refused(char: str) -> None:
    problem = id_problem(f"game{char}1")
    assert problem is not None and f"holds {char!r}" in problem


@pytest.mark.parametrize("text", ["", ".hidden", "-rf", "_x", MAX_ID_LENGTH * "g" + "g", None, 7])
def test_empty_hidden_option_like_long_and_non_text_ids_are_refused(text: object) -> None:
    assert id_problem(text) is not None


@pytest.mark.parametrize("text", ["g", "tengen-v12", "gnugo-l10", "worker-0-1a2b-3-17", "candidate-000000020000",
                                  "match-20261202-024301-a1b2c3-001", "user@host:1+x", MAX_ID_LENGTH * "g"])
def test_the_loop_s_own_ids_are_safe(text: str) -> None:
    assert id_problem(text) is None
