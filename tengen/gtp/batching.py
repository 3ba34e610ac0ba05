"""One net, many searching threads: their evaluations merged into shared batches.

`tengen analysis` searches several positions at once, one worker thread each (KataGo's analysis
threads). Each search asks for a few leaves at a time; `BatchingEvaluator` wraps the real
evaluator (torch, OpenVINO or Triton) so that the requests that are waiting at the same moment go
to it as one batch: one thread collects them, concatenates the rows of one board shape (up to
`max_batch`), evaluates, and hands each caller its rows. A worker that is inside an analysis says
so (`working()`), and the collector waits (at most `wait_s`) until every working thread has its
request in, so a batch holds one request per busy worker rather than whatever came first.
Requests of different board sizes go in separate batches.

It counts what it merged (`batches`, `requests`, `rows`): `summary()` is the line `tengen
analysis` logs when it stops, the measured mean batch.
"""
from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from tengen.nn.evaluator import Evaluator


@dataclass
class _Request:
    spatial: np.ndarray
    global_inputs: np.ndarray
    done: threading.Event = field(default_factory=threading.Event)
    result: dict[str, np.ndarray] | None = None
    error: BaseException | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return int(self.spatial.shape[2]), int(self.spatial.shape[3])


class BatchingEvaluator:
    """An Evaluator whose concurrent `evaluate` calls share calls of `evaluator`."""

    def __init__(self, evaluator: Evaluator, *, max_batch: int = 256, wait_s: float = 0.002) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.evaluator = evaluator
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.batches = 0  # calls of the wrapped evaluator
        self.requests = 0  # evaluate() calls they answered: one per search step of a worker
        self.rows = 0  # positions evaluated
        self._cond = threading.Condition()
        self._queue: list[_Request] = []
        self._working = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="eval-batcher", daemon=True)
        self._thread.start()

    @contextlib.contextmanager
    def working(self) -> Iterator[None]:
        """Mark the calling thread as searching: batches wait for its next request."""
        with self._cond:
            self._working += 1
        try:
            yield
        finally:
            with self._cond:
                self._working -= 1
                self._cond.notify_all()

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        request = _Request(np.asarray(spatial, dtype=np.float32), np.asarray(globals, dtype=np.float32))
        with self._cond:
            if self._closed:
                raise RuntimeError("the evaluator is closed")
            self._queue.append(request)
            self._cond.notify_all()
        request.done.wait()
        if request.error is not None:
            raise request.error
        assert request.result is not None
        return request.result

    def mean_requests(self) -> float:
        """Requests merged per call of the wrapped evaluator: above 1 when searches share batches."""
        return self.requests / self.batches if self.batches else 0.0

    def summary(self) -> str:
        if not self.batches:
            return "no net evaluations"
        return (f"{self.batches} net evaluations, mean batch {self.rows / self.batches:.1f} positions "
                f"from {self.mean_requests():.2f} searches")

    def close(self) -> None:
        """Evaluate what is queued, then stop the collecting thread."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=30)

    def _take(self) -> list[_Request] | None:
        """The next batch's requests (None once closed and drained)."""
        with self._cond:
            while not self._queue and not self._closed:
                self._cond.wait()
            if not self._queue:
                return None
            deadline = time.monotonic() + self.wait_s
            while len(self._queue) < self._working and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            shape = self._queue[0].shape
            taken: list[_Request] = []
            rows = 0
            for request in self._queue:
                n = len(request.spatial)
                if request.shape == shape and (not taken or rows + n <= self.max_batch):
                    taken.append(request)
                    rows += n
            self._queue = [r for r in self._queue if all(r is not t for t in taken)]
            return taken

    def _loop(self) -> None:
        while (taken := self._take()) is not None:
            try:
                if len(taken) == 1:
                    outputs = [self.evaluator.evaluate(taken[0].spatial, taken[0].global_inputs)]
                else:
                    out = self.evaluator.evaluate(np.concatenate([r.spatial for r in taken]),
                                                  np.concatenate([r.global_inputs for r in taken]))
                    outputs, start = [], 0
                    for request in taken:
                        end = start + len(request.spatial)
                        outputs.append({name: value[start:end] for name, value in out.items()})
                        start = end
                self.batches += 1
                self.requests += len(taken)
                self.rows += sum(len(r.spatial) for r in taken)
                for request, result in zip(taken, outputs):
                    request.result = result
            except BaseException as error:  # every waiting caller gets the evaluator's error
                for request in taken:
                    request.error = error
            finally:
                for request in taken:
                    request.done.set()
