"""A games dir as the services write it, for the ratings service's games pages (tests of
tengen.ratings.games and the browser test).

- `sgf/v2/`: three self-play games of version 2 (random games written by self-play's own SGF
  writer, tengen.data.record_sgf; one 9x9 with handicap stones and search comments);
- `gating/`: a match of candidate `candidate-000000004096` against v2, played by the real match
  runner (a tiny random net on both sides, 7x7) and recorded by gating's own ledger, promoted to
  v3 in the decision log; and a match file from before gating kept the moves (results only);
- `strength/sgf/v<N>/`: games of v2 and v3 against GNU Go levels 1 and 5 named as the strength
  service names them (`<match id>-<game>.sgf`, tengen.strength.measure), with its stderr logs
  beside them; short random games that end by two passes, as a random net's do.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from tengen.config import load_config
from tengen.data.record_sgf import write_record_sgf
from tengen.data.synthetic import random_game
from tengen.gate.net_match import MatchRunner, NetMatchSettings
from tengen.go.board import Board
from tengen.go.passalive import final_score, result_string
from tengen.go.rules import KATAGO
from tengen.go.sgf import SgfGame, write_game
from tengen.loop.ledger import DecisionLog, MatchFile, MatchGameResult
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.model import build_model

CANDIDATE = "candidate-000000004096"
OLD_CANDIDATE = "candidate-000000002048"
SELFPLAY_IDS = ("worker-a-1-0-0", "worker-a-1-0-1", "worker-b-7-0-0")
MATCH_GAMES = 4
STRENGTH_GAMES = {(2, 1): 2, (3, 1): 1, (3, 5): 1}  # (version, GNU Go level): games


def strength_name(version: int, level: int, number: int) -> str:
    """A strength game's file name without .sgf: its match id, then its number."""
    return f"v{version}-l{level}-20261201-101500-{number:03d}"


def write_strength_games(root: Path, rng: np.random.Generator) -> None:
    for (version, level), count in STRENGTH_GAMES.items():
        directory = root / "strength" / "sgf" / f"v{version}"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"v{version}-l{level}-20261201-101500-tengen-v{version}.stderr.log").write_text("log\n")
        for number in range(1, count + 1):
            ours, gnugo = f"tengen-v{version}", f"gnugo-l{level}"
            black, white = (ours, gnugo) if number % 2 else (gnugo, ours)
            board = Board(9, 9, KATAGO, 7.5)
            moves = []
            for _ in range(8 + number):
                move = int(rng.choice(np.flatnonzero(board.legal_moves()[:-1])))
                moves.append((board.to_move, move))
                board.play(move)
            for _ in range(2):
                moves.append((board.to_move, board.pass_move))
                board.play(board.pass_move)
            result = result_string(final_score(board))
            game = SgfGame(x_size=9, y_size=9, komi=7.5, rules=KATAGO, moves=moves, player_black=black,
                           player_white=white, result=result,
                           comment=f"tengen match v{version}-l{level}-20261201-101500, game {number}: "
                                   f"{result} by two passes")
            (directory / f"{strength_name(version, level, number)}.sgf").write_bytes(write_game(game))


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
    write_strength_games(root, rng)
    return root
