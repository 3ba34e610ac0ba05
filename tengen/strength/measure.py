"""Strength against GNU Go: one measurement of a model version, and the results file that owns it.

A measurement plays the version's export (`tengen gtp`, in-process torch, `visits` per move)
against GNU Go at each configured level through the match runner (colours alternate, tengen's
rules engine referees), reports every game to ratings (GNU Go as the anchor `gnugo-l<level>`, the
version as `<model>-v<N>` with its training samples: the names gating uses, so the gating chain and
these games form one rating scale tied to GNU Go), and appends one line per level to
`<data_dir>/strength/results.jsonl`. The loop's strength service (tengen.strength.service) calls it as
the run goes; the status view and `tengen run`'s summary read the file.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from tengen.config import StrengthConfig
from tengen.go.rules import KATAGO
from tengen.gtp.engine_match import EngineMatchSettings, EngineSpec, GameOutcome, Match
from tengen.gtp.gnugo import gnugo_command, model_command
from tengen.loop.layout import DataDir
from tengen.loop.messages import anchor_name, version_player
from tengen.nn.export import export_samples
from tengen.ratings.curve import STRENGTH_SOURCE
from tengen.ratings.report import Reporter

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StrengthResult:
    """One version against one GNU Go level: the model's score (draws half) over `games`."""

    version: int
    player: str  # the version's ratings name
    training_samples: int | None
    opponent: str  # gnugo-l<level>
    level: int
    games: int
    wins: int
    losses: int
    draws: int
    score_rate: float
    rate_low: float  # 95% Wilson interval
    rate_high: float
    visits: int
    board_size: int
    komi: float
    time: str  # when the measurement ended, UTC ISO 8601

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "StrengthResult":
        return cls(**{name: data[name] for name in cls.__dataclass_fields__})

    def format(self) -> str:
        return (f"{self.player} vs {self.opponent}: {self.wins}-{self.losses}-{self.draws}, "
                f"score {self.score_rate:.2f} [{self.rate_low:.2f}, {self.rate_high:.2f}]")


def read_results(data_dir: Path) -> list[StrengthResult]:
    """Every result in the data dir's results file, oldest first (torn or foreign lines skipped)."""
    try:
        lines = DataDir(data_dir).strength_results.read_text().splitlines()
    except OSError:
        return []
    results = []
    for line in lines:
        try:
            results.append(StrengthResult.from_dict(json.loads(line)))
        except (ValueError, KeyError, TypeError):
            continue  # a line cut off by a crash mid-write
    return results


def latest_results(data_dir: Path) -> list[StrengthResult]:
    """The results of the newest measured version (one per level), or []."""
    results = read_results(data_dir)
    if not results:
        return []
    newest = max(r.version for r in results)
    return [r for r in results if r.version == newest]


def append_result(data_dir: Path, result: StrengthResult) -> None:
    path = DataDir(data_dir).strength_results
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(asdict(result)) + "\n")
        f.flush()
        os.fsync(f.fileno())


def measure_version(
    data_dir: Path,
    model: str,
    version: int,
    export: Path,
    gnugo: str,
    config: StrengthConfig,
    reporter: Reporter | None,
    stop: threading.Event | None = None,
    on_game: Callable[[GameOutcome], None] | None = None,
) -> list[StrengthResult]:
    """Play `export` (version `version` of `model`) against GNU Go at every configured level and
    record the results; a level cut short by `stop` is recorded with the games it finished."""
    player = version_player(model, version)
    samples = export_samples(export)
    ours = EngineSpec(player, model_command(str(export), config.visits, config.threads, player), "model", samples)
    results = []
    for level in config.gnugo_levels:
        if stop is not None and stop.is_set():
            break
        opponent = anchor_name(level)
        settings = EngineMatchSettings(games=config.games, size=config.board_size, komi=config.komi, rules=KATAGO,
                                       sgf_dir=DataDir(data_dir).strength_sgf_version(version),
                                       source=STRENGTH_SOURCE)
        match = Match(ours, EngineSpec(opponent, gnugo_command(gnugo, level), "anchor"), settings, reporter,
                      match_id=f"v{version}-l{level}-{time.strftime('%Y%m%d-%H%M%S')}", on_game=on_game)
        summary = match.run(stop)
        if not summary.outcomes:
            break
        wins, losses, draws = summary.tally()
        low, high = summary.interval()
        result = StrengthResult(
            version=version, player=player, training_samples=samples, opponent=opponent, level=level,
            games=len(summary.outcomes), wins=wins, losses=losses, draws=draws, score_rate=summary.rate(),
            rate_low=low, rate_high=high, visits=config.visits, board_size=config.board_size, komi=config.komi,
            time=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        )
        append_result(data_dir, result)
        results.append(result)
    return results
