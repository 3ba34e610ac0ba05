"""A digest of what a few fixed-seed searches find, for checking that the search is bit for bit
what it was (tests/test_uncertainty_search.py holds the digest that main gave before the
uncertainty-weighting and variance-scaled cPUCT settings existed). Uses only APIs older than them."""
from __future__ import annotations

import hashlib

import numpy as np
import torch

from tengen.config import SearchConfig
from tengen.go.board import Board
from tengen.go.rules import parse_rules
from tengen.nn.evaluator import TorchEvaluator
from tengen.nn.model import build_model
from tengen.search.mcts import NNCache
from tengen.search.search import new_tree, run


def search_fingerprint(**changes: object) -> str:
    """`changes`: SearchConfig settings for every search (none: the settings main had)."""
    torch.manual_seed(7)
    evaluator = TorchEvaluator(build_model("b1c16").eval(), precision="fp32")
    digest = hashlib.sha256()
    board = Board(9, 9, parse_rules("tromp-taylor"), 7.5)
    for move in (40, 30, 50, 31):
        board.play(move)
    settings = [SearchConfig(**changes),
                SearchConfig(subtree_bias_factor=0.35, random_symmetry=True, shaped_noise=True, **changes)]
    for k, config in enumerate(settings):
        tree = new_tree(NNCache(4096, 81), config, seed=11 + k)
        for noise in (False, True):
            result = run(board, evaluator, 96, tree=tree, noise=noise, forced_playouts=noise, leaves_per_batch=4)
            for array in (result.moves, result.visits, result.pruned, result.priors, result.utility):
                digest.update(np.ascontiguousarray(array).tobytes())
            digest.update(np.array([result.win, result.loss, result.score_mean, result.score_stdev,
                                    result.root_utility], np.float64).tobytes())
    return digest.hexdigest()


if __name__ == "__main__":
    print(search_fingerprint())
