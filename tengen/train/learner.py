"""The trainer's learning side (paper §4.7): SGD steps on window batches, the per-sample learning
rate schedule, stochastic weight averaging, and checkpoints that resume exactly.

- Optimizer: SGD, momentum 0.9. The loss is a batch mean, so the per-batch rate handed to torch is
  the per-sample rate times the batch size (AAAI version: "a per-batch learning rate of
  256 * 6e-5").
- Per-sample rate: alpha_0 (lambda T + 1)^(-4/3), T = samples trained by this net; divided by 3
  (the preset's warmup factor) for the first `warmup_samples` samples (AAAI version §4).
- SWA: a snapshot every `snapshot_every` samples updates an exponential moving average of the
  weights (decay 0.75, the first snapshot starts it); every `candidate_every` samples the average
  becomes a candidate.
- Non-finite guard: a step whose loss or gradient is not finite changes nothing (it is counted and
  skipped; the next step draws another batch), and a net that is not finite is never averaged,
  checkpointed or exported (NonFiniteError), so the last good checkpoint survives. Records are
  validated before they reach the window; this is the defence behind that one.
- Batches: uniform from the window with random symmetries, cropped to the largest board in the
  batch; step k's batch comes from a generator seeded (seed, k) (BatchSource), so a checkpoint
  only needs the seed and the step count to resume the same sequence.
"""
from __future__ import annotations

import copy
import os
import queue
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tengen.config import TrainerConfig
from tengen.nn.loss import LossWeights, Targets, compute_training_loss
from tengen.nn.model import (
    OPTIMISTIC_POLICY_PREFIXES,
    SCORE_BELIEF_PREFIX,
    SHORT_TERM_PREFIXES,
    SOFT_POLICY_PREFIX,
    KataGoNet,
    build_model,
)
from tengen.train.window import Batch, Window

CHECKPOINT_FORMAT = "tengen-trainer-checkpoint-1"


class NonFiniteError(RuntimeError):
    """The net's weights are not all finite: nothing of it may be saved or exported."""


def learning_rate(samples: int, config: TrainerConfig) -> float:
    """Per-sample learning rate after `samples` training samples (§4.7 with the warm-up)."""
    rate = config.lr_per_sample * (config.lr_decay_lambda * samples + 1.0) ** (-4.0 / 3.0)
    if samples < config.warmup_samples:
        rate *= config.warmup_lr_factor
    return rate


class SwaAverager:
    """Exponential moving average of weight snapshots (floating-point tensors of the state dict,
    batch-norm statistics included; integer counters are taken from the latest snapshot)."""

    def __init__(self, decay: float) -> None:
        if not 0.0 <= decay < 1.0:
            raise ValueError(f"decay must be within [0, 1), got {decay}")
        self.decay = decay
        self.snapshots = 0
        self.average: dict[str, torch.Tensor] = {}

    def update(self, model: torch.nn.Module) -> None:
        with torch.no_grad():
            for name, value in model.state_dict().items():
                value = value.detach().to("cpu", copy=True)
                if self.snapshots == 0 or not value.is_floating_point():
                    self.average[name] = value
                else:
                    self.average[name].mul_(self.decay).add_(value, alpha=1.0 - self.decay)
        self.snapshots += 1

    def averaged(self, model: KataGoNet) -> KataGoNet:
        """A copy of `model` carrying the averaged weights."""
        if not self.snapshots:
            raise ValueError("no snapshot taken yet")
        out = copy.deepcopy(model).cpu()
        out.load_state_dict(self.average)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"decay": self.decay, "snapshots": self.snapshots, "average": self.average}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.decay, self.snapshots, self.average = state["decay"], state["snapshots"], state["average"]


@dataclass
class Counters:
    samples: int = 0  # training samples (batches x batch size) of the run: this net's and its predecessors'
    steps: int = 0
    next_snapshot: int = 0
    next_candidate: int = 0
    candidates: int = 0
    skipped_steps: int = 0  # steps whose loss or gradient was not finite (nothing changed)
    # A net that took over mid-run (a bigger architecture): the run's samples when it began, and
    # how far it may train ahead of the data to catch up on the window it inherited.
    net_start: int = 0
    catch_up: int = 0


_BATCH_FIELDS = ("spatial", "global_inputs", "policy", "opponent_policy", "value", "score", "ownership", "weight",
                 "final_weight")
_SHORT_TERM_FIELDS = ("short_term", "short_term_weight")


def _host_tensors(batch: Batch, pin: bool, short_term: bool = False) -> dict[str, torch.Tensor]:
    names = _BATCH_FIELDS + (_SHORT_TERM_FIELDS if short_term else ())
    tensors = {name: torch.from_numpy(getattr(batch, name)) for name in names}
    return {name: t.pin_memory() for name, t in tensors.items()} if pin else tensors


def _device_batch(host: dict[str, torch.Tensor], device: torch.device) -> tuple[torch.Tensor, torch.Tensor, Targets]:
    t = {name: value.to(device, non_blocking=True) for name, value in host.items()}
    targets = Targets(policy=t["policy"], opponent_policy=t["opponent_policy"], value=t["value"],
                      score=t["score"], ownership=t["ownership"], weight=t["weight"],
                      # side-branch rows (final_weight 0) have no score or ownership target
                      ownership_weight=t["final_weight"], score_weight=t["final_weight"],
                      short_term=t.get("short_term"), short_term_weight=t.get("short_term_weight"))
    return t["spatial"], t["global_inputs"], targets


def batch_tensors(batch: Batch, device: torch.device,
                  short_term: bool = False) -> tuple[torch.Tensor, torch.Tensor, Targets]:
    """A window batch as the net's inputs and the loss's targets on `device` (with the short-term
    targets when `short_term`)."""
    return _device_batch(_host_tensors(batch, pin=False, short_term=short_term), device)


class BatchSource:
    """The batches of consecutive training steps. Step k's batch is drawn with the random
    generator seeded (seed, k), so a resumed trainer draws what it would have drawn.

    With `prefetch` > 0 a background thread prepares that many batches ahead (sampling, unpacking,
    symmetries, pinned host memory on CUDA) while the device computes; a batch may then miss rows
    appended while it waited in the queue, which changes nothing that matters.
    """

    def __init__(self, window: Window, batch_size: int, seed: int, device: torch.device, prefetch: int = 0,
                 short_term: bool = False) -> None:
        """`short_term`: batches carry the short-term targets (for a net with the short-term heads)."""
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        self.window, self.batch_size, self.seed, self.device = window, batch_size, seed, device
        self.prefetch = prefetch
        self.short_term = short_term
        self._pin = device.type == "cuda"
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._queue: queue.Queue[tuple[int, dict[str, torch.Tensor] | BaseException]] = queue.Queue(
            maxsize=max(1, prefetch))

    def _draw(self, step: int) -> dict[str, torch.Tensor]:
        rng = np.random.default_rng((self.seed, step))
        return _host_tensors(
            self.window.sample(self.batch_size, rng, augment=True, crop=True), self._pin, self.short_term
        )

    def get(self, step: int) -> tuple[torch.Tensor, torch.Tensor, Targets]:
        if not self.prefetch:
            return _device_batch(self._draw(step), self.device)
        if self._thread is None:
            self._start(step)
        while True:
            got, host = self._queue.get()
            if isinstance(host, BaseException):  # the producer thread failed: fail here, loudly
                self._thread = None
                raise RuntimeError("preparing a training batch failed") from host
            if got == step:
                return _device_batch(host, self.device)
            if got > step:  # asked for an earlier step (e.g. after loading a checkpoint): start over
                self._start(step)

    def _start(self, step: int) -> None:
        self.close()
        self._stop = threading.Event()
        self._queue = queue.Queue(maxsize=self.prefetch)
        self._thread = threading.Thread(
            target=self._produce, args=(step, self._stop, self._queue), name="trainer-prefetch", daemon=True
        )
        self._thread.start()

    def _produce(self, step: int, stop: threading.Event, out: queue.Queue) -> None:
        while not stop.is_set():
            try:
                item: tuple[int, dict[str, torch.Tensor] | BaseException] = (step, self._draw(step))
            except ValueError as err:
                if len(self.window) == 0:  # nothing to draw yet
                    stop.wait(0.1)
                    continue
                item = (step, err)
            except Exception as err:  # handed to the training thread, which raises it
                item = (step, err)
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item[1], BaseException):
                return
            step += 1

    def close(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None


class Learner:
    """A net, its optimizer and SWA state, trained on batches drawn from a window."""

    def __init__(
        self,
        config: TrainerConfig,
        window: Window,
        device: str | torch.device = "cpu",
        seed: int = 0,
        prefetch: int | None = None,
    ) -> None:
        """`prefetch`: batches prepared ahead by a background thread; default 2 on CUDA, 0 on CPU
        (where the thread would only take cores from the net)."""
        self.config = config
        self.window = window
        self.device = torch.device(device)
        self.model = build_model(
            config.arch, short_term=config.short_term_heads, optimistic_policy=config.optimistic_policy_weight > 0
        ).to(self.device)
        self.model.train()
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.0, momentum=config.momentum)
        self.loss_weights = LossWeights(
            soft_policy=config.soft_policy_weight,
            l2=config.l2,
            short_term_value=config.short_term_value_weight,
            short_term_score=config.short_term_score_weight,
            short_term_value_error=config.short_term_value_error_weight,
            short_term_score_error=config.short_term_score_error_weight,
            optimistic_policy=config.optimistic_policy_weight,
        )
        self.swa = SwaAverager(config.swa_decay)
        self.counters = Counters(next_snapshot=config.snapshot_every, next_candidate=config.candidate_every)
        self.seed = seed
        if prefetch is None:
            prefetch = 2 if self.device.type == "cuda" else 0
        self.batches = BatchSource(window, config.batch_size, seed, self.device, prefetch, config.short_term_heads)

    def can_train(self) -> bool:
        """Enough rows to start, and not ahead of the data: about `samples_per_row` training
        samples per row ever appended."""
        n_total = self.window.n_total
        cap = self.config.samples_per_row * n_total + self.counters.catch_up
        return n_total >= self.config.min_rows_to_train and self.counters.samples + self.config.batch_size <= cap

    def step(self) -> dict[str, float]:
        """One SGD step on a fresh batch; returns every loss term and the learning rate."""
        spatial, global_inputs, targets = self.batches.get(self.counters.steps)
        rate = learning_rate(self.counters.samples - self.counters.net_start, self.config)  # this net's schedule
        for group in self.optimizer.param_groups:
            group["lr"] = rate * self.config.batch_size
        terms = compute_training_loss(
            self.model.training_outputs(spatial, global_inputs), targets, self.model, self.loss_weights
        )
        self.optimizer.zero_grad(set_to_none=True)
        finite = bool(torch.isfinite(terms["total"]))
        if finite:
            terms["total"].backward()
            grads = [p.grad for p in self.model.parameters() if p.grad is not None]
            finite = bool(
                torch.isfinite(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
            )
        self.counters.steps += 1  # also when skipped: the next step draws another batch
        if finite:
            self.optimizer.step()
            self.counters.samples += self.config.batch_size
        else:
            self.optimizer.zero_grad(set_to_none=True)
            self.counters.skipped_steps += 1
        report = {name: float(value.detach()) for name, value in terms.items()}
        report["lr_per_sample"] = rate
        report["skipped"] = 0.0 if finite else 1.0
        return report

    def finite(self) -> bool:
        """Every weight and batch-norm statistic of the net is finite."""
        return all(bool(torch.isfinite(t).all()) for t in self.model.state_dict().values() if t.is_floating_point())

    def _require_finite(self, what: str) -> None:
        if not self.finite():
            raise NonFiniteError(f"the net's weights are not finite: not {what}")

    def snapshot_due(self) -> bool:
        return self.counters.samples >= self.counters.next_snapshot

    def take_snapshot(self) -> bool:
        """Add a snapshot to the average; True when a candidate is due now."""
        self._require_finite("averaging a snapshot")
        self.swa.update(self.model)
        self.counters.next_snapshot += self.config.snapshot_every
        if self.counters.samples >= self.counters.next_candidate:
            self.counters.next_candidate += self.config.candidate_every
            return True
        return False

    def candidate(self) -> KataGoNet:
        """The averaged net (eval mode) to export as the next candidate."""
        self.counters.candidates += 1
        return self.swa.averaged(self.model).eval()

    # -- checkpoints ---------------------------------------------------------------------------

    def save(self, path: Path) -> None:
        """Write everything needed to resume to `path`, atomically (temp file, fsync, rename)."""
        self._require_finite(f"saving {path}")
        state = {
            "format": CHECKPOINT_FORMAT,
            "arch": self.config.arch,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "swa": self.swa.state_dict(),
            "counters": asdict(self.counters),
            "seed": self.seed,
            "window_n_total": self.window.n_total,
            "saved_at": time.time(),
        }
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        with open(tmp, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def load(self, path: Path) -> None:
        state = torch.load(path, map_location=self.device, weights_only=False)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: not a {CHECKPOINT_FORMAT} file")
        if state["arch"] != self.config.arch:
            raise ValueError(f"{path} holds a {state['arch']} net but the preset trains {self.config.arch}")
        self._add_missing_heads(state)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.swa.load_state_dict(state["swa"])
        self.counters = Counters(**state["counters"])
        self.seed = state["seed"]
        self.batches.close()
        self.batches = BatchSource(
            self.window,
            self.config.batch_size,
            self.seed,
            self.device,
            self.batches.prefetch,
            self.config.short_term_heads,
        )

    def take_over(self, samples: int) -> None:
        """This fresh net takes over a run at `samples` (a bigger architecture, KataGo's move as
        data grew): it trains on the window it inherits, up to one pass at the run's density
        (samples_per_row x the window's rows) ahead of the data, before its first candidate; its
        learning rate warms up and decays from its own start. The run's sample count goes on, so
        candidate names and the served version's lag stay in order."""
        catch_up = int(self.config.samples_per_row * len(self.window))
        self.counters = Counters(samples=samples, net_start=samples, catch_up=catch_up,
                                 next_snapshot=samples + self.config.snapshot_every,
                                 next_candidate=samples + max(catch_up, self.config.candidate_every))

    @staticmethod
    def checkpoint_arch(path: Path) -> tuple[str, int]:
        """(architecture, the run's samples) of a checkpoint."""
        state = torch.load(path, map_location="cpu", weights_only=False)
        if state.get("format") != CHECKPOINT_FORMAT:
            raise ValueError(f"{path}: not a {CHECKPOINT_FORMAT} file")
        return state["arch"], int(state["counters"]["samples"])

    def start_from(self, export: Path) -> int:
        """Start from an export's weights (a warm start) and return its samples_seen. The heads the
        export does not serve (training-only ones, and a short-term or optimistic head it lacks)
        keep this net's fresh weights; the counters stay at 0: the learning-rate warm-up and the
        samples-per-row cap are this run's, whose window starts empty."""
        from tengen.nn.export import load_export

        module, metadata = load_export(export)
        arch = metadata.get("architecture", {}).get("name")
        if arch != self.config.arch:
            raise ValueError(f"{export} holds a {arch} net but the preset trains {self.config.arch}")
        result = self.model.load_state_dict(module.state_dict(), strict=False)
        fresh_ok = (SOFT_POLICY_PREFIX, SCORE_BELIEF_PREFIX, *SHORT_TERM_PREFIXES, *OPTIMISTIC_POLICY_PREFIXES)
        optional = (*SHORT_TERM_PREFIXES, *OPTIMISTIC_POLICY_PREFIXES)
        wrong = [k for k in result.missing_keys if not k.startswith(fresh_ok)] + [
            k for k in result.unexpected_keys if not k.startswith(optional)]
        if wrong:
            raise ValueError(f"{export} does not fit the {arch} net: {', '.join(wrong[:5])}")
        return int(metadata.get("samples_seen") or 0)

    def _add_missing_heads(self, state: dict[str, Any]) -> None:
        """Completes a checkpoint saved before the soft policy head or without the short-term or
        optimistic heads (turned on for a running net): those heads keep this net's fresh weights
        (in the SWA average too) and start without momentum."""
        fresh: dict[str, torch.Tensor] = {}
        for prefixes in (
            (SOFT_POLICY_PREFIX,),
            SHORT_TERM_PREFIXES,
            OPTIMISTIC_POLICY_PREFIXES,
        ):  # a head is added whole or not at all
            if not any(k.startswith(prefixes) for k in state["model"]):
                fresh.update({k: v for k, v in self.model.state_dict().items() if k.startswith(prefixes)})
        if not fresh:
            return
        state["model"] = {**state["model"], **fresh}
        if state["swa"]["snapshots"]:
            state["swa"]["average"] = {
                **state["swa"]["average"],
                **{k: v.detach().to("cpu", copy=True) for k, v in fresh.items()},
            }
        # The added parameters are the net's last (KataGoNet registers these heads last): the saved
        # ids 0..n-1 stay the other parameters', the added ones take the next ids.
        names = [name for name, _ in self.model.named_parameters()]
        added = sum(1 for name in names if name in fresh)
        if any(name in fresh for name in names[: len(names) - added]):
            raise ValueError("the heads missing from the checkpoint are not the net's last parameters")
        group = state["optimizer"]["param_groups"][-1]
        saved = sum(len(g["params"]) for g in state["optimizer"]["param_groups"])
        group["params"] = [*group["params"], *range(saved, saved + added)]

    def close(self) -> None:
        """Stop the prefetch thread, if any."""
        self.batches.close()
