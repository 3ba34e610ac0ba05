"""docker-compose.yml (and the GPU override) against the Compose specification schema and against
the code: commands name entry points that exist and accept their flags, every variable is
defined, each service is configured for exactly the services its code talks to on the code's
default ports, health checks probe the ports the services listen on, and what a service writes
lives on a named volume shared with whoever reads it."""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pytest
import yaml
from deploy_support import (
    COMPOSE_SCHEMA,
    DASHBOARD,
    REPO,
    TRITON_METRICS,
    Workload,
    check_connections,
    check_entry_point,
    check_env,
    check_persistence,
    check_writable,
    dashboard_exprs,
    env_names_read,
    exposed_metric_names,
    host_port,
    operator_secret,
    prometheus_targets,
    promql_metric_names,
)

from tengen.config import Config, RatingsConfig, TritonConfig
from tengen.infra.triton.repository import CONFIG_TEMPLATES

COMPOSE = REPO / "docker-compose.yml"
GPU_OVERRIDE = REPO / "docker-compose.gpu.yml"
ENV_EXAMPLE = REPO / ".env.example"
LONG_RUNNING_RESTART = {"always", "unless-stopped"}
ONE_SHOT_RESTART = {"no", "on-failure"}

_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")


def read_env_file(path: Path) -> dict[str, str]:
    env = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            env[key] = value
    return env


def interpolate(text: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error} substitution (undefined = error here)."""

    def substitute(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3)
        value = env.get(name)
        unset = value is None or (value == "" and op is not None and op.startswith(":"))
        if not unset:
            return value
        if op in ("-", ":-"):
            return arg
        if op in ("?", ":?"):
            raise ValueError(f"{name}: {arg}")
        raise ValueError(f"{name} is used without a default and not defined")

    return _VARIABLE.sub(substitute, text)


def load(path: Path, env: dict[str, str]) -> dict[str, Any]:
    return yaml.safe_load(interpolate(path.read_text(), env))


def merge(base: Any, override: Any, key: str = "") -> Any:
    """Compose's merge of an override file: mappings merge key by key, a service's volume mounts by
    their target path, other values replace."""
    if isinstance(base, dict) and isinstance(override, dict):
        merged = dict(base)
        for k, value in override.items():
            merged[k] = merge(base[k], value, k) if k in base else value
        return merged
    if key == "volumes" and isinstance(base, list) and isinstance(override, list):
        def target(mount: str) -> str:
            return mount.split(":")[1]
        replaced = {target(m) for m in override}
        return [m for m in base if target(m) not in replaced] + copy.deepcopy(override)
    return copy.deepcopy(override)


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    """.env as an operator makes it from .env.example: the placeholder secrets replaced."""
    return {key: operator_secret(key, value) for key, value in read_env_file(ENV_EXAMPLE).items()}


@pytest.fixture(scope="module")
def compose(env: dict[str, str]) -> dict[str, Any]:
    return load(COMPOSE, env)


@pytest.fixture(scope="module")
def gpu_compose(env: dict[str, str], compose: dict[str, Any]) -> dict[str, Any]:
    return merge(compose, load(GPU_OVERRIDE, env))


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = yaml.safe_load(COMPOSE_SCHEMA.read_text())
    # The file names draft 2019-09 (with a URL spelling jsonschema does not recognise).
    jsonschema.Draft201909Validator.check_schema(schema)
    return jsonschema.Draft201909Validator(schema)


def as_dict(value: Any) -> dict[str, str]:
    """Compose's list-or-dict forms (environment) as a dict of strings."""
    if value is None:
        return {}
    if isinstance(value, list):
        return dict(item.split("=", 1) for item in value)
    return {k: "" if v is None else str(v) for k, v in value.items()}


def workload(name: str, service: dict[str, Any]) -> Workload:
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *mode = volume.split(":")
        mounts[target] = (source, mode == ["ro"])
    ports = set()
    for port in service.get("ports", []):
        ports.add(int(str(port).rsplit(":", 1)[-1]))
    argv = service.get("command") or service.get("entrypoint") or []
    return Workload(name, service.get("image", ""), list(argv), as_dict(service.get("environment")), mounts, ports)


def app_workloads(compose: dict[str, Any]) -> list[Workload]:
    return [w for name, s in compose["services"].items() if (w := workload(name, s)).is_app()]


def test_compose_files_validate_against_the_compose_schema(
    validator: jsonschema.protocols.Validator, compose: dict[str, Any], gpu_compose: dict[str, Any], env: dict[str, str]
) -> None:
    validator.validate(compose)
    validator.validate(load(GPU_OVERRIDE, env))
    validator.validate(gpu_compose)
    # The schema is strict: a misspelt key is an error, not ignored.
    broken = copy.deepcopy(compose)
    broken["services"]["trainer"]["restart_policy"] = "always"
    with pytest.raises(jsonschema.ValidationError, match="restart_policy"):
        validator.validate(broken)


def test_every_variable_is_defined(env: dict[str, str]) -> None:
    text = COMPOSE.read_text() + GPU_OVERRIDE.read_text()
    used = {m.group(1) for m in _VARIABLE.finditer(text)}
    assert set(env) == used, f"in .env.example but unused: {set(env) - used}; used but missing: {used - set(env)}"
    # Without a .env the secrets stop `docker compose` with a message saying what to do.
    defaults_only = {k: v for k, v in env.items() if k not in ("POSTGRES_PASSWORD", "TENGEN_RATINGS_TOKEN")}
    with pytest.raises(ValueError, match=r"POSTGRES_PASSWORD: set POSTGRES_PASSWORD in \.env"):
        interpolate(COMPOSE.read_text(), defaults_only)
    with pytest.raises(ValueError, match=r"TENGEN_RATINGS_TOKEN: set TENGEN_RATINGS_TOKEN in \.env"):
        interpolate(COMPOSE.read_text(), {**defaults_only, "POSTGRES_PASSWORD": "x"})
    # Every other variable has a default, so a .env with only the secrets is enough.
    load(COMPOSE, {"POSTGRES_PASSWORD": "x", "TENGEN_RATINGS_TOKEN": "y"})
    load(GPU_OVERRIDE, {})


def test_commands_name_existing_entry_points(compose: dict[str, Any], gpu_compose: dict[str, Any]) -> None:
    apps = app_workloads(compose)
    assert {w.name for w in apps} >= {"trainer", "selfplay", "gating", "strength", "ratings", "model-init",
                                      "tensorboard"}
    for w in apps + app_workloads(gpu_compose):
        assert w.argv, f"{w.name}: no command (the image's default would run the trainer)"
        check_entry_point(w.argv)
    # The topic script the Kafka image runs is mounted from the checkout.
    init = compose["services"]["kafka-init"]
    source, target = init["volumes"][0].split(":")[:2]
    assert (REPO / source).is_file() and target in init["entrypoint"]


@pytest.mark.parametrize("variant", ["cpu", "gpu"])
def test_environment_configures_each_service_the_code_talks_to(
    variant: str, compose: dict[str, Any], gpu_compose: dict[str, Any]
) -> None:
    spec = compose if variant == "cpu" else gpu_compose
    services = spec["services"]
    known = env_names_read()
    for w in app_workloads(spec):
        config = check_env(w, known)
        for target, (host, port) in check_connections(w, config).items():
            assert host in services, f"{w.name}: {target} host {host} is no compose service"
            listens = {"kafka": lambda s: f":{port}" in s["environment"]["KAFKA_LISTENERS"],
                       "triton": lambda s: f"--grpc-port={port}" in (REPO / "docker/triton-entrypoint.sh").read_text(),
                       "ratings": lambda s: s["environment"]["TENGEN_RATINGS__GRPC_PORT"] == port,
                       "database": lambda s: port == 5432 and s["image"].startswith("postgres:")}[target]
            assert listens(services[host]), f"{w.name}: {host} does not listen on {port}"
    ratings = services["ratings"]["environment"]
    postgres = services["postgres"]["environment"]
    from sqlalchemy.engine import make_url

    url = make_url(ratings["TENGEN_DATABASE_URL"])
    assert (url.username, url.password, url.database) == (
        postgres["POSTGRES_USER"], postgres["POSTGRES_PASSWORD"], postgres["POSTGRES_DB"])


def healthcheck_port(service: dict[str, Any]) -> int:
    test = " ".join(service["healthcheck"]["test"])
    match = re.search(r"http://127\.0\.0\.1:(\d+)/", test)
    assert match, f"no HTTP health URL in {test}"
    return int(match.group(1))


def test_ports_and_health_checks_agree_with_the_code(compose: dict[str, Any]) -> None:
    ratings_grpc, ratings_http = RatingsConfig().grpc_port, RatingsConfig().http_port

    services = compose["services"]
    trainer_port = Config().trainer.http_port
    trainer = services["trainer"]
    assert int(trainer["environment"]["TENGEN_TRAINER__HTTP_PORT"]) == trainer_port == healthcheck_port(trainer)

    for name, env_name in (("selfplay", "TENGEN_SELFPLAY__HTTP_PORT"), ("gating", "TENGEN_GATING__HTTP_PORT"),
                           ("strength", "TENGEN_STRENGTH__HTTP_PORT")):
        port = getattr(Config(), name).http_port
        assert int(services[name]["environment"][env_name]) == port == healthcheck_port(services[name]), name
        assert "ports" not in services[name], f"{name}: only its health check needs its port"

    ratings = services["ratings"]
    assert int(ratings["environment"]["TENGEN_RATINGS__GRPC_PORT"]) == ratings_grpc
    assert int(ratings["environment"]["TENGEN_RATINGS__HTTP_PORT"]) == ratings_http == healthcheck_port(ratings)
    assert workload("ratings", ratings).ports == {ratings_grpc, ratings_http}

    triton = services["triton"]
    defaults = TritonConfig()
    entrypoint = (REPO / "docker" / "triton-entrypoint.sh").read_text()
    for flag, port in (("http", defaults.http_port), ("grpc", defaults.grpc_port), ("metrics", defaults.metrics_port)):
        assert f"--{flag}-port={port}" in entrypoint
    assert workload("triton", triton).ports == {defaults.http_port, defaults.grpc_port, defaults.metrics_port}
    assert healthcheck_port(triton) == defaults.http_port
    assert "/v2/health/ready" in " ".join(triton["healthcheck"]["test"])

    tensorboard = services["tensorboard"]
    port = int(tensorboard["command"][tensorboard["command"].index("--port") + 1])
    assert workload("tensorboard", tensorboard).ports == {port} and healthcheck_port(tensorboard) == port
    # Kafka: the advertised listener is the address the services use.
    kafka = services["kafka"]["environment"]
    assert (
        kafka["KAFKA_ADVERTISED_LISTENERS"]
        == f"PLAINTEXT://{services['trainer']['environment']['TENGEN_KAFKA_BOOTSTRAP']}"
    )
    assert host_port(services["trainer"]["environment"]["TENGEN_KAFKA_BOOTSTRAP"])[0] == "kafka"


def test_volumes_persist_what_services_write_and_share_what_others_read(compose: dict[str, Any]) -> None:
    services = compose["services"]
    declared = set(compose["volumes"])
    known = env_names_read()
    for name, service in services.items():
        for source, _ in workload(name, service).mounts.values():
            assert source.startswith("./") or source in declared, f"{name}: volume {source} is not declared"
    # Docker gives a fresh named volume the owner of its mount point in the image; a mount point
    # the image lacks is created root-owned, and the non-root services could not write to it.
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    created = set(re.search(r"mkdir -p ((?:/data\S* ?)+)", dockerfile).group(1).split())
    for w in app_workloads(compose):
        check_persistence(w, check_env(w, known), ephemeral=set())
        for target, (source, read_only) in w.mounts.items():
            if source in declared and not read_only:
                assert target in created, f"{w.name}: {target} is not made (owned by the app user) in docker/Dockerfile"

    def volume_at(service: str, path: str) -> str:
        return workload(service, services[service]).mounts[path][0]

    # Triton serves the repository model-init (and later gating) writes into <data_dir>/models.
    triton_repo = services["triton"]["environment"]["TRITON_MODEL_REPOSITORY"]
    assert volume_at("triton", triton_repo) == volume_at("model-init", "/data/models")
    assert workload("triton", services["triton"]).mounts[triton_repo][1], "Triton only reads the repository"
    # Gating promotes into that repository and reads the trainer's candidates.
    assert workload("gating", services["gating"]).mounts["/data/models"] == (volume_at("triton", triton_repo), False)
    assert workload("gating", services["gating"]).mounts["/data/candidates"] == (
        volume_at("trainer", "/data/candidates"),
        True,
    )
    # Strength reads the newest version from that repository, never writes it, and keeps its
    # results and SGFs on a volume of its own.
    strength = workload("strength", services["strength"])
    assert strength.mounts["/data/models"] == (volume_at("triton", triton_repo), True), (
        "strength only reads the repository"
    )
    from tengen.loop.layout import DataDir

    results_dir = DataDir("/data").strength_results.parent.as_posix()
    own = strength.mounts[results_dir]
    assert not own[1] and all(
        own[0] != source
        for other, s in services.items()
        if other != "strength"
        for source, _ in workload(other, s).mounts.values()
    ), f"{results_dir}: {own}"
    # Ratings shows self-play's SGFs and gating's matches (its /games pages), read only, from the
    # volumes they write, at the paths under its games dir (the data dir) where they write them.
    ratings = workload("ratings", services["ratings"])
    games_dir = PurePosixPath(check_env(ratings, known).run.data_dir)
    for path, writer in ((games_dir / "sgf", "selfplay"), (games_dir / "gating", "gating")):
        assert ratings.mounts[str(path)] == (volume_at(writer, str(path)), True), f"ratings: {path}"
    # TensorBoard reads the trainer's logs.
    logdir = services["tensorboard"]["command"][services["tensorboard"]["command"].index("--logdir") + 1]
    assert volume_at("tensorboard", logdir) == volume_at("trainer", "/data/tensorboard")
    # Kafka and PostgreSQL keep their data on volumes.
    kafka_logs = PurePosixPath(services["kafka"]["environment"]["KAFKA_LOG_DIRS"])
    assert any(kafka_logs.is_relative_to(m) for m in workload("kafka", services["kafka"]).mounts)
    assert "/var/lib/postgresql/data" in workload("postgres", services["postgres"]).mounts
    # The Python backend passes tensors through /dev/shm.
    size = services["triton"]["shm_size"]
    assert re.fullmatch(r"\d+[mg]b?", size) and (size[-2] == "g" or int(re.match(r"\d+", size).group()) >= 256)


def test_start_order_waits_on_health_and_completion(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        one_shot = service["restart"] in ONE_SHOT_RESTART
        assert service["restart"] in (ONE_SHOT_RESTART if name.endswith("-init") else LONG_RUNNING_RESTART), name
        assert one_shot == name.endswith("-init")
        for dependency, rule in (service.get("depends_on") or {}).items():
            target = services[dependency]
            if rule["condition"] == "service_healthy":
                assert "healthcheck" in target and not target["healthcheck"].get("disable"), (
                    f"{name} waits for {dependency} to be healthy, which has no health check"
                )
            elif rule["condition"] == "service_completed_successfully":
                assert target["restart"] in ONE_SHOT_RESTART, f"{dependency} never completes"
    assert services["kafka-init"]["depends_on"]["kafka"]["condition"] == "service_healthy"
    assert services["trainer"]["depends_on"]["kafka-init"]["condition"] == "service_completed_successfully"
    assert services["ratings"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert services["model-init"]["depends_on"]["triton"]["condition"] == "service_healthy"
    # Selfplay, gating and strength start once the model has a version; gating and strength report
    # to a healthy ratings.
    for name in ("selfplay", "gating", "strength"):
        assert services[name]["depends_on"]["model-init"]["condition"] == "service_completed_successfully"
    for name in ("gating", "strength"):
        assert services[name]["depends_on"]["ratings"]["condition"] == "service_healthy"


def test_selfplay_replicas_come_from_the_env_file(env: dict[str, str]) -> None:
    assert load(COMPOSE, env)["services"]["selfplay"]["deploy"]["replicas"] == int(env["SELFPLAY_REPLICAS"])
    assert load(COMPOSE, {**env, "SELFPLAY_REPLICAS": "7"})["services"]["selfplay"]["deploy"]["replicas"] == 7


def test_gpu_override_reserves_gpus_and_switches_backend_and_device(gpu_compose: dict[str, Any]) -> None:
    services = gpu_compose["services"]
    gpus = {}
    for name in ("triton", "trainer"):
        devices = services[name]["deploy"]["resources"]["reservations"]["devices"]
        assert len(devices) == 1 and devices[0]["driver"] == "nvidia" and devices[0]["capabilities"] == ["gpu"]
        assert "count" not in devices[0], f"{name}: a count of GPUs lands on GPU 0 whatever the other service has"
        gpus[name] = devices[0]["device_ids"]
    assert gpus["triton"] != gpus["trainer"], "Triton and the trainer on one GPU by default"
    backend = services["model-init"]["environment"]["TENGEN_TRITON__BACKEND"]
    assert backend == "onnxruntime", "the GPU fast path: an ONNX copy served with TensorRT"
    assert "KIND_GPU" in CONFIG_TEMPLATES[backend].read_text()
    # TensorRT writes its engines where the config says: a volume of Triton's, beside the models.
    cache = re.search(r'"trt_engine_cache_path" value: "([^"$]+)/', CONFIG_TEMPLATES[backend].read_text()).group(1)
    mounts = {m.split(":")[1]: m for m in services["triton"]["volumes"]}
    assert cache in mounts and not mounts[cache].endswith(":ro") and "/models" in mounts
    assert services["trainer"]["environment"]["TENGEN_TRAINER__DEVICE"] == "cuda"
    assert services["trainer"]["build"]["args"]["TORCH_VARIANT"].startswith("cu")
    assert services["trainer"]["image"] != services["ratings"]["image"], "the CUDA trainer image has its own tag"
    # Strength plays the model in-process on the CPU: no GPU, the CPU image.
    assert "deploy" not in services["strength"] and services["strength"]["image"] == services["ratings"]["image"]


def test_one_registry_setting_prefixes_every_image_we_build(env: dict[str, str]) -> None:
    registry = "registry.example.com/team/"
    prefixed = merge(
        load(COMPOSE, {**env, "TENGEN_REGISTRY": registry}), load(GPU_OVERRIDE, {**env, "TENGEN_REGISTRY": registry})
    )
    plain = merge(load(COMPOSE, env), load(GPU_OVERRIDE, env))
    built = {name for name, service in plain["services"].items() if "build" in service}
    assert {"triton", "trainer", "ratings"} <= built
    for name in built:
        assert prefixed["services"][name]["image"] == registry + plain["services"][name]["image"], name
    for name in set(plain["services"]) - built:  # public images (Kafka, Postgres) stay where they are
        assert prefixed["services"][name].get("image") == plain["services"][name].get("image"), name


# Images whose entrypoint starts as root and switches to its own user, which takes capabilities
# (chown, setuid): compose runs them as that user from the start instead.
ROOT_STARTING_IMAGES = ("postgres:",)


def tmpfs_paths(service: dict[str, Any]) -> set[str]:
    tmpfs = service.get("tmpfs", [])
    return {entry.split(":")[0] for entry in ([tmpfs] if isinstance(tmpfs, str) else tmpfs)}


def test_services_are_hardened(compose: dict[str, Any], gpu_compose: dict[str, Any]) -> None:
    """Every service, Triton, Kafka, PostgreSQL and the monitoring profile's included: no new
    privileges, no capabilities (all bind unprivileged ports and run as non-root users), a read-only
    root file system with a tmpfs or a writable volume wherever its process writes, and a memory limit."""
    for merged in (compose, gpu_compose):
        for name, service in merged["services"].items():
            assert "no-new-privileges:true" in service.get("security_opt", []), name
            assert service.get("mem_limit"), f"{name} has no memory limit"
            assert service.get("cap_drop") == ["ALL"] and not service.get("cap_add"), f"{name} keeps capabilities"
            assert not service.get("privileged"), name
            assert service.get("read_only") is True, f"{name} has a writable root file system"
            image = service.get("image", "")
            if image.startswith(ROOT_STARTING_IMAGES):
                assert service.get("user"), f"{name}: {image} starts as root and needs capabilities to switch users"
            w = workload(name, service)
            writable = tmpfs_paths(service) | {target for target, (_, read_only) in w.mounts.items() if not read_only}
            check_writable(name, image, w.argv, w.env, writable)


def test_hardening_check_can_fail(compose: dict[str, Any], gpu_compose: dict[str, Any]) -> None:
    """Kafka without its config tmpfs, or Triton with capabilities, is reported."""
    no_config = copy.deepcopy(compose)
    no_config["services"]["kafka"]["tmpfs"] = ["/tmp", "/opt/kafka/logs"]
    with pytest.raises(AssertionError, match="kafka: /opt/kafka/config is not a writable mount"):
        test_services_are_hardened(no_config, gpu_compose)
    capable = copy.deepcopy(compose)
    del capable["services"]["triton"]["cap_drop"]
    with pytest.raises(AssertionError, match="triton keeps capabilities"):
        test_services_are_hardened(capable, gpu_compose)


# -- the monitoring profile -----------------------------------------------------------------------
MONITORING = ("prometheus", "grafana")


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Target -> checkout path of a service's bind mounts (./... sources)."""
    mounts = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        if source.startswith("./"):
            mounts[target] = REPO / source
    return mounts


def metrics_port(name: str, service: dict[str, Any]) -> int | None:
    """The port a compose service serves Prometheus metrics on, as its code or entrypoint sets it."""
    if name == "triton":
        port = TritonConfig().metrics_port
        assert f"--metrics-port={port}" in (REPO / "docker" / "triton-entrypoint.sh").read_text()
        return port
    env = as_dict(service.get("environment"))
    ports = [int(v) for k, v in env.items() if re.fullmatch(r"TENGEN_\w+_HTTP_PORT", k)]
    return ports[0] if ports else None


def test_monitoring_profile_is_optional(compose: dict[str, Any], validator: jsonschema.protocols.Validator) -> None:
    services = compose["services"]
    for name in MONITORING:
        assert services[name]["profiles"] == ["monitoring"], f"{name} must start only with --profile monitoring"
        for target, source in bind_mounts(services[name]).items():
            assert source.exists(), f"{name}: {source} mounted at {target} is not in the checkout"
    # Without the profile nothing changes: no other service is in a profile or waits for these.
    for name, service in services.items():
        if name not in MONITORING:
            assert "profiles" not in service, name
            assert not set(service.get("depends_on") or {}) & set(MONITORING), f"{name} depends on monitoring"
    # The schema checks the profile's keys too (validated whole above): a misspelt one is refused.
    broken = copy.deepcopy(compose)
    broken["services"]["grafana"]["profile"] = ["monitoring"]
    with pytest.raises(jsonschema.ValidationError, match="profile"):
        validator.validate(broken)


def test_prometheus_scrapes_every_service_where_it_serves_metrics(compose: dict[str, Any]) -> None:
    services = compose["services"]
    prometheus = services["prometheus"]
    config_file = next(a.split("=", 1)[1] for a in prometheus["command"] if a.startswith("--config.file="))
    config = yaml.safe_load(bind_mounts(prometheus)[config_file].read_text())
    scraped = {}
    for job, host, port, path in prometheus_targets(config):
        assert host in services, f"job {job}: {host} is no compose service"
        assert path == "/metrics"
        expected = metrics_port(host, services[host])
        assert port == expected, f"job {job}: {host}:{port}, but {host} serves its metrics on {expected}"
        scraped[host] = job
    serving = {name for name, service in services.items() if metrics_port(name, service) is not None}
    assert serving >= {"trainer", "selfplay", "gating", "strength", "ratings", "triton"}
    assert set(scraped) == serving, f"not scraped: {serving - set(scraped)}"
    # Self-play is scaled (SELFPLAY_REPLICAS): one static target would reach one worker only.
    selfplay_job = next(j for j in config["scrape_configs"] if j["job_name"] == scraped["selfplay"])
    assert "dns_sd_configs" in selfplay_job, "every selfplay replica must be scraped"


def test_grafana_reads_prometheus_and_the_one_dashboard_file(compose: dict[str, Any]) -> None:
    services = compose["services"]
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    (datasource,) = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    host, port = host_port(datasource["url"].removeprefix("http://"))
    prometheus_port = int(services["prometheus"]["ports"][0].rsplit(":", 1)[1])
    assert (host, port) == ("prometheus", prometheus_port) and datasource["type"] == "prometheus"
    assert grafana["depends_on"]["prometheus"]["condition"] == "service_healthy"
    (provider,) = yaml.safe_load((provisioning / "dashboards" / "tengen.yml").read_text())["providers"]
    dashboards = [t for t, source in mounts.items() if source == DASHBOARD]
    assert len(dashboards) == 1, "Grafana mounts the Kubernetes component's dashboard file, the one copy"
    assert PurePosixPath(dashboards[0]).parent == PurePosixPath(provider["options"]["path"])
    assert as_dict(grafana["environment"])["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == dashboards[0]
    assert grafana["ports"][0].startswith("127.0.0.1:") and services["prometheus"]["ports"][0].startswith("127.0.0.1:")


def test_dashboard_queries_metrics_that_exist() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] and dashboard["title"] and dashboard["schemaVersion"] >= 36
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    known = exposed_metric_names() | TRITON_METRICS
    exprs = dashboard_exprs(dashboard)
    used: set[str] = set()
    for title, expr in exprs:
        names = promql_metric_names(expr)
        assert names, f"{title}: {expr!r} reads no metric"
        assert names <= known, f"{title}: {sorted(names - known)} exported by no service and not Triton's"
        used |= names
    # What the loop's dashboard is for: throughput, batching, the window, training speed, the lag
    # of the served version, gating's results and Triton's queue and compute times.
    assert used >= {
        "tengen_selfplay_games_total",
        "tengen_selfplay_positions_total",
        "tengen_selfplay_batches_total",
        "tengen_trainer_window_rows",
        "tengen_trainer_samples",
        "tengen_gating_lag_samples",
        "tengen_gating_candidates_total",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_request_success",
    }
    panels = [p for row in dashboard["panels"] for p in [row, *row.get("panels", [])]]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    for panel in panels:
        grid = panel["gridPos"]
        assert 0 <= grid["x"] and grid["x"] + grid["w"] <= 24, panel["title"]
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "${datasource}", f"{panel['title']}: not the dashboard's data source"


def test_promql_check_can_fail() -> None:
    assert promql_metric_names('sum by (model) (rate(nv_inference_count{model="tengen"}[$__rate_interval])) / 1e3') == {
        "nv_inference_count"
    }
    assert promql_metric_names("max(a_total) - max(b)") == {"a_total", "b"}
    with pytest.raises(AssertionError, match="unknown PromQL function"):
        promql_metric_names("rates(tengen_selfplay_games_total[5m])")
    assert "tengen_selfplay_game_total" not in exposed_metric_names()  # a misspelt name is not known
    assert {
        "tengen_selfplay_games_total",
        "tengen_ratings_request_seconds_bucket",
        "tengen_trainer_window_rows",
        "tengen_trainer_games_total",
    } <= exposed_metric_names()
