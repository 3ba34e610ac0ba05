"""`tengen bench loop`: self-play through the running services against the same runner in process.

The loop path is what `make run` runs: a Kafka-protocol broker, Triton serving a random net of the
preset's architecture (the model config `tengen run` writes: the preset's instances, precision
"auto") and one selfplay service process, all started by the bench in a temporary data dir. The
baseline is the self-play runner of that service (tengen.selfplay.runner) in this process at the same
preset, with the same export through the in-process evaluator of the same runtime and precision
(tengen.nn.evaluator.make_evaluator, "auto" both) with as many threads as the machine has cores,
so neither side is slowed to make the ratio.

The two take turns in rounds: while the runner in process plays, the selfplay service is stopped
(SIGSTOP) and Triton idles; then the service runs again (SIGCONT) for a round. Both sides count
positions as moves are played, games in progress included, and the positions the net evaluated as
batches are answered: the service by its /metrics counters tengen_selfplay_moves_total and
tengen_selfplay_evaluations_total, the runner by its stats. (Counting the service's finished games,
tengen_selfplay_positions_total, moved a round's figure by whole cohorts of games.) Each figure is
the median round's; ratio = loop / in process. Evaluations/s is the finer figure where a round
sees few moves (the paper preset on a CPU: one move of its 256 games is ~150k evaluations).
Each loop round also reads Triton's statistics for the model: per request the time queued and
the time in the Python backend (the forward plus the hop to its stub and back), and requests per
execution (how often the dynamic batcher merged the halves' requests): where the loop's latency goes.
"""
from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DESCRIPTION = "self-play positions/s through broker, Triton and the selfplay service vs the runner in process"
MIN_ROUNDS = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--preset", default="cpu", help="preset of both paths (default cpu)")
    parser.add_argument("--seed", type=int, default=1, help="random seed of the net and the games (default 1)")
    parser.add_argument("--round", type=float, default=None, metavar="SECONDS",
                        help="seconds per round and path (default: --seconds / 4, at least 20)")


def _progress(metrics_url: str) -> tuple[float, float] | None:
    """(moves played, positions evaluated) by the selfplay service, games in progress included;
    None while its /metrics cannot be read."""
    from tengen.run.status import scrape

    metrics = scrape(metrics_url)
    moves, evaluations = metrics.get("tengen_selfplay_moves_total"), metrics.get("tengen_selfplay_evaluations_total")
    return None if moves is None or evaluations is None else (moves, evaluations)


def _wait(condition, timeout_s: float, what: str, proc: subprocess.Popen, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            raise SystemExit(f"the selfplay service exited ({proc.returncode}) waiting for {what}; log {log}")
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout_s:.0f} s waiting for {what}; log {log}")
        time.sleep(0.5)


def run(args: argparse.Namespace) -> dict:
    import torch
    import tritonclient.grpc as grpcclient

    from tengen.config import load_config
    from tengen.infra.broker import LocalBroker
    from tengen.infra.kafka import ReliableProducer
    from tengen.infra.process import dies_with_parent
    from tengen.infra.triton.client import model_stats, phase_means_ms
    from tengen.infra.triton.repository import ModelRepository
    from tengen.infra.triton.server import LocalTriton
    from tengen.loop.layout import DataDir
    from tengen.loop.messages import announce_model, ensure_loop_topics
    from tengen.nn.evaluator import make_evaluator
    from tengen.run.bootstrap import ensure_model
    from tengen.run.ports import PortPicker
    from tengen.selfplay.runner import SelfplayRunner

    config = load_config(args.preset)
    name = config.run.model_name
    cores = os.cpu_count() or 1
    # Both paths play for a whole round at a time, at least 20 s unless given (a shorter round is
    # mostly noise on a shared box).
    round_s = args.round if args.round is not None else max(20.0, args.seconds / (2 * MIN_ROUNDS))
    if not round_s > 0:
        raise SystemExit("--round must be positive")
    with tempfile.TemporaryDirectory(prefix="tengen-bench-loop-") as tmp:
        data_dir = DataDir(tmp)
        repository = ModelRepository(data_dir.models)
        ensure_model(repository, config, seed=args.seed)
        export = repository.export_path(name, 1)
        ports = PortPicker()
        broker = LocalBroker(port=ports.pick(), log_path=data_dir.root / "broker.log")
        triton = LocalTriton(repository.root, data_dir.triton, load_models=[name], http_port=ports.pick(),
                             grpc_port=ports.pick(), metrics_port=ports.pick(), log_path=data_dir.root / "triton.log")
        selfplay: subprocess.Popen | None = None
        stats_client: grpcclient.InferenceServerClient | None = None
        log = data_dir.root / "selfplay.log"
        try:
            print(f"preset {args.preset}: {config.trainer.arch} (random weights), boards {config.game.board_sizes}, "
                  f"{config.selfplay.games_in_parallel} games in parallel, {config.triton.instances} Triton "
                  f"instance(s); rounds of {round_s:.0f} s; data dir {data_dir}", flush=True)
            broker.start(timeout_s=60.0)
            ensure_loop_topics(broker.bootstrap)
            producer = ReliableProducer(broker.bootstrap, client_id="tengen-bench-loop")
            try:
                announce_model(producer, name, 1, samples=None)  # unknown: the preset's final boards
            finally:
                producer.close(timeout_s=5.0)
            triton.start(timeout_s=300.0)
            http_port = ports.pick()
            env = dict(os.environ, TENGEN_DATA_DIR=str(data_dir), TENGEN_KAFKA_BOOTSTRAP=broker.bootstrap,
                       TENGEN_TRITON_URL=triton.grpc_url, PYTHONUNBUFFERED="1")
            with open(log, "wb") as log_file:
                selfplay = subprocess.Popen(dies_with_parent(
                    [sys.executable, "-m", "services.selfplay", "--preset", args.preset, "--worker-id", "0",
                     "--http-port", str(http_port)]), env=env, stdout=log_file, stderr=subprocess.STDOUT)
            metrics = f"http://127.0.0.1:{http_port}/metrics"
            print("broker, Triton and the selfplay service up; waiting for its first evaluations ...", flush=True)
            _wait(lambda: (_progress(metrics) or (0, 0))[1] > 0, 600, "the service's first evaluations", selfplay, log)

            torch.set_num_threads(cores)
            runner = SelfplayRunner.from_config(config, make_evaluator(export, cores), seed=args.seed)
            # Per round: (positions/s, evaluations/s) of the loop and of the runner in process.
            loop_rates: list[tuple[float, float]] = []
            local_rates: list[tuple[float, float]] = []
            # Per loop round: Triton's (queued ms, backend ms) per request and requests per execution.
            server: list[tuple[float, float, float]] = []
            stats_client = grpcclient.InferenceServerClient(triton.grpc_url)
            start = time.monotonic()
            while len(loop_rates) < MIN_ROUNDS or time.monotonic() - start < args.seconds:
                before, then, server_before = _progress(metrics), time.monotonic(), model_stats(stats_client, name)
                time.sleep(round_s)
                after, now, server_after = _progress(metrics), time.monotonic(), model_stats(stats_client, name)
                if before is None or after is None:
                    raise SystemExit(f"cannot read the selfplay service's metrics at {metrics}; log {log}")
                loop_rates.append(((after[0] - before[0]) / (now - then), (after[1] - before[1]) / (now - then)))
                phases = phase_means_ms(server_before, server_after)
                requests = server_after.requests - server_before.requests
                executions = server_after.executions - server_before.executions
                server.append((phases.get("queue", 0.0), phases.get("compute_infer", 0.0),
                               requests / executions if executions else 0.0))
                selfplay.send_signal(signal.SIGSTOP)
                try:
                    stats = runner.play_for(round_s)
                finally:
                    selfplay.send_signal(signal.SIGCONT)
                local_rates.append((stats["moves_per_s"], stats["leaves_per_s"]))
                print(f"  round {len(loop_rates)}: loop {loop_rates[-1][0]:.1f} positions/s, "
                      f"{loop_rates[-1][1]:.0f} evals/s; in process {local_rates[-1][0]:.1f} positions/s, "
                      f"{local_rates[-1][1]:.0f} evals/s; Triton per request {server[-1][0]:.2f} ms queued, "
                      f"{server[-1][1]:.2f} ms in the backend, {server[-1][2]:.2f} requests per execution", flush=True)
        finally:
            if stats_client is not None:
                stats_client.close()
            if selfplay is not None:
                selfplay.send_signal(signal.SIGCONT)
                selfplay.terminate()
                try:
                    selfplay.wait(60)
                except subprocess.TimeoutExpired:
                    selfplay.kill()
                    selfplay.wait()
            triton.stop()
            broker.stop()
    loop, local = (statistics.median(r[0] for r in rates) for rates in (loop_rates, local_rates))
    loop_evals, local_evals = (statistics.median(r[1] for r in rates) for rates in (loop_rates, local_rates))
    # No move or evaluation in the runner's rounds (the paper preset's first moves on a CPU): no ratio.
    ratio = round(loop / local, 3) if local > 0 else None
    evals_ratio = round(loop_evals / local_evals, 3) if local_evals > 0 else None
    queued_ms, backend_ms, merged = (statistics.median(s[i] for s in server) for i in range(3))
    print(f"loop {loop:.1f} positions/s, in process {local:.1f}: the loop keeps {ratio} of it; "
          f"evals/s {loop_evals:.0f} against {local_evals:.0f}: {evals_ratio}", flush=True)
    return {"preset": args.preset, "arch": config.trainer.arch, "games_in_parallel": config.selfplay.games_in_parallel,
            "triton_instances": config.triton.instances, "rounds": len(loop_rates), "round_s": round_s,
            "loop_positions_per_s": round(loop, 1), "in_process_positions_per_s": round(local, 1),
            "ratio_loop_vs_in_process": ratio, "loop_evals_per_s": round(loop_evals),
            "in_process_evals_per_s": round(local_evals), "evals_ratio_loop_vs_in_process": evals_ratio,
            "triton_queue_ms": round(queued_ms, 3), "triton_backend_ms": round(backend_ms, 3),
            "triton_requests_per_execution": round(merged, 3)}
