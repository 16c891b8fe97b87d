from google.protobuf import timestamp_pb2 as _timestamp_pb2
from quarry.v1 import types_pb2 as _types_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor
FILE_OUTCOME_INDEXED: FileOutcome
FILE_OUTCOME_REJECTED: FileOutcome
FILE_OUTCOME_REMOVED: FileOutcome
FILE_OUTCOME_UNCHANGED: FileOutcome
FILE_OUTCOME_UNSPECIFIED: FileOutcome

class ArchiveCandidate(_message.Message):
    __slots__ = ["importance", "last_access", "maturity", "path", "title"]
    IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    LAST_ACCESS_FIELD_NUMBER: _ClassVar[int]
    MATURITY_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    TITLE_FIELD_NUMBER: _ClassVar[int]
    importance: float
    last_access: _timestamp_pb2.Timestamp
    maturity: _types_pb2.Maturity
    path: str
    title: str
    def __init__(self, path: _Optional[str] = ..., title: _Optional[str] = ..., importance: _Optional[float] = ..., maturity: _Optional[_Union[_types_pb2.Maturity, str]] = ..., last_access: _Optional[_Union[_timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ArchiveFileRequest(_message.Message):
    __slots__ = ["knowledge_base", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ArchiveFileResponse(_message.Message):
    __slots__ = ["archived_path", "ghost_cue", "stub_path", "summary"]
    ARCHIVED_PATH_FIELD_NUMBER: _ClassVar[int]
    GHOST_CUE_FIELD_NUMBER: _ClassVar[int]
    STUB_PATH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    archived_path: str
    ghost_cue: str
    stub_path: str
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ..., stub_path: _Optional[str] = ..., archived_path: _Optional[str] = ..., ghost_cue: _Optional[str] = ...) -> None: ...

class DeleteFileRequest(_message.Message):
    __slots__ = ["knowledge_base", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DeleteFileResponse(_message.Message):
    __slots__ = ["summary"]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ...) -> None: ...

class FileResult(_message.Message):
    __slots__ = ["outcome", "path", "reason"]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    outcome: FileOutcome
    path: str
    reason: str
    def __init__(self, path: _Optional[str] = ..., outcome: _Optional[_Union[FileOutcome, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ReadArchivedFileRequest(_message.Message):
    __slots__ = ["knowledge_base", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class ReadArchivedFileResponse(_message.Message):
    __slots__ = ["document", "generation", "stub_path"]
    DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    STUB_PATH_FIELD_NUMBER: _ClassVar[int]
    document: _types_pb2.Document
    generation: int
    stub_path: str
    def __init__(self, document: _Optional[_Union[_types_pb2.Document, _Mapping]] = ..., stub_path: _Optional[str] = ..., generation: _Optional[int] = ...) -> None: ...

class RestoreFileRequest(_message.Message):
    __slots__ = ["knowledge_base", "path"]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class RestoreFileResponse(_message.Message):
    __slots__ = ["path", "summary"]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    path: str
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ..., path: _Optional[str] = ...) -> None: ...

class SuggestArchiveRequest(_message.Message):
    __slots__ = ["below_importance", "knowledge_base", "limit"]
    BELOW_IMPORTANCE_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    below_importance: float
    knowledge_base: str
    limit: int
    def __init__(self, knowledge_base: _Optional[str] = ..., below_importance: _Optional[float] = ..., limit: _Optional[int] = ...) -> None: ...

class SuggestArchiveResponse(_message.Message):
    __slots__ = ["candidates", "generation"]
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[ArchiveCandidate]
    generation: int
    def __init__(self, candidates: _Optional[_Iterable[_Union[ArchiveCandidate, _Mapping]]] = ..., generation: _Optional[int] = ...) -> None: ...

class SyncFilesHeader(_message.Message):
    __slots__ = ["keep_missing", "knowledge_base"]
    KEEP_MISSING_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    keep_missing: bool
    knowledge_base: str
    def __init__(self, knowledge_base: _Optional[str] = ..., keep_missing: bool = ...) -> None: ...

class SyncFilesRequest(_message.Message):
    __slots__ = ["file", "header"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    file: UploadedFile
    header: SyncFilesHeader
    def __init__(self, header: _Optional[_Union[SyncFilesHeader, _Mapping]] = ..., file: _Optional[_Union[UploadedFile, _Mapping]] = ...) -> None: ...

class SyncFilesResponse(_message.Message):
    __slots__ = ["files", "files_truncated", "summary"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    FILES_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileResult]
    files_truncated: bool
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ..., files: _Optional[_Iterable[_Union[FileResult, _Mapping]]] = ..., files_truncated: bool = ...) -> None: ...

class SyncTreeRequest(_message.Message):
    __slots__ = ["keep_missing", "knowledge_base", "source"]
    KEEP_MISSING_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    keep_missing: bool
    knowledge_base: str
    source: str
    def __init__(self, knowledge_base: _Optional[str] = ..., source: _Optional[str] = ..., keep_missing: bool = ...) -> None: ...

class SyncTreeResponse(_message.Message):
    __slots__ = ["files", "files_truncated", "summary"]
    FILES_FIELD_NUMBER: _ClassVar[int]
    FILES_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[FileResult]
    files_truncated: bool
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ..., files: _Optional[_Iterable[_Union[FileResult, _Mapping]]] = ..., files_truncated: bool = ...) -> None: ...

class UploadedFile(_message.Message):
    __slots__ = ["content", "path"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    path: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class UpsertFileRequest(_message.Message):
    __slots__ = ["content", "knowledge_base", "path"]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    KNOWLEDGE_BASE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    knowledge_base: str
    path: str
    def __init__(self, knowledge_base: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[bytes] = ...) -> None: ...

class UpsertFileResponse(_message.Message):
    __slots__ = ["file", "summary"]
    FILE_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    file: FileResult
    summary: WriteSummary
    def __init__(self, summary: _Optional[_Union[WriteSummary, _Mapping]] = ..., file: _Optional[_Union[FileResult, _Mapping]] = ...) -> None: ...

class WriteSummary(_message.Message):
    __slots__ = ["changed", "document_count", "generation", "indexed", "rejected", "removed", "unchanged"]
    CHANGED_FIELD_NUMBER: _ClassVar[int]
    DOCUMENT_COUNT_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    INDEXED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    UNCHANGED_FIELD_NUMBER: _ClassVar[int]
    changed: bool
    document_count: int
    generation: int
    indexed: int
    rejected: int
    removed: int
    unchanged: int
    def __init__(self, generation: _Optional[int] = ..., changed: bool = ..., document_count: _Optional[int] = ..., indexed: _Optional[int] = ..., unchanged: _Optional[int] = ..., removed: _Optional[int] = ..., rejected: _Optional[int] = ...) -> None: ...

class FileOutcome(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
