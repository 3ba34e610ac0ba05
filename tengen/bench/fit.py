"""`tengen bench fit`: how well and how cheaply architectures learn from the same window.

Where an A/B (`tengen bench ab`) says an architecture lost, this says why: per sample, or per CPU
second. Each architecture trains with the trainer's Learner (the preset's trainer settings, one
torch thread, the same seed and batches) on the rows of one window, for the same number of steps:
as many as the first architecture (the baseline) makes in half of --seconds of CPU. Then the
served heads (what self-play and gating read) are scored in eval mode on rows of a held-out window
(other games), and on the training rows, by the loss terms of tengen.nn.loss. For a one-batch-norm
net (names ending in "nbt") it also reports the largest difference between its served heads in
train and eval mode: the served function must not depend on the mode (0 up to rounding).

Windows: a `tengen bench ab --out DIR` run leaves DIR/window-A and DIR/window-B (each arm's games).
cpu_per_step_ratio = an architecture's CPU seconds per step / the baseline's.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

DESCRIPTION = "architectures trained on the same window rows: held-out losses at equal steps, CPU per step"
SCORED_ROWS = 4096
TERMS = ("policy", "value", "ownership")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--window", required=True, type=Path, help="the training window's directory")
    parser.add_argument("--held-out", required=True, type=Path,
                        help="a window of other games (e.g. the other arm's of a `bench ab --out`)")
    parser.add_argument("--archs", default="b4c48,b4c64nbt",
                        help="comma-separated; the first is the baseline (default b4c48,b4c64nbt)")
    parser.add_argument("--preset", default="cpu7", help="trainer settings (default cpu7)")
    parser.add_argument("--seed", type=int, default=1, help="seed of the nets and batches (default 1)")


def _open(directory: Path, c: int):
    from tengen.train.window import MANIFEST, Window

    try:
        pos_len = int(json.loads((directory / MANIFEST).read_text())["pos_len"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"bench fit: {directory} is not a window ({exc})") from exc
    window = Window(directory, pos_len, c, read_only=True)
    if len(window) == 0:
        raise SystemExit(f"bench fit: {directory} holds no rows")
    return window


def _train(learner, steps: int | None, cpu_budget_s: float) -> tuple[int, float]:
    """Train `steps` steps, or (steps None) for about `cpu_budget_s` of CPU; (steps, CPU seconds)."""
    start, done = time.process_time(), 0
    while done < steps if steps is not None else (done < 2 or time.process_time() - start < cpu_budget_s):
        learner.step()
        done += 1
    return done, time.process_time() - start


def _score(model, batch, short_term: bool) -> tuple[dict[str, float], float | None]:
    """The served heads' loss terms on `batch` (eval mode) and, for a one-batch-norm net, the largest
    difference between its served policy in train and in eval mode (None for other nets)."""
    import torch

    from tengen.nn.loss import compute_loss
    from tengen.train.learner import batch_tensors

    with torch.no_grad():
        spatial, global_inputs, targets = batch_tensors(batch, torch.device("cpu"), short_term)
        served = model.eval()(spatial, global_inputs)
        terms = compute_loss(served, targets, None)
        losses = {t: round(float(terms[t]), 4) for t in TERMS}
        if not model.one_batch_norm:
            return losses, None
        in_training = model.train().training_outputs(spatial, global_inputs)[-1][1]  # served heads last
        model.eval()
        return losses, float((in_training.policy_logits - served.policy_logits).abs().max())


def run(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch

    from tengen.config import load_config
    from tengen.nn.model import ARCHITECTURES
    from tengen.train.learner import Learner

    archs = [a.strip() for a in args.archs.split(",") if a.strip()]
    unknown = [a for a in archs if a not in ARCHITECTURES]
    if len(archs) < 2 or unknown:
        raise SystemExit(f"bench fit: --archs needs two or more of {', '.join(ARCHITECTURES)}"
                         + (f"; unknown: {', '.join(unknown)}" if unknown else ""))
    config = load_config(args.preset, env={}).trainer
    train, held_out = _open(args.window, config.window_c), _open(args.held_out, config.window_c)
    if train.pos_len != held_out.pos_len:
        raise SystemExit(f"bench fit: the windows' boards differ ({train.pos_len} and {held_out.pos_len})")
    scored = {"train_rows": train.sample(SCORED_ROWS, np.random.default_rng(args.seed), augment=False),
              "held_out": held_out.sample(SCORED_ROWS, np.random.default_rng(args.seed), augment=False)}
    torch.set_num_threads(1)  # the same experiment on every machine, as bench ab's arms
    print(f"bench fit: {', '.join(archs)} on {args.window} ({len(train)} rows in the window), scored on "
          f"{SCORED_ROWS} rows of {args.held_out}; preset {args.preset}'s trainer, batch {config.batch_size}")
    figures: dict = {"preset": args.preset, "window_rows": len(train), "archs": {}}
    steps, base_cpu_per_step = None, 0.0  # set by the baseline, the first architecture
    for arch in archs:
        torch.manual_seed(args.seed)
        learner = Learner(dataclasses.replace(config, arch=arch), train, seed=args.seed)
        steps, cpu = _train(learner, steps, args.seconds / 2)
        base_cpu_per_step = base_cpu_per_step or cpu / steps
        result: dict = {"steps": steps, "samples": learner.counters.samples, "cpu_s": round(cpu, 1)}
        diffs: list[float] = []  # one-batch-norm nets only
        for name, batch in scored.items():
            result[name], diff = _score(learner.model, batch, config.short_term_heads)
            if diff is not None:
                diffs.append(diff)
        if learner.model.one_batch_norm:
            result["served_train_eval_max_diff"] = max(diffs)
        result["cpu_per_step_ratio"] = round(cpu / steps / base_cpu_per_step, 3)
        print(f"  {arch}: {steps} steps in {cpu:.0f} s of CPU ({result['cpu_per_step_ratio']:.2f}x the baseline's "
              f"per step); held out {result['held_out']}; training rows {result['train_rows']}")
        figures["archs"][arch] = result
    return figures
