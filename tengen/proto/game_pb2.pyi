import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Color(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COLOR_UNSPECIFIED: _ClassVar[Color]
    BLACK: _ClassVar[Color]
    WHITE: _ClassVar[Color]

class EndReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    END_REASON_UNSPECIFIED: _ClassVar[EndReason]
    TWO_PASSES: _ClassVar[EndReason]
    PASS_ALIVE: _ClassVar[EndReason]
    MOVE_CAP: _ClassVar[EndReason]
COLOR_UNSPECIFIED: Color
BLACK: Color
WHITE: Color
END_REASON_UNSPECIFIED: EndReason
TWO_PASSES: EndReason
PASS_ALIVE: EndReason
MOVE_CAP: EndReason

class Move(_message.Message):
    __slots__ = ("move", "color", "full_search", "policy_moves", "policy_visits", "value_win", "value_loss", "value_no_result", "score_mean", "weight", "policy_surprise")
    MOVE_FIELD_NUMBER: _ClassVar[int]
    COLOR_FIELD_NUMBER: _ClassVar[int]
    FULL_SEARCH_FIELD_NUMBER: _ClassVar[int]
    POLICY_MOVES_FIELD_NUMBER: _ClassVar[int]
    POLICY_VISITS_FIELD_NUMBER: _ClassVar[int]
    VALUE_WIN_FIELD_NUMBER: _ClassVar[int]
    VALUE_LOSS_FIELD_NUMBER: _ClassVar[int]
    VALUE_NO_RESULT_FIELD_NUMBER: _ClassVar[int]
    SCORE_MEAN_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    POLICY_SURPRISE_FIELD_NUMBER: _ClassVar[int]
    move: int
    color: Color
    full_search: bool
    policy_moves: _containers.RepeatedScalarFieldContainer[int]
    policy_visits: _containers.RepeatedScalarFieldContainer[int]
    value_win: float
    value_loss: float
    value_no_result: float
    score_mean: float
    weight: float
    policy_surprise: float
    def __init__(self, move: _Optional[int] = ..., color: _Optional[_Union[Color, str]] = ..., full_search: _Optional[bool] = ..., policy_moves: _Optional[_Iterable[int]] = ..., policy_visits: _Optional[_Iterable[int]] = ..., value_win: _Optional[float] = ..., value_loss: _Optional[float] = ..., value_no_result: _Optional[float] = ..., score_mean: _Optional[float] = ..., weight: _Optional[float] = ..., policy_surprise: _Optional[float] = ...) -> None: ...

class SideBranch(_message.Message):
    __slots__ = ("move_index", "alternative", "searches")
    MOVE_INDEX_FIELD_NUMBER: _ClassVar[int]
    ALTERNATIVE_FIELD_NUMBER: _ClassVar[int]
    SEARCHES_FIELD_NUMBER: _ClassVar[int]
    move_index: int
    alternative: int
    searches: _containers.RepeatedCompositeFieldContainer[Move]
    def __init__(self, move_index: _Optional[int] = ..., alternative: _Optional[int] = ..., searches: _Optional[_Iterable[_Union[Move, _Mapping]]] = ...) -> None: ...

class GameRecord(_message.Message):
    __slots__ = ("id", "x_size", "y_size", "rules", "komi", "handicap", "initial_black", "initial_white", "first_to_move", "moves", "model_version", "model_name", "created", "final_score", "result", "ownership", "end_reason", "side_branches")
    ID_FIELD_NUMBER: _ClassVar[int]
    X_SIZE_FIELD_NUMBER: _ClassVar[int]
    Y_SIZE_FIELD_NUMBER: _ClassVar[int]
    RULES_FIELD_NUMBER: _ClassVar[int]
    KOMI_FIELD_NUMBER: _ClassVar[int]
    HANDICAP_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BLACK_FIELD_NUMBER: _ClassVar[int]
    INITIAL_WHITE_FIELD_NUMBER: _ClassVar[int]
    FIRST_TO_MOVE_FIELD_NUMBER: _ClassVar[int]
    MOVES_FIELD_NUMBER: _ClassVar[int]
    MODEL_VERSION_FIELD_NUMBER: _ClassVar[int]
    MODEL_NAME_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    FINAL_SCORE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    OWNERSHIP_FIELD_NUMBER: _ClassVar[int]
    END_REASON_FIELD_NUMBER: _ClassVar[int]
    SIDE_BRANCHES_FIELD_NUMBER: _ClassVar[int]
    id: str
    x_size: int
    y_size: int
    rules: str
    komi: float
    handicap: int
    initial_black: _containers.RepeatedScalarFieldContainer[int]
    initial_white: _containers.RepeatedScalarFieldContainer[int]
    first_to_move: Color
    moves: _containers.RepeatedCompositeFieldContainer[Move]
    model_version: int
    model_name: str
    created: _timestamp_pb2.Timestamp
    final_score: float
    result: str
    ownership: _containers.RepeatedScalarFieldContainer[int]
    end_reason: EndReason
    side_branches: _containers.RepeatedCompositeFieldContainer[SideBranch]
    def __init__(self, id: _Optional[str] = ..., x_size: _Optional[int] = ..., y_size: _Optional[int] = ..., rules: _Optional[str] = ..., komi: _Optional[float] = ..., handicap: _Optional[int] = ..., initial_black: _Optional[_Iterable[int]] = ..., initial_white: _Optional[_Iterable[int]] = ..., first_to_move: _Optional[_Union[Color, str]] = ..., moves: _Optional[_Iterable[_Union[Move, _Mapping]]] = ..., model_version: _Optional[int] = ..., model_name: _Optional[str] = ..., created: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., final_score: _Optional[float] = ..., result: _Optional[str] = ..., ownership: _Optional[_Iterable[int]] = ..., end_reason: _Optional[_Union[EndReason, str]] = ..., side_branches: _Optional[_Iterable[_Union[SideBranch, _Mapping]]] = ...) -> None: ...
