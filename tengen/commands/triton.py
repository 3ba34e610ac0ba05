"""`tengen triton`: run a local Triton inference server in the foreground.

The server is the `tritonserver` binary of the nvidia-pytriton wheel (Python backend, CPU), in
explicit model-control mode over the model repository (default `<data-dir>/models`). It loads the
models named with --load, or else every model of the repository that has a version, waits until
they are ready, prints its URLs, and runs until Ctrl-C or SIGTERM, then stops cleanly (exit 0).
Port 0 picks a free port. The server's own log goes to `<workdir>/tritonserver.log`.
"""
from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path
from types import FrameType

from tengen.commands.models import add_repository_arguments, data_dir, repository_path, settings
from tengen.config import TritonConfig
from tengen.infra.entrypoint import port


class _Stop(Exception):
    """Raised in the main thread by the SIGTERM handler (Ctrl-C raises KeyboardInterrupt)."""


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise _Stop()


def _resolve_port(args: argparse.Namespace, kind: str) -> int | None:
    """The flag, else triton.<kind>_port of the configuration; None for 0 (a free port)."""
    value = getattr(args, f"{kind}_port")
    if value is None:
        value = getattr(settings(args).triton, f"{kind}_port")
    return value or None


def _serve(args: argparse.Namespace) -> int:
    from tengen.infra.triton.errors import TritonError
    from tengen.infra.triton.repository import ModelRepository
    from tengen.infra.triton.server import LocalTriton
    from tengen.loop.layout import DataDir

    repo = ModelRepository(repository_path(args))  # created when missing: an empty one serves nothing yet
    workdir = args.workdir if args.workdir is not None else DataDir(data_dir(args)).triton
    if args.load:
        missing = [m for m in args.load if not repo.versions(m)]
        if missing:
            print(f"tengen triton: no version of {', '.join(missing)} in {repo.root} "
                  f"(models there: {', '.join(repo.models()) or 'none'})", file=sys.stderr)
            return 1
        load = list(args.load)
    else:
        load = [m for m in repo.models() if repo.versions(m)]
    server = LocalTriton(repo.root, workdir, load_models=load, host=args.host,
                         http_port=_resolve_port(args, "http"), grpc_port=_resolve_port(args, "grpc"),
                         metrics_port=_resolve_port(args, "metrics"))
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        print(f"starting Triton on {repo.root} (models: {', '.join(load) or 'none yet'}; log {server.log_path}) ...",
              flush=True)
        server.start(timeout_s=args.start_timeout)
        print(f"Triton ready: gRPC {server.grpc_url}  HTTP {server.http_url}  metrics {server.metrics_url}", flush=True)
        print("serving until Ctrl-C or SIGTERM", flush=True)
        while server.is_running():
            time.sleep(0.5)
        print(f"tengen triton: tritonserver exited on its own; see {server.log_path}:\n{server.log_tail(2000)}",
              file=sys.stderr)
        return 1
    except (KeyboardInterrupt, _Stop):
        print("stopping Triton ...", flush=True)
        return 0
    except TritonError as exc:
        print(f"tengen triton: {exc}", file=sys.stderr)
        return 1
    finally:
        # A second signal must not cut the shutdown short (stop() kills after its grace period).
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        server.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if not server.is_running():
            print("Triton stopped", flush=True)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "triton", help="run a local Triton inference server (from the nvidia-pytriton wheel) in the foreground",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_repository_arguments(parser)
    defaults = TritonConfig()
    for kind, default in (("http", defaults.http_port), ("grpc", defaults.grpc_port),
                          ("metrics", defaults.metrics_port)):
        env = f"TENGEN_TRITON__{kind.upper()}_PORT"
        parser.add_argument(f"--{kind}-port", type=port, default=None,
                            help=f"{kind} port (default triton.{kind}_port: ${env}, else {default}; 0: a free port)")
    parser.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    parser.add_argument("--load", action="append", metavar="MODEL", default=[],
                        help="load this model at start (repeatable; default: every model with a version)")
    parser.add_argument("--workdir", type=Path, default=None,
                        help="where the server tree and its log go (default <data-dir>/triton)")
    parser.add_argument("--start-timeout", type=float, default=300.0,
                        help="seconds to wait for the server and its models to be ready (default 300)")
    parser.set_defaults(func=_serve)
