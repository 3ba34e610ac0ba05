"""Triton's gRPC API from this side: the repository index, loads and readiness, and
TritonEvaluator (the Evaluator protocol over Triton, with system shared memory on one host)."""
from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from tengen.infra.shm import ShmRegion
from tengen.infra.triton.errors import TritonError, UnknownModelError
from tengen.infra.triton.repository import check_model_name
from tengen.nn.evaluator import check_batch
from tengen.nn.export import OUTPUT_NAMES, complete_outputs

log = logging.getLogger(__name__)


def _grpc_client(url: str):  # -> tritonclient.grpc.InferenceServerClient
    import tritonclient.grpc as grpcclient

    return grpcclient.InferenceServerClient(url=url)


def _is_unavailable(exc: Exception) -> bool:
    """Connection-level failures that a server restart explains (worth retrying)."""
    status = str(getattr(exc, "status", lambda: "")() or "")
    text = str(exc)
    return ("UNAVAILABLE" in status or "DEADLINE_EXCEEDED" in status or "failed to connect" in text.lower()
            or "Socket closed" in text or "Connection reset" in text)


def _is_unknown_model(exc: Exception) -> bool:
    text = str(exc)
    return "unknown model" in text or "is not found" in text or "no available versions" in text \
        or "is not at ready state" in text


def model_states(url: str, timeout_s: float | None = None) -> dict[str, dict[int, str]]:
    """Triton's repository index: the state of each version it knows of (READY, LOADING,
    UNAVAILABLE, ...) per model name. Raises the client's exception when Triton does not answer
    within timeout_s (None: no limit)."""
    client = _grpc_client(url)
    try:
        index = client.get_model_repository_index(as_json=True, client_timeout=timeout_s)
    finally:
        client.close()
    states: dict[str, dict[int, str]] = {}
    for entry in index.get("models", []):
        versions = states.setdefault(entry.get("name", ""), {})
        if entry.get("version"):  # models never loaded are listed without a version
            versions[int(entry["version"])] = entry.get("state", "")
    return states


def ready_versions(url: str, model: str) -> list[int]:
    """Versions of `model` that Triton reports READY."""
    return sorted(v for v, state in model_states(url).get(model, {}).items() if state == "READY")


def wait_version_ready(url: str, model: str, version: int, timeout_s: float = 300.0) -> None:
    """Block until `model` version `version` reports ready, or raise TritonError."""
    client = _grpc_client(url)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            try:
                if client.is_model_ready(model, str(version)):
                    return
            except Exception as exc:
                if not _is_unavailable(exc):
                    raise TritonError(f"checking readiness of {model} v{version}: {exc}") from exc
            time.sleep(0.2)
    finally:
        client.close()
    raise TritonError(f"{model} version {version} not ready within {timeout_s:.0f} s")


def load_model(url: str, model: str, timeout_s: float = 300.0) -> None:
    """Ask Triton to (re)load `model` from its repository; blocks until the load finished."""
    import tritonclient.grpc as grpcclient

    client = grpcclient.InferenceServerClient(url=url)
    try:
        client.load_model(model, client_timeout=timeout_s)
    except Exception as exc:
        raise TritonError(f"Triton at {url} failed to load {model}: {exc}") from exc
    finally:
        client.close()


@dataclass(frozen=True)
class ModelStats:
    """Triton's cumulative statistics of one model, all versions: (count, ns) per phase of its
    requests (`success`, `queue`, `compute_input`, `compute_infer`, `compute_output`, ...) and
    its executions (one per batch the instances ran, merged requests counted once)."""
    phases: dict[str, tuple[int, int]]
    executions: int

    @property
    def requests(self) -> int:
        return self.phases.get("success", (0, 0))[0]


def model_stats(client, model: str) -> ModelStats:
    """The model's statistics now; `client` is a tritonclient gRPC client."""
    phases: dict[str, tuple[int, int]] = {}
    executions = 0
    for version in client.get_inference_statistics(model, as_json=True).get("model_stats", []):
        for phase, stat in version.get("inference_stats", {}).items():
            count, ns = phases.get(phase, (0, 0))
            phases[phase] = (count + int(stat.get("count", 0)), ns + int(stat.get("ns", 0)))
        executions += int(version.get("execution_count", 0))
    return ModelStats(phases, executions)


def phase_means_ms(before: ModelStats, after: ModelStats) -> dict[str, float]:
    """Mean milliseconds per request of each phase between two model_stats."""
    out = {}
    for phase, (count, ns) in after.phases.items():
        requests = count - before.phases.get(phase, (0, 0))[0]
        if requests > 0:
            out[phase] = (ns - before.phases.get(phase, (0, 0))[1]) / requests / 1e6
    return out


@dataclass(frozen=True)
class InferenceResult:
    outputs: dict[str, np.ndarray]
    model_version: int


class _SharedMemoryUnsupported(Exception):
    """The server cannot map this client's shared memory (another host or container)."""


LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1", "[::1]")


class TritonEvaluator:
    """The Evaluator protocol over Triton's gRPC API.

    `evaluate(spatial, globals)` returns policy/value/score/ownership arrays. Batches larger than
    the model's max_batch_size are split. `version=None` lets Triton pick (its latest ready
    version); `set_version(v)` pins a version (selfplay switches on each `tengen.models`
    announcement). While the server is unreachable (restart) requests are retried with backoff for
    up to `retry_deadline_s`; an unknown model or version fails at once with UnknownModelError.
    Setting `stop` (a service's shutdown event) ends the retrying at once with a TritonError, so a
    worker waiting for a dead server still stops promptly.
    `submit()` runs a request on a small thread pool so several batches can be in flight.
    `shared_memory`: pass inputs and outputs through system shared memory (tengen.infra.shm)
    instead of the gRPC messages; None (default) uses it when the server is on this host's loopback
    and falls back to plain gRPC, with a log line, where the server cannot map the regions.
    """

    def __init__(self, url: str, model: str, version: int | None = None, *, timeout_s: float = 60.0,
                 retry_deadline_s: float = 300.0, max_in_flight: int = 4,
                 stop: threading.Event | None = None, shared_memory: bool | None = None) -> None:
        self.url = url
        self.model = check_model_name(model)
        self.timeout_s = timeout_s
        self.retry_deadline_s = retry_deadline_s
        self._stop = stop if stop is not None else threading.Event()
        self._version = version
        self._local = threading.local()
        self._clients: list = []
        self._clients_lock = threading.Lock()
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=max_in_flight,
                                                           thread_name_prefix="triton-eval")
        self.max_batch_size, self.outputs = self._call_with_retry(self._fetch_config)
        if shared_memory is None:
            shared_memory = url.rpartition(":")[0] in LOOPBACK_HOSTS
        self.shared_memory = shared_memory
        self._regions: list[ShmRegion] = []

    @property
    def version(self) -> int | None:
        return self._version

    def set_version(self, version: int | None) -> None:
        if version is not None and version < 1:
            raise ValueError(f"model versions start at 1, got {version}")
        if version != self._version:
            log.info("evaluator: %s now requests version %s", self.model, version if version else "latest")
        self._version = version

    def _client(self):  # one gRPC client per thread: tritonclient clients are not thread-safe
        client = getattr(self._local, "client", None)
        if client is None:
            client = _grpc_client(self.url)
            self._local.client = client
            with self._clients_lock:
                self._clients.append(client)
        return client

    def _fetch_config(self) -> tuple[int, tuple[str, ...]]:
        """(max batch size, the outputs to request): a model repository configured before an output
        existed (uncertainty) keeps serving without it, and complete_outputs fills it in."""
        config = self._client().get_model_config(self.model, as_json=True).get("config", {})
        declared = {o.get("name") for o in config.get("output", [])}
        outputs = tuple(n for n in OUTPUT_NAMES if n in declared) if declared else OUTPUT_NAMES
        return int(config.get("max_batch_size", 0)) or 1, outputs

    def _unknown(self, exc: Exception) -> UnknownModelError:
        try:
            ready = {(m.get("name"), m.get("version")) for m in
                     self._client().get_model_repository_index(as_json=True).get("models", [])
                     if m.get("state") == "READY"}
            serving = ", ".join(f"{n} v{v}" for n, v in sorted(ready)) or "none"
        except Exception:
            serving = "unknown (index not available)"
        wanted = f"{self.model}" + (f" version {self._version}" if self._version else "")
        return UnknownModelError(f"Triton at {self.url} does not serve {wanted} (ready: {serving}): {exc}")

    def _call_with_retry(self, fn):
        deadline = time.monotonic() + self.retry_deadline_s
        delay = 0.2
        warned = False
        while True:
            try:
                result = fn()
            except _SharedMemoryUnsupported:
                raise
            except Exception as exc:
                if _is_unknown_model(exc):
                    raise self._unknown(exc) from exc
                if not _is_unavailable(exc) or time.monotonic() >= deadline:
                    raise TritonError(f"inference on {self.model} at {self.url} failed: {exc}") from exc
                if not warned:
                    log.warning(
                        "evaluator: Triton at %s unavailable (%s); retrying with backoff for up to %.0f s",
                        self.url,
                        str(exc).strip()[:200],
                        self.retry_deadline_s,
                    )
                    warned = True
                if self._stop.wait(delay):  # returns at once when already stopping
                    raise TritonError(
                        f"inference on {self.model} at {self.url} abandoned while stopping: {exc}"
                    ) from exc
                delay = min(delay * 2, 5.0)
                continue
            if warned:
                log.info("evaluator: Triton at %s reachable again", self.url)
            return result

    def _infer_chunk(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        if self.shared_memory:
            try:
                return self._call_with_retry(lambda: self._infer_shared(spatial, global_inputs))
            except _SharedMemoryUnsupported as exc:
                log.warning(
                    "evaluator: Triton at %s cannot map this host's shared memory (%s); sending "
                    "tensors in the gRPC messages from now on",
                    self.url,
                    exc,
                )
                self.shared_memory = False
        return self._call_with_retry(lambda: self._infer_grpc(spatial, global_inputs))

    def _request(self, client, inputs, outputs) -> tuple[Any, int]:
        version = self._version
        result = client.infer(
            self.model,
            inputs,
            model_version=str(version) if version else "",
            outputs=outputs,
            client_timeout=self.timeout_s,
        )
        return result, int(result.get_response().model_version)

    def _infer_grpc(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        import tritonclient.grpc as grpcclient

        inputs = [
            grpcclient.InferInput("spatial", list(spatial.shape), "FP32"),
            grpcclient.InferInput("globals", list(global_inputs.shape), "FP32"),
        ]
        inputs[0].set_data_from_numpy(spatial)
        inputs[1].set_data_from_numpy(global_inputs)
        result, version = self._request(
            self._client(), inputs, [grpcclient.InferRequestedOutput(n) for n in self.outputs]
        )
        arrays = {name: result.as_numpy(name) for name in self.outputs}
        for name, arr in arrays.items():
            if arr is None or arr.shape[0] != spatial.shape[0]:
                raise TritonError(f"{self.model}: output {name} missing or wrong batch size")
        # as_numpy gives read-only views of the response; the search's Cython backup takes
        # writable memoryviews, like TorchEvaluator's arrays.
        return InferenceResult(complete_outputs({name: np.array(arr) for name, arr in arrays.items()}), version)

    def _infer_shared(self, spatial: np.ndarray, global_inputs: np.ndarray) -> InferenceResult:
        import tritonclient.grpc as grpcclient

        client, region = self._client(), self._region()
        placed_inputs, placed_outputs = region.write_inputs(spatial, global_inputs)
        inputs = []
        for p in placed_inputs:
            inputs.append(grpcclient.InferInput(p.name, list(p.shape), "FP32"))
            inputs[-1].set_shared_memory(region.name, p.nbytes, p.offset)
        outputs = []
        placed_outputs = [p for p in placed_outputs if p.name in self.outputs]
        for p in placed_outputs:
            outputs.append(grpcclient.InferRequestedOutput(p.name))
            outputs[-1].set_shared_memory(region.name, p.nbytes, p.offset)
        if not region.registered:
            self._register(client, region)
        try:
            _, version = self._request(client, inputs, outputs)
        except Exception:
            region.registered = False  # a restarted server has forgotten it: register it again
            raise
        return InferenceResult(complete_outputs(region.read_outputs(placed_outputs)), version)

    def _region(self) -> ShmRegion:
        region = getattr(self._local, "region", None)
        if region is None:
            region = self._local.region = ShmRegion(self.max_batch_size)
            with self._clients_lock:
                self._regions.append(region)
        return region

    def _register(self, client, region: ShmRegion) -> None:
        with contextlib.suppress(Exception):  # a registration the server still holds from before
            client.unregister_system_shared_memory(region.name)
        try:
            client.register_system_shared_memory(region.name, region.key, region.byte_size)
        except Exception as exc:
            if _is_unavailable(exc):
                raise
            raise _SharedMemoryUnsupported(str(exc).strip()[:300]) from exc
        region.registered = True

    def infer(self, spatial: np.ndarray, globals: np.ndarray) -> InferenceResult:  # noqa: A002
        """Outputs plus the version that computed them (the lowest one when a batch was split)."""
        spatial, global_inputs = check_batch(spatial, globals)
        n = spatial.shape[0]
        if n <= self.max_batch_size:
            return self._infer_chunk(spatial, global_inputs)
        parts = [
            self._infer_chunk(spatial[i : i + self.max_batch_size], global_inputs[i : i + self.max_batch_size])
            for i in range(0, n, self.max_batch_size)
        ]
        merged = {name: np.concatenate([p.outputs[name] for p in parts]) for name in OUTPUT_NAMES}
        return InferenceResult(merged, min(p.model_version for p in parts))

    def evaluate(self, spatial: np.ndarray, globals: np.ndarray) -> dict[str, np.ndarray]:  # noqa: A002
        return self.infer(spatial, globals).outputs

    def submit(self, spatial: np.ndarray, globals: np.ndarray) -> concurrent.futures.Future[InferenceResult]:  # noqa: A002
        """Start a request in the background; the future yields an InferenceResult."""
        return self._pool.submit(self.infer, spatial, globals)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        with self._clients_lock:
            clients, self._clients = self._clients, []
            regions, self._regions = self._regions, []
        if regions and clients:
            for region in regions:
                with contextlib.suppress(Exception):  # the server may be gone: nothing to unregister
                    clients[0].unregister_system_shared_memory(region.name, client_timeout=5.0)
        for region in regions:
            region.close()
        for client in clients:
            client.close()
        self._local = threading.local()

    def __enter__(self) -> "TritonEvaluator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
