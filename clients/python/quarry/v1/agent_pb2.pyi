from quarry.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class AgentAnswer(_message.Message):
    __slots__ = ["answer", "degraded", "degraded_reason", "llm", "sources"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_FIELD_NUMBER: _ClassVar[int]
    DEGRADED_REASON_FIELD_NUMBER: _ClassVar[int]
    LLM_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    answer: str
    degraded: bool
    degraded_reason: str
    llm: _types_pb2.LlmTrace
    sources: _containers.RepeatedCompositeFieldContainer[_types_pb2.Source]
    def __init__(self, answer: _Optional[str] = ..., sources: _Optional[_Iterable[_Union[_types_pb2.Source, _Mapping]]] = ..., degraded: bool = ..., degraded_reason: _Optional[str] = ..., llm: _Optional[_Union[_types_pb2.LlmTrace, _Mapping]] = ...) -> None: ...

class AnswerRequest(_message.Message):
    __slots__ = ["content_version", "generation", "knowledge_base", "prefetched", "query", "sources", "tier"]
    CONTENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PREFETCHED_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    TIER_FIELD_NUMBER: _ClassVar[int]
    content_version: int
    generation: int
    knowledge_base: str
    prefetched: _containers.RepeatedCompositeFieldContainer[_types_pb2.Document]
    query: str
    sources: _containers.RepeatedCompositeFieldContainer[_types_pb2.Source]
    tier: _types_pb2.Tier
    def __init__(self, knowledge_base: _Optional[str] = ..., query: _Optional[str] = ..., tier: _Optional[_Union[_types_pb2.Tier, str]] = ..., prefetched: _Optional[_Iterable[_Union[_types_pb2.Document, _Mapping]]] = ..., sources: _Optional[_Iterable[_Union[_types_pb2.Source, _Mapping]]] = ..., generation: _Optional[int] = ..., content_version: _Optional[int] = ...) -> None: ...

class AnswerResponse(_message.Message):
    __slots__ = ["delta", "final"]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    delta: str
    final: AgentAnswer
    def __init__(self, delta: _Optional[str] = ..., final: _Optional[_Union[AgentAnswer, _Mapping]] = ...) -> None: ...
