"""`tengen bench ab`: the strength a setting buys, as issue-style A/B runs of the in-process loop.

Two arms of the learning loop (tengen.run.in_process: self-play -> window -> learner -> SWA
candidate -> self-play, no services), A with the preset as it is and B with the --b overrides (and
A with the --a ones), start from the same seed and run side by side, one process and one torch
thread each, until each has used --seconds of CPU time (time.process_time: both arms get the same
compute whatever the box's load). Then the two final nets play --games games against each other at
fixed visits (colours alternating, the preset's boards and gating komi, batched in process, each
net searching with its own arm's search settings), and the bench reports B's score with its Wilson
interval and the implied Elo difference.

    tengen bench ab --preset cpu7 --seconds 1800 --a trainer.soft_policy_weight=0 --games 100

With --checkpoint-every S each arm also leaves the net its self-play used at every S seconds of
its CPU, for `tengen eval gnugo --model`: two strength curves over equal compute, in one window.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import tempfile
import time
from pathlib import Path

DESCRIPTION = "A/B of a setting: two in-process loops of equal CPU time, then their final nets' match"


def _override(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    section, dot, name = key.partition(".")
    if not sep or not dot or not section or not name:
        raise argparse.ArgumentTypeError(f"not SECTION.KEY=VALUE: {text!r}")
    return f"TENGEN_{section.upper()}__{name.upper()}", value


def _setting(config, env_key: str) -> object:
    """The value `config` took for TENGEN_<SECTION>__<KEY> (what _override made)."""
    section, name = env_key.removeprefix("TENGEN_").lower().split("__", 1)
    return getattr(getattr(config, section), name)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu7", help="preset of both arms (default cpu7)")
    parser.add_argument(
        "--a",
        type=_override,
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting of arm A (repeatable)",
    )
    parser.add_argument(
        "--b",
        type=_override,
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="a setting of arm B (repeatable)",
    )
    parser.add_argument("--games", type=int, default=100, help="match games between the final nets (default 100)")
    parser.add_argument("--visits", type=int, default=100, help="visits per move in the match (default 100)")
    parser.add_argument("--seed", type=int, default=1, help="seed of both arms' starting nets and games (default 1)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="directory for the final nets and the arms' figures (default: a temporary one)",
    )
    parser.add_argument(
        "--checkpoint-every",
        type=float,
        default=0,
        metavar="S",
        help="also write each arm's current net every S seconds of its CPU, as "
        "<out>/<arm>-<cpu_s>s.pt (a curve per arm; needs --out; default: final nets only)",
    )


def _arm(
    name: str, preset: str, env: dict[str, str], seed: int, cpu_seconds: float, out: str, checkpoint_every: float = 0
) -> None:
    """One arm, in its own process: the loop until `cpu_seconds` of CPU, then its final net (and,
    with `checkpoint_every`, the net self-play used at each multiple of that much CPU)."""
    import torch

    from tengen.config import load_config
    from tengen.nn.export import export_model
    from tengen.run.in_process import learn_in_process
    from tengen.train.learner import Learner
    from tengen.train.window import Window

    torch.set_num_threads(1)
    config = load_config(preset, env=env)
    trainer = config.trainer
    window = Window(
        Path(out) / f"window-{name}",
        max(config.game.board_sizes),
        c=trainer.window_c,
        alpha=trainer.window_alpha,
        beta=trainer.window_beta,
    )
    torch.manual_seed(seed)  # the starting net's weights
    learner = Learner(trainer, window, seed=seed)
    start = time.process_time()
    last = [start]
    checkpoints = (
        [
            checkpoint_every * k
            for k in range(1, int(cpu_seconds // checkpoint_every) + 1)
            if checkpoint_every * k < cpu_seconds
        ]
        if checkpoint_every > 0
        else []
    )

    def progress(record, result) -> None:
        if checkpoints and time.process_time() - start >= checkpoints[0]:
            at = checkpoints.pop(0)
            export_model(
                result.final_net,
                Path(out) / f"{name}-{at:.0f}s.pt",
                samples_seen=result.samples,
                extra={"arm": name, "cpu_s": at},
            )
            print(f"  arm {name}: checkpoint at {at:.0f} s CPU ({result.samples} samples)", flush=True)
        if time.process_time() - last[0] >= 60:
            last[0] = time.process_time()
            print(
                f"  arm {name}: {last[0] - start:5.0f} s CPU, {len(result.records)} games, "
                f"{result.samples} samples, {len(result.candidates)} candidates",
                flush=True,
            )

    try:
        result = learn_in_process(
            config,
            learner,
            10**9,
            seed=seed,
            on_game=progress,
            until=lambda _: time.process_time() - start >= cpu_seconds,
        )
    finally:
        learner.close()
    figures = {
        "games": len(result.records),
        "rows": window.n_total,
        "samples": result.samples,
        "candidates": len(result.candidates),
        "cpu_s": round(time.process_time() - start, 1),
        "settings": {key: _setting(config, key) for key in env},
    }
    export_model(result.final_net, Path(out) / f"{name}.pt", samples_seen=result.samples, extra={"arm": name})
    (Path(out) / f"{name}.json").write_text(json.dumps(figures))


def _match(
    preset: str, arms: dict[str, dict[str, str]], a_path: Path, b_path: Path, games: int, visits: int, seed: int
) -> dict:
    """B's score against A over `games` games (draws half), colours alternating; each net searches
    with its own arm's search settings (a search method is part of how its net plays), the match
    settings (visits, temperature) are the preset's for both."""
    from tengen.config import load_config
    from tengen.gate.net_match import MatchRunner, NetMatchSettings
    from tengen.nn.evaluator import make_evaluator
    from tengen.stats import elo_difference, wilson_interval

    config = load_config(preset, env={})
    settings = NetMatchSettings.from_config(config)
    settings.visits = visits
    b_side = 0
    # Test-time search: a net with an optimistic policy head plays with it (KataGo's use of it).
    evaluators = [make_evaluator(b_path, 1, policy="auto"), make_evaluator(a_path, 1, policy="auto")]
    searches = [load_config(preset, env=arms["B"]).search, load_config(preset, env=arms["A"]).search]
    runner = MatchRunner(evaluators, settings, searches, games_in_parallel=min(games, 16), seed=seed)
    score = 0.0
    for n, result in enumerate(runner.play(list(range(games))), 1):
        winner_side = (
            None if result.winner == "draw" else (result.black_side if result.winner == "B" else 1 - result.black_side)
        )
        score += 0.5 if winner_side is None else float(winner_side == b_side)
        if n % 10 == 0:
            print(f"  match: {n}/{games} games, B {score:g}", flush=True)
    low, high = wilson_interval(score, games)
    rate = score / games
    elo = elo_difference(rate)
    return {
        "b_score": score,
        "games": games,
        "b_rate": round(rate, 3),
        "wilson_low": round(low, 3),
        "wilson_high": round(high, 3),
        "elo_b_minus_a": round(elo, 1) if math.isfinite(elo) else None,
    }


def run(args: argparse.Namespace) -> dict:
    if args.games < 1 or args.visits < 1:
        raise SystemExit("--games and --visits must be at least 1")
    if args.checkpoint_every < 0 or (args.checkpoint_every and args.out is None):
        raise SystemExit("--checkpoint-every takes a positive number of seconds, and --out to keep the nets in")
    from tengen.config import load_config

    for env in (dict(args.a), dict(args.b)):  # a bad preset or setting: one error here, not one per arm
        load_config(args.preset, env=env)
    with tempfile.TemporaryDirectory(prefix="tengen-ab-") as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        arms = {"A": dict(args.a), "B": dict(args.b)}
        print(
            f"bench ab: preset {args.preset}, {args.seconds:.0f} s of CPU per arm, seed {args.seed}; "
            f"A {arms['A'] or 'as the preset'}, B {arms['B'] or 'as the preset'}",
            flush=True,
        )
        context = multiprocessing.get_context("spawn")  # no threads or torch state inherited
        procs = [
            context.Process(
                target=_arm,
                args=(name, args.preset, env, args.seed, args.seconds, str(out), args.checkpoint_every),
                name=f"ab-arm-{name}",
            )
            for name, env in arms.items()
        ]
        for proc in procs:
            proc.start()
        try:
            for proc in procs:
                proc.join()
        finally:
            for proc in procs:
                if proc.is_alive():
                    proc.terminate()
                    proc.join()
        failed = [p.name for p in procs if p.exitcode != 0]
        if failed:
            raise SystemExit(f"bench ab: {', '.join(failed)} failed")
        figures = {name: json.loads((out / f"{name}.json").read_text()) for name in arms}
        for name, fig in figures.items():
            print(
                f"  arm {name}: {fig['games']} games, {fig['rows']} rows, {fig['samples']} samples, "
                f"{fig['candidates']} candidates in {fig['cpu_s']} s of CPU"
            )
        match = _match(args.preset, arms, out / "A.pt", out / "B.pt", args.games, args.visits, args.seed)
        print(
            f"bench ab: B scored {match['b_score']:g}/{args.games} = {match['b_rate']:.3f} "
            f"[{match['wilson_low']:.3f}, {match['wilson_high']:.3f}] against A at {args.visits} visits "
            f"(Elo B-A {match['elo_b_minus_a'] if match['elo_b_minus_a'] is not None else 'unbounded'})"
        )
        return {
            "preset": args.preset,
            "cpu_s_per_arm": args.seconds,
            "a": arms["A"],
            "b": arms["B"],
            "arms": figures,
            **match,
        }
