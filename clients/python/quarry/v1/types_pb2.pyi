from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import struct_pb2 as _struct_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
MATURITY_CORE: Maturity
MATURITY_DRAFT: Maturity
MATURITY_UNSPECIFIED: Maturity
MATURITY_VALIDATED: Maturity
TIER_AGENTIC: Tier
TIER_DIRECT: Tier
TIER_EXACT_CACHE: Tier
TIER_FUZZY_CACHE: Tier
TIER_OUT_OF_DOMAIN: Tier
TIER_SINGLE_LLM: Tier
TIER_UNSPECIFIED: Tier

class CacheTrace(_message.Message):
    __slots__ = ["exact", "exact_replica_copy", "fuzzy", "fuzzy_candidate", "fuzzy_similarity", "fuzzy_verification", "normalised_query", "stored", "tokens"]
    EXACT_FIELD_NUMBER: _ClassVar[int]
    EXACT_REPLICA_COPY_FIELD_NUMBER: _ClassVar[int]
    FUZZY_CANDIDATE_FIELD_NUMBER: _ClassVar[int]
    FUZZY_FIELD_NUMBER: _ClassVar[int]
    FUZZY_SIMILARITY_FIELD_NUMBER: _ClassVar[int]
    FUZZY_VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    NORMALISED_QUERY_FIELD_NUMBER: _ClassVar[int]
    STORED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    exact: str
    exact_replica_copy: bool
    fuzzy: str
    fuzzy_candidate: str
    fuzzy_similarity: float
    fuzzy_verification: str
    normalised_query: str
    stored: bool
    tokens: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, normalised_query: _Optional[str] = ..., tokens: _Optional[_Iterable[str]] = ..., exact: _Optional[str] = ..., fuzzy: _Optional[str] = ..., fuzzy_candidate: _Optional[str] = ..., fuzzy_similarity: _Optional[float] = ..., fuzzy_verification: _Optional[str] = ..., stored: bool = ..., exact_replica_copy: bool = ...) -> None: ...

class Document(_message.Message):
    __slots__ = ["archived", "content", "extra", "importance", "maturity", "path", "related", "summary", "tags", "title", "updated"]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    EXTRA_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    MATURITY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    RELATED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    UPDATED_FIELD_NUMBER: _ClassVar[int]
    archived: bool
    content: str
    extra: _struct_pb2.Struct
    importance: float
    maturity: Maturity
    path: str
    related: _containers.RepeatedScalarFieldContainer[str]
    summary: bool
    tags: _containers.RepeatedScalarFieldContainer[str]
    title: str
    updated: _timestamp_pb2.Timestamp
    def __init__(self, path: _Optional[str] = ..., title: _Optional[str] = ..., content: _Optional[str] = ..., tags: _Optional[_Iterable[str]] = ..., related: _Optional[_Iterable[str]] = ..., importance: _Optional[float] = ..., maturity: _Optional[_Union[Maturity, str]] = ..., updated: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ..., archived: bool = ..., summary: bool = ..., extra: _Optional[_Union[_struct_pb2.Struct, _Mapping]] = ...) -> None: ...

class Explain(_message.Message):
    __slots__ = ["cache", "gate", "llm", "stages"]
    CACHE_FIELD_NUMBER: _ClassVar[int]
    GATE_FIELD_NUMBER: _ClassVar[int]
    LLM_FIELD_NUMBER: _ClassVar[int]
    STAGES_FIELD_NUMBER: _ClassVar[int]
    cache: CacheTrace
    gate: GateTrace
    llm: LlmTrace
    stages: _containers.RepeatedCompositeFieldContainer[StageTiming]
    def __init__(self, stages: _Optional[_Iterable[_Union[StageTiming, _Mapping]]] = ..., cache: _Optional[_Union[CacheTrace, _Mapping]] = ..., gate: _Optional[_Union[GateTrace, _Mapping]] = ..., llm: _Optional[_Union[LlmTrace, _Mapping]] = ...) -> None: ...

class GateTrace(_message.Message):
    __slots__ = ["all_terms_matched", "direct_decision", "entity_terms", "out_of_domain_rule", "result_count", "results", "scope", "search_text", "second_relevance", "thresholds", "top_relevance", "top_score"]
    class ThresholdsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    ALL_TERMS_MATCHED_FIELD_NUMBER: _ClassVar[int]
    DIRECT_DECISION_FIELD_NUMBER: _ClassVar[int]
    ENTITY_TERMS_FIELD_NUMBER: _ClassVar[int]
    OUT_OF_DOMAIN_RULE_FIELD_NUMBER: _ClassVar[int]
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    SEARCH_TEXT_FIELD_NUMBER: _ClassVar[int]
    SECOND_RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLDS_FIELD_NUMBER: _ClassVar[int]
    TOP_RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    TOP_SCORE_FIELD_NUMBER: _ClassVar[int]
    all_terms_matched: bool
    direct_decision: str
    entity_terms: _containers.RepeatedScalarFieldContainer[str]
    out_of_domain_rule: str
    result_count: int
    results: _containers.RepeatedCompositeFieldContainer[ScoredResult]
    scope: str
    search_text: str
    second_relevance: float
    thresholds: _containers.ScalarMap[str, float]
    top_relevance: float
    top_score: float
    def __init__(self, search_text: _Optional[str] = ..., scope: _Optional[str] = ..., all_terms_matched: bool = ..., result_count: _Optional[int] = ..., entity_terms: _Optional[_Iterable[str]] = ..., top_relevance: _Optional[float] = ..., second_relevance: _Optional[float] = ..., top_score: _Optional[float] = ..., out_of_domain_rule: _Optional[str] = ..., direct_decision: _Optional[str] = ..., thresholds: _Optional[_Mapping[str, float]] = ..., results: _Optional[_Iterable[_Union[ScoredResult, _Mapping]]] = ...) -> None: ...

class LlmTrace(_message.Message):
    __slots__ = ["calls", "completion_tokens", "context_trims", "iterations", "model", "prompt_tokens", "stop_reason", "tool_calls"]
    CALLS_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_TRIMS_FIELD_NUMBER: _ClassVar[int]
    ITERATIONS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    calls: int
    completion_tokens: int
    context_trims: int
    iterations: int
    model: str
    prompt_tokens: int
    stop_reason: str
    tool_calls: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, model: _Optional[str] = ..., prompt_tokens: _Optional[int] = ..., completion_tokens: _Optional[int] = ..., calls: _Optional[int] = ..., iterations: _Optional[int] = ..., tool_calls: _Optional[_Iterable[str]] = ..., stop_reason: _Optional[str] = ..., context_trims: _Optional[int] = ...) -> None: ...

class ScoredResult(_message.Message):
    __slots__ = ["boost", "coverage", "engine_score", "from_entity_search", "importance", "path", "propagated_from", "recency", "relevance", "score"]
    BOOST_FIELD_NUMBER: _ClassVar[int]
    COVERAGE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_SCORE_FIELD_NUMBER: _ClassVar[int]
    FROM_ENTITY_SEARCH_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PROPAGATED_FROM_FIELD_NUMBER: _ClassVar[int]
    RECENCY_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    boost: float
    coverage: float
    engine_score: float
    from_entity_search: bool
    importance: float
    path: str
    propagated_from: str
    recency: float
    relevance: float
    score: float
    def __init__(self, path: _Optional[str] = ..., engine_score: _Optional[float] = ..., coverage: _Optional[float] = ..., relevance: _Optional[float] = ..., importance: _Optional[float] = ..., recency: _Optional[float] = ..., boost: _Optional[float] = ..., score: _Optional[float] = ..., propagated_from: _Optional[str] = ..., from_entity_search: bool = ...) -> None: ...

class Source(_message.Message):
    __slots__ = ["archived", "excerpt", "importance", "maturity", "path", "propagated", "relevance", "score", "title"]
    ARCHIVED_FIELD_NUMBER: _ClassVar[int]
    EXCERPT_FIELD_NUMBER: _ClassVar[int]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    MATURITY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    PROPAGATED_FIELD_NUMBER: _ClassVar[int]
    RELEVANCE_FIELD_NUMBER: _ClassVar[int]
    SCORE_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    archived: bool
    excerpt: str
    importance: float
    maturity: Maturity
    path: str
    propagated: bool
    relevance: float
    score: float
    title: str
    def __init__(self, path: _Optional[str] = ..., title: _Optional[str] = ..., score: _Optional[float] = ..., relevance: _Optional[float] = ..., archived: bool = ..., excerpt: _Optional[str] = ..., maturity: _Optional[_Union[Maturity, str]] = ..., importance: _Optional[float] = ..., propagated: bool = ...) -> None: ...

class StageTiming(_message.Message):
    __slots__ = ["duration", "name", "outcome"]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    duration: _duration_pb2.Duration
    name: str
    outcome: str
    def __init__(self, name: _Optional[str] = ..., duration: _Optional[_Union[_duration_pb2.Duration, _Mapping]] = ..., outcome: _Optional[str] = ...) -> None: ...

class Tier(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Maturity(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
