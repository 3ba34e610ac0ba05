"""`docker compose up` for real: the stack of docker-compose.yml built, started, trained, hot-swapped,
killed and taken down in a real Docker engine on this box.

The images come from docker/build-local-images.sh (a Debian base from debootstrap, Debian's Python
and PostgreSQL, the Tansu broker in place of Apache Kafka's image, the CPU Triton image); the compose
file is the one users run, with the tiny preset, one self-play worker and host ports of the test's
own in a generated .env, and a settings file (TENGEN_SETTINGS_FILE) that gives the tiny preset a
board-size curriculum: 7x7 until the served net has trained FIRST_BOARD_SAMPLES, then 9x9.
Everything is checked from outside the containers: published ports (on 127.0.0.1 only) and
`docker compose` commands. The tests run in order on one stack; the last one
takes it down and checks that nothing of the project is left.
"""
from __future__ import annotations

import json
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Iterator

import pytest
from compose_support import REPO, ComposeError, ComposeProject, engine, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

LONG_RUNNING = ("kafka", "postgres", "triton", "trainer", "selfplay", "gating", "strength", "ratings", "tensorboard")
ONE_SHOT = ("kafka-init", "model-init")
MODEL = "tengen"
FIRST_BOARD_SAMPLES = 2000
CURRICULUM = {"TENGEN_GAME__BOARD_SIZES": "9", "TENGEN_GAME__FIRST_BOARD_SIZE": "7",
              "TENGEN_GAME__FIRST_BOARD_SAMPLES": str(FIRST_BOARD_SAMPLES)}
# The board sizes of gating's games by candidate samples, and of the window's rows, read inside the
# containers from their volumes.
MATCH_BOARDS = ("import json; from pathlib import Path; out = {}\n"
                "for p in Path('/data/gating/matches').glob('candidate-*.jsonl'):\n"
                "    games = [json.loads(l)['game'] for l in p.read_text().splitlines() if '\"game\"' in l]\n"
                "    out[int(p.stem.split('-')[1])] = sorted({g['board_size'] for g in games})\n"
                "print(json.dumps(out))")
WINDOW_BOARDS = ("import json, os; import numpy as np; from tengen.config import load_config; "
                 "from tengen.train.window import Window; c = load_config(os.environ['TENGEN_PRESET']); "
                 "w = Window('/data/trainer/window', 9, c=c.trainer.window_c, read_only=True); "
                 "print(json.dumps(sorted({int(x) for x in w.read(np.arange(w.start, w.n_total))['x_size']})))")
# Python run inside the app containers (the image's own tengen): the broker's log of tengen.games,
# and the window's game ids with the count of ids appended twice (tengen chaos's checks).
ACKNOWLEDGED = ("import json; from tengen.run.chaos import acknowledged_ids; "
                "print(json.dumps(sorted(acknowledged_ids('kafka:9092'))))")
WINDOW = ("import json, os; from pathlib import Path; from tengen.config import load_config; "
          "from tengen.run.chaos import window_duplicates, window_ids; d = Path('/data'); "
          "print(json.dumps({'ids': sorted(window_ids(d, load_config(os.environ['TENGEN_PRESET']))), "
          "'duplicated': window_duplicates(d)}))")
SCRAPE = ("import sys, urllib.request; "
          "print(urllib.request.urlopen(sys.argv[1], timeout=5).read().decode())")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def http_status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return 0


def metric(text: str, name: str) -> float:
    """The value of an unlabelled sample `name` in Prometheus text (0 when absent)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


class Stack:
    """The running project and what the tests learn about it on the way."""

    def __init__(self, project: ComposeProject, ports: dict[str, int]) -> None:
        self.project = project
        self.ports = ports
        self.timings: dict[str, float] = {}  # the figures printed at the end: seconds, and game counts
        self.acknowledged: set[str] = set()
        self.at_risk: set[str] = set()  # acknowledged, not in the window when the broker was killed

    def scrape(self, service: str, port: int) -> str:
        return self.project.run("exec", "-T", service, "python", "-c", SCRAPE,
                                f"http://127.0.0.1:{port}/metrics", timeout_s=60).stdout

    def positions(self) -> float:
        return metric(self.scrape("selfplay", 8072), "tengen_selfplay_moves_total")

    def window(self) -> dict:
        return json.loads(self.project.exec_python("trainer", WINDOW))

    def note_acknowledged(self) -> set[str]:
        ids = set(json.loads(self.project.exec_python("gating", ACKNOWLEDGED)))
        self.acknowledged |= ids
        return ids

    def states(self) -> dict[str, dict]:
        return {row["Service"]: row for row in self.project.containers()}

    def healthy(self) -> bool:
        states = self.states()
        return all(states.get(s, {}).get("Health") == "healthy" for s in LONG_RUNNING) and \
            all(states.get(s, {}).get("State") == "exited" for s in ONE_SHOT)

    def triton_ready(self, version: int) -> bool:
        return (
            http_status(f"http://127.0.0.1:{self.ports['TRITON_HTTP_PORT']}/v2/models/{MODEL}/versions/{version}/ready")
            == 200
        )


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Stack]:
    workdir = tmp_path_factory.mktemp("compose")
    with engine(workdir) as docker_env:
        images_env = workdir / "images.env"
        started = time.monotonic()
        with open(workdir / "build.log", "w") as build_log:
            built = subprocess.run(
                ["bash", str(REPO / "docker" / "build-local-images.sh"), str(images_env)],
                env=docker_env,
                stdout=build_log,
                stderr=subprocess.STDOUT,
                timeout=1200,
            )
        if built.returncode != 0:
            raise ComposeError(
                f"build-local-images.sh exited {built.returncode}:\n" + (workdir / "build.log").read_text()[-4000:]
            )
        build_s = time.monotonic() - started
        ports = {
            name: free_port()
            for name in (
                "RATINGS_HTTP_PORT",
                "RATINGS_GRPC_PORT",
                "TENSORBOARD_PORT",
                "TRITON_HTTP_PORT",
                "TRITON_GRPC_PORT",
                "TRITON_METRICS_PORT",
            )
        }
        settings = {
            "TENGEN_PRESET": "tiny",
            "SELFPLAY_REPLICAS": "1",
            "TENGEN_RATINGS_TOKEN": secrets.token_urlsafe(24),
            "POSTGRES_PASSWORD": secrets.token_urlsafe(24),
            **{k: str(v) for k, v in ports.items()},
        }
        overrides = workdir / "tengen.env"
        overrides.write_text("".join(f"{k}={v}\n" for k, v in CURRICULUM.items()))
        settings["TENGEN_SETTINGS_FILE"] = str(overrides)
        dot_env = workdir / "test.env"
        dot_env.write_text("".join(f"{k}={v}\n" for k, v in settings.items()))
        project = ComposeProject(f"tengen-test-{secrets.token_hex(3)}", [images_env, dot_env], docker_env)
        result = Stack(project, ports)
        result.timings["build_s"] = build_s
        try:
            yield result
        finally:
            project.run("down", "-v", "--remove-orphans", "--timeout", "30", check=False, timeout_s=300)
            # Past pytest's capture, so `make test` shows them; also kept beside the build log.
            figures = json.dumps({k: round(v, 1) for k, v in result.timings.items()})
            (workdir / "figures.json").write_text(figures + "\n")
            reporter = request.config.pluginmanager.get_plugin("terminalreporter")
            capture = request.config.pluginmanager.get_plugin("capturemanager")
            if reporter is not None and capture is not None:
                with capture.global_and_fixture_disabled():
                    reporter.write_line(f"\ncompose stack figures: {figures} ({workdir})")


def test_every_service_reaches_healthy_and_the_one_shots_exit_0(stack: Stack) -> None:
    started = time.monotonic()
    stack.project.run("up", "-d", timeout_s=900)
    try:
        wait_for(
            stack.healthy,
            "every long-running service healthy, kafka-init and model-init exited",
            900,
            stack.project,
            poll_s=5,
        )
    finally:
        stack.timings["up_to_healthy_s"] = time.monotonic() - started
    states = stack.states()
    for service in ONE_SHOT:
        assert states[service]["ExitCode"] == 0, (service, states[service])
    # Version 1 (model-init's random net) is what Triton serves and what self-play asks for.
    assert stack.triton_ready(1)


def test_games_reach_the_trainer_and_a_promotion_is_hot_swapped_into_selfplay(stack: Stack) -> None:
    started = time.monotonic()
    selfplay_id = stack.states()["selfplay"]["ID"]
    wait_for(
        lambda: metric(stack.scrape("trainer", 8071), "tengen_trainer_games_total") >= 5,
        "the trainer's first games",
        600,
        stack.project,
        ("selfplay", "trainer"),
    )
    wait_for(
        lambda: stack.triton_ready(2),
        "version 2 promoted and ready in Triton",
        900,
        stack.project,
        ("trainer", "gating"),
        poll_s=5,
    )
    stack.timings["first_promotion_s"] = time.monotonic() - started + stack.timings.get("up_to_healthy_s", 0)
    # The worker switched on the announcement, in the same container (no restart, no new one).
    wait_for(
        lambda: metric(stack.scrape("selfplay", 8072), "tengen_selfplay_model_version") >= 2,
        "self-play asking for version 2",
        300,
        stack.project,
        ("selfplay",),
    )
    after = stack.states()["selfplay"]
    assert after["ID"] == selfplay_id and after["State"] == "running"
    restarts = subprocess.run(
        ["docker", "inspect", "-f", "{{.RestartCount}}", selfplay_id],
        env=stack.project.env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert restarts == "0"
    # The model repository as gating sees it agrees with Triton: version 2 there and READY.
    listed = json.loads(stack.project.run("exec", "-T", "gating", "tengen", "models", "list", "--json").stdout)
    assert listed["triton"]["reachable"], listed
    (model,) = [m for m in listed["models"] if m["name"] == MODEL]
    ready = {v["version"] for v in model["versions"] if v["ready"]}
    assert 2 in ready, model


def test_ratings_list_the_promoted_version_and_the_pages_answer(stack: Stack) -> None:
    url = f"127.0.0.1:{stack.ports['RATINGS_GRPC_PORT']}"

    def rated() -> set[str]:
        top = subprocess.run(
            [sys.executable, "-m", "tengen.cli", "ratings", "top", "--url", url, "--n", "0", "--json"],
            capture_output=True, text=True, timeout=60,
        )
        if top.returncode != 0:
            raise ComposeError(f"tengen ratings top: {top.stderr.strip()[-500:]}")
        return {row["name"] for row in json.loads(top.stdout)["ratings"]}

    # Gating reports a match's games to ratings after it decides, so the promotion can come first.
    wait_for(lambda: "tengen-v2" in rated(), "tengen-v2 in `tengen ratings top`", 300, stack.project,
             ("gating", "ratings"))
    http = f"http://127.0.0.1:{stack.ports['RATINGS_HTTP_PORT']}"
    for page in (f"{http}/", f"{http}/games", f"http://127.0.0.1:{stack.ports['TENSORBOARD_PORT']}/"):
        assert http_status(page) == 200, page


def test_the_curriculum_moves_selfplay_gating_and_the_window_to_9x9(stack: Stack) -> None:
    """The services follow the board-size curriculum by themselves: self-play's board follows the
    served version's samples, gating plays each candidate on its boards, the window takes both."""
    started = time.monotonic()
    wait_for(lambda: metric(stack.scrape("selfplay", 8072), "tengen_selfplay_board_size") == 9,
             "self-play on 9x9", 900, stack.project, ("selfplay", "gating", "trainer"), poll_s=5)
    stack.timings["to_9x9_s"] = time.monotonic() - started
    boards = {int(k): v for k, v in json.loads(stack.project.exec_python("gating", MATCH_BOARDS)).items()}
    assert any(s >= FIRST_BOARD_SAMPLES for s in boards), boards
    assert all(v == ([7] if s < FIRST_BOARD_SAMPLES else [9]) for s, v in boards.items() if v), boards
    wait_for(lambda: 9 in json.loads(stack.project.exec_python("trainer", WINDOW_BOARDS)), "9x9 rows in the window",
             300, stack.project, ("trainer",))
    logs = stack.project.run("logs", "--no-color", "selfplay").stdout
    assert "playing 7x7 (komi around 9): the served net has trained 0 samples" in logs
    assert "playing 9x9 (komi around 7)" in logs


def test_the_page_and_tengen_status_show_the_runs_progress(stack: Stack) -> None:
    """The figures the services publish (tengen.progress) on the ratings page and in `tengen status
    --page`, as under `tengen run`; the trainer keeps the run records in its volume."""
    page = f"http://127.0.0.1:{stack.ports['RATINGS_HTTP_PORT']}"

    def progress() -> dict:
        with urllib.request.urlopen(f"{page}/api/curve", timeout=30) as response:
            return json.loads(response.read())["progress"] or {}

    def flowing(p: dict) -> bool:
        return p.get("boards") == "9x9" and (p.get("games") or 0) > 0 and (p.get("games_per_s") or 0) > 0

    wait_for(lambda: flowing(progress()), "the run's progress on the page", 300, stack.project,
             ("ratings", "trainer", "selfplay"))
    shown = progress()
    assert shown["samples"] >= FIRST_BOARD_SAMPLES and shown["version"] >= 2 and shown["workers"] == 1, shown
    assert shown["elapsed_s"] > 0 and shown["machine"], shown
    status = subprocess.run([sys.executable, "-m", "tengen.cli", "status", "--page", page], capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    assert "run up " in status.stdout and "self-play plays v" in status.stdout and "on 9x9" in status.stdout
    records = stack.project.run("exec", "-T", "trainer", "cat", "/data/trainer/runs.jsonl").stdout.splitlines()
    assert records and json.loads(records[0])["preset"] == "tiny"
    assert json.loads(records[0])["config"]["game"]["first_board_size"] == 7


@pytest.mark.parametrize("service", ["kafka", "trainer", "triton"])
def test_a_killed_part_comes_back_and_selfplay_moves_again(stack: Stack, service: str) -> None:
    started = time.monotonic()
    if service == "kafka":
        # As tengen chaos does: the trainer stopped, so the broker dies holding acknowledged games
        # nobody has made durable yet (the worker's outbox sends them again to the new broker).
        in_window = set(stack.window()["ids"])
        stack.project.run("pause", "trainer")
        try:
            wait_for(
                lambda: len(stack.note_acknowledged() - in_window) >= 5,
                "5 acknowledged games on the broker that the paused trainer has not taken",
                300,
                stack.project,
                ("selfplay",),
            )
            stack.at_risk = stack.acknowledged - in_window
            moves = stack.positions()
            stack.project.run("kill", "-s", "KILL", service)
        finally:
            stack.project.run("unpause", "trainer")
    else:
        stack.note_acknowledged()
        moves = stack.positions()
        stack.project.run("kill", "-s", "KILL", service)
    stack.project.run("up", "-d", timeout_s=600)
    wait_for(
        lambda: stack.states()[service].get("Health") == "healthy",
        f"{service} healthy again",
        600,
        stack.project,
        (service,),
        poll_s=5,
    )
    wait_for(
        lambda: stack.positions() > moves + 20,
        "self-play moving again",
        600,
        stack.project,
        ("selfplay", service),
        poll_s=5,
    )
    stack.timings[f"kill_{service}_s"] = time.monotonic() - started


def test_every_acknowledged_game_reaches_the_window_exactly_once(stack: Stack) -> None:
    stack.note_acknowledged()
    assert len(stack.acknowledged) >= 5

    def all_in() -> bool:
        return stack.acknowledged <= set(stack.window()["ids"])

    wait_for(
        all_in, f"the {len(stack.acknowledged)} acknowledged games in the window", 600, stack.project, ("trainer",)
    )
    window = stack.window()
    stack.timings.update(
        acknowledged=len(stack.acknowledged), at_risk=len(stack.at_risk), window_games=len(window["ids"])
    )
    assert window["duplicated"] == 0


def test_down_leaves_no_container_network_or_volume(stack: Stack) -> None:
    started = time.monotonic()
    stack.project.run("down", "-v", "--remove-orphans", "--timeout", "60", timeout_s=300)
    stack.timings["down_s"] = time.monotonic() - started
    assert stack.project.left_over() == {"containers": [], "networks": [], "volumes": []}
