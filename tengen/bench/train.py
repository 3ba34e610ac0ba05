"""`tengen bench train`: samples/s of the trainer's full step against the bare net step.

The full step is what the trainer service runs (tengen.train.learner.Learner.step): draw a
uniform batch from an on-disk window with random symmetries, unpack it, move it to the device,
forward, every loss term, backward, SGD step. The baseline, in the same run with the same net
and optimizer, repeats forward + loss + backward + SGD step on one batch already on the device.
pipeline_efficiency = full samples/s / baseline samples/s at 19x19 (1.0 = data handling is free).

The window is filled with random-play games (tengen.data.synthetic) replayed into rows, every
turn a recorded one.
"""
from __future__ import annotations

import argparse
import dataclasses
import tempfile
import time

DESCRIPTION = "trainer step (window sampling through optimizer step) vs bare forward+backward, 9x9 and 19x19"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="b6c96", help="net size (default b6c96)")
    parser.add_argument("--batch-size", type=int, default=256, help="samples per step (default 256)")
    parser.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def _measure(step, seconds: float, batch_size: int, sync) -> tuple[float, int]:
    """Samples/s of `step` over about `seconds` (after one warm-up step); (rate, steps)."""
    step()
    sync()
    steps = 0
    start = time.perf_counter()
    while steps < 2 or time.perf_counter() - start < seconds:
        step()
        steps += 1
    sync()
    return steps * batch_size / (time.perf_counter() - start), steps


def run(args: argparse.Namespace) -> dict:
    import numpy as np
    import torch

    from tengen.config import TrainerConfig
    from tengen.data.synthetic import random_game
    from tengen.loop.rows import rows_from_record
    from tengen.nn.loss import compute_loss
    from tengen.train.learner import Learner, batch_tensors
    from tengen.train.window import Window

    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(args.seed)
    torch.manual_seed(args.seed)
    config = dataclasses.replace(TrainerConfig(), arch=args.arch, batch_size=args.batch_size,
                                 min_rows_to_train=0, samples_per_row=1e12)
    print(f"bench train: {args.arch}, batch {args.batch_size}, device {device}, "
          f"{args.seconds / 4:.1f} s per measurement")
    figures: dict = {"arch": args.arch, "batch_size": args.batch_size, "device": str(device)}
    with tempfile.TemporaryDirectory() as tmp:
        for size in (9, 19):
            window = Window(f"{tmp}/w{size}", size, c=1_000_000)
            while window.n_total < 2 * args.batch_size:
                record = random_game(rng, size, full_search_prob=1.0)
                window.append(record.id, rows_from_record(record, size))
            learner = Learner(config, window, device=device, seed=args.seed)
            full, full_steps = _measure(learner.step, args.seconds / 4, args.batch_size, sync)

            batch = window.sample(args.batch_size, rng, crop=True)
            spatial, global_inputs, targets = batch_tensors(batch, device)
            model, optimizer = learner.model, learner.optimizer

            def bare_step() -> None:
                outputs = model(spatial, global_inputs)
                loss = compute_loss(outputs, targets, model)["total"]
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()

            bare, bare_steps = _measure(bare_step, args.seconds / 4, args.batch_size, sync)
            print(f"  {size}x{size}: full step {full:8.1f} samples/s ({full_steps} steps), "
                  f"bare forward+backward {bare:8.1f} samples/s ({bare_steps} steps), ratio {full / bare:.3f}")
            figures[f"samples_per_s_{size}"] = round(full, 1)
            figures[f"baseline_samples_per_s_{size}"] = round(bare, 1)
            figures[f"pipeline_efficiency_{size}"] = round(full / bare, 3)
    figures["pipeline_efficiency"] = figures["pipeline_efficiency_19"]
    return figures
