"""A games dir as the services write it, for the ratings service's games pages (tests of
tengen.ratings.games and the browser test).

- `sgf/v2/`: three self-play games of version 2 (random games written by self-play's own SGF
  writer, tengen.data.record_sgf; one 9x9 with handicap stones and search comments);
- `gating/`: a match of candidate `candidate-000000004096` against v2, played by the real match
  runner (a tiny random net on both sides, 7x7) and recorded by gating's own ledger, promoted to
  v3 in the decision log; and a match file from before gating kept the moves (results only).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tengen.config import load_config
from tengen.data.record_sgf import write_record_sgf
from tengen.data.synthetic import random_game
from tengen.gate.net_match import MatchRunner, NetMatchSettings
from tengen.loop.ledger import DecisionLog, MatchFile, MatchGameResult
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.model import build_model

CANDIDATE = "candidate-000000004096"
OLD_CANDIDATE = "candidate-000000002048"
SELFPLAY_IDS = ("worker-a-1-0-0", "worker-a-1-0-1", "worker-b-7-0-0")
MATCH_GAMES = 4


def make_games_dir(root: Path) -> Path:
    rng = np.random.default_rng(5)
    for i, game_id in enumerate(SELFPLAY_IDS):
        size = 9 if i == 0 else 7
        record = random_game(rng, size, full_search_prob=0.5, game_id=game_id,
                             initial_black=(20, 60) if i == 0 else ())
        record.model_version, record.model_name = 2, "tengen"
        write_record_sgf(record, root / "sgf" / "v2")

    config = load_config("tiny")
    torch.manual_seed(3)
    net = build_model("b1c16").eval()
    settings = NetMatchSettings.from_config(config)
    runner = MatchRunner([TorchEvaluator(net), TorchEvaluator(net)], settings, config.search,
                         games_in_parallel=MATCH_GAMES, seed=11)
    match = MatchFile(root, CANDIDATE)
    match.start({"candidate": CANDIDATE, "candidate_path": f"/data/candidates/{CANDIDATE}.pt",
                 "opponent_version": 2, "games": MATCH_GAMES, "started": 1000.0})
    for result in runner.play(list(range(MATCH_GAMES))):
        match.add(result)
    match.mark_reported()
    decisions = DecisionLog(root)
    decisions.record({"candidate": CANDIDATE, "candidate_path": f"/data/candidates/{CANDIDATE}.pt",
                      "opponent_version": 2, "wins": 3, "losses": 1, "draws": 0, "games": MATCH_GAMES,
                      "promoted": True, "promoted_version": 3, "reason": "test", "time": 1001.0})

    old = MatchFile(root, OLD_CANDIDATE)
    old.start({"candidate": OLD_CANDIDATE, "candidate_path": "x", "opponent_version": 2, "games": 2,
               "started": 500.0})
    for index, winner in ((0, "B"), (1, "B")):  # one win each
        old.add(MatchGameResult(index=index, black_side=index % 2, winner=winner, score=None, end="resign",
                                moves=31, board_size=7, rules="tromp-taylor", komi=7.5))
    decisions.record({"candidate": OLD_CANDIDATE, "candidate_path": "x", "opponent_version": 2, "wins": 1,
                      "losses": 1, "draws": 0, "games": 2, "promoted": False, "promoted_version": None,
                      "reason": "test", "time": 501.0})
    return root
