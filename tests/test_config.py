"""Presets load and validate; environment overrides apply with types; bad input names the key."""
from pathlib import Path

import pytest
import yaml

from tengen.config import PRESETS, ConfigError, load_config


@pytest.mark.parametrize("name", PRESETS)
def test_every_preset_loads(name: str) -> None:
    config = load_config(name, env={})
    assert config.preset == name
    assert config.gating.wins_to_pass <= config.gating.games


def test_paper_preset_keeps_the_paper_constants() -> None:
    config = load_config("paper", env={})
    assert (config.search.cpuct, config.search.fpu_reduction) == (1.1, 0.2)
    assert (config.trainer.window_alpha, config.trainer.window_beta) == (0.75, 0.4)
    assert config.trainer.swa_decay == 0.75 and config.trainer.l2 == 3e-5
    assert config.trainer.soft_policy_weight == 8.0  # KataGo's since v1.12 (off in the CPU presets: measured)
    assert config.game.board_sizes == list(range(9, 20))


def test_environment_overrides_are_typed() -> None:
    env = {
        "TENGEN_TRAINER__BATCH_SIZE": "128",
        "TENGEN_GAME__BOARD_SIZES": "9,13",
        "TENGEN_GAME__BOARD_SIZE_WEIGHTS": "1,2",
        "TENGEN_GATING__SPRT": "no",
        "TENGEN_DATA_DIR": "/tmp/run1",
        "UNRELATED": "x",
    }
    config = load_config("tiny", env=env)
    assert config.trainer.batch_size == 128
    assert config.game.board_sizes == [9, 13]
    assert config.gating.sprt is False
    assert config.run.data_dir == "/tmp/run1"


@pytest.mark.parametrize(
    "env, fragment",
    [
        ({"TENGEN_TRAINER__BATCH_SIZ": "1"}, "unknown key trainer.batch_siz"),
        ({"TENGEN_NOPE__X": "1"}, "unknown section 'nope'"),
        ({"TENGEN_TRAINER__BATCH_SIZE": "many"}, "trainer.batch_size: expected int"),
        ({"TENGEN_GAME__BOARD_SIZES": "5"}, "within 7..19"),
        ({"TENGEN_GATING__WINS_TO_PASS": "500"}, "gating.wins_to_pass"),
        ({"TENGEN_TRITON__INSTANCES": "0"}, "triton.instances and threads must be >= 1"),
        ({"TENGEN_TRITON__GPU_INSTANCES": "-1"}, "triton.gpu_instances must be >= 0"),
        ({"TENGEN_TRAINER__SOFT_POLICY_WEIGHT": "-1"}, "trainer.soft_policy_weight must be >= 0"),
        ({"TENGEN_SEARCH__SUBTREE_BIAS_FACTOR": "-0.1"}, "search.subtree_bias_factor must be >= 0"),
        ({"TENGEN_SEARCH__SUBTREE_BIAS_EXPONENT": "-0.5"}, "search.subtree_bias_exponent must be >= 0"),
        ({"TENGEN_SELFPLAY__LEAVES_PER_GAME": "0"}, "selfplay.leaves_per_game must be >= 1"),
    ],
)
def test_bad_overrides_name_the_key(env: dict, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.").replace("(", r"\(")):
        load_config("tiny", env=env)


def test_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="unknown preset"):
        load_config("huge", env={})
    broken = tmp_path / "broken.yaml"
    broken.write_text("trainer: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(broken, env={})
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text("trainer:\n  batch_size: 2.5\n")
    with pytest.raises(ConfigError, match="trainer.batch_size"):
        load_config(wrong, env={})


def _placeholders() -> dict[str, str]:
    """The secrets the deployment files ship as placeholders (.env.example, the k8s base)."""
    root = Path(__file__).resolve().parent.parent
    env = dict(line.split("=", 1) for line in (root / ".env.example").read_text().splitlines()
               if line and not line.startswith("#"))
    kustomization = yaml.safe_load((root / "k8s" / "base" / "kustomization.yaml").read_text())
    literals = dict(item.split("=", 1) for gen in kustomization["secretGenerator"] for item in gen.get("literals", []))
    return {"compose token": env["TENGEN_RATINGS_TOKEN"], "compose password": env["POSTGRES_PASSWORD"],
            "k8s token": literals["ratings-token"], "k8s password": literals["postgres-password"]}


@pytest.mark.parametrize("which", ["compose", "k8s"])
def test_placeholder_secrets_are_refused_at_start(which: str) -> None:
    secrets = _placeholders()
    with pytest.raises(ConfigError, match="ratings token .* placeholder"):
        load_config("cpu", env={"TENGEN_RATINGS_TOKEN": secrets[f"{which} token"]})
    url = f"postgresql+psycopg2://tengen:{secrets[f'{which} password']}@postgres:5432/tengen"
    with pytest.raises(ConfigError, match="database password .* placeholder"):
        load_config("cpu", env={"TENGEN_DATABASE_URL": url})
    # The ratings service itself refuses them too, before it opens anything.
    from services.ratings.__main__ import main

    assert main(["--token", secrets[f"{which} token"], "--grpc-port", "0", "--http-port", "0"]) == 2
    # Real secrets pass.
    assert load_config("cpu", env={"TENGEN_RATINGS_TOKEN": "k2v9-not-a-placeholder"}).ratings.token


def test_one_configuration_for_every_setting() -> None:
    """The preset comes from $TENGEN_PRESET without a flag; per-process and ratings settings are
    preset keys like any other; what the environment set is known by name; retired names stop the
    start with the name to use."""
    from tengen.config import environment_config

    config = environment_config({"TENGEN_PRESET": "tiny", "TENGEN_TRAINER__HTTP_PORT": "9071",
                                 "TENGEN_RATINGS__PRIOR_DRAWS": "3.5", "TENGEN_KAFKA_BOOTSTRAP": "kafka:9092",
                                 "TENGEN_SELFPLAY__WORKER_ID": "w7", "TENGEN_TRITON__BACKEND": "onnxruntime"})
    assert config.preset == "tiny" and config.trainer.http_port == 9071 and config.ratings.prior_draws == 3.5
    assert (config.selfplay.worker_id, config.triton.backend) == ("w7", "onnxruntime")
    assert config.from_env == {"trainer.http_port", "ratings.prior_draws", "kafka.bootstrap", "selfplay.worker_id",
                               "triton.backend"}
    assert environment_config({}).preset == "cpu" and environment_config({}).from_env == set()
    with pytest.raises(ConfigError, match="TENGEN_TRAINER_HTTP_PORT is no longer read: set TENGEN_TRAINER__HTTP_PORT"):
        load_config("tiny", env={"TENGEN_TRAINER_HTTP_PORT": "9071"})
    with pytest.raises(ConfigError, match="TENGEN_MODEL_BACKEND is no longer read: set TENGEN_TRITON__BACKEND"):
        load_config("tiny", env={"TENGEN_MODEL_BACKEND": "python"})
    for env, fragment in (({"TENGEN_TRITON__BACKEND": "tensorflow"}, "triton.backend must be one of"),
                          ({"TENGEN_RATINGS__PRIOR_DRAWS": "0"}, "ratings.prior_draws must be a positive"),
                          ({"TENGEN_GATING__HTTP_PORT": "70000"}, "gating.http_port must be a port")):
        with pytest.raises(ConfigError, match=fragment):
            load_config("tiny", env=env)


def test_ratings_flags_left_out_take_the_configured_values(tmp_path: Path) -> None:
    import argparse

    from tengen.ratings.config import add_store_arguments, fill_from_config

    parser = argparse.ArgumentParser()
    add_store_arguments(parser)
    config = load_config("tiny", env={"TENGEN_DATA_DIR": str(tmp_path), "TENGEN_RATINGS__ANCHOR": "gnugo-l1",
                                      "TENGEN_RATINGS__MAX_BATCH": "50"})
    args = parser.parse_args(["--prior-draws", "4"])
    fill_from_config(args, config)
    assert (args.data_dir, args.prior_draws, args.anchor, args.max_batch) == (tmp_path, 4.0, "gnugo-l1", 50)
    assert args.database_url is None  # not configured: the data dir's SQLite file


def test_the_settings_reference_in_docs_is_current() -> None:
    """docs/configuration.md is generated from config.py and the presets: a setting added, removed
    or changed without regenerating it fails here."""
    from tengen.config_reference import first_sentence, reference

    page = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"
    assert page.read_text() == reference(), "regenerate: python -m tengen.config_reference > docs/configuration.md"
    text = reference()
    for key in ("`search.full_visits` | `600` | `16` | `64` | `32` | = |", "`trainer.batch_size`", "`triton.url`"):
        assert key in text
    assert first_sentence("App. C: komi (N(7, 1). rounded) here. More.") == "App. C: komi (N(7, 1). rounded) here"
