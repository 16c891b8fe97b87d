from quarry.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class FolderEntry(_message.Message):
    __slots__ = ["archived", "folder", "has_summary", "path", "title"]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    FOLDER_FIELD_NUMBER: _ClassVar[int]
    HAS_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    archived: bool
    folder: bool
    has_summary: bool
    path: str
    title: str
    def __init__(self, path: _Optional[str] = ..., folder: bool = ..., title: _Optional[str] = ..., has_summary: bool = ..., archived: bool = ...) -> None: ...

class GetManifestRequest(_message.Message):
    __slots__ = ["knowledge_base"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    def __init__(self, knowledge_base: _Optional[str] = ...) -> None: ...

class GetManifestResponse(_message.Message):
    __slots__ = ["content_version", "contexts", "generation", "stubs", "summaries"]
    CONTENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CONTEXTS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STUBS_FIELD_NUMBER: _ClassVar[int]
    SUMMARIES_FIELD_NUMBER: _ClassVar[int]
    content_version: int
    contexts: ManifestLane
    generation: int
    stubs: ManifestLane
    summaries: ManifestLane
    def __init__(self, summaries: _Optional[_Union[ManifestLane, _Mapping]] = ..., contexts: _Optional[_Union[ManifestLane, _Mapping]] = ..., stubs: _Optional[_Union[ManifestLane, _Mapping]] = ..., generation: _Optional[int] = ..., content_version: _Optional[int] = ...) -> None: ...

class KnowledgeBaseState(_message.Message):
    __slots__ = ["content_version", "document_count", "domains", "generation", "id"]
    CONTENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    DOMAINS_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    ID_FIELD_NUMBER: _ClassVar[int]
    content_version: int
    document_count: int
    domains: _containers.RepeatedScalarFieldContainer[str]
    generation: int
    id: str
    def __init__(self, id: _Optional[str] = ..., generation: _Optional[int] = ..., document_count: _Optional[int] = ..., domains: _Optional[_Iterable[str]] = ..., content_version: _Optional[int] = ...) -> None: ...

class ListFolderRequest(_message.Message):
    __slots__ = ["knowledge_base", "limit", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    limit: int
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListFolderResponse(_message.Message):
    __slots__ = ["entries", "generation", "total"]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[FolderEntry]
    generation: int
    total: int
    def __init__(self, entries: _Optional[_Iterable[_Union[FolderEntry, _Mapping]]] = ..., generation: _Optional[int] = ..., total: _Optional[int] = ...) -> None: ...

class ListKnowledgeBasesRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class ListKnowledgeBasesResponse(_message.Message):
    __slots__ = ["knowledge_bases"]
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBaseState]
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBaseState, _Mapping]]] = ...) -> None: ...

class ManifestEntry(_message.Message):
    __slots__ = ["importance", "path", "summary", "title", "tokens"]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    importance: float
    path: str
    summary: str
    title: str
    tokens: int
    def __init__(self, path: _Optional[str] = ..., title: _Optional[str] = ..., summary: _Optional[str] = ..., tokens: _Optional[int] = ..., importance: _Optional[float] = ...) -> None: ...

class ManifestLane(_message.Message):
    __slots__ = ["budget_tokens", "entries", "omitted", "used_tokens"]
    BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    USED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    budget_tokens: int
    entries: _containers.RepeatedCompositeFieldContainer[ManifestEntry]
    omitted: int
    used_tokens: int
    def __init__(self, entries: _Optional[_Iterable[_Union[ManifestEntry, _Mapping]]] = ..., budget_tokens: _Optional[int] = ..., used_tokens: _Optional[int] = ..., omitted: _Optional[int] = ...) -> None: ...

class ReadDocumentRequest(_message.Message):
    __slots__ = ["knowledge_base", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ReadDocumentResponse(_message.Message):
    __slots__ = ["document", "generation"]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    document: _types_pb2.Document
    generation: int
    def __init__(self, document: _Optional[_Union[_types_pb2.Document, _Mapping]] = ..., generation: _Optional[int] = ...) -> None: ...

class ResolveRequest(_message.Message):
    __slots__ = ["explain", "knowledge_base", "query"]
    EXPLAIN_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    explain: bool
    knowledge_base: str
    query: str
    def __init__(self, knowledge_base: _Optional[str] = ..., query: _Optional[str] = ..., explain: bool = ...) -> None: ...

class ResolveResponse(_message.Message):
    __slots__ = ["answer", "content_version", "fallback_degraded", "gate", "generation", "prefetched", "route", "sources", "stages"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CONTENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_DEGRADED_FIELD_NUMBER: _ClassVar[int]
    GATE_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    PREFETCHED_FIELD_NUMBER: _ClassVar[int]
    ROUTE_FIELD_NUMBER: _ClassVar[int]
    SOURCES_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    answer: str
    content_version: int
    fallback_degraded: bool
    gate: _types_pb2.GateTrace
    generation: int
    prefetched: _containers.RepeatedCompositeFieldContainer[_types_pb2.Document]
    route: _types_pb2.Tier
    sources: _containers.RepeatedCompositeFieldContainer[_types_pb2.Source]
    stages: _containers.RepeatedCompositeFieldContainer[_types_pb2.StageTiming]
    def __init__(self, route: _Optional[_Union[_types_pb2.Tier, str]] = ..., answer: _Optional[str] = ..., fallback_degraded: bool = ..., sources: _Optional[_Iterable[_Union[_types_pb2.Source, _Mapping]]] = ..., prefetched: _Optional[_Iterable[_Union[_types_pb2.Document, _Mapping]]] = ..., generation: _Optional[int] = ..., gate: _Optional[_Union[_types_pb2.GateTrace, _Mapping]] = ..., stages: _Optional[_Iterable[_Union[_types_pb2.StageTiming, _Mapping]]] = ..., content_version: _Optional[int] = ...) -> None: ...

class SearchRequest(_message.Message):
    __slots__ = ["knowledge_base", "limit", "query", "scope"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    QUERY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    limit: int
    query: str
    scope: str
    def __init__(self, knowledge_base: _Optional[str] = ..., query: _Optional[str] = ..., scope: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class SearchResponse(_message.Message):
    __slots__ = ["generation", "results"]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    generation: int
    results: _containers.RepeatedCompositeFieldContainer[_types_pb2.Source]
    def __init__(self, results: _Optional[_Iterable[_Union[_types_pb2.Source, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...

class WatchGenerationsRequest(_message.Message):
    __slots__ = []
    def __init__(self) -> None: ...

class WatchGenerationsResponse(_message.Message):
    __slots__ = ["knowledge_bases", "removed"]
    KNOWLEDGE_BASES_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    knowledge_bases: _containers.RepeatedCompositeFieldContainer[KnowledgeBaseState]
    removed: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, knowledge_bases: _Optional[_Iterable[_Union[KnowledgeBaseState, _Mapping]]] = ..., removed: _Optional[_Iterable[str]] = ...) -> None: ...
