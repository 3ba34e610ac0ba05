"""Go rule sets: which ko rule, whether multi-stone suicide is legal, and how the end is scored.

KataGo (paper §6.2.3, App. C) trains on positional and situational superko, with suicide allowed
or not, and scores by area where pass-alive territory counts for its owner even with dead opponent
stones inside. Plain Tromp-Taylor scoring (every stone on the board is alive) is kept for
compatibility with other programs and for tests.

Names accepted by `parse_rules`:
- ``tromp-taylor``: positional superko, suicide allowed, plain area scoring;
- ``chinese``: positional superko, suicide forbidden, KataGo's pass-alive area scoring;
- ``katago``: positional superko, suicide forbidden, KataGo's scoring (selfplay's default);
- explicit ``ko=simple|positional|situational,suicide=yes|no[,scoring=area|katago]``
  (scoring defaults to ``katago``), in any order.
"""
from __future__ import annotations

from dataclasses import dataclass

KO_RULES = ("simple", "positional", "situational")
SCORING_RULES = ("area", "katago")
ILLEGAL_REASONS = ("off-board", "occupied", "suicide", "ko", "superko")


class IllegalMoveError(ValueError):
    """A move the rules forbid; `.reason` is one of ILLEGAL_REASONS, `.move` the move index."""

    def __init__(self, reason: str, move: int, detail: str = "") -> None:
        self.reason = reason
        self.move = move
        super().__init__(f"illegal move {move}: {reason}" + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class Rules:
    """One rule set. `suicide` means multi-stone suicide is legal (single-stone suicide never is:
    it would leave the board unchanged, like a pass, as in KataGo)."""

    ko: str = "positional"
    suicide: bool = False
    scoring: str = "katago"

    def __post_init__(self) -> None:
        if self.ko not in KO_RULES:
            raise ValueError(f"unknown ko rule {self.ko!r}; expected one of {', '.join(KO_RULES)}")
        if self.scoring not in SCORING_RULES:
            raise ValueError(
                f"unknown scoring {self.scoring!r}; expected one of {', '.join(SCORING_RULES)}"
            )
        if not isinstance(self.suicide, bool):
            raise ValueError(f"suicide must be a bool, got {self.suicide!r}")

    @property
    def ko_code(self) -> int:
        """0 simple ko, 1 positional superko, 2 situational superko (the engine's encoding)."""
        return KO_RULES.index(self.ko)

    def to_string(self) -> str:
        """Canonical explicit form; `parse_rules(r.to_string()) == r`."""
        return f"ko={self.ko},suicide={'yes' if self.suicide else 'no'},scoring={self.scoring}"


TROMP_TAYLOR = Rules(ko="positional", suicide=True, scoring="area")
CHINESE = Rules(ko="positional", suicide=False, scoring="katago")
KATAGO = Rules(ko="positional", suicide=False, scoring="katago")

NAMED_RULES = {"tromp-taylor": TROMP_TAYLOR, "chinese": CHINESE, "katago": KATAGO}
_YES_NO = {"yes": True, "no": False}


def parse_rules(text: str) -> Rules:
    """Rules from a name (see the module docstring) or an explicit ``key=value,...`` string."""
    if not isinstance(text, str):
        raise ValueError(f"rules must be a string, got {type(text).__name__}")
    spec = text.strip().lower()
    if spec in NAMED_RULES:
        return NAMED_RULES[spec]
    if "=" not in spec:
        raise ValueError(
            f"unknown rules {text!r}; expected one of {', '.join(NAMED_RULES)} "
            "or 'ko=simple|positional|situational,suicide=yes|no[,scoring=area|katago]'"
        )
    fields: dict[str, str] = {}
    for part in spec.split(","):
        key, sep, value = (s.strip() for s in part.partition("="))
        if not sep or not key or not value:
            raise ValueError(f"bad rules item {part.strip()!r} in {text!r}; expected key=value")
        if key not in ("ko", "suicide", "scoring"):
            raise ValueError(f"unknown rules key {key!r} in {text!r}; expected ko, suicide, scoring")
        if key in fields:
            raise ValueError(f"rules key {key!r} given twice in {text!r}")
        fields[key] = value
    missing = [k for k in ("ko", "suicide") if k not in fields]
    if missing:
        raise ValueError(f"rules {text!r} lack {' and '.join(missing)}")
    if fields["suicide"] not in _YES_NO:
        raise ValueError(f"suicide must be yes or no in {text!r}, got {fields['suicide']!r}")
    return Rules(
        ko=fields["ko"], suicide=_YES_NO[fields["suicide"]], scoring=fields.get("scoring", "katago")
    )
