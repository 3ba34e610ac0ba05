"""Faults in a running loop (`tengen run --preset tiny`: the real broker, Triton, ratings, trainer,
gating, strength and selfplay), through the drill of `tengen chaos` (tengen.run.chaos): the broker
SIGKILLed while the trainer is paused (every game it had acknowledged still reaches the window,
once), then the trainer, Triton, ratings and `tengen run` itself SIGKILLed in turn; after each,
self-play moves again and the window grows, on its own. The bounds are liveness timeouts, not speed
claims."""
from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from tengen.config import load_config
from tengen.infra.process import marked_processes
from tengen.run.chaos import Drill

RECOVERY_S = 240  # generous: a service restart with backoff, Triton reloading its models


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_the_loop_survives_kills_without_losing_a_game(tmp_path: Path, gnugo: str) -> None:
    data_dir = tmp_path / "run"
    env = {k: v for k, v in os.environ.items() if not k.startswith("TENGEN_")}
    env.update(TENGEN_STRENGTH__GAMES="2", TENGEN_STRENGTH__GNUGO_LEVELS="0")
    out = io.StringIO()
    drill = Drill("tiny", load_config("tiny", env=env), data_dir, rounds=1,
                  targets=("broker", "trainer", "triton", "ratings", "supervisor"), recovery_s=RECOVERY_S,
                  out=out, env=env)
    result = drill.run()
    assert [r.target for r in result.recoveries] == ["broker", "trainer", "triton", "ratings", "supervisor"], \
        out.getvalue()
    # The paused trainer left games on the broker when it died: the resend path was exercised.
    selfplay_log = (data_dir / "logs" / "selfplay-0.log").read_text(errors="replace")
    assert "sending them again" in selfplay_log
    assert result.at_risk >= 5, "the pause left nothing for the broker to lose; nothing was tested"
    assert result.lost == 0 and result.duplicated == 0, result.summary()
    assert not marked_processes(str(data_dir.resolve())), "the drill left processes of its runs behind"
