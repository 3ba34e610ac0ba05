"""`tengen analysis`: KataGo's JSON analysis engine on stdin/stdout, for KaTrain and other tools.

Queries are read one JSON object per line; each analysed turn is answered with one JSON line, in
KataGo's format (docs/Analysis_Engine.md in KataGo's repository): moveInfos, rootInfo, ownership,
policy; errors and warnings as {"id", "field", "error"|"warning"}. The actions query_version,
query_models, clear_cache, terminate and terminate_all are understood. Logs go to stderr.

The net is an export run in this process (--model PATH) or a model served by Triton (--triton URL
--model NAME), as for `tengen gtp`. --analysis-threads positions are searched at once (tengen's
MCTS, or with --search policy the raw net plus a one-ply look at its best moves), their
evaluations merged into shared batches. At the end of the input the queued queries are finished
first (unless --quit-without-waiting); Ctrl-C or SIGTERM stop at once.

KaTrain: in "General & Engine Settings", set "Override Engine Command" to
  /path/to/.venv/bin/tengen analysis --model /path/to/model.pt
"""
from __future__ import annotations

import argparse
import importlib.metadata
import logging
import signal
import sys
from typing import Any

from tengen.infra.entrypoint import positive_int

log = logging.getLogger(__name__)


class _Stop(Exception):
    """Raised in the main thread by SIGTERM (Ctrl-C raises KeyboardInterrupt)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise _Stop()


def _run(args: argparse.Namespace) -> int:
    from tengen.commands.gtp import MODEL_ERRORS, build_evaluator, describe_model
    from tengen.gtp.analysis_engine import create_engine

    try:
        evaluator, metadata = build_evaluator(args)
    except MODEL_ERRORS as error:
        print(f"error: cannot load the model: {error}", file=sys.stderr)
        return 2
    threads = args.analysis_threads
    description = describe_model(args, metadata)
    models = [{"name": args.model, "internalName": metadata.get("architecture", {}).get("name", args.model),
               "maxBatchSize": args.max_batch, "usesHumanSLProfile": False,
               "version": metadata.get("version", 0) or 0}]
    # Bytes that are not UTF-8 become U+FFFD: a garbled line is a bad query, not a crash.
    sys.stdin.reconfigure(errors="replace")  # type: ignore[union-attr]
    engine = create_engine(
        evaluator, threads=threads, search=args.search, out=sys.stdout, max_visits=args.max_visits,
        perspective=args.report_winrates_as, version=importlib.metadata.version("tengen"),
        models=models, max_batch=args.max_batch, quit_without_waiting=args.quit_without_waiting,
    )
    log.info("tengen analysis: %s, %s search, %d analysis threads", description, args.search, threads)
    # KataGo's line on stderr; some tools wait for it before sending queries.
    print("Started, ready to begin handling requests", file=sys.stderr, flush=True)
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return engine.run(sys.stdin)
    except (KeyboardInterrupt, _Stop):
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second signal must not interrupt the stop
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        engine.stop(wait=False)
        return 0
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def register(subparsers: argparse._SubParsersAction) -> None:
    from tengen.commands.gtp import add_model_arguments

    parser = subparsers.add_parser(
        "analysis", help="KataGo's JSON analysis engine (for KaTrain)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_model_arguments(parser)
    parser.add_argument("--max-visits", type=positive_int, default=500,
                        help="visits of a query that gives no maxVisits (default 500, as KataGo's example config)")
    parser.add_argument("--analysis-threads", type=positive_int, default=2,
                        help="positions searched at once, their evaluations batched together (default 2)")
    parser.add_argument("--search", choices=("mcts", "policy"), default="mcts",
                        help="mcts (default): tengen's MCTS for maxVisits playouts; policy: the raw net, "
                        "plus the positions after its maxVisits-1 best moves")
    parser.add_argument("--report-winrates-as", choices=("BLACK", "WHITE", "SIDETOMOVE"), default="BLACK",
                        help="perspective of winrates, scores and ownership (default BLACK, as KataGo's "
                        "example config; a query can override it with reportAnalysisWinratesAs)")
    parser.add_argument("--max-batch", type=positive_int, default=256,
                        help="most positions in one evaluation batch (default 256)")
    parser.add_argument("--quit-without-waiting", action="store_true",
                        help="at the end of the input, stop at once instead of finishing queued queries")
    parser.set_defaults(func=_run)
