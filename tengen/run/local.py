"""The whole loop on one machine: what `tengen run` starts, watches and stops.

Start order (stop is the reverse, so producers stop before what they feed):
  broker (Tansu, memory only: topics are created and the current model version is announced on
  every start) -> Triton (the data dir's model repository) -> ratings (SQLite in the data dir) ->
  trainer -> gating -> strength (GNU Go) -> selfplay workers.
Every service gets its settings from the environment (TENGEN_DATA_DIR, TENGEN_KAFKA_BOOTSTRAP,
TENGEN_TRITON_URL, TENGEN_RATINGS_URL, TENGEN_RATINGS_TOKEN) and the preset by flag; its output
goes to `<data_dir>/logs/<name>.log`. Everything durable lives in the data dir, so a second run on
the same one continues: window, checkpoints, candidates, model versions, ratings.

`<data_dir>/run.json` holds the addresses and process ids of the run while it is up (for people
and tools that want to talk to its services); `<data_dir>/run.lock` keeps a second `tengen run`
off a data dir in use. Every process a run starts carries the data dir in its environment
(tengen.infra.process.RUN_OWNER_ENV), so when a run was killed (SIGKILL, OOM) and left children
running (services, Triton with its backend stubs, the broker, GNU Go), the next run on the data
dir stops them before it starts anything.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, TextIO

from tengen.config import Config
from tengen.infra.broker import LocalBroker
from tengen.infra.machine import describe, machine_facts
from tengen.infra.process import marking_descendants, stop_marked
from tengen.infra.triton.repository import ModelRepository
from tengen.infra.triton.server import LocalTriton
from tengen.loop.layout import DataDir
from tengen.loop.progress import RunProgress
from tengen.ratings.config import load_or_create_token
from tengen.run.bootstrap import ensure_model
from tengen.run.cpu import CpuLedger
from tengen.run.ports import PortPicker
from tengen.run.status import StatusReader, render_line, render_screen
from tengen.run.supervisor import Child, ServerChild, ServiceProcess, Supervisor, SupervisorError

log = logging.getLogger(__name__)

# Preferred HTTP ports (/healthz, /metrics): the services' own defaults (compose and k8s use them
# too); selfplay workers after the first get free ports.
TRAINER_HTTP_PORT = 8071
SELFPLAY_HTTP_PORT = 8072
GATING_HTTP_PORT = 8073
STRENGTH_HTTP_PORT = 8074


class RunError(RuntimeError):
    """The run cannot start (data dir in use, a server that does not come up)."""


@dataclass
class Endpoints:
    """Where the run's servers listen."""

    kafka: str
    triton_grpc: str
    triton_http: str
    ratings_grpc: str
    ratings_http: str
    trainer_http: str
    gating_http: str
    strength_http: str
    selfplay_http: list[str] = field(default_factory=list)


@dataclass
class RunOptions:
    preset: str  # a preset name or an absolute YAML path, passed on to the services
    config: Config  # the preset with this process's environment overrides applied
    data_dir: Path
    workers: int
    duration_s: float | None = None
    status_every_s: float = 5.0
    interactive: bool = False  # redraw the status view in place (a terminal) or print lines


@contextlib.contextmanager
def data_dir_lock(data_dir: Path) -> Iterator[None]:
    """Hold `<data_dir>/run.lock` (flock, released when the process ends in any way)."""
    path = DataDir(data_dir).run_lock
    with open(path, "a+") as lock:
        try:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"another tengen run is using {data_dir} (it holds {path})") from None
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


class LocalRun:
    """One run of the whole loop; `run(stop)` blocks until `stop` is set, the duration is over, or a
    child keeps failing, and returns the exit code."""

    def __init__(self, options: RunOptions, out: TextIO = sys.stdout) -> None:
        self.options = options
        self.config = options.config
        self.data_dir = options.data_dir.resolve()
        self.out = out
        self.layout = DataDir(self.data_dir)
        self.logs = self.layout.logs
        self.repository: ModelRepository | None = None
        self.endpoints: Endpoints | None = None
        self.supervisor: Supervisor | None = None
        self.progress: RunProgress | None = None  # the last status line's figures, for run.json
        self.cpu: CpuLedger | None = None  # each service's CPU seconds, from when all had started

    # -- the run --------------------------------------------------------------------------------
    def run(self, stop: threading.Event) -> int:
        self.logs.mkdir(parents=True, exist_ok=True)
        with data_dir_lock(self.data_dir):
            found = stop_marked(str(self.data_dir))  # a killed run's children
            if found:
                self._say(f"stopped {len(found)} processes left running by an earlier run on {self.data_dir} "
                          "that was killed")
            with marking_descendants(str(self.data_dir)):
                return self._run_locked(stop)

    def _run_locked(self, stop: threading.Event) -> int:
        opts = self.options
        self.repository = repository = ModelRepository(self.layout.models)
        self._say(f"machine: {describe(machine_facts())}; the trainer appends each start's record "
                  f"(configuration, version, commit, machine) to {self.layout.run_records}")
        version, created = ensure_model(repository, self.config)
        self._say(f"model {self.config.run.model_name}: "
                  + (f"wrote version 1 (random {self.config.trainer.arch} net)" if created
                     else f"continuing from version {version}"))
        token = load_or_create_token(self.data_dir)
        children, ep = self._children(token, repository)
        self.endpoints = ep
        self.supervisor = supervisor = Supervisor(children)
        started = time.monotonic()
        deadline = started + opts.duration_s if opts.duration_s else None
        reader = StatusReader(self.data_dir, self.config, trainer_metrics=f"{ep.trainer_http}/metrics",
                              selfplay_metrics=[f"{u}/metrics" for u in ep.selfplay_http],
                              ratings_url=ep.ratings_grpc, triton_url=ep.triton_grpc)
        code = 0
        try:
            self._say(f"starting {', '.join(c.name for c in children)} (logs in {self.logs}) ...")
            supervisor.start_all(should_stop=stop.is_set)
            self.cpu = CpuLedger()
            self._write_state()
            if not stop.is_set():
                self._say(f"all services started: Kafka {ep.kafka}, Triton {ep.triton_grpc} (gRPC), "
                          f"ratings {ep.ratings_grpc} (gRPC), page {ep.ratings_http}/ (addresses in "
                          f"{self.layout.run_state})")
            next_status = time.monotonic()
            while not stop.is_set():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    self._say(f"duration of {opts.duration_s:.0f} s reached")
                    break
                supervisor.check()
                if now >= next_status:
                    self._show(reader, now - started)
                    next_status = now + opts.status_every_s
                stop.wait(0.5)
        except SupervisorError as exc:
            log.error("%s", exc)
            self._say(f"tengen run: {exc}", err=True)
            code = 1
        finally:
            if self.cpu is not None:
                self.cpu.read(supervisor.pids())
            self._say("stopping: selfplay and gating, then trainer, ratings, Triton, broker ...")
            supervisor.stop_all()
            reader.close()
            with contextlib.suppress(OSError):
                (self.layout.run_state).unlink()
            self._say(self.summary())
            if self.cpu is not None:
                log.info("%s", self.cpu.summary())
                self._say(self.cpu.summary())
        return code

    # -- children -------------------------------------------------------------------------------
    def _children(self, token: str, repository: ModelRepository) -> tuple[list[Child], Endpoints]:
        """Every child in start order and where the servers listen, with ports chosen now (configured
        ones when free)."""
        cfg, opts = self.config, self.options
        ports = PortPicker()
        kafka_port = cfg.kafka.bootstrap.rpartition(":")[2]
        broker = LocalBroker(port=ports.pick(int(kafka_port) if kafka_port.isdigit() else None),
                             log_path=self.logs / "broker.log")
        triton = LocalTriton(repository.root, self.layout.triton, load_models=[cfg.run.model_name],
                             http_port=ports.pick(cfg.triton.http_port), grpc_port=ports.pick(cfg.triton.grpc_port),
                             metrics_port=ports.pick(cfg.triton.metrics_port), log_path=self.logs / "triton.log")
        ratings_grpc, ratings_http = ports.pick(cfg.ratings.grpc_port), ports.pick(cfg.ratings.http_port)
        trainer_http, gating_http = ports.pick(TRAINER_HTTP_PORT), ports.pick(GATING_HTTP_PORT)
        strength_http = ports.pick(STRENGTH_HTTP_PORT)
        selfplay_http = [ports.pick(SELFPLAY_HTTP_PORT if k == 0 else None) for k in range(opts.workers)]
        endpoints = Endpoints(
            kafka=broker.bootstrap, triton_grpc=triton.grpc_url, triton_http=triton.http_url,
            ratings_grpc=f"127.0.0.1:{ratings_grpc}", ratings_http=f"http://127.0.0.1:{ratings_http}",
            trainer_http=f"http://127.0.0.1:{trainer_http}", gating_http=f"http://127.0.0.1:{gating_http}",
            strength_http=f"http://127.0.0.1:{strength_http}",
            selfplay_http=[f"http://127.0.0.1:{p}" for p in selfplay_http],
        )
        env = self._service_env(token, endpoints)
        preset = ["--preset", opts.preset]

        def service(name: str, module: str, *args: str, grace_s: float = 20.0) -> ServiceProcess:
            return ServiceProcess(name, [sys.executable, "-m", module, *args], env, self.logs / f"{name}.log",
                                  stop_grace_s=grace_s)

        children: list[Child] = [
            ServerChild("broker", broker, start_timeout_s=60.0, stop_grace_s=10.0,
                        after_start=lambda: self._prepare_broker(repository, broker.bootstrap), pid=lambda: broker.pid),
            ServerChild("triton", triton, start_timeout_s=300.0, stop_grace_s=20.0, pid=lambda: triton.pid),
            service("ratings", "services.ratings", "--data-dir", str(self.data_dir), "--host", "127.0.0.1",
                    "--grpc-port", str(ratings_grpc), "--http-port", str(ratings_http)),
            # The trainer checkpoints on SIGTERM: give it time.
            service("trainer", "services.trainer", *preset, "--http-port", str(trainer_http), grace_s=60.0),
            # A promotion under way (load and warm-up in Triton: ~30 s on a busy 2-core box) finishes.
            service("gating", "services.gating", *preset, "--http-port", str(gating_http), grace_s=90.0),
            # The game against GNU Go in progress finishes (seconds at the presets' visits).
            service("strength", "services.strength", *preset, "--http-port", str(strength_http), grace_s=60.0),
        ]
        # The local broker loses its log when it restarts, and with `tengen run` SIGKILLed the next run
        # stops the workers with it: each worker keeps its uncommitted games on disk to send again.
        children += [service(f"selfplay-{k}", "services.selfplay", *preset, "--worker-id", str(k),
                             "--http-port", str(port), "--outbox-dir", str(self.layout.outbox(k)))
                     for k, port in enumerate(selfplay_http)]
        return children, endpoints

    def _service_env(self, token: str, ep: Endpoints) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "TENGEN_DATA_DIR": str(self.data_dir),
            "TENGEN_KAFKA_BOOTSTRAP": ep.kafka,
            "TENGEN_TRITON_URL": ep.triton_grpc,
            "TENGEN_RATINGS_URL": ep.ratings_grpc,
            "TENGEN_RATINGS_TOKEN": token,
            "TENGEN_PRESET": self.options.preset,
            "PYTHONUNBUFFERED": "1",  # log lines reach the log files as they happen
        })
        env.pop("TENGEN_DATABASE_URL", None)  # the local run keeps its ratings in the data dir's SQLite
        return env

    def _prepare_broker(self, repository: ModelRepository, bootstrap: str) -> None:
        """A fresh in-memory broker: create the topics, announce the version that serves now, so
        workers that start (or reconnect) learn it from the compacted topic."""
        from tengen.infra.kafka import ReliableProducer
        from tengen.loop.messages import announce_model, ensure_loop_topics
        from tengen.nn.export import export_net_samples

        ensure_loop_topics(bootstrap)
        version = repository.latest_version(self.config.run.model_name)
        if version is None:
            return
        producer = ReliableProducer(bootstrap, client_id="tengen-run")
        try:
            model = self.config.run.model_name
            announce_model(producer, model, version, samples=export_net_samples(repository.export_path(model, version)))
        finally:
            producer.close(timeout_s=5.0)

    # -- output ---------------------------------------------------------------------------------
    def _say(self, text: str, err: bool = False) -> None:
        print(text, file=sys.stderr if err else self.out, flush=True)

    def _show(self, reader: StatusReader, elapsed_s: float) -> None:
        supervisor, ep = self.supervisor, self.endpoints
        if supervisor is None or ep is None:
            raise RuntimeError("the run's status is shown only after its children are set up")
        status = reader.read()
        status.elapsed_s = elapsed_s
        status.duration_s = self.options.duration_s
        status.services = supervisor.states()
        status.events = list(supervisor.events)
        if self.cpu is not None:
            self.cpu.read(supervisor.pids())
        self.progress = RunProgress(time.time(), elapsed_s, status.duration_s, status.samples, status.games_played,
                                    status.games_per_s)
        if self.options.interactive:
            title = f"tengen run · preset {self.config.preset} · {self.data_dir}"
            footer = [f"ratings page {ep.ratings_http}/   "
                      f"tensorboard --logdir {self.layout.tensorboard}",
                      f"service logs in {self.logs}"]
            self.out.write("\x1b[H\x1b[2J" + render_screen(status, title, footer) + "\n")  # home, clear, draw
            self.out.flush()
        else:
            self._say(render_line(status))
        self._write_state()  # pids change with restarts

    def _write_state(self) -> None:
        ep = self.endpoints
        state = {"pid": os.getpid(), "preset": self.options.preset, "data_dir": str(self.data_dir),
                 "endpoints": ep.__dict__ if ep else {}, "children": self.supervisor.pids() if self.supervisor else {}}
        if self.progress is not None:
            state["progress"] = self.progress.to_json()  # the ratings page shows it (tengen.loop.progress)
        if self.cpu is not None:
            state["cpu_seconds"] = self.cpu.to_json()  # by service, since the services started
        tmp = self.layout.run_state.with_name(f".{self.layout.run_state.name}.tmp")
        tmp.write_text(json.dumps(state, indent=1) + "\n")
        os.replace(tmp, self.layout.run_state)

    def summary(self) -> str:
        """Where a run's results are and how to look at them (printed at the end)."""
        d, layout = self.data_dir, self.layout
        sgfs = [p.parent for p in d.glob("**/*.sgf")]
        sgf = (f"{len(sgfs)} files under {os.path.commonpath(sgfs)}   (tengen sgf check|score FILE)" if sgfs
               else "none written yet")
        return "\n".join([
            f"run stopped. Everything is in {d}; `tengen run --data-dir {d}` continues it.",
            f"  games (SGF)   {sgf}",
            f"  TensorBoard   tensorboard --logdir {layout.tensorboard}",
            f"  models        {layout.models}   (tengen models list --data-dir {d})",
            f"  candidates    {layout.candidates}",
            f"  gating        {layout.decisions}",
            f"  ratings       {layout.ratings_sqlite}   (tengen ratings top --data-dir {d})",
            f"  logs          {self.logs}",
        ])

