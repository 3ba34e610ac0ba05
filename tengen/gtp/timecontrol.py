"""A simple time manager for GTP's time_settings / time_left (Canadian byo-yomi).

GTP's `time_settings main byo_yomi_time byo_yomi_stones`: main time in seconds, then periods of
`byo_yomi_time` seconds for `byo_yomi_stones` stones. `byo_yomi_time > 0` with `stones == 0`
means no time limit; all zero after the main time means absolute time. `time_left color time
stones` resets the clock of one colour (stones 0: still in main time).

The budget for one move: in main time, the time left spread over the moves still expected
(about half the empty points, at least MIN_MOVES_LEFT), plus an even share of the byo-yomi
period; in byo-yomi, the period's time divided by the stones still to play there. A fixed safety
margin for the controller's and the pipe's latency is always kept.
"""
from __future__ import annotations

from dataclasses import dataclass

from tengen.go.board import BLACK, WHITE

MIN_MOVES_LEFT = 10
SAFETY_S = 0.5  # seconds kept back on every move for transport and bookkeeping
MIN_BUDGET_S = 0.05


@dataclass
class Clock:
    time_left: float
    stones_left: int  # 0: main time; else stones still to play in the current byo-yomi period


class TimeManager:
    def __init__(self) -> None:
        self.main_time = 0.0
        self.byo_yomi_time = 0.0
        self.byo_yomi_stones = 0
        self.unlimited = False  # time_settings said explicitly: no time limit
        self.clocks: dict[int, Clock] = {}

    def settings(self, main_time: float, byo_yomi_time: float, byo_yomi_stones: int) -> None:
        if main_time < 0 or byo_yomi_time < 0 or byo_yomi_stones < 0:
            raise ValueError("time settings must not be negative")
        self.main_time = main_time
        self.byo_yomi_time = byo_yomi_time
        self.byo_yomi_stones = byo_yomi_stones
        # GTP: byo-yomi time with zero stones means no time limit at all.
        self.unlimited = byo_yomi_time > 0 and byo_yomi_stones == 0
        self.clocks = {c: Clock(main_time, 0) for c in (BLACK, WHITE)}

    def time_left(self, color: int, seconds: float, stones: int) -> None:
        if seconds < 0 or stones < 0:
            raise ValueError("time left and stones must not be negative")
        self.clocks[color] = Clock(seconds, stones)

    def budget(self, color: int, empty_points: int) -> float | None:
        """Seconds to spend on this move, or None without a time limit (no time_settings and no
        time_left for this colour, or time_settings declaring no limit)."""
        clock = self.clocks.get(color)
        if self.unlimited or clock is None:
            return None
        if clock.stones_left > 0:
            share = clock.time_left / clock.stones_left
        else:
            moves_left = max(MIN_MOVES_LEFT, empty_points // 2)
            share = clock.time_left / moves_left
            if self.byo_yomi_stones > 0:
                share += self.byo_yomi_time / self.byo_yomi_stones
        return max(MIN_BUDGET_S, share - SAFETY_S)
