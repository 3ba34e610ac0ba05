"""A digest of what a few fixed-seed searches find, for checking that the search is bit for bit
what it was (tests/test_uncertainty_search.py holds the digest that main gave before the
uncertainty-weighting and variance-scaled cPUCT settings existed). Uses only APIs older than them.

The evaluator is exact arithmetic on the input planes (small integers, sums and divisions by powers
of two), not a net: a net's float32 kernels differ in their last bits between CPUs (AVX2 and
AVX-512 gave different digests for the same search), and the digest is about the search."""
from __future__ import annotations

import hashlib

import numpy as np

from tengen.config import SearchConfig
from tengen.go.board import Board
from tengen.go.planes import ON_BOARD
from tengen.go.rules import parse_rules
from tengen.search.nn_cache import NNCache
from tengen.search.single_search import new_tree, run


class ExactEvaluator:
    """Outputs that depend on every input plane and on the point, computed exactly on any CPU."""

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        batch, planes, height, width = spatial.shape
        weights = np.arange(1, planes + 1, dtype=np.int64).reshape(1, planes, 1, 1)
        feature = (np.rint(spatial).astype(np.int64) * weights).sum(axis=1)  # [B, H, W] small integers
        points = np.arange(height * width, dtype=np.int64).reshape(1, height, width)
        on_board = spatial[:, ON_BOARD] > 0.5
        logits = np.where(on_board, ((feature * 37 + points * 11) % 17) / 8.0 - 1.0, -1.0e4)
        total = feature.sum(axis=(1, 2))
        policy = np.concatenate([logits.reshape(batch, -1), np.full((batch, 1), -0.5)], axis=1)
        value = np.stack([(total % 5) / 4.0, (total % 7) / 4.0, np.full(batch, -2.0)], axis=1)
        score = np.stack([((total % 11) - 5) / 2.0, np.full(batch, 5.0)], axis=1)
        ownership = np.where(on_board, (feature % 3) - 1.0, 0.0)
        return {"policy": policy.astype(np.float32), "value": value.astype(np.float32),
                "score": score.astype(np.float32), "ownership": ownership.astype(np.float32),
                "uncertainty": np.full((batch, 2), -1.0, np.float32)}


def search_fingerprint(**changes: object) -> str:
    """`changes`: SearchConfig settings for every search (none: the settings main had)."""
    evaluator = ExactEvaluator()
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
