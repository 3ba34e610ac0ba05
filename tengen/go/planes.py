"""The layout of the neural net's input: KataGo's Tables 1-2 without the Japanese-rules channels.

Shared by the feature encoder (tengen.go.features), the net (tengen.nn) and the exported model's
signature, so every part of the system agrees on what channel i means. All planes are from the
perspective of the player to move. Channel ON_BOARD doubles as the mask for mixed board sizes.
"""
from __future__ import annotations

# Spatial (binary) channels, shape [NUM_SPATIAL, H, W].
ON_BOARD = 0
OWN_STONE = 1
OPP_STONE = 2
LIBERTIES_1 = 3  # chain with exactly 1 liberty; LIBERTIES_1 + k for k+1 liberties (k < 3)
LIBERTIES_2 = 4
LIBERTIES_3 = 5
KO_ILLEGAL = 6  # illegal because of ko or superko
PREV_MOVE_1 = 7  # location of the previous move; PREV_MOVE_1 + i for the (i+1)-th previous (i < 5)
LADDERED_0 = 12  # stone in or one move from inescapable atari now; LADDERED_0 + t, t turns ago (t < 3)
LADDERED_1 = 13
LADDERED_2 = 14
LADDER_WORKING_MOVE = 15  # move that puts an opponent chain in inescapable atari
PASS_ALIVE_OWN = 16  # own pass-alive stones or area surrounded by them
PASS_ALIVE_OPP = 17
NUM_SPATIAL = 18

# Global (float) channels, shape [NUM_GLOBAL].
PREV_PASS_1 = 0  # previous move was a pass; PREV_PASS_1 + i for the (i+1)-th previous (i < 5)
KOMI = 5  # komi / 15 from the perspective of the player to move
KO_RULE_SIMPLE = 6  # 1.0 for simple ko, 0.0 for superko
KO_RULE_KIND = 7  # 0.0 simple, 0.5 positional superko, -0.5 situational superko
SUICIDE_ALLOWED = 8  # 1.0 when multi-stone suicide is legal
KOMI_PARITY = 9  # komi + board size parity (see tengen.go.features)
NUM_GLOBAL = 10

MAX_BOARD = 19
MIN_BOARD = 7
