"""`tengen models init|export|list|promote|configure|prepare`: make a fresh export, write one as
ONNX or plain weights for use outside tengen (tengen.commands.models_export), see what the model
repository and Triton hold, hot-swap an export into Triton by hand, bring a model's config to a
preset, and prepare the repository before Triton starts.

`promote` goes through the same path as gating (tengen.gate.promotion): the export is
written atomically as the next version of the model, Triton loads it beside the version that
serves now, the command waits until it reports ready, then announces it on `tengen.models` so
selfplay workers switch to it. Nothing is written when PATH is not a valid export or when Triton
or the broker cannot be reached.

A flag left out takes its value from the configuration (tengen.config: --preset where the action
has one, else $TENGEN_PRESET, with the environment's overrides): run.data_dir ($TENGEN_DATA_DIR; the
model repository is `<data-dir>/models`), triton.url ($TENGEN_TRITON_URL), run.model_name
($TENGEN_RUN__MODEL_NAME), triton.backend ($TENGEN_TRITON__BACKEND). Announcements go to the broker
of --kafka or $TENGEN_KAFKA_BOOTSTRAP, and to none when neither is given.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from tengen.commands import CommandError, models_export
from tengen.config import BACKENDS, Config
from tengen.infra.entrypoint import add_preset_argument, positive_float

# A person is waiting: a Triton that does not answer within this is reported as not reachable.
REACHABLE_TIMEOUT_S = 3.0

# Spelled out so that --help needs no torch; tests/test_cli.py checks it against tengen.nn.model.
ARCHITECTURE_NAMES = ("b1c16, b2c32 (tiny, for tests), b4c48 (the cpu presets'), b6c96, b10c128, b15c192, "
                      "b20c256 (the paper's; b6c96 a bigger net for a CPU run), b1c32nbt, b4c64nbt, b6c128nbt "
                      "(nested bottleneck blocks)")


def settings(args: argparse.Namespace) -> Config:
    """The configuration the action's defaults come from: --preset's, else $TENGEN_PRESET's, with the
    environment's overrides (shared with `tengen triton`)."""
    from tengen.config import ConfigError, environment_config, load_config

    if getattr(args, "config", None) is None:
        try:
            args.config = load_config(args.preset) if getattr(args, "preset", None) else environment_config()
        except ConfigError as exc:
            raise CommandError(str(exc)) from None
    return args.config


def data_dir(args: argparse.Namespace) -> Path:
    return args.data_dir if args.data_dir is not None else Path(settings(args).run.data_dir)


def triton_url(args: argparse.Namespace) -> str:
    return args.triton or settings(args).triton.url


def announce_to(args: argparse.Namespace) -> str | None:
    """The broker to announce on: --kafka, else $TENGEN_KAFKA_BOOTSTRAP when set, else none."""
    config = settings(args)
    return args.kafka or (config.kafka.bootstrap if "kafka.bootstrap" in config.from_env else None)


MODEL_HELP = "model name in Triton (default run.model_name: $TENGEN_RUN__MODEL_NAME, else tengen)"
VERSION_MODEL_HELP = ("model whose versions a number names, in <data-dir>/models (default run.model_name: "
                      "$TENGEN_RUN__MODEL_NAME, else tengen)")
TRITON_HELP = "Triton gRPC address (default triton.url: $TENGEN_TRITON_URL, else 127.0.0.1:8001)"


def add_repository_arguments(parser: argparse.ArgumentParser) -> None:
    """--data-dir and --model-repository (shared with `tengen triton`)."""
    parser.add_argument("--data-dir", type=Path, default=None,
                        help="run data dir (default run.data_dir: $TENGEN_DATA_DIR, else ./tengen-data)")
    parser.add_argument("--model-repository", type=Path, default=None,
                        help="Triton model repository (default <data-dir>/models)")


def repository_path(args: argparse.Namespace) -> Path:
    from tengen.loop.layout import DataDir

    if args.model_repository is not None:
        return args.model_repository
    return DataDir(data_dir(args)).models


def resolve_export(source: str, repository: Path, model: str) -> tuple[Path, int | None]:
    """The export a command line names: a number N is version N of `model` in the repository
    (<repository>/<model>/<N>/model.pt), anything else an export file; (its path, N or None).
    Raises CommandError when there is no such version or file."""
    from tengen.infra.triton.repository import check_model_name, version_export_path

    if not source.isdigit():
        path = Path(source)
        if not path.is_file():
            raise CommandError(f"no export file at {path} (a version is named by its number, e.g. 12 for "
                               f"{version_export_path(repository, model, 12)})")
        return path, None
    version = int(source)
    try:
        path = version_export_path(repository, model, version)
    except ValueError as exc:  # a bad model name
        raise CommandError(str(exc)) from None
    if path.is_file():
        return path, version
    model_dir = repository / check_model_name(model)
    versions = sorted(int(d.name) for d in model_dir.iterdir() if d.name.isdigit()
                      and version_export_path(repository, model, int(d.name)).is_file()) if model_dir.is_dir() else []
    held = f"it has versions {', '.join(map(str, versions))}" if versions else "it has no versions there"
    raise CommandError(f"{model} has no version {version} in {repository} ({held})")


# -- init -----------------------------------------------------------------------------------------
def _init(args: argparse.Namespace) -> int:
    import torch

    from tengen.nn.export import export_model, sidecar_path
    from tengen.nn.model import ARCHITECTURES, build_model

    if args.arch not in ARCHITECTURES:
        raise CommandError(f"unknown architecture {args.arch!r}; known: {', '.join(ARCHITECTURES)}")
    out: Path = args.out
    if out.is_dir():
        raise CommandError(f"{out} is a directory; give the export's file name, e.g. {out / 'model.pt'}")
    if (out.exists() or sidecar_path(out).exists()) and not args.force:
        raise CommandError(f"{out} already exists; pass --force to overwrite it")
    torch.manual_seed(args.seed)
    metadata = export_model(build_model(args.arch), out, samples_seen=0, extra={"init_seed": args.seed})
    print(f"wrote a randomly initialised {args.arch} export ({metadata['parameters']:,} parameters, "
          f"seed {args.seed}) to {out} (+ {sidecar_path(out).name})")
    return 0


# -- list -----------------------------------------------------------------------------------------
def _read_sidecar(version_dir: Path) -> dict[str, Any]:
    from tengen.infra.triton.repository import EXPORT_FILENAME

    try:
        meta = json.loads((version_dir / f"{EXPORT_FILENAME}.json").read_text())
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def _triton_states(url: str) -> tuple[dict[str, dict[int, str]] | None, str | None]:
    """(Triton's version states per model, None) or (None, why it could not be asked)."""
    from tengen.infra.triton.client import model_states

    try:
        return model_states(url, timeout_s=REACHABLE_TIMEOUT_S), None
    except Exception as exc:  # tritonclient raises its own exception type for every failure
        return None, str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def collect_listing(repository: Path, url: str) -> dict[str, Any]:
    """Models and versions on disk (with each version's sidecar) and Triton's view of them."""
    from tengen.infra.triton.repository import ModelRepository

    states, error = _triton_states(url)
    listing: dict[str, Any] = {
        "repository": str(repository.resolve()),
        "triton": {"url": url, "reachable": states is not None, "error": error},
        "models": [],
    }
    if not repository.is_dir():
        return listing
    repo = ModelRepository(repository)
    for name in repo.models():
        triton_versions = states.get(name, {}) if states is not None else {}
        versions = []
        for version in repo.versions(name):
            meta = _read_sidecar(repo.model_dir(name) / str(version))
            arch = meta.get("architecture", {})
            versions.append({
                "version": version,
                "arch": arch.get("name") if isinstance(arch, dict) else None,
                "samples_seen": meta.get("samples_seen"),
                "created": meta.get("created"),
                "state": triton_versions.get(version, "not loaded") if states is not None else None,
                "ready": triton_versions.get(version) == "READY" if states is not None else None,
            })
        listing["models"].append({"name": name, "backend": repo.backend(name), "versions": versions})
    return listing


def format_listing(listing: dict[str, Any]) -> str:
    lines = [f"model repository {listing['repository']}"]
    if not listing["models"]:
        lines.append("  no models" + ("" if Path(listing["repository"]).is_dir() else " (directory does not exist)"))
    for model in listing["models"]:
        ready = [v["version"] for v in model["versions"] if v["ready"]]
        lines.append(f"{model['name']} ({model['backend']} backend): {len(model['versions'])} version(s)"
                     + (f", ready in Triton: {', '.join(map(str, ready))}" if ready else ""))
        lines.append(f"  {'version':>7}  {'arch':<8}  {'samples seen':>12}  {'created':<25}  triton")
        for v in model["versions"]:
            samples = f"{v['samples_seen']:,}" if isinstance(v["samples_seen"], int) else "-"
            lines.append(f"  {v['version']:>7}  {v['arch'] or '-':<8}  {samples:>12}  {v['created'] or '-':<25}  "
                         f"{v['state'] or '-'}")
    triton = listing["triton"]
    if triton["reachable"]:
        lines.append(f"Triton at {triton['url']}: reachable")
    else:
        lines.append(f"Triton at {triton['url']}: not reachable ({triton['error']}); readiness unknown")
    return "\n".join(lines)


def _list(args: argparse.Namespace) -> int:
    listing = collect_listing(repository_path(args), triton_url(args))
    print(json.dumps(listing, indent=2) if args.json else format_listing(listing))
    return 0


# -- promote --------------------------------------------------------------------------------------
def _promote(args: argparse.Namespace) -> int:
    from tengen.gate.promotion import ExportError, ModelServer, validate_export
    from tengen.infra.triton.errors import TritonError
    from tengen.infra.triton.repository import ModelRepository, model_config

    export: Path = args.path
    try:
        metadata, expected = validate_export(export)
    except ExportError as exc:
        raise CommandError(str(exc)) from None
    url, bootstrap = triton_url(args), announce_to(args)
    model, backend = args.model or settings(args).run.model_name, args.backend or settings(args).triton.backend
    # Check both servers before writing, so an unreachable one leaves the repository untouched.
    states, error = _triton_states(url)
    if states is None:
        raise CommandError(f"Triton at {url} is not reachable ({error}); nothing written")
    if bootstrap is not None:
        from tengen.infra.kafka import broker_reachable

        if not broker_reachable(bootstrap, timeout_s=REACHABLE_TIMEOUT_S):
            raise CommandError(f"Kafka broker {bootstrap} is not reachable; nothing written "
                               "(leave out --kafka and unset TENGEN_KAFKA_BOOTSTRAP to promote without announcing)")
    repo = ModelRepository(repository_path(args))
    if not repo.has_model(model):
        repo.create_model(model, model_config(settings(args), model, backend))
        print(f"created model {model} ({backend} backend, preset {args.preset}'s triton settings) in {repo.root}")
    arch = metadata.get("architecture", {}).get("name", "?")
    print(f"promoting {export} ({arch}, {metadata.get('samples_seen', 0):,} samples seen) as the next version "
          f"of {model} in {repo.root} ...", flush=True)
    try:
        version = ModelServer(repo, url, model, timeout_s=args.timeout).load(export, expected)
    except TritonError as exc:
        raise CommandError(f"promotion failed, repository left as it was: {exc}") from None
    print(f"{model} version {version} is ready in Triton at {url}"
          + (" (the previous version stays loaded)" if version > 1 else ""))
    if bootstrap is None:
        print("not announced: no Kafka broker given (--kafka or TENGEN_KAFKA_BOOTSTRAP); "
              "workers requesting the latest version get it anyway")
        return 0
    from tengen.infra.kafka import KafkaAdapterError, ReliableProducer
    from tengen.loop.messages import announce_model
    from tengen.nn.export import export_net_samples

    producer = ReliableProducer(bootstrap, client_id="tengen-models-promote")
    try:
        announce_model(producer, model, version, samples=export_net_samples(export), timeout_s=args.timeout)
    except KafkaAdapterError as exc:
        raise CommandError(f"version {version} serves, but announcing it on {bootstrap} failed: {exc}; "
                           "selfplay workers keep the version they pinned until it is announced") from None
    finally:
        producer.close(timeout_s=5.0)
    print(f"announced {model} version {version} on tengen.models at {bootstrap}")
    return 0


# -- configure ------------------------------------------------------------------------------------
def _configure(args: argparse.Namespace) -> int:
    from tengen.infra.triton.client import load_model
    from tengen.infra.triton.errors import TritonError
    from tengen.infra.triton.repository import ModelRepository
    from tengen.run.bootstrap import configure_model

    model = args.model or settings(args).run.model_name
    repo = ModelRepository(repository_path(args))
    if not repo.has_model(model):
        raise CommandError(f"model {model} is not in {repo.root}; `tengen models promote` creates it")
    try:
        changed = configure_model(repo, settings(args), model)
    except TritonError as exc:
        raise CommandError(str(exc)) from None
    if not changed:
        print(f"model {model}: config.pbtxt already has preset {args.preset}'s triton settings")
        return 0
    print(f"model {model}: config.pbtxt updated to preset {args.preset}'s triton settings")
    url = triton_url(args)
    states, error = _triton_states(url)
    if states is None or model not in states:
        print(f"Triton at {url} does not serve it now ({error or 'not loaded'}): it takes the config at its next load")
        return 0
    try:  # Triton loads the versions with the new config beside the old ones, then swaps
        load_model(url, model, timeout_s=args.timeout)
    except TritonError as exc:
        raise CommandError(f"config written, but Triton at {url} did not reload {model}: {exc}") from None
    print(f"Triton at {url} reloaded {model} with it")
    return 0


# -- prepare --------------------------------------------------------------------------------------
def _prepare(args: argparse.Namespace) -> int:
    """Before Triton starts (Kubernetes: the init container of the Triton pod, so it runs on every
    start of the pod, and a changed preset rolls the pod): the model's config follows the preset, a
    new repository gets a random version 1 written straight into it (Triton loads every version
    there at its start), and the latest version is announced for the selfplay workers."""
    import threading

    from tengen.infra.triton.errors import TritonError
    from tengen.infra.triton.repository import ModelRepository
    from tengen.run.bootstrap import ensure_model

    config = settings(args)
    name, backend = config.run.model_name, args.backend or config.triton.backend
    repo = ModelRepository(repository_path(args))
    if repo.has_model(name) and repo.backend(name) != backend:
        print(f"model {name} keeps its {repo.backend(name)} backend (fixed when the model is created; "
              f"start from an empty repository to serve it with {backend})")
    try:
        version, created = ensure_model(repo, config, backend=backend)
    except TritonError as exc:
        raise CommandError(str(exc)) from None
    print(f"model {name} in {repo.root}: config.pbtxt follows preset {args.preset}'s triton settings; "
          + (f"wrote a random {config.trainer.arch} net as version 1" if created else f"latest version {version}")
          + " (Triton loads it at its start)")
    bootstrap = announce_to(args)
    if bootstrap is None:
        print("not announced: no Kafka broker given (--kafka or TENGEN_KAFKA_BOOTSTRAP)")
        return 0
    from tengen.infra.kafka import KafkaAdapterError, ReliableProducer
    from tengen.loop.messages import announce_model, wait_for_loop_topics
    from tengen.nn.export import export_net_samples

    # The topics are the deployment's to create (the topics Job); wait for them, never make them.
    deadline = threading.Event()
    timer = threading.Timer(args.timeout, deadline.set)
    timer.start()
    try:
        if not wait_for_loop_topics(bootstrap, deadline, "tengen models prepare"):
            raise CommandError(f"the topics on {bootstrap} did not appear within {args.timeout:.0f} s; "
                               "nothing announced")
    finally:
        timer.cancel()
    producer = ReliableProducer(bootstrap, client_id="tengen-models-prepare")
    try:
        announce_model(producer, name, version, samples=export_net_samples(repo.export_path(name, version)),
                       timeout_s=args.timeout)
    except KafkaAdapterError as exc:
        raise CommandError(f"announcing {name} version {version} on {bootstrap} failed: {exc}") from None
    finally:
        producer.close(timeout_s=5.0)
    print(f"announced {name} version {version} on tengen.models at {bootstrap}")
    return 0


# -- argparse -------------------------------------------------------------------------------------
def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "models", help="model exports and the Triton model repository: init, export (ONNX, weights), list, "
        "promote (hot swap), configure, prepare",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="models_command", metavar="ACTION", required=True)

    init = actions.add_parser("init", help="write a randomly initialised export",
                              description="Write a randomly initialised net as an export (TorchScript file + "
                              "JSON sidecar): version 1 of a new run, or a net for tests.")
    init.add_argument("--arch", required=True, metavar="ARCH", help=f"net size: {ARCHITECTURE_NAMES}")
    init.add_argument("--out", required=True, type=Path, help="export file to write, e.g. model.pt")
    init.add_argument("--seed", type=int, default=0, help="torch seed of the initialisation (default 0)")
    init.add_argument("--force", action="store_true", help="overwrite an existing export")
    init.set_defaults(func=_init)

    models_export.register(actions)

    lst = actions.add_parser("list", help="versions in the repository and which Triton reports ready",
                             description="Every model and version in the model repository with its sidecar "
                             "(architecture, samples seen, created) and its state in Triton.")
    add_repository_arguments(lst)
    lst.add_argument("--triton", default=None, help=TRITON_HELP)
    lst.add_argument("--json", action="store_true", help="print JSON instead of a table")
    lst.set_defaults(func=_list)

    pro = actions.add_parser("promote", help="hot-swap an export into Triton and announce it",
                             description="Write PATH atomically as the next version of the model, load it in "
                             "Triton beside the serving version, wait until it is ready, and announce it on "
                             "tengen.models when a broker is given.")
    pro.add_argument("path", type=Path, help="the export (TorchScript file with its .json sidecar)")
    pro.add_argument("--model", default=None, help=MODEL_HELP)
    add_repository_arguments(pro)
    pro.add_argument("--triton", default=None, help=TRITON_HELP)
    pro.add_argument("--kafka", default=None, help="Kafka bootstrap servers for the announcement "
                     "($TENGEN_KAFKA_BOOTSTRAP; unset: no announcement)")
    pro.add_argument("--backend", choices=BACKENDS, default=None,
                     help="backend of the model's config when the model is new: python (CPU), onnxruntime (GPU: "
                     "model.onnx with TensorRT fp16, the fast path) or pytorch (GPU: libtorch) (default "
                     "triton.backend: $TENGEN_TRITON__BACKEND, else python)")
    add_preset_argument(pro, "preset whose triton section (batching, instances, warm-up) a new model's config takes")
    pro.add_argument("--timeout", type=positive_float, default=300.0,
                     help="seconds to wait for the load and the announcement (default 300)")
    pro.set_defaults(func=_promote)

    con = actions.add_parser("configure", help="bring a model's config.pbtxt up to a preset's triton settings",
                             description="Rewrite the model's config.pbtxt (atomically, same backend) from the "
                             "preset's triton section: max batch, preferred batch sizes, queue delay, instances, "
                             "threads, warm-up. When Triton serves the model it reloads it with the new config.")
    con.add_argument("--model", default=None, help=MODEL_HELP)
    add_repository_arguments(con)
    add_preset_argument(con, "preset to take the settings from")
    con.add_argument("--triton", default=None, help=TRITON_HELP)
    con.add_argument("--timeout", type=positive_float, default=300.0,
                     help="seconds to wait for the reload (default 300)")
    con.set_defaults(func=_configure)

    pre = actions.add_parser(
        "prepare",
        help="before Triton starts: the model's config, version 1, the announcement",
        description="Before Triton starts (the Kubernetes init container of the Triton pod): "
        "create the model with the preset's config or bring its config up to the preset, write "
        "a randomly initialised version 1 straight into the repository when the model has none "
        "(Triton loads it at its start), then announce the latest version on tengen.models "
        "when a broker is given, once the deployment's topics exist.",
    )
    add_repository_arguments(pre)
    add_preset_argument(
        pre,
        "preset for the architecture of version 1 and the config's triton settings; the "
        "model's name is its run.model_name",
    )
    pre.add_argument(
        "--backend",
        choices=BACKENDS,
        default=None,
        help="backend of a new model's config (default triton.backend: $TENGEN_TRITON__BACKEND, else "
        "python); an existing model keeps its own",
    )
    pre.add_argument(
        "--kafka",
        default=None,
        help="Kafka bootstrap servers for the announcement ($TENGEN_KAFKA_BOOTSTRAP; unset: no announcement)",
    )
    pre.add_argument(
        "--timeout",
        type=positive_float,
        default=600.0,
        help="seconds to wait for the topics and the announcement (default 600)",
    )
    pre.set_defaults(func=_prepare)
