"""The gating service: plays each candidate against the current model and promotes the winners.

Loop: a consumer group on `tengen.candidates` (tengen.loop.messages.CandidateAnnouncement, up
to CANDIDATE_SCAN records at a time, decided in order). For each candidate:

0. With `gating.skip_superseded` (default), a candidate with a newer one already waiting behind it
   and no match under way is decided unplayed as "superseded": a gate slower than the trainer
   plays the newest net instead of falling ever further behind.
1. Skip it when `decisions.jsonl` already has a decision about it (a redelivery after a crash).
2. Check the export (tengen.gate.promotion.validate_export); a broken one is rejected with the
   reason, never loaded. One that Triton serves otherwise than the export computes (the check of
   steps 4 and 6) is rejected too, not retried: its answers are the same on every try.
3. The opponent is the current model: the latest version of `run.model_name` announced on
   `tengen.models` (the repository's latest when nothing was announced), once Triton has it READY
   (unless the current version is this very candidate, promoted before a crash: see below).
4. Load the candidate into Triton as a version of `<model>-candidate` in the same repository
   (written atomically, loaded, checked to answer like the export; older candidate versions are
   removed from disk first so the model keeps at most two).
5. Play the match (tengen.gate.net_match: Appendix D settings, both colours equally, batched through
   the self-play runner, one TritonEvaluator per side), each finished game appended and fsynced to
   `matches/<candidate>.jsonl` with a progress line; stop once decided (tengen.gate.decision).
6. On a pass, promote through exactly `tengen models promote`'s hot swap
   (tengen.gate.promotion.ModelServer.promote: atomic write as the next version, load beside the
   serving one, wait ready, check, announce on `tengen.models`).
7. Append the decision (the score over every finished game, the reason naming what decided it,
   the version) to `decisions.jsonl`, fsynced; only then commit the candidate's offset.
8. Report every game of the match to ratings (an outbox: retried with backoff while ratings is
   down, also after a restart, idempotent by game id). Players follow `tengen eval`'s names:
   version N of model M is `M-vN` (kind model, with its training samples); a promoted candidate
   is reported as the version it became, a rejected one as `M-<candidate>` (kind engine).

Lost announcements: the candidate files are durable, their announcements are not (a broker that
loses its log loses them). When no announcement has come for ORPHAN_GRACE_S, the newest candidate
file newer than every decided candidate and every announcement seen is gated as if announced.

Crash safety: a crash mid-match resumes it from the match file when its opponent is still the
current model (else the match starts again). A crash after the promotion's write but before the
decision line is finished on restart without a second version: the repository is searched for a
version newer than the opponent holding the candidate's bytes (tengen.gate.promotion
.ModelServer.written_version). Triton or the broker down: the candidate is retried with backoff.
SIGTERM/SIGINT: the game batches in flight finish, games in progress are dropped (the finished
ones are on disk), nothing is committed that is not decided.
"""
from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
import zlib
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge

from tengen.config import Config
from tengen.gate.decision import Score, Verdict, decide, side_score
from tengen.gate.net_match import MatchRunner, NetMatchSettings
from tengen.gate.promotion import ExportError, ModelServer, ServedMismatch, validate_export
from tengen.infra.health import HealthServer
from tengen.infra.kafka import Backoff, GroupConsumer, KafkaAdapterError, ReliableProducer
from tengen.infra.triton.client import TritonEvaluator, wait_version_ready
from tengen.infra.triton.errors import TritonError
from tengen.infra.triton.repository import ModelRepository, model_config
from tengen.loop.layout import DataDir
from tengen.loop.ledger import DecisionLog, MatchFile, MatchGameResult, check_candidate_name
from tengen.loop.messages import (
    CANDIDATES_TOPIC,
    CandidateAnnouncement,
    candidate_player,
    latest_model_version,
    version_player,
    wait_for_loop_topics,
)
from tengen.nn.export import export_samples, net_samples, sidecar_path
from tengen.ratings.records import GameReport, PlayerInfo, RatingsError
from tengen.ratings.report import Reporter, ratings_reporter

log = logging.getLogger("services.gating")

GROUP_ID = "tengen-gating"
CANDIDATE_SUFFIX = "-candidate"
SOURCE = "gating"
CANDIDATE, CURRENT = 0, 1  # sides of a match (evaluator indices)
TRITON_TIMEOUT_S = 300.0  # loading a version
READY_WAIT_S = 30.0  # waiting for the opponent to be READY before a retry (which checks for SIGTERM)
EVAL_RETRY_S = 120.0  # a Triton outage longer than this ends the match attempt (retried later)
REPORT_CHUNK = 500  # games per ratings report
CANDIDATE_SCAN = 64  # announcements read at once, to see whether newer candidates wait (skip_superseded)
ORPHAN_GRACE_S = 120.0  # a candidate file this old with no announcement seen: its announcement was lost


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.games = Counter("tengen_gating_games", "Gating games finished", registry=r)
        self.candidates = Counter("tengen_gating_candidates", "Candidates decided", ["result"], registry=r)
        self.wins = Gauge("tengen_gating_match_wins", "Candidate wins in the current match", registry=r)
        self.losses = Gauge("tengen_gating_match_losses", "Candidate losses in the current match", registry=r)
        self.version = Gauge("tengen_gating_current_version", "Version of the current model", registry=r)
        self.unreported = Gauge("tengen_gating_unreported_matches", "Decided matches not yet in ratings",
                                registry=r)
        self.playing = Gauge("tengen_gating_playing", "1 while a match is being played", registry=r)
        # How fresh self-play's net is: the newest candidate's training samples (the trainer's count
        # when it exported) minus the served version's, as of the last candidate to reach the gate.
        self.served_samples = Gauge("tengen_gating_served_samples",
                                    "Training samples of the served version", registry=r)
        self.lag_samples = Gauge("tengen_gating_lag_samples",
                                 "Newest candidate's training samples minus the served version's", registry=r)


class GatingService:
    """`run(stop)` gates candidates until `stop` is set."""

    def __init__(self, config: Config, *, http_port: int | None = None, group_id: str = GROUP_ID,
                 topic: str = CANDIDATES_TOPIC) -> None:
        self.config = config
        self.model = config.run.model_name
        self.candidate_model = f"{self.model}{CANDIDATE_SUFFIX}"
        self.data_dir = DataDir(config.run.data_dir)
        self.repository = ModelRepository(self.data_dir.models)
        self.url = config.triton.url
        self.served = ModelServer(self.repository, self.url, self.model, TRITON_TIMEOUT_S)
        self.candidate_server = ModelServer(self.repository, self.url, self.candidate_model, TRITON_TIMEOUT_S)
        self.decisions = DecisionLog(self.data_dir)
        self.http_port = http_port
        self.group_id = group_id
        self.topic = topic
        self.metrics = Metrics()
        self.state = "starting"
        self.last_promoted = 0
        self._producer: ReliableProducer | None = None
        self._reporter: Reporter | None = None
        self._report_backoff = Backoff(1.0, 60.0)
        self._report_next = 0.0
        self._unreported: list[str] = []  # decided matches whose games are not in ratings yet
        self._newest_seen = ""  # the newest candidate name announced or decided (names sort by samples)

    def _set_state(self, state: str) -> None:
        if state != self.state:
            log.info("gating: %s", state)
        self.state = state

    # -- the loop --------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> int:
        http = HealthServer(self.http_port, self.metrics.registry, lambda: (True, self.state), name="gating") \
            if self.http_port is not None else None
        if http is not None:
            self.http_port = http.port
        bootstrap = self.config.kafka.bootstrap
        consumer = None
        try:
            self._set_state(f"waiting for the broker at {bootstrap}")
            if not wait_for_loop_topics(bootstrap, stop, "gating"):
                return 0
            self._producer = ReliableProducer(bootstrap, client_id="tengen-gating")
            # A match can take long: the group must not drop us between polls.
            consumer = GroupConsumer(bootstrap, self.topic, self.group_id, client_id="tengen-gating",
                                     max_poll_records=CANDIDATE_SCAN, max_poll_interval_s=24 * 3600.0)
            self._unreported = [c for c in MatchFile.unreported(self.data_dir) if self.decisions.find(c) is not None]
            self._set_state("waiting for candidates")
            while not stop.is_set():
                self._report_pending()
                records = consumer.poll(timeout_s=1.0, max_records=CANDIDATE_SCAN)
                if not records:
                    orphan = self._orphaned_candidate()
                    if orphan is not None:
                        log.warning("gating: %s was written %.0f s ago and never announced (the broker lost "
                                    "it?); gating it from its file", orphan.name, time.time() - orphan.created)
                        self._seen(orphan.name)
                        if self._handle(orphan.to_bytes(), stop):
                            self._set_state("waiting for candidates")
                            self._report_pending(force=True)
                    continue
                for i, record in enumerate(records):
                    newest = records[-1].value if i < len(records) - 1 else None
                    if newest is None or not self._supersede(record.value, newest):
                        if not self._handle(record.value, stop):
                            break  # stopped: the rest is delivered again at the next start
                        self._set_state("waiting for candidates")
                        self._report_pending(force=True)
                    if not consumer.commit([record]):
                        log.warning("gating: offset commit failed; a redelivery is skipped by the decision log")
            return 0
        finally:
            if consumer is not None:
                consumer.close()
            if self._producer is not None:
                self._producer.close(timeout_s=10.0)
            if self._reporter is not None:
                self._reporter.close()
            if http is not None:
                http.close()
            log.info("gating: stopped")

    def _seen(self, name: str) -> None:
        self._newest_seen = max(self._newest_seen, name)

    def _orphaned_candidate(self) -> CandidateAnnouncement | None:
        """The newest candidate file that no announcement or decision covers, once older than
        ORPHAN_GRACE_S (the trainer writes the file before announcing it); else None."""
        if not self._newest_seen:
            last = self.decisions.last()
            if last is not None:
                self._seen(str(last.get("candidate", "")))
        names = [Path(file).stem for file in self.data_dir.candidate_files()]
        if not names or names[-1] <= self._newest_seen:
            return None
        name = names[-1]
        path = self.data_dir.candidate(name)
        try:
            created = path.stat().st_mtime
            meta = json.loads(sidecar_path(path).read_text())
            samples = int(meta["samples_seen"])
        except (OSError, ValueError, KeyError, TypeError):
            return None  # not whole yet, or not ours: its own announcement (or a later file) decides
        if time.time() - created < ORPHAN_GRACE_S:
            return None
        return CandidateAnnouncement(name=name, path=str(path), samples=samples,
                                     arch=self.config.trainer.arch, created=created)

    def _handle(self, value: bytes | None, stop: threading.Event) -> bool:
        """Gate one announcement; True once it is decided (or unreadable), False when stopped."""
        try:
            announcement = CandidateAnnouncement.from_bytes(value or b"")
            check_candidate_name(announcement.name)
        except ValueError as err:
            log.error("gating: skipping a bad record on %s: %s", self.topic, err)
            return True
        self._seen(announcement.name)
        backoff = Backoff(2.0, 60.0)
        while not stop.is_set():
            try:
                return self.gate(announcement, stop)
            except (TritonError, KafkaAdapterError, OSError) as err:
                if stop.is_set():
                    break
                delay = backoff.next()
                self._set_state(f"{announcement.name}: waiting ({str(err).strip()[:200]}); retrying in {delay:.0f} s")
                stop.wait(delay)
        return False

    def _supersede(self, value: bytes | None, newest: bytes | None) -> bool:
        """With `gating.skip_superseded`, decide a candidate that a newer one already waits behind as
        unplayed ("superseded"), so a gate slower than the trainer keeps up with the newest net
        instead of falling ever further behind. A candidate whose match is under way (its file has a
        header: maybe a promotion cut short) is played out as usual. True when it was skipped."""
        if not self.config.gating.skip_superseded:
            return False
        try:
            ann = CandidateAnnouncement.from_bytes(value or b"")
            newer = CandidateAnnouncement.from_bytes(newest or b"")
            check_candidate_name(ann.name)
        except ValueError:
            return False  # _handle logs and skips it
        self._seen(newer.name)
        if self.decisions.find(ann.name) is not None or MatchFile(self.data_dir, ann.name).header is not None:
            return False  # decided before, or under way: _handle knows what to do
        self._record(ann, None, Score(), 0, None, f"superseded by {newer.name} (gating was behind the trainer)")
        return True

    # -- one candidate --------------------------------------------------------------------------

    def gate(self, ann: CandidateAnnouncement, stop: threading.Event) -> bool:
        """Play, decide, promote and record one candidate; False when stopped before a decision."""
        if self.decisions.find(ann.name) is not None:
            log.info("gating: %s was decided before; not played again", ann.name)
            return True
        path = Path(ann.path)
        try:
            metadata, expected = validate_export(path)
        except ExportError as err:
            log.error("gating: rejecting %s: %s", ann.name, err)
            self._record(ann, None, Score(), 0, None, f"invalid export: {err}")
            return True
        opponent = self._current_version()
        self._set_lag(ann.samples, opponent)
        match = MatchFile(self.data_dir, ann.name)
        header = match.header
        played_against = header.get("opponent_version") if header is not None else None
        if isinstance(played_against, int) and played_against != opponent and \
                self.served.written_version(path, newer_than=played_against) is not None:
            opponent = played_against  # the current version is this candidate: our promotion was cut short
        wait_version_ready(self.url, self.model, opponent, READY_WAIT_S)
        if header is not None and header.get("opponent_version") == opponent and header.get("games") == \
                self.config.gating.games:
            log.info("gating: resuming %s against v%d after %d finished games", ann.name, opponent, len(match.results))
        else:
            if header is not None:
                log.info("gating: %s was played against v%s; the current model is v%d: starting again",
                         ann.name, header.get("opponent_version"), opponent)
            match.start({"candidate": ann.name, "candidate_path": str(path), "opponent_version": opponent,
                         "games": self.config.gating.games, "started": time.time()})
        verdict = self._verdict(match)  # the games already played may decide it
        try:
            if verdict is None:
                verdict = self._play(ann, match, self._load_candidate(path, expected), opponent, stop,
                                     net_samples(metadata))
                if verdict is None:
                    return False
            promoted = None
            if verdict.promote:
                self._set_state(f"{ann.name}: promoting")
                promoted = self._promote(path, expected, opponent)
                self.last_promoted = promoted
                self._set_lag(ann.samples, promoted)
            reason = verdict.reason
        except ServedMismatch as err:
            # The same answers come back on every try: retrying would stall gating (a 2-hour run
            # lost its last 30 minutes so), so the candidate is rejected and the next one gated.
            log.error("gating: rejecting %s: %s", ann.name, err)
            promoted, reason = None, f"Triton does not serve it as exported: {err}"
        score = side_score(match.results.values(), CANDIDATE)  # every finished game, as ratings gets them
        self._record(ann, opponent, score, len(match.results), promoted, reason, samples=metadata.get("samples_seen"))
        self._unreported.append(ann.name)
        return True

    def _current_version(self) -> int:
        """The version last announced on `tengen.models` (read to its end now, so a fresh start
        knows it too), else the repository's latest."""
        announced = latest_model_version(self.config.kafka.bootstrap, self.model, timeout_s=30.0)
        version = max(announced or 0, self.last_promoted) or self.repository.latest_version(self.model)
        if not version:
            raise TritonError(f"no version of {self.model} announced on tengen.models or in {self.repository.root}")
        self.metrics.version.set(version)
        return version

    def _load_candidate(self, path: Path, expected: dict) -> int:
        """The candidate's version in `<model>-candidate`, loaded and ready."""
        repo, name = self.repository, self.candidate_model
        if not repo.has_model(name):
            repo.create_model(name, model_config(self.config, name, repo.backend(self.model)))
        if self.candidate_server.written_version(path) is None:
            for old in repo.versions(name)[:-1]:  # done with; the newest stays so numbers keep growing
                repo.remove_version(name, old)
        self._set_state(f"loading candidate {path.name} into Triton as {name}")
        return self.candidate_server.load(path, expected)

    def _play(self, ann: CandidateAnnouncement, match: MatchFile, candidate_version: int, opponent: int,
              stop: threading.Event, samples: int | None) -> Verdict | None:
        """`samples`: what the candidate has trained on in all (net_samples), which picks the boards."""
        gating = self.config.gating
        remaining = [i for i in range(gating.games) if i not in match.results]
        parallel = max(2, min(self.config.selfplay.games_in_parallel, len(remaining)))
        self._set_state(f"{ann.name} (cand v{candidate_version}) vs {self.model} v{opponent}: "
                        f"{len(remaining)} of {gating.games} games to play on "
                        f"{self.config.game.boards_at(samples).describe()}, {parallel} at a time")
        evaluators = [TritonEvaluator(self.url, self.candidate_model, candidate_version,
                                      retry_deadline_s=EVAL_RETRY_S, stop=stop),
                      TritonEvaluator(self.url, self.model, opponent, retry_deadline_s=EVAL_RETRY_S, stop=stop)]
        seed = zlib.crc32(ann.name.encode())  # the same games when a match resumes
        # The boards the candidate would play once served (the curriculum), the same at every resume.
        settings = NetMatchSettings.from_config(self.config, samples)
        runner = MatchRunner(evaluators, settings, self.config.search, games_in_parallel=parallel, seed=seed)
        self.metrics.playing.set(1)
        try:
            with contextlib.closing(runner.play(remaining, stop=stop)) as results:
                for result in results:
                    match.add(result)
                    self.metrics.games.inc()
                    self._log_game(ann.name, result, match)
                    verdict = self._verdict(match)
                    if verdict is not None:
                        return verdict
        finally:
            self.metrics.playing.set(0)
            for evaluator in evaluators:
                evaluator.close()
        return None

    def _verdict(self, match: MatchFile) -> Verdict | None:
        gating = self.config.gating
        score = side_score(match.in_order(), CANDIDATE)
        self.metrics.wins.set(score.wins)
        self.metrics.losses.set(score.losses)
        return decide(score, gating.games, gating.wins_to_pass, gating.sprt)

    def _log_game(self, candidate: str, result: MatchGameResult, match: MatchFile) -> None:
        side = result.winner_side()
        outcome = "draw" if side is None else "candidate wins" if side == CANDIDATE else "current wins"
        colour = "Black" if result.black_side == CANDIDATE else "White"
        all_games = side_score(match.results.values(), CANDIDATE)
        log.info("gating: %s game %d (candidate %s, %dx%d, %s): %s by %s after %d moves | "
                 "running score %s (%d of %d games played; %s in order)",
                 candidate, result.index, colour, result.board_size, result.board_size, result.rules, outcome,
                 result.end if result.score is None else f"{result.winner}+{abs(result.score):g}", result.moves,
                 all_games, len(match.results), self.config.gating.games, side_score(match.in_order(), CANDIDATE))

    def _promote(self, path: Path, expected: dict, opponent: int) -> int:
        """Hot-swap the candidate in as the next version, or finish a promotion a crash cut short."""
        return self.served.promote(path, expected, self._producer, newer_than=opponent)

    def _record(self, ann: CandidateAnnouncement, opponent: int | None, score: Score, games: int,
                promoted: int | None,
                reason: str, samples: Any = None) -> None:
        decision = {
            "candidate": ann.name, "candidate_path": ann.path, "candidate_samples": samples
            if isinstance(samples, int) else ann.samples, "opponent_version": opponent, "wins": score.wins,
            "losses": score.losses, "draws": score.draws, "games": games, "promoted": promoted is not None,
            "promoted_version": promoted, "reason": reason, "time": time.time(),
        }
        self.decisions.record(decision)
        self.metrics.candidates.labels("promoted" if promoted is not None else "rejected").inc()
        verdict = f"PROMOTED to v{promoted}" if promoted is not None else "rejected"
        against = f"against {self.model} v{opponent} with {score} in {games} games" if opponent else "unplayed"
        log.info("gating: %s %s %s (%s)", ann.name, verdict, against, reason)

    # -- ratings --------------------------------------------------------------------------------

    def _make_reporter(self) -> Reporter:
        return ratings_reporter(self.config.ratings, self.data_dir.root)

    def _report_pending(self, force: bool = False) -> None:
        """Report every decided match not yet in ratings (with backoff while ratings is down)."""
        self.metrics.unreported.set(len(self._unreported))
        if not self._unreported or (not force and time.monotonic() < self._report_next):
            return
        while self._unreported:
            candidate = self._unreported[0]
            try:
                if self._reporter is None:
                    self._reporter = self._make_reporter()
                self._report(candidate, self._reporter)
            # Any failure (service down, database down, a refusal) is retried with backoff: the
            # games stay in the match file until they are in.
            except Exception as err:
                delay = self._report_backoff.next()
                self._report_next = time.monotonic() + delay
                log.warning("gating: reporting %s to ratings failed (%s); retrying in %.0f s",
                            candidate, str(err).strip()[:300], delay)
                if self._reporter is not None and not isinstance(err, RatingsError):
                    self._reporter.close()
                    self._reporter = None
                return
            self._unreported.pop(0)
            self.metrics.unreported.set(len(self._unreported))
        self._report_backoff.reset()
        self._report_next = 0.0

    def _report(self, candidate: str, reporter: Reporter) -> None:
        decision = self.decisions.find(candidate)
        match = MatchFile(self.data_dir, candidate)
        if decision is None or match.header is None:
            return
        opponent = int(match.header["opponent_version"])
        current = PlayerInfo(version_player(self.model, opponent), "model", self._version_samples(opponent))
        samples = decision.get("candidate_samples")
        samples = samples if isinstance(samples, int) and samples >= 0 else None
        if decision.get("promoted"):
            cand = PlayerInfo(version_player(self.model, int(decision["promoted_version"])), "model", samples)
        else:
            cand = PlayerInfo(candidate_player(self.model, candidate), "engine", samples)
        names = {CANDIDATE: cand.name, CURRENT: current.name}
        games = [GameReport(f"{SOURCE}-{candidate}-v{opponent}-{r.index}", names[r.black_side],
                            names[1 - r.black_side], r.winner, source=SOURCE)
                 for r in sorted(match.results.values(), key=lambda r: r.index)]
        for start in range(0, max(len(games), 1), REPORT_CHUNK):
            reporter.report(games[start:start + REPORT_CHUNK], [cand, current])
        match.mark_reported()
        log.info("gating: reported %d games of %s to ratings (%s vs %s)", len(games), candidate, cand.name,
                 current.name)

    def _set_lag(self, newest_samples: int, served_version: int) -> None:
        served = self._version_samples(served_version)
        if served is not None:
            self.metrics.served_samples.set(served)
            self.metrics.lag_samples.set(max(0, newest_samples - served))

    def _version_samples(self, version: int) -> int | None:
        """samples_seen from a repository version's sidecar."""
        return export_samples(self.repository.export_path(self.model, version))
