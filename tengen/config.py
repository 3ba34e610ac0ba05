"""Configuration: one YAML preset plus `TENGEN_...` environment overrides, validated at start.

A preset is a file in `tengen/configs/` (`tiny`, `cpu`, `cpu7`, `paper`) or any YAML path. Every value lives in a
typed section dataclass below; unknown keys, wrong types and out-of-range values are errors that
name the key, so a typo never silently falls back to a default.

Environment overrides use `TENGEN_<SECTION>__<KEY>` (double underscore), e.g.
`TENGEN_TRAINER__BATCH_SIZE=128`. A few common settings have short names too (see ENV_ALIASES):
`TENGEN_DATA_DIR`, `TENGEN_DATABASE_URL`, `TENGEN_RATINGS_TOKEN`, `TENGEN_RATINGS_URL`,
`TENGEN_KAFKA_BOOTSTRAP`, `TENGEN_TRITON_URL`. `TENGEN_PRESET` names the preset of a service or
command started without `--preset` (default_preset). This module is the only reader of `TENGEN_`
settings: every service, command and deployment file gets its settings from here (`TENGEN_RUN_OWNER`
is no setting but the mark `tengen run` leaves on its processes, tengen.infra.process).
"""
from __future__ import annotations

import dataclasses
import os
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml

CONFIG_DIR = Path(__file__).resolve().parent / "configs"  # the presets, package data
PRESETS = ("tiny", "cpu", "cpu7", "paper")
# The longest game record the trainer accepts, in moves per board point (tengen.loop.rows). Self-play
# cuts a game at game.max_moves_factor x area moves (kept within this bound below), and side
# branches add at most that many searches again; a longer record is an attack or a bug, and it
# would crowd the window (a 20,000-move game once became 97% of it).
MAX_MOVES_FACTOR = 5.0


class ConfigError(ValueError):
    """A preset or an override is invalid; the message names the key."""


@dataclass
class RunConfig:
    data_dir: str = "./tengen-data"  # everything a run writes lives under here
    model_name: str = "tengen"  # Triton model name served to selfplay


@dataclass
class GameConfig:
    board_sizes: list[int] = field(default_factory=lambda: [9])
    board_size_weights: list[float] = field(default_factory=lambda: [1.0])
    komi_mean: float = 7.0  # App. C: komi ~ N(7, 1) rounded to halves (scaled to board area)
    komi_stdev: float = 1.0
    wide_komi_prob: float = 0.05
    handicap_prob: float = 0.05
    max_moves_factor: float = 3.0  # a game is cut off after factor x area moves
    # The board-size curriculum (KataGo §4.3, §7.2: what a small board teaches carries to a bigger
    # one): while the net that plays has trained fewer than first_board_samples, self-play and gating
    # play first_board_size at komi around first_board_komi_mean instead of board_sizes. Every
    # service reads it the same way (boards_at), keyed on the samples a version was trained on, which
    # its sidecar and its announcement on tengen.models carry. 0: no curriculum.
    first_board_size: int = 0
    first_board_komi_mean: float = 9.0  # 7x7 is a draw at about 9
    first_board_samples: int = 300_000  # the first board until the playing net has trained this many samples

    def boards_at(self, samples: int | None) -> "Boards":
        """The boards a net trained on `samples` plays. None (a version whose samples are unknown:
        announced by a tengen before the curriculum) plays board_sizes."""
        if self.first_board_size and samples is not None and samples < self.first_board_samples:
            return Boards((self.first_board_size,), (1.0,), self.first_board_komi_mean)
        return Boards(tuple(self.board_sizes), tuple(self.board_size_weights), self.komi_mean)


@dataclass(frozen=True)
class Boards:
    """The boards of one step of the curriculum: sizes with their weights, and the komi mean."""

    sizes: tuple[int, ...]
    weights: tuple[float, ...]
    komi_mean: float

    def describe(self) -> str:
        """E.g. '7x7' or '9x9, 13x13'."""
        return ", ".join(f"{s}x{s}" for s in self.sizes)


@dataclass
class SearchConfig:
    full_visits: int = 600  # playout cap randomization: N
    fast_visits: int = 100  # n
    full_search_prob: float = 0.25  # p
    cpuct: float = 1.1
    fpu_reduction: float = 0.2
    dirichlet_alpha_total: float = 10.83  # 0.03 * 361, spread over the legal moves
    noise_weight: float = 0.25
    # Root policy temperature of noised searches, plus a boost at the first move that halves every
    # B turns (B the board's side); KataGo's later runs use 1.1 + 0.15 (1.25 at the start) and shaped
    # Dirichlet noise (tengen.search.mcts), as the 7x7 presets and paper do (their cpu7 A/B won;
    # tengen/configs/cpu.yaml says why 9x9 keeps them off).
    root_policy_temperature: float = 1.03
    root_policy_temperature_boost: float = 0.0
    shaped_noise: bool = False
    # Every net evaluation in search under a random symmetry of the board, and NN cache hits for
    # positions that are rotations or mirror images of cached ones (tengen.search.mcts). On in the 7x7
    # presets and paper (its cpu7 A/B won, tengen/configs/cpu7.yaml); the bare engine default stays off.
    random_symmetry: bool = False
    # The root's ending bias (paper 6.2.3; KataGo 0.5): moves into surely owned areas look this many
    # points worse, so games end sooner; 0 = off (tengen.search.mcts; docs/results.md, "the root ending bias").
    ending_bonus_points: float = 0.0
    # Subtree value bias correction (tengen.search.mcts): each node's own utility is corrected by
    # lambda = subtree_bias_factor times the error that the net's utility showed against the deeper
    # search below the nodes of its bucket (same last two moves and 5x5 pattern around the last
    # one), nodes weighted by their child visits to the power alpha = subtree_bias_exponent.
    # KataGo uses lambda = 0.35, alpha = 0.8. Off (0): docs/results.md, "subtree value bias correction".
    subtree_bias_factor: float = 0.0
    subtree_bias_exponent: float = 0.8
    score_utility_weight: float = 0.5  # c_score
    # Uncertainty-weighted playouts (tengen.search.mcts; KataGo's "other methods" notes, v1.9): each
    # playout counts C / (U + C / 8) playouts, U the net's predicted short-term error of its leaf in
    # utility units (C = 0.25), in the averages and in PUCT's counts; needs a net trained with
    # trainer.short_term_heads (without them every playout counts 1). Off: docs/results.md, "uncertainty".
    uncertainty_weighting: bool = False
    # Variance-scaled cPUCT (tengen.search.mcts; KataGo v1.9): each node's cpuct times
    # 1 + 0.85 (sd / 0.4 - 1), sd the stdev of its playouts' utilities with a prior of 0.4 weighing
    # 2 playouts. On in cpu, cpu7 and paper (docs/results.md, "variance-scaled cPUCT alone"); the bare
    # engine default stays off.
    cpuct_variance_scaling: bool = False
    temperature_start: float = 0.8
    temperature_end: float = 0.2
    nn_cache_size: int = 65536


@dataclass
class SelfplayConfig:
    workers: int = 1
    worker_id: str = ""  # the worker's name in game ids and logs; empty: the host name
    http_port: int = 8072  # /healthz and /metrics (`tengen run` gives workers after the first free ports)
    games_in_parallel: int = 16  # G games per process, split into two halves in flight
    # Leaves each game's search adds to its half's batch per step (virtual loss spreads them over
    # the tree): k times the rows per request at the same games, for a loop whose requests cost a
    # fixed amount each, without the later rows of more games.
    leaves_per_game: int = 1
    sgf_sample_rate: float = 0.05  # fraction of games also written as SGF
    # Policy surprise weighting (tengen.selfplay.game): records carry each full search's policy
    # surprise and the window gets surprising positions more often, the game's total kept. Off: it
    # lost its A/B on this box (docs/results.md, "policy surprise weighting"); on in the paper preset.
    surprise_weighting: bool = False


@dataclass
class TrainerConfig:
    device: str = "cpu"  # torch device to train on
    http_port: int = 8071  # /healthz and /metrics
    arch: str = "b6c96"
    batch_size: int = 256
    momentum: float = 0.9
    lr_per_sample: float = 6e-5  # alpha_0 of §4.7
    lr_decay_lambda: float = 1e-7  # lambda of §4.7, per sample
    warmup_samples: int = 5_000_000  # lower learning rate at the start (§4.7)
    warmup_lr_factor: float = 1.0 / 3.0
    l2: float = 3e-5
    # The auxiliary soft policy head's loss weight (tengen.nn.loss; 0 = off). KataGo uses 8x (it makes
    # up for the soft target's much smaller gradients once trained); on this box it cost strength
    # (docs/results.md, "auxiliary soft policy target"). Off by default.
    soft_policy_weight: float = 0.0
    # Short-term value and score heads and their error heads (tengen.nn.model; KataGo's "other
    # methods" notes), trained on the rows' short-term targets; their error predictions are the
    # uncertainty that search.uncertainty_weighting reads. Off by default, on in cpu, cpu7 and paper
    # (docs/results.md, "the short-term heads with the optimistic policy"); a net without them serves
    # an "unknown" uncertainty. The weights are tengen.nn.loss.LossWeights' (untuned).
    short_term_heads: bool = False
    short_term_value_weight: float = 1.0
    short_term_score_weight: float = 0.004
    short_term_value_error_weight: float = 1.0
    short_term_score_error_weight: float = 1e-4
    # The optimistic policy head's loss weight (tengen.nn.loss; 0 = no head). It needs
    # short_term_heads (its rows' weights come from them). Search uses it at test time only (`tengen
    # gtp`/`eval`/`analysis --policy`, the strength service, bench ab's match), never in self-play or
    # gating, as KataGo does. Off by default, 1 in cpu, cpu7 and paper (docs/results.md, "optimistic
    # policy").
    optimistic_policy_weight: float = 0.0
    window_c: int = 250_000  # N_window = c(1 + beta((N_total/c)^alpha - 1)/alpha)
    window_alpha: float = 0.75
    window_beta: float = 0.4
    min_rows_to_train: int = 250_000
    samples_per_row: float = 4.0  # train on each row about this many times on average
    snapshot_every: int = 250_000  # samples between SWA snapshots
    candidate_every: int = 1_000_000  # samples between candidates
    swa_decay: float = 0.75
    threads: int = 1


@dataclass
class GatingConfig:
    http_port: int = 8073  # /healthz and /metrics
    games: int = 200
    wins_to_pass: int = 100
    visits: int = 600
    komi: float = 7.5
    temperature: float = 0.5
    sprt: bool = True  # stop early when the outcome is already clear
    skip_superseded: bool = True  # a candidate with a newer one queued behind it is not played


@dataclass
class StrengthConfig:
    """The loop's own measurement against GNU Go (services.strength)."""

    gnugo_levels: list[int] = field(default_factory=lambda: [0, 1])  # each rated as anchor gnugo-l<level>
    games: int = 10  # per level and measured version; colours alternate
    visits: int = 100  # the model's search per move, the same at every point of the curve
    board_size: int = 9
    komi: float = 7.5
    interval_s: float = 900.0  # at most one measurement per interval: the CPU belongs to self-play
    threads: int = 1  # torch threads of the measured model's engine
    gnugo: str = ""  # gnugo binary; empty: gnugo on PATH, else Debian's /usr/games/gnugo
    http_port: int = 8074  # /healthz and /metrics


@dataclass
class RatingsConfig:
    """The ratings service's settings (services.ratings) and its clients' (url, token)."""

    prior_draws: float = 2.0  # the prior's weight in virtual draws (BayesElo's default)
    anchor: str = ""  # the player held at Elo 0; empty: GNU Go's lowest level that has played, else the mean
    token: str = ""  # bearer token for writes; empty: the data dir's token file
    url: str = ""  # gRPC address of the ratings service; empty = open the store directly
    database_url: str = ""  # SQLAlchemy URL; empty = SQLite file in the data dir
    host: str = "0.0.0.0"  # the service's listen address
    grpc_port: int = 50061
    http_port: int = 8061
    max_batch: int = 1000  # most games one report may carry
    connect_attempts: int = 10  # tries to reach the database at start, with backoff
    games_dir: str = ""  # the data dir whose games the /games pages show; empty: run.data_dir


@dataclass
class KafkaConfig:
    bootstrap: str = "127.0.0.1:9092"


@dataclass
class TritonConfig:
    url: str = "127.0.0.1:8001"  # gRPC
    # The backend a new model is configured for (`tengen models prepare|promote`): python (CPU,
    # OpenVINO or torch in Triton's Python backend), onnxruntime or pytorch (GPU).
    backend: str = "python"
    http_port: int = 8000
    grpc_port: int = 8001
    metrics_port: int = 8002
    # Model instances of the served model on the CPU (the Python backend), each computing with
    # `threads` threads (torch's or OpenVINO's); see tengen/configs/cpu.yaml. On a GPU backend
    # (pytorch, onnxruntime) `gpu_instances` GPU instances, or `instances` when 0: a GPU's layout
    # (instances overlapping one batch's transfers with another's compute) is not a CPU's.
    instances: int = 1
    threads: int = 1
    gpu_instances: int = 0
    # The dynamic batcher: the largest batch, the batch sizes it waits for (empty: any), how long it
    # waits for more requests to merge into one batch. A GPU wants big batches (each self-play
    # worker sends about games_in_parallel / 2 rows at a time); a CPU wants them soon.
    max_batch_size: int = 256
    preferred_batch_sizes: list[int] = field(default_factory=list)
    queue_delay_us: int = 200
    # Warm-up request at load time: this batch on the preset's largest board.
    warmup_batch: int = 1


@dataclass
class Config:
    preset: str = "custom"
    run: RunConfig = field(default_factory=RunConfig)
    game: GameConfig = field(default_factory=GameConfig)
    search: SearchConfig = field(default_factory=SearchConfig)
    selfplay: SelfplayConfig = field(default_factory=SelfplayConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    gating: GatingConfig = field(default_factory=GatingConfig)
    strength: StrengthConfig = field(default_factory=StrengthConfig)
    ratings: RatingsConfig = field(default_factory=RatingsConfig)
    kafka: KafkaConfig = field(default_factory=KafkaConfig)
    triton: TritonConfig = field(default_factory=TritonConfig)
    # "section.key" of every value the environment set (a command that acts only when a setting
    # was given, such as announcing to a broker, asks here).
    from_env: set[str] = field(default_factory=set)


BACKENDS = ("python", "pytorch", "onnxruntime")
DEFAULT_PRESET = "cpu"
PRESET_ENV = "TENGEN_PRESET"

ENV_ALIASES = {
    "TENGEN_DATA_DIR": ("run", "data_dir"),
    "TENGEN_DATABASE_URL": ("ratings", "database_url"),
    "TENGEN_RATINGS_TOKEN": ("ratings", "token"),
    "TENGEN_RATINGS_URL": ("ratings", "url"),
    "TENGEN_KAFKA_BOOTSTRAP": ("kafka", "bootstrap"),
    "TENGEN_TRITON_URL": ("triton", "url"),
}


# Names read before 2026-11-29 by the services themselves, now settings of the preset: a deployment
# that still sets one is stopped with the name to use (it would otherwise lose the setting quietly).
RETIRED_ENV = {
    **{f"TENGEN_{s.upper()}_HTTP_PORT": f"TENGEN_{s.upper()}__HTTP_PORT"
       for s in ("trainer", "selfplay", "gating", "strength", "ratings")},
    **{f"TENGEN_RATINGS_{k}": f"TENGEN_RATINGS__{k}"
       for k in ("GRPC_PORT", "HOST", "PRIOR_DRAWS", "ANCHOR", "MAX_BATCH", "GAMES_DIR", "CONNECT_ATTEMPTS")},
    "TENGEN_TRAINER_DEVICE": "TENGEN_TRAINER__DEVICE",
    "TENGEN_SELFPLAY_WORKER_ID": "TENGEN_SELFPLAY__WORKER_ID",
    "TENGEN_MODEL_BACKEND": "TENGEN_TRITON__BACKEND",
    # The launcher's first stage became the loop's curriculum (GameConfig.first_board_*).
    "TENGEN_RUN__FIRST_STAGE_BOARD_SIZE": "TENGEN_GAME__FIRST_BOARD_SIZE",
    "TENGEN_RUN__FIRST_STAGE_KOMI_MEAN": "TENGEN_GAME__FIRST_BOARD_KOMI_MEAN",
    "TENGEN_RUN__FIRST_STAGE_SAMPLES": "TENGEN_GAME__FIRST_BOARD_SAMPLES",
}


# The placeholder secrets the deployment files ship (.env.example, k8s/base/kustomization.yaml):
# a deployment that still has one is refused at start instead of running with a public secret.
PLACEHOLDER_PREFIXES = ("replace-me", "replace-with")


def placeholder_secret(token: str | None, database_url: str | None) -> str | None:
    """What is still a placeholder (a sentence for the error), or None."""
    if token and token.strip().lower().startswith(PLACEHOLDER_PREFIXES):
        return "the ratings token (TENGEN_RATINGS_TOKEN) is the deployment files' placeholder"
    if database_url:
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError

        try:
            password = make_url(database_url).password
        except ArgumentError:
            return None  # not a URL at all: the store says so when it opens it
        if password and str(password).lower().startswith(PLACEHOLDER_PREFIXES):
            return "the ratings database password (in TENGEN_DATABASE_URL) is the deployment files' placeholder"
    return None


def default_preset(env: Mapping[str, str] | None = None) -> str:
    """The preset of a service or command started without --preset: $TENGEN_PRESET, else cpu."""
    env = os.environ if env is None else env
    return env.get(PRESET_ENV) or DEFAULT_PRESET


def environment_config(env: Mapping[str, str] | None = None) -> Config:
    """The configuration of a command that takes no --preset: default_preset() with the
    environment's overrides (ConfigError when they are invalid)."""
    return load_config(default_preset(env), env)


def load_config(preset: str | os.PathLike = "cpu", env: Mapping[str, str] | None = None) -> Config:
    """Read a preset (name or path), apply environment overrides, validate, and return it."""
    env = os.environ if env is None else env
    path = _preset_path(preset)
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections")
    config = Config()
    config.preset = str(raw.pop("preset", Path(path).stem))
    for section, values in raw.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{path}: section {section!r} must be a mapping")
        for key, value in values.items():
            _set(config, section, key, value, source=str(path))
    for name, value in env.items():
        if name in RETIRED_ENV:
            raise ConfigError(f"{name} is no longer read: set {RETIRED_ENV[name]} instead")
        if name in ENV_ALIASES:
            section, key = ENV_ALIASES[name]
        elif name.startswith("TENGEN_") and "__" in name:
            section, _, key = (part.lower() for part in name[len("TENGEN_"):].partition("__"))
        else:
            continue
        _set(config, section, key, value, source=name)
        config.from_env.add(f"{section}.{key}")
    validate(config)
    return config


def _preset_path(preset: str | os.PathLike) -> Path:
    if str(preset) in PRESETS:
        return CONFIG_DIR / f"{preset}.yaml"
    path = Path(preset)
    if not path.is_file():
        raise ConfigError(f"unknown preset {str(preset)!r}: use one of {', '.join(PRESETS)} or a YAML path")
    return path


def _set(config: Config, section: str, key: str, value: Any, source: str) -> None:
    target = getattr(config, section, None)
    if not dataclasses.is_dataclass(target):
        raise ConfigError(f"{source}: unknown section {section!r}")
    hints = typing.get_type_hints(type(target))
    if key not in hints:
        raise ConfigError(f"{source}: unknown key {section}.{key}")
    setattr(target, key, _coerce(value, hints[key], f"{source}: {section}.{key}"))


def _coerce(value: Any, hint: Any, where: str) -> Any:
    """Convert YAML values or environment strings to the declared type, or fail naming the key."""
    origin = typing.get_origin(hint)
    if origin is list:
        (item_type,) = typing.get_args(hint)
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return [_coerce(v, item_type, where) for v in value]
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if hint is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError(value)
            return int(str(value).replace("_", "")) if isinstance(value, str) else int(value)
        if hint is float:
            if isinstance(value, bool):
                raise ValueError(value)
            return float(value)
        if hint is str:
            return str(value)
    except ValueError as err:
        raise ConfigError(f"{where}: expected {hint.__name__}, got {value!r}") from err
    raise ConfigError(f"{where}: unsupported type {hint}")


def validate(config: Config) -> None:
    """Range checks that the types alone cannot express."""
    problems: list[str] = []

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    game, search, trainer, gating = config.game, config.search, config.trainer, config.gating
    check(bool(game.board_sizes), "game.board_sizes must not be empty")
    check(game.first_board_size == 0 or 7 <= game.first_board_size < min(game.board_sizes or [0]),
          "game.first_board_size must be 0 (none), or at least 7 and below every game.board_sizes")
    check(game.first_board_samples > 0, "game.first_board_samples must be > 0")
    check(all(7 <= s <= 19 for s in game.board_sizes), "game.board_sizes must be within 7..19")
    check(len(game.board_size_weights) == len(game.board_sizes),
          "game.board_size_weights must have one weight per board size")
    check(all(w >= 0 for w in game.board_size_weights) and sum(game.board_size_weights) > 0,
          "game.board_size_weights must be >= 0 with a positive sum")
    for name in ("wide_komi_prob", "handicap_prob"):
        check(0 <= getattr(game, name) <= 1, f"game.{name} must be within 0..1")
    check(0 < game.max_moves_factor <= MAX_MOVES_FACTOR,
          f"game.max_moves_factor must be within (0, {MAX_MOVES_FACTOR:g}] (longer games are rejected as records)")
    # a lopsided full search shrinks towards fast_visits and must keep a policy target (>= 2 visits)
    check(search.full_visits >= search.fast_visits >= 2, "search.full_visits >= search.fast_visits >= 2")
    check(0 < search.full_search_prob <= 1, "search.full_search_prob must be within (0, 1]")
    check(0 <= search.noise_weight < 1, "search.noise_weight must be within [0, 1)")
    check(search.cpuct > 0 and search.root_policy_temperature > 0, "search.cpuct and temperatures > 0")
    check(search.root_policy_temperature_boost >= 0, "search.root_policy_temperature_boost must be >= 0")
    check(0 <= search.ending_bonus_points < 1, "search.ending_bonus_points must be within [0, 1) (below a point)")
    check(search.subtree_bias_factor >= 0, "search.subtree_bias_factor must be >= 0")
    check(search.subtree_bias_exponent >= 0, "search.subtree_bias_exponent must be >= 0")
    check(config.selfplay.workers >= 1 and config.selfplay.games_in_parallel >= 2,
          "selfplay.workers >= 1 and selfplay.games_in_parallel >= 2")
    check(config.selfplay.leaves_per_game >= 1, "selfplay.leaves_per_game must be >= 1")
    check(0 <= config.selfplay.sgf_sample_rate <= 1, "selfplay.sgf_sample_rate must be within 0..1")
    check(trainer.batch_size >= 1 and trainer.window_c >= 1, "trainer.batch_size and window_c >= 1")
    check(0 < trainer.window_alpha <= 1 and trainer.window_beta > 0, "trainer.window_alpha in (0,1], beta > 0")
    check(0 <= trainer.swa_decay < 1, "trainer.swa_decay must be within [0, 1)")
    check(trainer.candidate_every >= trainer.snapshot_every >= 1,
          "trainer.candidate_every >= trainer.snapshot_every >= 1")
    check(trainer.lr_per_sample > 0 and 0 <= trainer.momentum < 1, "trainer.lr_per_sample > 0, momentum in [0,1)")
    check(trainer.soft_policy_weight >= 0, "trainer.soft_policy_weight must be >= 0")
    check(min(trainer.short_term_value_weight, trainer.short_term_score_weight, trainer.short_term_value_error_weight,
              trainer.short_term_score_error_weight) >= 0, "trainer.short_term_*_weight must be >= 0")
    check(trainer.optimistic_policy_weight >= 0, "trainer.optimistic_policy_weight must be >= 0")
    check(trainer.optimistic_policy_weight == 0 or trainer.short_term_heads,
          "trainer.optimistic_policy_weight > 0 needs trainer.short_term_heads: true")
    check(1 <= gating.wins_to_pass <= gating.games, "gating.wins_to_pass must be within 1..gating.games")
    check(gating.visits >= 1 and gating.temperature >= 0, "gating.visits >= 1, temperature >= 0")
    strength = config.strength
    check(all(0 <= level <= 10 for level in strength.gnugo_levels), "strength.gnugo_levels must be within 0..10")
    check(strength.games >= 1 and strength.visits >= 1 and strength.threads >= 1,
          "strength.games, visits and threads must be >= 1")
    check(7 <= strength.board_size <= 19, "strength.board_size must be within 7..19")
    check(strength.interval_s > 0, "strength.interval_s must be > 0")
    triton = config.triton
    check(triton.instances >= 1 and triton.threads >= 1, "triton.instances and threads must be >= 1")
    check(triton.gpu_instances >= 0, "triton.gpu_instances must be >= 0 (0: triton.instances)")
    check(triton.queue_delay_us >= 0, "triton.queue_delay_us must be >= 0")
    check(1 <= triton.warmup_batch <= triton.max_batch_size, "triton.warmup_batch must be within 1..max_batch_size")
    check(all(1 <= b <= triton.max_batch_size for b in triton.preferred_batch_sizes),
          "triton.preferred_batch_sizes must be within 1..max_batch_size")
    ratings = config.ratings
    check(0 < ratings.prior_draws < float("inf"), "ratings.prior_draws must be a positive number of draws")
    check(ratings.max_batch >= 1 and ratings.connect_attempts >= 1, "ratings.max_batch and connect_attempts >= 1")
    ports = {"triton.http_port": triton.http_port, "triton.grpc_port": triton.grpc_port,
             "triton.metrics_port": triton.metrics_port, "ratings.grpc_port": ratings.grpc_port,
             "ratings.http_port": ratings.http_port, "trainer.http_port": trainer.http_port,
             "selfplay.http_port": config.selfplay.http_port, "gating.http_port": gating.http_port,
             "strength.http_port": strength.http_port}
    for name, value in ports.items():
        check(0 <= value <= 65535, f"{name} must be a port within 0..65535 (0: any free one)")
    check(triton.backend in BACKENDS, f"triton.backend must be one of {', '.join(BACKENDS)}")
    check(bool(trainer.device), "trainer.device must not be empty")
    placeholder = placeholder_secret(config.ratings.token, config.ratings.database_url)
    check(placeholder is None, f"{placeholder}: set a real secret")
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
