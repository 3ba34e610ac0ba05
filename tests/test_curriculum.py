"""The board-size curriculum as a property of the loop (GameConfig.first_board_*, boards_at): the
boards a net plays follow the training samples it has seen, which its announcement on
tengen.models carries; self-play's and gating's settings are built from the same rule. The loop
switching boards end to end is tests/test_run_curriculum.py (tengen run) and the compose test."""
from __future__ import annotations

import json

import pytest

from tengen.config import Boards, ConfigError, load_config
from tengen.gate.net_match import NetMatchSettings
from tengen.infra.kafka import KafkaAdapterError
from tengen.loop.messages import ModelAnnouncement
from tengen.nn.export import net_samples
from tengen.selfplay.game import SelfplaySettings


def test_the_cpu_preset_plays_7x7_at_komi_9_until_480k_samples_then_9x9() -> None:
    game = load_config("cpu").game
    first, final = Boards((7,), (1.0,), 9.0), Boards((9,), (1.0,), 7.0)
    assert [game.boards_at(s) for s in (0, 1, 479_999)] == [first] * 3
    assert [game.boards_at(s) for s in (480_000, 2_000_000)] == [final] * 2
    # A version announced without its samples (a tengen from before the curriculum) plays the final boards.
    assert game.boards_at(None) == final
    assert first.describe() == "7x7" and Boards((9, 13), (1.0, 1.0), 7.0).describe() == "9x9, 13x13"


def test_a_preset_without_a_curriculum_always_plays_its_boards() -> None:
    game = load_config("tiny").game
    assert game.first_board_size == 0
    assert {game.boards_at(s) for s in (None, 0, 10**9)} == {Boards((7,), (1.0,), game.komi_mean)}


@pytest.mark.parametrize("env, key", [
    ({"TENGEN_GAME__FIRST_BOARD_SIZE": "9"}, "game.first_board_size"),  # not below board_sizes [9]
    ({"TENGEN_GAME__FIRST_BOARD_SIZE": "6"}, "game.first_board_size"),  # below 7x7
    ({"TENGEN_GAME__FIRST_BOARD_SAMPLES": "0"}, "game.first_board_samples"),
])
def test_a_bad_curriculum_is_refused_by_name(env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError, match=key):
        load_config("cpu", env=env)


def test_the_launchers_first_stage_settings_name_their_successors() -> None:
    with pytest.raises(ConfigError, match="TENGEN_GAME__FIRST_BOARD_SAMPLES instead"):
        load_config("cpu", env={"TENGEN_RUN__FIRST_STAGE_SAMPLES": "1000"})


def test_selfplay_and_gating_play_the_boards_of_the_nets_samples() -> None:
    config = load_config("cpu")
    early, late = SelfplaySettings.from_config(config, 0), SelfplaySettings.from_config(config, 480_000)
    assert (early.board_sizes, early.komi_mean) == ([7], 9.0)
    assert (late.board_sizes, late.komi_mean) == ([9], 7.0)
    # Gating's match is on the boards the candidate would play once served, at gating's komi.
    match_early = NetMatchSettings.from_config(config, 100_000)
    match_late = NetMatchSettings.from_config(config, 500_000)
    assert match_early.board_sizes == [7] and match_late.board_sizes == [9]
    assert match_early.komi == match_late.komi == config.gating.komi


def test_a_warm_started_nets_samples_count_its_past() -> None:
    """The curriculum is keyed on what a net has trained on in all: a run started from another's
    net (an init model, or the first stage of a tengen before this one) is past the first board."""
    assert net_samples({"samples_seen": 1000}) == 1000
    assert net_samples({"samples_seen": 0, "init_from": {"path": "x.pt", "samples_seen": 480_000}}) == 480_000
    assert net_samples({"samples_seen": 20_000, "init_from": {"samples_seen": 480_000}}) == 500_000
    assert load_config("cpu").game.boards_at(net_samples({"samples_seen": 0, "init_from": {"samples_seen": 480_000}})) \
        .sizes == (9,)
    for broken in ({}, {"samples_seen": -1}, {"samples_seen": "many"}, {"samples_seen": True}):
        assert net_samples(broken) is None
    assert net_samples({"samples_seen": 5, "init_from": {"samples_seen": "many"}}) == 5


def test_model_announcements_carry_the_versions_samples() -> None:
    ann = ModelAnnouncement("tengen", 12, 1.5, samples=480_000)
    assert json.loads(ann.to_bytes()) == {"model": "tengen", "version": 12, "samples": 480_000, "announced_at": 1.5}
    assert ModelAnnouncement.from_bytes(ann.to_bytes()).samples == 480_000
    # An announcement of a tengen from before the curriculum has no samples: unknown.
    old = ModelAnnouncement.from_bytes(b'{"model": "tengen", "version": 3, "announced_at": 2.0}')
    assert (old.version, old.samples) == (3, None)


@pytest.mark.parametrize("samples", ["-1", "1.5", "true", '"480000"', "[1]"])
def test_an_announcement_with_bad_samples_is_refused(samples: str) -> None:
    with pytest.raises(KafkaAdapterError, match="malformed model announcement"):
        ModelAnnouncement.from_bytes(f'{{"model": "tengen", "version": 3, "samples": {samples}}}'.encode())
