"""`tengen gtp`: play and analyse over GTP (Sabaki, GoGui, Lizzie, KaTrain's GTP engines).

The net is either an export file run in this process (`--model PATH`) or a model served by
Triton (`--triton URL --model NAME`). It searches 100 visits a move by default with tengen.search's
MCTS (see tengen.gtp.mcts_analyzer) and plays the most visited move; `--visits 1` plays the raw
policy (one evaluation per move). The board is the size the export was trained on unless --size or
the GUI's boardsize says otherwise. The protocol runs on stdin/stdout; logs go to stderr.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import logging
import sys
from typing import Any

from tengen.config import StrengthConfig
from tengen.infra.entrypoint import positive_float, positive_int

log = logging.getLogger(__name__)

MCTS_ANALYSIS_VISITS = 20_000
DEFAULT_VISITS = StrengthConfig.visits  # what the loop's live curve measures at
DEFAULT_SIZE = 9  # what the presets train, for an export whose sidecar names no trained size
# A person (or a GUI) is waiting: a mistyped or stopped Triton is reported after this, not after the
# five minutes a self-play worker waits for a restarting server.
TRITON_WAIT_S = 30.0
# What loading a model can raise: a missing or unreadable export (OSError, ValueError), a file
# TorchScript cannot load or a Triton server that refuses the model (RuntimeError).
MODEL_ERRORS = (OSError, ValueError, RuntimeError)


def _rules(text: str) -> Any:
    from tengen.go.sgf import rules_from_ru

    try:
        return rules_from_ru(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that say which net evaluates positions and how (shared with `tengen analysis`)."""
    parser.add_argument("--model", required=True,
                        help="export file (TorchScript + .json sidecar), or the model name with --triton")
    parser.add_argument("--triton", metavar="URL", default=None,
                        help="evaluate through Triton at this gRPC address instead of in-process")
    parser.add_argument("--model-version", type=positive_int, default=None,
                        help="Triton model version (default: the latest ready one)")
    parser.add_argument("--triton-wait", type=positive_float, default=TRITON_WAIT_S, metavar="SECONDS",
                        help="how long an unreachable Triton is retried, at the start and later, before "
                        f"its request fails (default {TRITON_WAIT_S:g})")
    parser.add_argument("--threads", type=positive_int, default=1, help="CPU threads for the net (default 1)")
    parser.add_argument("--runtime", default="auto", choices=("auto", "torch", "openvino"),
                        help="CPU runtime of an export (default auto: OpenVINO where installed, else torch)")
    parser.add_argument("--policy", default="auto", choices=("auto", "normal", "optimistic"),
                        help="policy head the search reads: the optimistic one (KataGo's, for play and analysis, "
                        "never self-play) or the normal one; default auto: optimistic where the export has it. "
                        "Through Triton always the normal one")


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags that build an engine (shared with `tengen eval`)."""
    add_model_arguments(parser)
    parser.add_argument("--visits", type=positive_int, default=DEFAULT_VISITS,
                        help=f"playouts per move: 1 plays the raw policy, more search with MCTS (default "
                        f"{DEFAULT_VISITS}, the strength service's, so a score compares with the live curve)")


def build_evaluator(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The evaluator of the model arguments (an export run in this process, or Triton) and the
    model's metadata (only the name and version through Triton). Raises one of MODEL_ERRORS when
    the model cannot be loaded."""
    if args.triton:
        from tengen.infra.triton.client import TritonEvaluator

        if args.policy == "optimistic":  # Triton serves what self-play reads
            raise ValueError("--policy optimistic needs an export run in this process, not --triton")
        evaluator: Any = TritonEvaluator(args.triton, args.model, args.model_version,
                                         retry_deadline_s=args.triton_wait)
        metadata: dict[str, Any] = {"model": args.model, "version": args.model_version}
    else:
        from tengen.nn.evaluator import make_evaluator

        evaluator = make_evaluator(args.model, num_threads=args.threads, runtime=args.runtime, policy=args.policy)
        metadata = evaluator.metadata
    return evaluator, metadata


def build_analyzer(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The analyzer for the arguments (the raw policy for one visit, MCTS for more) and the
    model's metadata (see build_evaluator)."""
    from tengen.gtp.analysis import PolicyAnalyzer
    from tengen.gtp.mcts_analyzer import MctsAnalyzer

    evaluator, metadata = build_evaluator(args)
    return (PolicyAnalyzer(evaluator) if args.visits == 1 else MctsAnalyzer(evaluator)), metadata


def describe_model(args: argparse.Namespace, metadata: dict[str, Any]) -> str:
    if args.triton:
        version = args.model_version or "latest"
        return f"{args.model} v{version} via Triton {args.triton}"
    arch = metadata.get("architecture", {}).get("name", "?")
    return f"{arch}, {metadata.get('samples_seen', 0):,} samples"


def trained_size(metadata: dict[str, Any]) -> int:
    """The largest board size an export's sidecar says it was trained on, else DEFAULT_SIZE (older
    exports and Triton name none)."""
    sizes = metadata.get("trained_board_sizes")
    if isinstance(sizes, list) and sizes and all(isinstance(s, int) and 7 <= s <= 19 for s in sizes):
        return max(sizes)
    return DEFAULT_SIZE


def analysis_visits(args: argparse.Namespace) -> int:
    """lz-analyze / kata-analyze budget: --analysis-visits, else the raw net's root plus its ten
    best children for --visits 1, else MCTS_ANALYSIS_VISITS (the analysis ends at the next command
    anyway; the cap bounds the tree's memory)."""
    if args.analysis_visits is not None:
        return max(args.analysis_visits, args.visits)
    return 11 if args.visits == 1 else max(args.visits, MCTS_ANALYSIS_VISITS)


def _run(args: argparse.Namespace) -> int:
    from tengen.gtp.engine import GtpEngine
    from tengen.infra.process import exit_on_signals

    try:
        analyzer, metadata = build_analyzer(args)
    except MODEL_ERRORS as error:
        print(f"error: cannot load the model: {error}", file=sys.stderr)
        return 2
    version = f"{importlib.metadata.version('tengen')} ({describe_model(args, metadata)}, visits {args.visits})"
    try:
        engine = GtpEngine(
            analyzer,
            visits=args.visits,
            analysis_visits=analysis_visits(args),
            size=args.size or trained_size(metadata),
            komi=args.komi,
            rules=args.rules,
            name=args.name,
            version=version,
            resign_threshold=args.resign_threshold,
            out=sys.stdout,
        )
    except ValueError as error:  # e.g. a komi the rules engine refuses
        print(f"error: {error}", file=sys.stderr)
        return 2
    log.info("tengen gtp ready: %s", version)
    # Bytes that are not UTF-8 become U+FFFD: a garbled line is an unknown command, not a crash.
    sys.stdin.reconfigure(errors="replace")  # type: ignore[union-attr]
    # SIGTERM and Ctrl-C end the engine quietly, even mid-search (exit 128 + N, no traceback).
    exit_on_signals()
    return engine.run(sys.stdin)


def register(subparsers: argparse._SubParsersAction) -> None:
    from tengen.go.rules import KATAGO

    parser = subparsers.add_parser(
        "gtp", help="GTP engine for Go GUIs and matches", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_engine_arguments(parser)
    parser.add_argument("--analysis-visits", type=positive_int, default=None,
                        help="budget of lz-analyze / kata-analyze (default: 11 net evaluations with "
                        f"--visits 1, else {MCTS_ANALYSIS_VISITS} playouts)")
    parser.add_argument("--rules", type=_rules, default=KATAGO,
                        help="starting rules: tromp-taylor, chinese, katago, an explicit "
                        "ko=...,suicide=... string or a common name (default katago)")
    parser.add_argument("--size", type=int, default=None, choices=range(7, 20), metavar="7..19",
                        help="starting board size (default: the largest size the export was trained on, "
                        f"from its sidecar; else {DEFAULT_SIZE})")
    parser.add_argument("--komi", type=float, default=7.5, help="starting komi (default 7.5)")
    parser.add_argument("--name", default="tengen", help="name the engine reports (default tengen)")
    parser.add_argument("--resign-threshold", type=float, default=0.0,
                        help="resign after 3 moves in a row below this winrate (default 0: never)")
    parser.set_defaults(func=_run)
