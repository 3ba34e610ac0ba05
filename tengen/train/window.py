"""The training window: a durable, append-only on-disk store of training rows (paper §4.7).

Training batches are drawn uniformly from the last N_window rows ever appended, where

    N_window = c (1 + beta ((N_total / c)^alpha - 1) / alpha),  alpha = 0.75, beta = 0.4,

capped at N_total (the formula alone exceeds N_total while N_total < c) and rounded down.

Layout of a window directory:
- ``shards/<first row>.rows``: fixed-size binary records (the numpy dtype from `row_dtype`), one
  after another; rows are only ever appended to the newest shard, which is sealed after
  `shard_rows` rows. Spatial planes are binary and stored bit-packed.
- ``game_ids.jsonl``: every game ever appended, one JSON line ``[id, digest]`` each (dedupe; the
  digest of the game's record tells a redelivered game from a different one under a known id).
  Lines that are a bare JSON string (windows written before digests) have no digest.
- ``lock``: held (flock) by the one process that has the window open for writing.
- ``manifest.json``: the commit record, replaced atomically (write, fsync, rename, fsync the
  directory): format, pos_len, total rows, the committed byte length of the id log, and the first
  row and row count of each shard still in use.

An append writes and fsyncs the rows, then the id, then the manifest; it is acknowledged (returns)
only after all three are on disk. Anything past the manifest's lengths (a torn write of a crashed
append) is cut off when the store is opened, and shard files the manifest does not name are
deleted, so a crashed append is invisible and its game can be appended again. Shards that fall
entirely behind the window are dropped from the manifest and then deleted.

One process writes a window directory at a time: opening for writing takes the lock (a second
writer gets WindowError at once, before it touches a file), runs the recovery above and holds the
lock until `close()` or exit. `read_only=True` opens without the lock and without recovery, for
inspection: it sees the window as its manifest was at the open. Appends and samples are
thread-safe.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tengen.go import planes, symmetry
from tengen.infra.files import fsync_dir
from tengen.loop.rows import TrainingRows

FORMAT = "tengen-window-3"  # 3: rows carry short-term value and score targets
# Windows of the previous format stay readable and appendable in their own format: their rows (and
# rows appended to them) have no short-term targets (short_term_weight 0 in batches). A run that
# wants those targets starts a new window.
FORMAT_WITHOUT_SHORT_TERM = "tengen-window-2"  # 2: rows carry final_weight
FORMATS = (FORMAT, FORMAT_WITHOUT_SHORT_TERM)
MANIFEST = "manifest.json"
IDS = "game_ids.jsonl"
LOCK = "lock"
SHARDS = "shards"
ALPHA = 0.75
BETA = 0.4


class WindowError(RuntimeError):
    """The window directory is unusable (corrupt, or made with other settings)."""


def window_size(n_total: int, c: int, alpha: float = ALPHA, beta: float = BETA) -> int:
    """Rows in the window after `n_total` rows were ever appended (§4.7): min(N_window, N_total)."""
    if n_total < 0 or c < 1:
        raise ValueError(f"need n_total >= 0 and c >= 1, got {n_total}, {c}")
    if n_total == 0:
        return 0
    n_window = c * (1.0 + beta * ((n_total / c) ** alpha - 1.0) / alpha)
    return min(n_total, int(n_window))


def row_dtype(pos_len: int, short_term: bool = True) -> np.dtype:
    """The on-disk record of one row for a pos_len x pos_len buffer (`short_term`: with the
    short-term targets, FORMAT; without, FORMAT_WITHOUT_SHORT_TERM)."""
    area = pos_len * pos_len
    extra = [("short_term", np.float32, (2,)), ("short_term_weight", np.float32)] if short_term else []
    return np.dtype([
        ("spatial", np.uint8, ((planes.NUM_SPATIAL * area + 7) // 8,)),  # np.packbits of [C, L, L]
        ("global_inputs", np.float32, (planes.NUM_GLOBAL,)),
        ("policy", np.float32, (area + 1,)),
        ("opponent_policy", np.float32, (area + 1,)),
        ("value", np.float32, (3,)),
        ("score", np.float32),
        ("ownership", np.int8, (area,)),
        ("weight", np.float32),
        ("final_weight", np.float32),
        ("x_size", np.uint8),
        ("y_size", np.uint8),
        *extra,
    ])


@dataclass
class Batch:
    """A training batch (numpy; the trainer moves it to torch). Field names match
    tengen.nn.loss.Targets; B = batch size, L = pos_len."""

    spatial: np.ndarray  # float32 [B, NUM_SPATIAL, L, L]
    global_inputs: np.ndarray  # float32 [B, NUM_GLOBAL]
    policy: np.ndarray  # float32 [B, L*L + 1]
    opponent_policy: np.ndarray  # float32 [B, L*L + 1]
    value: np.ndarray  # float32 [B, 3]
    score: np.ndarray  # float32 [B]
    ownership: np.ndarray  # float32 [B, L, L]
    weight: np.ndarray  # float32 [B]
    final_weight: np.ndarray  # float32 [B]: weight of score and ownership (Targets' score/ownership_weight)
    short_term: np.ndarray  # float32 [B, 2]: short-term value and score targets
    short_term_weight: np.ndarray  # float32 [B]: their weight (0: none)
    x_size: np.ndarray  # int64 [B]
    y_size: np.ndarray  # int64 [B]
    rows: np.ndarray  # int64 [B]: global row numbers drawn (for tests and diagnostics)
    symmetry: np.ndarray  # int64 [B]: the symmetry applied to each row

    @property
    def pos_len(self) -> int:
        return self.spatial.shape[-1]

    def cropped(self) -> "Batch":
        """The same rows in the smallest buffer that holds every board of the batch (boards are in
        the top-left corner, so cropping drops only zeros; policy indices are renumbered)."""
        old, new = self.pos_len, int(max(self.x_size.max(), self.y_size.max()))
        if new == old:
            return self
        n = len(self.weight)

        def policy(p: np.ndarray) -> np.ndarray:
            board = p[:, : old * old].reshape(n, old, old)[:, :new, :new].reshape(n, new * new)
            return np.concatenate([board, p[:, old * old :]], axis=1)

        return dataclasses.replace(
            self,
            spatial=np.ascontiguousarray(self.spatial[:, :, :new, :new]),
            policy=policy(self.policy),
            opponent_policy=policy(self.opponent_policy),
            ownership=np.ascontiguousarray(self.ownership[:, :new, :new]),
        )


@dataclass
class _Shard:
    first_row: int
    rows: int

    @property
    def name(self) -> str:
        return f"{self.first_row:012d}.rows"


def _write_at(path: Path, offset: int, data: bytes) -> None:
    """Write `data` at `offset` (cutting off whatever an earlier failed append left there) and
    fsync the file."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.ftruncate(fd, offset)
        os.lseek(fd, offset, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


class Window:
    """The window store in `directory` (created if missing)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        pos_len: int,
        c: int,
        alpha: float = ALPHA,
        beta: float = BETA,
        shard_rows: int | None = None,
        read_only: bool = False,
    ) -> None:
        if not planes.MIN_BOARD <= pos_len <= planes.MAX_BOARD:
            raise ValueError(f"pos_len must be within {planes.MIN_BOARD}..{planes.MAX_BOARD}, got {pos_len}")
        window_size(0, c, alpha, beta)  # validates c
        self.directory = Path(directory)
        self.pos_len = pos_len
        self.c, self.alpha, self.beta = c, alpha, beta
        # Small enough that old data is released in steps of a few percent of c.
        self.shard_rows = shard_rows if shard_rows is not None else max(64, min(65536, c // 16))
        if self.shard_rows < 1:
            raise ValueError(f"shard_rows must be >= 1, got {self.shard_rows}")
        self.format = FORMAT
        self.dtype = row_dtype(pos_len)
        self._lock = threading.RLock()
        self._maps: dict[int, tuple[int, np.memmap]] = {}  # first_row -> (rows mapped, map)
        self.read_only = read_only
        self._lock_file: int | None = None
        if read_only:
            if not (self.directory / MANIFEST).exists():
                raise WindowError(f"{self.directory}: no window here (no {MANIFEST})")
            self._read_manifest()
            self._ids = self._read_ids(self.directory / IDS, self._ids_bytes)
            return
        (self.directory / SHARDS).mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            self._recover()
        except BaseException:
            self.close()
            raise

    def _take_lock(self) -> None:
        path = self.directory / LOCK
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            who = "another Window of this process" if holder == str(os.getpid()) else f"process {holder}"
            raise WindowError(f"{self.directory} is open for writing by {who}; "
                              "open it with read_only=True to inspect it") from None
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_file = fd

    def close(self) -> None:
        """Release the writer's lock and the shard maps. Idempotent."""
        with self._lock:
            self._maps.clear()
            if self._lock_file is not None:
                os.close(self._lock_file)  # closing the descriptor releases the flock
                self._lock_file = None

    def __enter__(self) -> "Window":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- state ---------------------------------------------------------------------------------

    @property
    def n_total(self) -> int:
        """Rows ever appended."""
        return self._n_total

    @property
    def games(self) -> int:
        """Games ever appended (including those with no rows)."""
        return len(self._ids)

    def __len__(self) -> int:
        """Rows in the window now."""
        return window_size(self._n_total, self.c, self.alpha, self.beta)

    @property
    def start(self) -> int:
        """Global number of the oldest row in the window."""
        return self._n_total - len(self)

    def __contains__(self, game_id: str) -> bool:
        return game_id in self._ids

    def game_ids(self) -> dict[str, str]:
        """Every game appended: id -> the digest it was appended with."""
        with self._lock:
            return dict(self._ids)

    def digest_of(self, game_id: str) -> str | None:
        """The digest a game was appended with ("" when it had none), None for an unseen id."""
        return self._ids.get(game_id)

    def stored_rows(self) -> int:
        """Rows still on disk (the window plus the unreleased part of its oldest shard)."""
        return sum(s.rows for s in self._shards)

    # -- recovery ------------------------------------------------------------------------------

    def _read_manifest(self) -> None:
        manifest_path = self.directory / MANIFEST
        if manifest_path.exists():
            try:
                manifest = json.loads(manifest_path.read_text())
            except (OSError, ValueError) as err:
                raise WindowError(f"{manifest_path}: unreadable manifest: {err}") from err
            if manifest.get("format") not in FORMATS:
                raise WindowError(f"{manifest_path}: format {manifest.get('format')!r}, expected one of "
                                  f"{FORMATS} (a window of another tengen version: move it away to start a new one)")
            self.format = manifest["format"]
            self.dtype = row_dtype(self.pos_len, short_term=self.has_short_term)
            if manifest["pos_len"] != self.pos_len:
                raise WindowError(
                    f"{self.directory} holds rows for pos_len {manifest['pos_len']}, not {self.pos_len}"
                )
            self._n_total = int(manifest["n_total"])
            self._ids_bytes = int(manifest["ids_bytes"])
            self._shards = [_Shard(int(s["first_row"]), int(s["rows"])) for s in manifest["shards"]]
        else:
            self._n_total, self._ids_bytes, self._shards = 0, 0, []

    @staticmethod
    def _read_ids(path: Path, length: int) -> dict[str, str]:
        """game id -> digest from the first `length` bytes of the id log."""
        if length == 0:
            return {}
        with open(path, "rb") as f:
            data = f.read(length)
        ids: dict[str, str] = {}
        for number, line in enumerate(data.splitlines()):
            try:
                entry = json.loads(line)
                game_id, digest = (entry, "") if isinstance(entry, str) else entry
            except ValueError as err:
                raise WindowError(f"{path}: line {number + 1} is not a game id: {err}") from err
            ids[str(game_id)] = str(digest)
        return ids

    def _recover(self) -> None:
        self._read_manifest()
        # Cut torn tails of appends that never reached the manifest; drop unnamed files.
        row_bytes = self.dtype.itemsize
        named = {s.name for s in self._shards}
        for shard in self._shards:
            path = self.directory / SHARDS / shard.name
            size = path.stat().st_size if path.exists() else -1
            if size < shard.rows * row_bytes:
                raise WindowError(f"{path}: {size} bytes, the manifest needs {shard.rows * row_bytes}")
            if size > shard.rows * row_bytes:
                os.truncate(path, shard.rows * row_bytes)
        for path in (self.directory / SHARDS).iterdir():
            if path.name not in named:
                path.unlink()
        for path in self.directory.glob(MANIFEST + ".tmp*"):
            path.unlink()
        ids_path = self.directory / IDS
        if self._ids_bytes > (ids_path.stat().st_size if ids_path.exists() else 0):
            raise WindowError(f"{ids_path}: shorter than the {self._ids_bytes} bytes the manifest names")
        with open(ids_path, "a+b") as ids_file:
            ids_file.truncate(self._ids_bytes)
        self._ids = self._read_ids(ids_path, self._ids_bytes)

    # -- appending -----------------------------------------------------------------------------

    def append(self, game_id: str, rows: TrainingRows, digest: str = "") -> bool:
        """Durably add one game's rows, remembering `digest` (of its record) with its id; False
        (and nothing written) if the id was seen before."""
        if not isinstance(game_id, str) or not game_id:
            raise ValueError("game_id must be a non-empty string")
        if self.read_only or self._lock_file is None:
            raise WindowError(f"{self.directory}: this Window is not open for writing")
        records = self._pack(rows)
        with self._lock:
            if game_id in self._ids:
                return False
            shards = list(self._shards)
            if records.size:
                if not shards or shards[-1].rows >= self.shard_rows:
                    shards.append(_Shard(self._n_total, 0))
                shard = shards[-1]
                path = self.directory / SHARDS / shard.name
                is_new = not path.exists()
                _write_at(path, shard.rows * self.dtype.itemsize, records.tobytes())
                if is_new:
                    fsync_dir(path.parent)
                shards[-1] = _Shard(shard.first_row, shard.rows + records.size)
            line = (json.dumps([game_id, digest]) + "\n").encode()
            _write_at(self.directory / IDS, self._ids_bytes, line)
            n_total = self._n_total + records.size
            start = n_total - window_size(n_total, self.c, self.alpha, self.beta)
            dropped = [s for s in shards if s.first_row + s.rows <= start]
            shards = [s for s in shards if s.first_row + s.rows > start]
            self._write_manifest(n_total, self._ids_bytes + len(line), shards)
            # Committed: now update memory and release what fell out of the window.
            self._n_total, self._ids_bytes, self._shards = n_total, self._ids_bytes + len(line), shards
            self._ids[game_id] = digest
            for shard in dropped:
                self._maps.pop(shard.first_row, None)
                (self.directory / SHARDS / shard.name).unlink(missing_ok=True)
            return True

    def _write_manifest(self, n_total: int, ids_bytes: int, shards: list[_Shard]) -> None:
        manifest = {
            "format": self.format,
            "pos_len": self.pos_len,
            "n_total": n_total,
            "ids_bytes": ids_bytes,
            "shards": [{"first_row": s.first_row, "rows": s.rows} for s in shards],
        }
        tmp = self.directory / (MANIFEST + ".tmp")
        with open(tmp, "w") as f:
            json.dump(manifest, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.directory / MANIFEST)
        fsync_dir(self.directory)

    def _pack(self, rows: TrainingRows) -> np.ndarray:
        n, length = len(rows), self.pos_len
        if rows.pos_len != length:
            raise ValueError(f"rows are for pos_len {rows.pos_len}, this window stores {length}")
        if not (rows.x_size <= length and rows.y_size <= length):
            raise ValueError(f"a {rows.x_size}x{rows.y_size} board does not fit pos_len {length}")
        spatial = rows.spatial.reshape(n, planes.NUM_SPATIAL * length * length)
        if not ((spatial == 0) | (spatial == 1)).all():
            raise ValueError("spatial planes must be binary (0/1) to be stored bit-packed")
        weight = np.asarray(rows.weight, np.float32)
        if not (np.isfinite(weight).all() and (weight >= 0).all()):
            raise ValueError("row weights must be finite and >= 0")
        final_weight = np.asarray(rows.final_weights(), np.float32)
        if final_weight.shape != (n,) or not (np.isfinite(final_weight).all() and (final_weight >= 0).all()):
            raise ValueError(f"final weights must be {n} finite values >= 0")
        records = np.zeros(n, self.dtype)
        records["spatial"] = np.packbits(spatial.astype(np.uint8), axis=1)
        records["global_inputs"] = rows.global_inputs
        records["policy"] = rows.policy
        records["opponent_policy"] = rows.opponent_policy
        records["value"] = rows.value
        records["score"] = rows.score
        records["ownership"] = rows.ownership.reshape(n, length * length)
        records["weight"] = weight
        records["final_weight"] = final_weight
        records["x_size"] = rows.x_size
        records["y_size"] = rows.y_size
        if self.has_short_term:  # (an older window drops them)
            short_weight = np.asarray(rows.short_term_weights(), np.float32)
            if short_weight.shape != (n,) or not (np.isfinite(short_weight).all() and (short_weight >= 0).all()):
                raise ValueError(f"short-term weights must be {n} finite values >= 0")
            if rows.short_term is not None:
                if not np.isfinite(rows.short_term).all():
                    raise ValueError("short-term targets must be finite")
                records["short_term"] = rows.short_term
            records["short_term_weight"] = short_weight
        return records

    @property
    def has_short_term(self) -> bool:
        """Rows carry short-term targets (FORMAT; a FORMAT_WITHOUT_SHORT_TERM window's do not)."""
        return self.format == FORMAT

    # -- sampling ------------------------------------------------------------------------------

    def read(self, row_numbers: np.ndarray) -> np.ndarray:
        """The stored records of the given global row numbers (each within the window)."""
        row_numbers = np.asarray(row_numbers, np.int64)
        with self._lock:
            if row_numbers.size and (row_numbers.min() < self.start or row_numbers.max() >= self._n_total):
                raise IndexError(f"rows must be within the window [{self.start}, {self._n_total})")
            firsts = np.array([s.first_row for s in self._shards], np.int64)
            which = np.searchsorted(firsts, row_numbers, side="right") - 1
            out = np.empty(row_numbers.size, self.dtype)
            for k in np.unique(which):
                mask = which == k
                out[mask] = self._map(self._shards[k])[row_numbers[mask] - self._shards[k].first_row]
            return out

    def _map(self, shard: _Shard) -> np.memmap:
        mapped = self._maps.get(shard.first_row)
        if mapped is None or mapped[0] != shard.rows:  # the newest shard grows: map it again
            path = self.directory / SHARDS / shard.name
            mapped = (shard.rows, np.memmap(path, self.dtype, mode="r", shape=(shard.rows,)))
            self._maps[shard.first_row] = mapped
        return mapped[1]

    def sample(self, batch_size: int, rng: np.random.Generator, augment: bool = True, crop: bool = False) -> Batch:
        """`batch_size` rows drawn uniformly (with replacement) from the window, each under a random
        symmetry its board allows (identity when `augment` is False). With `crop`, the buffers
        shrink to the largest board in the batch (less work for the net on small boards)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        with self._lock:
            if len(self) == 0:
                raise ValueError("the window is empty")
            row_numbers = rng.integers(self.start, self._n_total, size=batch_size)
            records = self.read(row_numbers)
        batch = self._unpack(records, row_numbers, rng, augment)
        return batch.cropped() if crop else batch

    def _unpack(self, records: np.ndarray, row_numbers: np.ndarray, rng: np.random.Generator,
                augment: bool) -> Batch:
        n, length = records.size, self.pos_len
        area = length * length
        spatial = np.unpackbits(records["spatial"], axis=1, count=planes.NUM_SPATIAL * area)
        spatial = spatial.reshape(n, planes.NUM_SPATIAL, length, length).astype(np.float32)
        policy = records["policy"].copy()
        opponent = records["opponent_policy"].copy()
        ownership = records["ownership"].reshape(n, length, length).astype(np.float32)
        x_size = records["x_size"].astype(np.int64)
        y_size = records["y_size"].astype(np.int64)
        chosen = np.zeros(n, np.int64)
        if augment:
            square = x_size == y_size
            chosen = np.where(square, rng.integers(0, 8, size=n), rng.integers(0, 4, size=n))
            # Transform each group of rows sharing a board shape and a symmetry in one call.
            for h, w, s in {(int(a), int(b), int(c)) for a, b, c in zip(y_size, x_size, chosen)}:
                if s == 0:
                    continue
                idx = np.flatnonzero((y_size == h) & (x_size == w) & (chosen == s))
                spatial[idx] = symmetry.apply_planes(spatial[idx], s, h, w)
                ownership[idx] = symmetry.apply_planes(ownership[idx], s, h, w)
                for target in (policy, opponent):
                    grid = target[idx, :area].reshape(-1, length, length)
                    target[idx, :area] = symmetry.apply_planes(grid, s, h, w).reshape(-1, area)
        return Batch(
            spatial=spatial,
            global_inputs=records["global_inputs"].copy(),
            policy=policy,
            opponent_policy=opponent,
            value=records["value"].copy(),
            score=records["score"].copy(),
            ownership=ownership,
            weight=records["weight"].copy(),
            final_weight=records["final_weight"].copy(),
            short_term=(records["short_term"].copy() if self.has_short_term else np.zeros((n, 2), np.float32)),
            short_term_weight=(records["short_term_weight"].copy() if self.has_short_term
                               else np.zeros(n, np.float32)),
            x_size=x_size,
            y_size=y_size,
            rows=row_numbers,
            symmetry=chosen,
        )
