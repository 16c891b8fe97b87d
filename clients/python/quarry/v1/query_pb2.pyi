from google.protobuf import duration_pb2 as _duration_pb2
from quarry.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class QueryRequest(_message.Message):
    __slots__ = ["explain", "knowledge_base", "query"]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    explain: bool
    knowledge_base: str
    query: str
    def __init__(self, knowledge_base: _Optional[str] = ..., query: _Optional[str] = ..., explain: bool = ...) -> None: ...

class QueryResponse(_message.Message):
    __slots__ = ["answer", "content_version", "degraded", "degraded_reason", "elapsed", "explain", "from_cache", "generation", "knowledge_base", "origin_tier", "sources", "tier"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    FROM_CACHE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_TIER_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    answer: str
    content_version: int
    degraded: bool
    degraded_reason: str
    elapsed: _duration_pb2.Duration
    explain: _types_pb2.Explain
    from_cache: bool
    generation: int
    knowledge_base: str
    origin_tier: _types_pb2.Tier
    sources: _containers.RepeatedCompositeFieldContainer[_types_pb2.Source]
    tier: _types_pb2.Tier
    def __init__(self, tier: _Optional[_Union[_types_pb2.Tier, str]] = ..., origin_tier: _Optional[_Union[_types_pb2.Tier, str]] = ..., from_cache: bool = ..., answer: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[_types_pb2.Source, _Mapping]]] = ..., degraded: bool = ..., degraded_reason: _Optional[str] = ..., knowledge_base: _Optional[str] = ..., generation: _Optional[int] = ..., elapsed: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., explain: _Optional[_Union[_types_pb2.Explain, _Mapping]] = ..., content_version: _Optional[int] = ...) -> None: ...

class QueryStreamRequest(_message.Message):
    __slots__ = ["request"]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: QueryRequest
    def __init__(self, request: _Optional[_Union[QueryRequest, _Mapping]] = ...) -> None: ...

class QueryStreamResponse(_message.Message):
    __slots__ = ["delta", "final"]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    delta: str
    final: QueryResponse
    def __init__(self, delta: _Optional[str] = ..., final: _Optional[_Union[QueryResponse, _Mapping]] = ...) -> None: ...
