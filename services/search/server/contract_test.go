package server

import (
	"context"
	"strings"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/grpcx/wiretest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// wire encodes string and bytes fields, numbered from 1 in order; a nil field is left out.
func wire(fields ...[]byte) *wiretest.Bytes {
	var b []byte
	for i, f := range fields {
		if f == nil {
			continue
		}
		b = protowire.AppendTag(b, protowire.Number(i+1), protowire.BytesType)
		b = protowire.AppendBytes(b, f)
	}
	w := wiretest.Bytes(b)
	return &w
}

// nested wraps an encoded message as field num of another.
func nested(num protowire.Number, m *wiretest.Bytes) *wiretest.Bytes {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	b = protowire.AppendBytes(b, *m)
	w := wiretest.Bytes(b)
	return &w
}

// Text that is not UTF-8 is INVALID_ARGUMENT naming the field, on every method, and
// changes nothing. gRPC's standard codec refused it while decoding, which it reports as
// INTERNAL: a C++ client (whose protobuf only logs invalid UTF-8) sending a Latin-1 file
// name got "internal error" for its own mistake.
func TestNonUTF8TextIsInvalidArgument(t *testing.T) {
	f := startWrite(t, nil)
	id, bad := []byte(team), []byte("ops/caf\xe9.md")
	ok := []byte("# Fine\n\nA perfectly good file.\n")
	unary := func(method string, req *wiretest.Bytes) func(context.Context) error {
		return func(ctx context.Context) error {
			var out wiretest.Bytes
			return f.conn.Invoke(ctx, method, req, &out, wiretest.CallOption())
		}
	}
	tests := []struct {
		name, field string
		call        func(context.Context) error
	}{
		{"Resolve: query", "query", unary(quarryv1.SearchService_Resolve_FullMethodName, wire(id, []byte("pager \xff rotation")))},
		{"Resolve: knowledge base", "knowledge_base", unary(quarryv1.SearchService_Resolve_FullMethodName, wire([]byte("te\xffam"), []byte("pager")))},
		{"Search: scope", "scope", unary(quarryv1.SearchService_Search_FullMethodName, wire(id, []byte("pager"), []byte("o\xc0ps")))},
		{"ReadDocument: path", "path", unary(quarryv1.SearchService_ReadDocument_FullMethodName, wire(id, bad))},
		{"ListFolder: path", "path", unary(quarryv1.SearchService_ListFolder_FullMethodName, wire(id, []byte("\xed\xa0\x80")))},
		{"GetManifest: knowledge base", "knowledge_base", unary(quarryv1.SearchService_GetManifest_FullMethodName, wire([]byte("\xff")))},
		{"UpsertFile: path", "path", unary(quarryv1.KnowledgeService_UpsertFile_FullMethodName, wire(id, bad, ok))},
		{"DeleteFile: path", "path", unary(quarryv1.KnowledgeService_DeleteFile_FullMethodName, wire(id, []byte("ops/pager.md\xff")))},
		{"ArchiveFile: path", "path", unary(quarryv1.KnowledgeService_ArchiveFile_FullMethodName, wire(id, []byte("ops/pager\xff.md")))},
		{"RestoreFile: path", "path", unary(quarryv1.KnowledgeService_RestoreFile_FullMethodName, wire(id, bad))},
		{"ReadArchivedFile: path", "path", unary(quarryv1.KnowledgeService_ReadArchivedFile_FullMethodName, wire(id, bad))},
		{"SuggestArchive: knowledge base", "knowledge_base", unary(quarryv1.KnowledgeService_SuggestArchive_FullMethodName, wire([]byte("te\x80m")))},
		{"SyncTree: source", "source", unary(quarryv1.KnowledgeService_SyncTree_FullMethodName, wire(id, []byte(f.syncRoot+"/caf\xe9")))},
		{"SyncFiles: a file's path", "path", func(ctx context.Context) error {
			desc := &quarryv1.KnowledgeService_ServiceDesc.Streams[0]
			s, err := f.conn.NewStream(ctx, desc, quarryv1.KnowledgeService_SyncFiles_FullMethodName, wiretest.CallOption())
			if err != nil {
				return err
			}
			_ = s.SendMsg(nested(1, wire(id, nil)))
			_ = s.SendMsg(nested(2, wire([]byte("ops/new.md"), ok)))
			_ = s.SendMsg(nested(2, wire(bad, ok)))
			_ = s.CloseSend()
			var out wiretest.Bytes
			return s.RecvMsg(&out)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.state(t, team)
			err := tt.call(callCtx(t))
			st := status.Convert(err)
			if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "UTF-8") || !strings.Contains(st.Message(), tt.field) {
				t.Fatalf("status = %v %q, want INVALID_ARGUMENT saying %s is not UTF-8", st.Code(), st.Message(), tt.field)
			}
			assertUnchanged(t, before, f.state(t, team))
		})
	}
	// The server still reads well-formed requests on the same connection.
	if got := f.searchPaths(t, team, "handover note"); len(got) == 0 || got[0] != "ops/pager.md" {
		t.Errorf("search after the refusals = %v, want ops/pager.md first", got)
	}
}

// An input of any length gets its status with a short message. Messages quoted what
// they refused: a 1 MB knowledge base id came back as a 1 MB grpc-message trailer, over
// the 8 KiB of metadata that gRPC's C-core (Python, C++, Ruby...) and Java clients
// accept by default, so those callers saw a transport error instead of the status.
func TestLongInputsGetAShortStatus(t *testing.T) {
	f := startWrite(t, nil)
	// As strict as C-core's and grpc-java's default metadata limit.
	conn, err := grpcx.Dial(f.addr, grpc.WithMaxHeaderListSize(8<<10))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	sc, kc := quarryv1.NewSearchServiceClient(conn), quarryv1.NewKnowledgeServiceClient(conn)
	long := strings.Repeat("a", 1<<20)
	longPath := "ops/" + long + ".md"
	inv := codes.InvalidArgument
	tests := []struct {
		name string
		call func(context.Context) error
		want codes.Code
	}{
		{"Resolve: knowledge base id", func(ctx context.Context) error {
			_, err := sc.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: long, Query: "pager"})
			return err
		}, inv},
		{"Search: knowledge base id", func(ctx context.Context) error {
			_, err := sc.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: long, Query: "pager"})
			return err
		}, inv},
		{"Search: scope", func(ctx context.Context) error {
			_, err := sc.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: team, Query: "pager", Scope: "../" + long})
			return err
		}, inv},
		{"ReadDocument: path", func(ctx context.Context) error {
			_, err := sc.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: team, Path: longPath})
			return err
		}, inv},
		{"ListFolder: knowledge base id", func(ctx context.Context) error {
			_, err := sc.ListFolder(ctx, &quarryv1.ListFolderRequest{KnowledgeBase: long})
			return err
		}, inv},
		{"GetManifest: knowledge base id", func(ctx context.Context) error {
			_, err := sc.GetManifest(ctx, &quarryv1.GetManifestRequest{KnowledgeBase: long})
			return err
		}, inv},
		{"UpsertFile: knowledge base id", func(ctx context.Context) error {
			_, err := kc.UpsertFile(ctx, &quarryv1.UpsertFileRequest{KnowledgeBase: long, Path: "ops/x.md", Content: []byte("# x\n")})
			return err
		}, inv},
		{"UpsertFile: path", func(ctx context.Context) error {
			_, err := kc.UpsertFile(ctx, &quarryv1.UpsertFileRequest{KnowledgeBase: team, Path: longPath, Content: []byte("# x\n")})
			return err
		}, inv},
		{"DeleteFile: path", func(ctx context.Context) error {
			_, err := kc.DeleteFile(ctx, &quarryv1.DeleteFileRequest{KnowledgeBase: team, Path: longPath})
			return err
		}, inv},
		{"ArchiveFile: path", func(ctx context.Context) error {
			_, err := kc.ArchiveFile(ctx, &quarryv1.ArchiveFileRequest{KnowledgeBase: team, Path: longPath})
			return err
		}, inv},
		{"RestoreFile: path", func(ctx context.Context) error {
			_, err := kc.RestoreFile(ctx, &quarryv1.RestoreFileRequest{KnowledgeBase: team, Path: longPath})
			return err
		}, inv},
		{"ReadArchivedFile: path", func(ctx context.Context) error {
			_, err := kc.ReadArchivedFile(ctx, &quarryv1.ReadArchivedFileRequest{KnowledgeBase: team, Path: longPath})
			return err
		}, inv},
		{"SuggestArchive: knowledge base id", func(ctx context.Context) error {
			_, err := kc.SuggestArchive(ctx, &quarryv1.SuggestArchiveRequest{KnowledgeBase: long})
			return err
		}, inv},
		{"SyncTree: knowledge base id", func(ctx context.Context) error {
			_, err := kc.SyncTree(ctx, &quarryv1.SyncTreeRequest{KnowledgeBase: long, Source: f.syncRoot})
			return err
		}, inv},
		{"SyncTree: source", func(ctx context.Context) error {
			_, err := kc.SyncTree(ctx, &quarryv1.SyncTreeRequest{KnowledgeBase: team, Source: f.syncRoot + "/" + long})
			return err
		}, codes.FailedPrecondition},
		{"SyncFiles: knowledge base id", func(ctx context.Context) error {
			_, err := syncFiles(ctx, kc, long, true, [2]string{"ops/x.md", "# x\n"})
			return err
		}, inv},
	}
	before := f.state(t, team)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(callCtx(t))
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("status = %v %.200q, want %v", st.Code(), st.Message(), tt.want)
			}
			if n := len(st.Message()); n == 0 || n > maxStatusBytes {
				t.Errorf("status message of %d bytes, want 1 to %d", n, maxStatusBytes)
			}
		})
	}
	assertUnchanged(t, before, f.state(t, team))
}

// A request message over gRPC's 4 MiB bound is RESOURCE_EXHAUSTED from gRPC, with no
// RetryInfo to send it again after, and changes nothing; a file over -kb-max-file-bytes
// but under 4 MiB is INVALID_ARGUMENT, its rejection.
func TestAnOversizedWriteIsRefusedWithoutRetry(t *testing.T) {
	f := startWrite(t, nil)
	tests := []struct {
		name string
		size int
		want codes.Code
	}{
		{"a file of 2 MiB", 2 << 20, codes.InvalidArgument},
		{"a file of 5 MiB", 5 << 20, codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := f.state(t, team)
			body := "# Big\n\n" + strings.Repeat("word ", tt.size/5)
			_, err := f.know.UpsertFile(callCtx(t), &quarryv1.UpsertFileRequest{KnowledgeBase: team, Path: "ops/big.md", Content: []byte(body)},
				grpc.MaxCallSendMsgSize(8<<20)) // as a client in another language would send it
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("status = %v %q, want %v", st.Code(), st.Message(), tt.want)
			}
			if len(st.Details()) != 0 {
				t.Errorf("status details %v, want none (no RetryInfo)", st.Details())
			}
			assertUnchanged(t, before, f.state(t, team))
		})
	}
}

// Search's scope is matched ignoring case, and a folder that does not exist finds
// nothing rather than being an error; scope "" searches everything.
func TestSearchScopeIgnoresCaseAndAMissingFolderFindsNothing(t *testing.T) {
	f := startWrite(t, nil)
	tests := []struct {
		scope string
		want  []string
	}{
		{"", []string{"ops/pager.md"}},
		{"ops", []string{"ops/pager.md"}},
		{"OPS", []string{"ops/pager.md"}},
		{"Ops/", []string{"ops/pager.md"}},
		{"auth", nil},
		{"billing", nil},
		{"ops/no/such/folder", nil},
	}
	for _, tt := range tests {
		t.Run("scope "+tt.scope, func(t *testing.T) {
			resp, err := f.search.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: team, Query: "handover note", Scope: tt.scope})
			if err != nil {
				t.Fatalf("Search in %q: %v, want results or none", tt.scope, err)
			}
			var got []string
			for _, r := range resp.GetResults() {
				got = append(got, r.GetPath())
			}
			if len(tt.want) == 0 && len(got) != 0 || len(tt.want) > 0 && (len(got) == 0 || got[0] != tt.want[0]) {
				t.Errorf("Search in %q = %v, want %v first", tt.scope, got, tt.want)
			}
		})
	}
}
