"""The board-size curriculum in `tengen run`: the tiny preset at 9x9 with a 7x7 first step of 2,000
samples. The services follow it by themselves (nothing in the launcher knows it): self-play plays
7x7 under the versions trained on fewer samples and 9x9 from the first version past them, gating
plays each candidate on the boards it would play once served, and the window takes both boards,
all in one data dir, one chain of versions. The bounds are liveness timeouts, not speed claims."""
from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from tengen.config import load_config
from tengen.infra.process import stop_marked
from tengen.loop.layout import DataDir
from tengen.nn.export import export_samples
from tengen.train.window import Window
from tests.test_run_loop import TENGEN, _env, _logs, _tail

FIRST_BOARD_SAMPLES = 2000
SWITCH_DEADLINE_S = 600  # from nothing past the first board; about 3-5 minutes on the 2-core box


def _sgf_sizes(directory: Path) -> set[int]:
    """The board sizes (SZ) of the SGFs in a directory."""
    found = (re.search(r"SZ\[(\d+)\]", p.read_text(errors="replace")) for p in directory.glob("*.sgf"))
    return {int(m.group(1)) for m in found if m is not None}


def _versions_by_samples(layout: DataDir) -> dict[int, int | None]:
    model = layout.models / "tengen"
    if not model.is_dir():
        return {}
    return {int(p.name): export_samples(p / "model.pt") for p in model.iterdir() if p.name.isdigit()}


def _match_boards(layout: DataDir) -> dict[int, set[int]]:
    """Candidate samples -> the board sizes of its gating games."""
    boards: dict[int, set[int]] = {}
    for path in layout.matches.glob("candidate-*.jsonl"):
        sizes = set()
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line being written
            if "game" in record:
                sizes.add(int(record["game"]["board_size"]))
        if sizes:
            boards[int(path.stem.split("-")[1])] = sizes
    return boards


def _progress_on_the_page(page: str, done: Callable[[dict], bool], timeout_s: float = 120.0) -> dict:
    """The progress on the ratings page's /api/curve once `done` holds for it."""
    deadline = time.monotonic() + timeout_s
    progress: dict = {}
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"{page}/api/curve", timeout=30) as response:
            progress = json.loads(response.read())["progress"] or {}
        if done(progress):
            return progress
        time.sleep(3)
    raise AssertionError(f"the page's progress: {progress}")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_tengen_run_plays_the_first_board_then_the_presets(tmp_path: Path) -> None:
    data_dir = tmp_path / "run"
    layout = DataDir(data_dir)
    out = tmp_path / "run.out"
    env = dict(_env(data_dir), TENGEN_GAME__BOARD_SIZES="9", TENGEN_GAME__FIRST_BOARD_SIZE="7",
               TENGEN_GAME__FIRST_BOARD_SAMPLES=str(FIRST_BOARD_SAMPLES), TENGEN_STRENGTH__GNUGO_LEVELS="")
    with open(out, "wb") as sink:
        proc = subprocess.Popen([TENGEN, "run", "--preset", "tiny", "--data-dir", str(data_dir), "--duration", "14m",
                                 "--status-every", "10"], stdout=sink, stderr=subprocess.STDOUT, env=env)
    switched: int | None = None
    try:
        deadline = time.monotonic() + SWITCH_DEADLINE_S
        while time.monotonic() < deadline and proc.poll() is None and switched is None:
            time.sleep(5)
            for version, samples in sorted(_versions_by_samples(layout).items()):
                if samples is not None and samples >= FIRST_BOARD_SAMPLES and \
                        9 in _sgf_sizes(layout.selfplay_sgf_version(version)):
                    switched = version
                    break
        assert proc.poll() is None, f"tengen run exited early:\n{_tail(out)}\n{_logs(data_dir)}"
        assert switched is not None, f"no 9x9 self-play within {SWITCH_DEADLINE_S} s:\n{_tail(out)}\n{_logs(data_dir)}"
        # The progress the services publish, on the page and in `tengen status --page`, as under compose.
        page = json.loads((data_dir / "run.json").read_text())["endpoints"]["ratings_http"]
        progress = _progress_on_the_page(page, lambda p: p.get("boards") == "9x9" and (p.get("games") or 0) > 0
                                         and (p.get("games_per_s") or 0) > 0)
        status = subprocess.run([TENGEN, "status", "--page", page, "--json"], capture_output=True, text=True,
                                env=_env(data_dir), timeout=120)
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=240) == 0, _tail(out)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        stop_marked(str(data_dir.resolve()))
    assert progress["samples"] >= FIRST_BOARD_SAMPLES and progress["version"] >= switched, progress
    assert progress["workers"] == 1 and progress["games_per_s"] > 0 and progress["elapsed_s"] > 0, progress
    assert progress["machine"], progress  # the trainer's machine line
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)["progress"]
    assert shown["samples"] >= progress["samples"] and shown["run_began"] == progress["run_began"], (shown, progress)
    text = out.read_text(errors="replace")
    assert "the curriculum plays 7x7 (komi around 9) until the served net has trained 2,000 samples, then 9x9" in text

    # Self-play: 7x7 under every version trained on fewer samples, 9x9 under the first one past them.
    samples = _versions_by_samples(layout)
    assert samples[1] == 0 and _sgf_sizes(layout.selfplay_sgf_version(1)) == {7}
    for version, seen in samples.items():
        sizes = _sgf_sizes(layout.selfplay_sgf_version(version))
        if seen is not None and seen < FIRST_BOARD_SAMPLES:
            assert sizes <= {7}, (version, seen, sizes)
    selfplay_log = (layout.logs / "selfplay-0.log").read_text(errors="replace")
    assert "playing 7x7 (komi around 9): the served net has trained 0 samples" in selfplay_log
    assert "playing 9x9 (komi around 7)" in selfplay_log

    # Gating: a candidate trained on fewer samples is played on 7x7, a later one on 9x9.
    boards = _match_boards(layout)
    assert boards, "gating played no game"
    for candidate_samples, sizes in boards.items():
        assert sizes == ({7} if candidate_samples < FIRST_BOARD_SAMPLES else {9}), boards
    assert any(s >= FIRST_BOARD_SAMPLES for s in boards), boards  # the match that promoted the switch

    # The window took the 9x9 rows beside the 7x7 ones (those age out as it slides).
    window = Window(layout.window, 9, c=load_config("tiny").trainer.window_c, read_only=True)
    sizes = {int(x) for x in window.read(np.arange(window.start, window.n_total))["x_size"]}
    assert 9 in sizes and sizes <= {7, 9}, sizes
