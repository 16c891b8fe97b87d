package main

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	"github.com/quarry-router/quarry/gateway/cache"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// badCall is one hostile or broken request and the status it must get.
type badCall struct {
	name string
	call func(ctx context.Context, q quarryv1.QueryServiceClient, s quarryv1.SearchServiceClient, gw *grpc.ClientConn) error
	want codes.Code
}

func askBad(kb, q string) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, c quarryv1.QueryServiceClient, _ quarryv1.SearchServiceClient, _ *grpc.ClientConn) error {
		_, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: kb, Query: q})
		return err
	}
}

func streamBad(kb, q string) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, c quarryv1.QueryServiceClient, _ quarryv1.SearchServiceClient, _ *grpc.ClientConn) error {
		s, err := c.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: kb, Query: q}})
		if err != nil {
			return err
		}
		for {
			if _, err := s.Recv(); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
		}
	}
}

// rawQuery puts bytes on the wire that Go's client would refuse to marshal.
func rawQuery(kb string, q []byte) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, _ quarryv1.QueryServiceClient, _ quarryv1.SearchServiceClient, gw *grpc.ClientConn) error {
		var req []byte
		req = protowire.AppendTag(req, 1, protowire.BytesType)
		req = protowire.AppendString(req, kb)
		req = protowire.AppendTag(req, 2, protowire.BytesType)
		req = protowire.AppendBytes(req, q)
		var resp []byte
		return gw.Invoke(ctx, quarryv1.QueryService_Query_FullMethodName, &req, &resp, grpc.ForceCodecV2(rawCodec{}))
	}
}

func readDoc(kb, path string) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, _ quarryv1.QueryServiceClient, s quarryv1.SearchServiceClient, _ *grpc.ClientConn) error {
		_, err := s.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: kb, Path: path})
		return err
	}
}

func listFolder(kb, path string) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, _ quarryv1.QueryServiceClient, s quarryv1.SearchServiceClient, _ *grpc.ClientConn) error {
		_, err := s.ListFolder(ctx, &quarryv1.ListFolderRequest{KnowledgeBase: kb, Path: path})
		return err
	}
}

func searchIn(kb, q, scope string, limit int32) func(context.Context, quarryv1.QueryServiceClient, quarryv1.SearchServiceClient, *grpc.ClientConn) error {
	return func(ctx context.Context, _ quarryv1.QueryServiceClient, s quarryv1.SearchServiceClient, _ *grpc.ClientConn) error {
		_, err := s.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: kb, Query: q, Scope: scope, Limit: limit})
		return err
	}
}

// TestBadInputCorpus sends hostile and broken requests through the public gRPC API
// (and the search service's read API the agent uses) and checks that each gets a clear
// status and that nothing changed: generations, document counts and cached answers.
func TestBadInputCorpus(t *testing.T) {
	store := cache.NewMemory(cache.DefaultConfig(), time.Now)
	ctx, cancel := context.WithCancel(context.Background())
	sys, err := start(ctx, upConfig{Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
		GatewayOpts: []gatewayapp.Option{gatewayapp.WithStore(store)}}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); <-sys.done })
	gw, err := grpcx.Dial(sys.Gateway.String())
	if err != nil {
		t.Fatal(err)
	}
	defer gw.Close()
	sc, err := grpcx.Dial(sys.Search.String())
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	qc, scl := quarryv1.NewQueryServiceClient(gw), quarryv1.NewSearchServiceClient(sc)

	// One good answer in the cache, so "nothing changed" covers cached content too.
	if _, err := qc.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: "How do I rotate the JWT signing key?"}); err != nil {
		t.Fatal(err)
	}
	before, cached := kbStates(t, scl), store.Len()

	const kb = "platform"
	inv, nf := codes.InvalidArgument, codes.NotFound
	cases := []badCall{
		// Queries.
		{"empty query", askBad(kb, ""), inv},
		{"spaces only", askBad(kb, "     "), inv},
		{"tabs and newlines only", askBad(kb, "\t\n\r\n"), inv},
		{"unicode spaces only", askBad(kb, "\u00a0\u2003\u3000"), inv},
		{"one byte over the limit", askBad(kb, strings.Repeat("a", 4097)), inv},
		{"1 MB query", askBad(kb, strings.Repeat("rotate key ", 100_000)), inv},
		{"NUL byte", askBad(kb, "rotate\x00key"), inv},
		{"NUL only", askBad(kb, "\x00"), inv},
		{"escape sequence", askBad(kb, "rotate \x1b[31mkey"), inv},
		{"bell character", askBad(kb, "rotate\akey"), inv},
		{"DEL character", askBad(kb, "rotate\x7fkey"), inv},
		{"backspace", askBad(kb, "rotate\bkey"), inv},
		{"form feed", askBad(kb, "rotate\fkey"), inv},
		{"vertical tab", askBad(kb, "rotate\vkey"), inv},
		{"C1 control", askBad(kb, "rotate\u0085key\u009b"), inv},
		{"invalid UTF-8 on the wire", rawQuery(kb, []byte("rotate \xff\xfe key")), inv},
		{"truncated UTF-8 on the wire", rawQuery(kb, []byte("rotate \xe2\x82")), inv},
		{"overlong UTF-8 on the wire", rawQuery(kb, []byte("\xc0\xaf etc")), inv},
		{"surrogate half on the wire", rawQuery(kb, []byte("\xed\xa0\x80")), inv},
		{"streamed empty query", streamBad(kb, ""), inv},
		{"streamed NUL byte", streamBad(kb, "a\x00b"), inv},
		{"streamed oversized query", streamBad(kb, strings.Repeat("x", 5000)), inv},
		// Knowledge base ids.
		{"empty knowledge base", askBad("", "rotate keys"), inv},
		{"unknown knowledge base", askBad("nosuchkb", "rotate keys"), nf},
		{"upper-case knowledge base id", askBad("Platform", "rotate keys"), inv},
		{"knowledge base id with a slash", askBad("platform/auth", "rotate keys"), inv},
		{"knowledge base id with dot-dot", askBad("..", "rotate keys"), inv},
		{"knowledge base id path traversal", askBad("../../etc", "rotate keys"), inv},
		{"knowledge base id with a NUL", askBad("plat\x00form", "rotate keys"), inv},
		{"knowledge base id of 65 characters", askBad(strings.Repeat("a", 65), "rotate keys"), inv},
		{"knowledge base id with spaces", askBad("plat form", "rotate keys"), inv},
		{"knowledge base id starting with a dash", askBad("-platform", "rotate keys"), inv},
		{"knowledge base id with unicode", askBad("plätform", "rotate keys"), inv},
		{"streamed unknown knowledge base", streamBad("nosuchkb", "rotate keys"), nf},
		// Paths the agent's read tools could be asked for.
		{"read: parent directory", readDoc(kb, "../../etc/passwd"), inv},
		{"read: absolute path", readDoc(kb, "/etc/passwd"), inv},
		{"read: dot-dot inside the tree", readDoc(kb, "auth/../../secrets.md"), inv},
		{"read: dot-dot that stays inside", readDoc(kb, "auth/../auth/jwt/signing-key-rotation.md"), inv},
		{"read: backslashes", readDoc(kb, `auth\jwt\signing-key-rotation.md`), inv},
		{"read: NUL in the path", readDoc(kb, "auth/jwt\x00.md"), inv},
		{"read: Windows drive", readDoc(kb, "C:/Windows/win.ini"), inv},
		{"read: missing file", readDoc(kb, "auth/nope.md"), nf},
		{"read: a folder", readDoc(kb, "auth"), nf},
		{"read: unknown knowledge base", readDoc("nosuchkb", "auth/_index.md"), nf},
		{"list: parent directory", listFolder(kb, ".."), inv},
		{"list: absolute path", listFolder(kb, "/etc"), inv},
		{"list: missing folder", listFolder(kb, "no/such/folder"), nf},
		{"search: scope escaping the tree", searchIn(kb, "rotate", "../..", 5), inv},
		{"search: absolute scope", searchIn(kb, "rotate", "/etc", 5), inv},
		{"search: negative limit", searchIn(kb, "rotate", "", -1), inv},
		{"search: limit over 50", searchIn(kb, "rotate", "", 51), inv},
		{"search: empty query", searchIn(kb, "", "", 5), inv},
		{"search: 1 MB query", searchIn(kb, strings.Repeat("rotate ", 150_000), "", 5), inv},
	}
	if len(cases) < 50 {
		t.Fatalf("the corpus has %d inputs; keep at least 50", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
			defer ccancel()
			err := tc.call(cctx, qc, scl, gw)
			if got := status.Code(err); got != tc.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tc.want)
			}
			if msg := status.Convert(err).Message(); msg == "" || strings.Contains(msg, "panic") || strings.Contains(msg, "goroutine") {
				t.Errorf("status message %q is not a clear, safe explanation", msg)
			}
		})
	}
	if after := kbStates(t, scl); after != before {
		t.Errorf("bad input changed the knowledge bases: %s -> %s", before, after)
	}
	if n := store.Len(); n != cached {
		t.Errorf("bad input changed the cache: %d entries -> %d", cached, n)
	}
	t.Logf("%d bad inputs, each refused with its status; nothing changed", len(cases))
}
