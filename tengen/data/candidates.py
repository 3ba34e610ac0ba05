"""Candidate nets: where the trainer writes them and how it announces them to gating.

A candidate is a TorchScript export (tengen.nn.export, with its JSON sidecar) at
`<data_dir>/candidates/<name>.pt`, written atomically before it is announced. The announcement is
a JSON value on Kafka topic `tengen.candidates`, key = name:
    {"name": "...", "path": "/abs/.../name.pt", "samples": 123456, "arch": "b6c96", "created": 1.7e9}
`samples` = training samples the trained net had seen when the candidate was averaged.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass

@dataclass(frozen=True)
class CandidateAnnouncement:
    name: str
    path: str
    samples: int
    arch: str
    created: float

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> "CandidateAnnouncement":
        """Parse an announcement; ValueError naming what is wrong."""
        try:
            raw = json.loads(data)
            announcement = cls(
                name=str(raw["name"]), path=str(raw["path"]), samples=int(raw["samples"]),
                arch=str(raw["arch"]), created=float(raw["created"]),
            )
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(f"not a candidate announcement: {err!r}") from err
        if announcement.samples < 0 or not announcement.name:
            raise ValueError(f"bad candidate announcement {raw!r}")
        return announcement
