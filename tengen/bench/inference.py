"""`tengen bench inference`: net evaluations/s through Triton against the same net in-process.

The net (default b6c96, random weights) is exported once, as `tengen models init` does. The Triton
path is what the selfplay workers use: a local tritonserver from the nvidia-pytriton wheel (Python
backend on the CPU, config rendered by tengen.infra.triton.repository.render_config) started by the
benchmark in a temporary directory, and TritonEvaluator over gRPC with two batches in flight (as
the selfplay runner keeps them: one is serialised, sent and decoded while the server computes the
other), so the figure is throughput, not one request's latency. The baseline is the in-process
evaluator (tengen.nn.evaluator.make_evaluator, same --runtime and --precision) on the same export
in this process, one call after another, with the same number of threads as the Triton model
instance (unless --triton-threads says otherwise).

At each batch size the two paths run in alternating rounds of a few calls each, so load from
other processes on the machine hits both alike; a round's rate is positions / its wall time,
evals/s is the median round's, and ratio = Triton evals/s / in-process evals/s. Both paths are
checked to compute the same outputs first. Triton's own statistics for the rounds split its time
per request into the forward pass, the copies in and out of the Python backend, and the queue (a
request waits there while the one before it computes: that is what being in flight means).

On a machine shared with other work the wall-clock rates swing with the load, so the CPU time each
path spends per evaluation is measured too (this process: client or in-process net; tritonserver
and its backend stubs from /proc): cpu_ratio = in-process CPU per eval / Triton CPU per eval says
whether the Triton path does more work, whatever the load.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import math
import os
import tempfile
import time
from pathlib import Path
from typing import Callable

import numpy as np

DESCRIPTION = "evals/s of a net through local Triton (gRPC, Python backend, 2 batches in flight) vs in-process"
MIN_ROUNDS = 3
ROUND_S = 0.5  # a round is at least this long (and at least 2 * in-flight calls)
WARMUP_CALLS = 3  # TorchScript's profiling executor specialises on the first calls at a new shape


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--arch", default="b6c96", help="net size (default b6c96)")
    parser.add_argument("--board", type=int, default=9, help="board size (default 9)")
    parser.add_argument("--batches", default="16,64,256", help="batch sizes, comma-separated (default 16,64,256)")
    parser.add_argument("--in-flight", type=int, default=2,
                        help="Triton requests kept in flight (default 2, as the selfplay runner)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch threads of the in-process path (default: this process's torch setting)")
    parser.add_argument("--triton-threads", type=int, default=None,
                        help="torch threads of each Triton model instance (default: --threads; 0: torch's default)")
    parser.add_argument("--instances", type=int, default=1, help="Triton model instances (default 1)")
    parser.add_argument("--queue-delay-us", type=int, default=200,
                        help="Triton dynamic batching queue delay in microseconds (default 200)")
    parser.add_argument("--runtime", default="auto", choices=("auto", "torch", "openvino"),
                        help="CPU runtime of both paths (tengen.nn.evaluator.RUNTIMES; default auto: OpenVINO)")
    parser.add_argument("--precision", default="auto", choices=("auto", "bf16", "fp32"),
                        help="precision of both paths (default auto: bf16 where the CPU has it)")
    parser.add_argument("--shared-memory", default="on", choices=("on", "off"),
                        help="tensors through system shared memory (on, as a worker beside Triton does) or in "
                             "the gRPC messages (off)")
    parser.add_argument("--seed", type=int, default=1, help="random seed (default 1)")


def _inputs(n: int, board: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Random binary planes on a full board (the net's cost does not depend on the values)."""
    from tengen.go.planes import NUM_GLOBAL, NUM_SPATIAL, ON_BOARD

    spatial = (rng.random((n, NUM_SPATIAL, board, board)) < 0.2).astype(np.float32)
    spatial[:, ON_BOARD] = 1.0
    return spatial, rng.random((n, NUM_GLOBAL)).astype(np.float32)


def _pipelined(submit: Callable[[], object], calls: int, in_flight: int) -> float:
    """Seconds for `calls` requests with up to `in_flight` of them outstanding at once."""
    pending: collections.deque = collections.deque()
    start = time.perf_counter()
    for _ in range(calls):
        if len(pending) == in_flight:
            pending.popleft().result()
        pending.append(submit())
    while pending:
        pending.popleft().result()
    return time.perf_counter() - start


def _sequential(evaluate: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        evaluate()
    return time.perf_counter() - start


def _server_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of a process and its children (tritonserver and the Python
    backend stubs that run the model), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()  # state, ppid, ..., utime [11], stime [12]
        except OSError:  # ended meanwhile
            continue
        if stat.parent.name == str(pid) or fields[1] == str(pid):
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def _rounds(paths: dict[str, tuple[Callable[[int], float], Callable[[], float]]], calls: int,
            seconds: float) -> tuple[dict[str, list[float]], dict[str, float]]:
    """Seconds per call of each path's rounds (`calls` calls each), the paths taking turns for
    about `seconds` in all (at least MIN_ROUNDS rounds each); and the CPU seconds per call of each
    path over all its rounds (each path's CPU clock read around its rounds)."""
    times: dict[str, list[float]] = {path: [] for path in paths}
    cpu = dict.fromkeys(paths, 0.0)
    start = time.perf_counter()
    while min(map(len, times.values())) < MIN_ROUNDS or time.perf_counter() - start < seconds:
        for path, (run_round, cpu_clock) in paths.items():
            cpu_before = cpu_clock()
            times[path].append(run_round(calls) / calls)
            cpu[path] += cpu_clock() - cpu_before
    return times, {path: cpu[path] / (calls * len(times[path])) for path in paths}


def run(args: argparse.Namespace) -> dict:
    import torch
    import tritonclient.grpc as grpcclient

    from tengen.gate.promotion import agree
    from tengen.infra.triton.client import TritonEvaluator, model_stats, phase_means_ms
    from tengen.infra.triton.repository import ModelRepository, render_config
    from tengen.infra.triton.server import LocalTriton
    from tengen.nn.evaluator import make_evaluator
    from tengen.nn.export import export_model
    from tengen.nn.model import build_model

    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if not batches or min(batches) < 1:
        raise SystemExit(f"--batches needs positive batch sizes, got {args.batches!r}")
    if args.in_flight < 1:
        raise SystemExit(f"--in-flight must be >= 1, got {args.in_flight}")
    threads = args.threads or torch.get_num_threads()
    triton_threads = threads if args.triton_threads is None else args.triton_threads
    torch.set_num_threads(threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    name = "bench"
    per_batch = args.seconds / len(batches)
    print(f"bench inference: {args.arch} on {args.board}x{args.board}, batches {batches}; in-process: "
          f"{threads} torch thread(s), one call at a time; Triton: {args.instances} instance(s) x "
          f"{triton_threads or 'default'} thread(s), {args.in_flight} request(s) in flight, queue delay "
          f"{args.queue_delay_us} us; rounds alternate for {per_batch:.1f} s per batch size", flush=True)
    figures: dict = {"arch": args.arch, "board": args.board, "runtime": args.runtime, "precision": args.precision,
                     "shared_memory": args.shared_memory,
                     "threads": threads, "triton_threads": triton_threads,
                     "instances": args.instances, "in_flight": args.in_flight}
    with tempfile.TemporaryDirectory(prefix="tengen-bench-inference-") as tmp:
        export = f"{tmp}/{args.arch}.pt"
        export_model(build_model(args.arch), export, samples_seen=0)
        repo = ModelRepository(f"{tmp}/repository")
        repo.create_model(name, render_config(
            name, max_batch_size=max(batches), queue_delay_us=args.queue_delay_us, instances=args.instances,
            torch_threads=triton_threads, warmup_board=args.board, precision=args.precision, runtime=args.runtime))
        repo.write_version(name, export)
        local = make_evaluator(export, threads, precision=args.precision, runtime=args.runtime)
        print("  Triton server starting (copying the wheel's server tree, loading the model)...", flush=True)
        started = time.perf_counter()
        with LocalTriton(repo.root, f"{tmp}/work", load_models=[name]) as server, \
                TritonEvaluator(server.grpc_url, name, max_in_flight=args.in_flight,
                                shared_memory=args.shared_memory == "on") as remote, \
                contextlib.closing(grpcclient.InferenceServerClient(server.grpc_url)) as stats_client:
            print(f"  Triton ready in {time.perf_counter() - started:.1f} s (gRPC {server.grpc_url})", flush=True)
            server_pid = server.pid
            if server_pid is None:  # its CPU seconds would read as 0
                raise SystemExit(f"Triton exited right after it came up; see {server.log_path}")
            spatial, glob = _inputs(max(batches), args.board, rng)
            want = local.evaluate(spatial[:8], glob[:8])
            got = remote.evaluate(spatial[:8], glob[:8])
            worst = max(float(np.max(np.abs(got[k] - want[k]))) for k in want)
            if not all(agree(k, got[k], want[k]) for k in want):
                raise SystemExit(f"Triton and in-process outputs differ (max abs difference {worst:g})")
            print(f"  same outputs on both paths (max abs difference {worst:.1e})", flush=True)
            for batch in batches:
                x, g = spatial[:batch], glob[:batch]
                paths = {
                    "triton": (lambda calls: _pipelined(lambda: remote.submit(x, g), calls, args.in_flight),
                               lambda: time.process_time() + _server_cpu_s(server_pid)),
                    "torch": (lambda calls: _sequential(lambda: local.evaluate(x, g), calls), time.process_time),
                }
                print(f"  batch {batch:>4}: warming up both paths, then {per_batch:.0f} s of rounds...", flush=True)
                warm = min(run_round(WARMUP_CALLS) for run_round, _ in paths.values()) / WARMUP_CALLS
                calls = max(2 * args.in_flight, math.ceil(ROUND_S / max(warm, 1e-6)))
                before = model_stats(stats_client, name)
                times, cpu = _rounds(paths, calls, per_batch)
                phases = phase_means_ms(before, model_stats(stats_client, name))
                # The median round: other processes on a shared machine make some rounds far slower.
                rates = {path: batch / float(np.median(t)) for path, t in times.items()}
                spread = {path: (batch / max(t), batch / min(t)) for path, t in times.items()}
                ratio = rates["triton"] / rates["torch"]
                print(f"  batch {batch:>4}: Triton {rates['triton']:7.0f} evals/s, in-process {rates['torch']:7.0f} "
                      f"evals/s, ratio {ratio:.2f}  ({len(times['torch'])} rounds of {calls} calls each; "
                      f"round range Triton {spread['triton'][0]:.0f}-{spread['triton'][1]:.0f}, "
                      f"in-process {spread['torch'][0]:.0f}-{spread['torch'][1]:.0f})", flush=True)
                copies = phases.get("compute_input", 0.0) + phases.get("compute_output", 0.0)
                cpu_ratio = cpu["torch"] / cpu["triton"]
                print(f"              Triton per request: forward {phases.get('compute_infer', 0.0):.1f} ms, "
                      f"copies in/out of the backend {copies:.1f} ms, queued {phases.get('queue', 0.0):.1f} ms; "
                      f"CPU per call: Triton {1000 * cpu['triton']:.1f} ms (client, server and backend), "
                      f"in-process {1000 * cpu['torch']:.1f} ms, CPU ratio {cpu_ratio:.2f}", flush=True)
                figures[f"triton_evals_per_s_{batch}"] = round(rates["triton"], 1)
                figures[f"torch_evals_per_s_{batch}"] = round(rates["torch"], 1)
                figures[f"ratio_{batch}"] = round(ratio, 3)
                figures[f"triton_forward_ms_{batch}"] = round(phases.get("compute_infer", 0.0), 2)
                figures[f"triton_copies_ms_{batch}"] = round(copies, 2)
                figures[f"cpu_ratio_{batch}"] = round(cpu_ratio, 3)
    return figures
