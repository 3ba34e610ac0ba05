"""System shared memory between a TritonEvaluator and a Triton server on the same host.

Over plain gRPC every batch is copied into a protobuf message, parsed by the server, and the same
again for the outputs. With the inputs and outputs in a region of /dev/shm that both processes
map, a request carries only the region's name, offsets and sizes. A region is used by one client
thread at a time, for one request from start to end, and is sized for the model's largest batch
on the largest board: inputs first, then room for the outputs.
"""
from __future__ import annotations

import itertools
import os
import re
import time
from dataclasses import dataclass
from multiprocessing import shared_memory
from pathlib import Path

import numpy as np

from tengen.go.planes import MAX_BOARD, NUM_GLOBAL, NUM_SPATIAL

FLOAT_BYTES = 4
CLIENT_REGION_PREFIX = "tengen-"  # then the client's pid and a count
_IDS = itertools.count()


def output_shapes(n: int, height: int, width: int) -> dict[str, tuple[int, ...]]:
    """The shapes of the exported model's outputs for n positions of height x width."""
    return {"policy": (n, height * width + 1), "value": (n, 3), "score": (n, 2), "ownership": (n, height, width),
            "uncertainty": (n, 2)}


@dataclass(frozen=True)
class Placement:
    """Where one tensor lies in a region."""
    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * FLOAT_BYTES


class ShmRegion:
    """One /dev/shm region named `tengen-<pid>-<n>`; `registered` is the client's note of whether
    the server knows it (a restarted server forgets its regions)."""

    def __init__(self, max_batch: int) -> None:
        self.name = f"{CLIENT_REGION_PREFIX}{os.getpid()}-{next(_IDS)}"
        outputs = sum(int(np.prod(shape)) for shape in output_shapes(1, MAX_BOARD, MAX_BOARD).values())
        per_position = NUM_SPATIAL * MAX_BOARD * MAX_BOARD + NUM_GLOBAL + outputs
        self.byte_size = max_batch * per_position * FLOAT_BYTES
        self.key = f"/{self.name}"  # the POSIX name the server opens
        self._shm: shared_memory.SharedMemory | None = shared_memory.SharedMemory(
            name=self.name, create=True, size=self.byte_size)
        self.registered = False

    def write_inputs(self, spatial: np.ndarray, global_inputs: np.ndarray) -> tuple[list[Placement], list[Placement]]:
        """Copy a batch in; (input placements, output placements) for the request."""
        if self._shm is None:
            raise ValueError(f"shared memory region {self.name} is closed")
        inputs = [Placement("spatial", spatial.shape, 0),
                  Placement("globals", global_inputs.shape, spatial.nbytes)]
        offset = spatial.nbytes + global_inputs.nbytes
        outputs = []
        for name, shape in output_shapes(spatial.shape[0], spatial.shape[2], spatial.shape[3]).items():
            outputs.append(Placement(name, shape, offset))
            offset += outputs[-1].nbytes
        if offset > self.byte_size:
            raise ValueError(f"a batch of {spatial.shape[0]} at {spatial.shape[2]}x{spatial.shape[3]} needs "
                             f"{offset} bytes; region {self.name} has {self.byte_size}")
        for placement, array in zip(inputs, (spatial, global_inputs)):
            self._view(placement)[...] = array
        return inputs, outputs

    def read_outputs(self, outputs: list[Placement]) -> dict[str, np.ndarray]:
        """Copies of the placed outputs (the region is reused by the next request)."""
        return {p.name: np.array(self._view(p)) for p in outputs}

    def _view(self, placement: Placement) -> np.ndarray:
        assert self._shm is not None
        return np.ndarray(placement.shape, np.float32, buffer=self._shm.buf, offset=placement.offset)

    def close(self) -> None:
        """Unmap and unlink (the server must have unregistered it, or have gone)."""
        if self._shm is not None:
            self._shm.close()
            self._shm.unlink()
            self._shm = None


SHM_DIR = Path("/dev/shm")
_CLIENT_REGION = re.compile(re.escape(CLIENT_REGION_PREFIX) + r"(\d+)-\d+")
STUB_REGION_PREFIX = "triton_python_backend_shm_region_"  # Triton's Python backend, one per stub
ORPHAN_AGE_S = 60.0  # younger stub regions are spared: a stub may be starting as no Triton shows yet


def _triton_alive() -> bool:
    """Whether a tritonserver or Python backend stub runs on this host (True when unsure)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes()
        except FileNotFoundError:  # gone meanwhile
            continue
        except OSError:
            return True
        if b"tritonserver" in cmdline or b"triton_python_backend_stub" in cmdline:
            return True
    return False


def remove_orphaned_regions(directory: Path = SHM_DIR) -> list[str]:
    """Unlink the regions that SIGKILLed processes left in /dev/shm, where nothing unlinks them:
    a client's `tengen-<pid>-<n>` whose process is gone, and a Triton Python stub's region older
    than ORPHAN_AGE_S while no tritonserver or stub runs on this host (a region's owner cannot be
    told from its name, and another server's stub may be using it). `directory` is /dev/shm but
    in tests. Returns the names removed."""
    removed: list[str] = []
    now = time.time()
    triton_alive: bool | None = None
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        return removed
    for path in entries:
        match = _CLIENT_REGION.fullmatch(path.name)
        if match:
            try:
                os.kill(int(match.group(1)), 0)
                continue  # alive (or another user's pid: not ours to judge)
            except ProcessLookupError:
                pass
            except OSError:
                continue
        elif path.name.startswith(STUB_REGION_PREFIX):
            try:
                if now - path.stat().st_mtime < ORPHAN_AGE_S:
                    continue
            except OSError:
                continue
            if triton_alive is None:
                triton_alive = _triton_alive()
            if triton_alive:
                continue
        else:
            continue
        try:
            path.unlink()
            removed.append(path.name)
        except OSError:
            pass
    return removed
