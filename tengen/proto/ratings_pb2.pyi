from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PlayerKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PLAYER_KIND_UNSPECIFIED: _ClassVar[PlayerKind]
    MODEL: _ClassVar[PlayerKind]
    ANCHOR: _ClassVar[PlayerKind]
    ENGINE: _ClassVar[PlayerKind]

class Result(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESULT_UNSPECIFIED: _ClassVar[Result]
    BLACK_WINS: _ClassVar[Result]
    WHITE_WINS: _ClassVar[Result]
    DRAW: _ClassVar[Result]
PLAYER_KIND_UNSPECIFIED: PlayerKind
MODEL: PlayerKind
ANCHOR: PlayerKind
ENGINE: PlayerKind
RESULT_UNSPECIFIED: Result
BLACK_WINS: Result
WHITE_WINS: Result
DRAW: Result

class PlayerInfo(_message.Message):
    __slots__ = ("name", "kind", "training_samples")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    TRAINING_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: PlayerKind
    training_samples: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[PlayerKind, str]] = ..., training_samples: _Optional[int] = ...) -> None: ...

class Game(_message.Message):
    __slots__ = ("game_id", "black", "white", "result", "source", "played_at_unix_ms")
    GAME_ID_FIELD_NUMBER: _ClassVar[int]
    BLACK_FIELD_NUMBER: _ClassVar[int]
    WHITE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    PLAYED_AT_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    game_id: str
    black: str
    white: str
    result: Result
    source: str
    played_at_unix_ms: int
    def __init__(self, game_id: _Optional[str] = ..., black: _Optional[str] = ..., white: _Optional[str] = ..., result: _Optional[_Union[Result, str]] = ..., source: _Optional[str] = ..., played_at_unix_ms: _Optional[int] = ...) -> None: ...

class ReportGamesRequest(_message.Message):
    __slots__ = ("games", "players")
    GAMES_FIELD_NUMBER: _ClassVar[int]
    PLAYERS_FIELD_NUMBER: _ClassVar[int]
    games: _containers.RepeatedCompositeFieldContainer[Game]
    players: _containers.RepeatedCompositeFieldContainer[PlayerInfo]
    def __init__(self, games: _Optional[_Iterable[_Union[Game, _Mapping]]] = ..., players: _Optional[_Iterable[_Union[PlayerInfo, _Mapping]]] = ...) -> None: ...

class ReportGamesResponse(_message.Message):
    __slots__ = ("accepted", "duplicates")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    DUPLICATES_FIELD_NUMBER: _ClassVar[int]
    accepted: int
    duplicates: int
    def __init__(self, accepted: _Optional[int] = ..., duplicates: _Optional[int] = ...) -> None: ...

class FitOptions(_message.Message):
    __slots__ = ("prior_draws",)
    PRIOR_DRAWS_FIELD_NUMBER: _ClassVar[int]
    prior_draws: float
    def __init__(self, prior_draws: _Optional[float] = ...) -> None: ...

class Rating(_message.Message):
    __slots__ = ("name", "kind", "rank", "rated", "elo", "stddev", "elo_low", "elo_high", "games", "wins", "losses", "draws", "training_samples", "created_unix_ms")
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    RANK_FIELD_NUMBER: _ClassVar[int]
    RATED_FIELD_NUMBER: _ClassVar[int]
    ELO_FIELD_NUMBER: _ClassVar[int]
    STDDEV_FIELD_NUMBER: _ClassVar[int]
    ELO_LOW_FIELD_NUMBER: _ClassVar[int]
    ELO_HIGH_FIELD_NUMBER: _ClassVar[int]
    GAMES_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    TRAINING_SAMPLES_FIELD_NUMBER: _ClassVar[int]
    CREATED_UNIX_MS_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: PlayerKind
    rank: int
    rated: bool
    elo: float
    stddev: float
    elo_low: float
    elo_high: float
    games: int
    wins: int
    losses: int
    draws: int
    training_samples: int
    created_unix_ms: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[PlayerKind, str]] = ..., rank: _Optional[int] = ..., rated: _Optional[bool] = ..., elo: _Optional[float] = ..., stddev: _Optional[float] = ..., elo_low: _Optional[float] = ..., elo_high: _Optional[float] = ..., games: _Optional[int] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., training_samples: _Optional[int] = ..., created_unix_ms: _Optional[int] = ...) -> None: ...

class FitSummary(_message.Message):
    __slots__ = ("anchor", "anchor_elo", "prior_draws", "confidence", "total_games")
    ANCHOR_FIELD_NUMBER: _ClassVar[int]
    ANCHOR_ELO_FIELD_NUMBER: _ClassVar[int]
    PRIOR_DRAWS_FIELD_NUMBER: _ClassVar[int]
    CONFIDENCE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_GAMES_FIELD_NUMBER: _ClassVar[int]
    anchor: str
    anchor_elo: float
    prior_draws: float
    confidence: float
    total_games: int
    def __init__(self, anchor: _Optional[str] = ..., anchor_elo: _Optional[float] = ..., prior_draws: _Optional[float] = ..., confidence: _Optional[float] = ..., total_games: _Optional[int] = ...) -> None: ...

class LeaderboardRequest(_message.Message):
    __slots__ = ("limit", "options")
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    limit: int
    options: FitOptions
    def __init__(self, limit: _Optional[int] = ..., options: _Optional[_Union[FitOptions, _Mapping]] = ...) -> None: ...

class LeaderboardResponse(_message.Message):
    __slots__ = ("ratings", "summary")
    RATINGS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    ratings: _containers.RepeatedCompositeFieldContainer[Rating]
    summary: FitSummary
    def __init__(self, ratings: _Optional[_Iterable[_Union[Rating, _Mapping]]] = ..., summary: _Optional[_Union[FitSummary, _Mapping]] = ...) -> None: ...

class PlayerRequest(_message.Message):
    __slots__ = ("name", "options")
    NAME_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    options: FitOptions
    def __init__(self, name: _Optional[str] = ..., options: _Optional[_Union[FitOptions, _Mapping]] = ...) -> None: ...

class HeadToHead(_message.Message):
    __slots__ = ("opponent", "wins", "losses", "draws", "opponent_elo", "expected_score")
    OPPONENT_FIELD_NUMBER: _ClassVar[int]
    WINS_FIELD_NUMBER: _ClassVar[int]
    LOSSES_FIELD_NUMBER: _ClassVar[int]
    DRAWS_FIELD_NUMBER: _ClassVar[int]
    OPPONENT_ELO_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SCORE_FIELD_NUMBER: _ClassVar[int]
    opponent: str
    wins: int
    losses: int
    draws: int
    opponent_elo: float
    expected_score: float
    def __init__(self, opponent: _Optional[str] = ..., wins: _Optional[int] = ..., losses: _Optional[int] = ..., draws: _Optional[int] = ..., opponent_elo: _Optional[float] = ..., expected_score: _Optional[float] = ...) -> None: ...

class PlayerResponse(_message.Message):
    __slots__ = ("rating", "head_to_head", "summary")
    RATING_FIELD_NUMBER: _ClassVar[int]
    HEAD_TO_HEAD_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    rating: Rating
    head_to_head: _containers.RepeatedCompositeFieldContainer[HeadToHead]
    summary: FitSummary
    def __init__(self, rating: _Optional[_Union[Rating, _Mapping]] = ..., head_to_head: _Optional[_Iterable[_Union[HeadToHead, _Mapping]]] = ..., summary: _Optional[_Union[FitSummary, _Mapping]] = ...) -> None: ...

class HistoryRequest(_message.Message):
    __slots__ = ("options",)
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    options: FitOptions
    def __init__(self, options: _Optional[_Union[FitOptions, _Mapping]] = ...) -> None: ...

class HistoryResponse(_message.Message):
    __slots__ = ("points", "summary")
    POINTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    points: _containers.RepeatedCompositeFieldContainer[Rating]
    summary: FitSummary
    def __init__(self, points: _Optional[_Iterable[_Union[Rating, _Mapping]]] = ..., summary: _Optional[_Union[FitSummary, _Mapping]] = ...) -> None: ...
