package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/generations"
	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/grpcx/wiretest"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const internalAddr = "10.1.2.3:7701"

// fakeSearch routes by the query's first word.
type fakeSearch struct{}

func (fakeSearch) Resolve(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	switch strings.Fields(req.GetQuery())[0] {
	case "rotate":
		return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_DIRECT, Answer: "Use keyctl.", Generation: 1,
			Sources: []*quarryv1.Source{{Path: "auth/keys.md"}}}, nil
	case "design":
		return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_SINGLE_LLM, Answer: "fallback", Generation: 1}, nil
	case "down":
		return nil, fmt.Errorf("dial tcp %s: connection refused", internalAddr)
	case "slow":
		<-ctx.Done()
		return nil, ctx.Err()
	default:
		// A route the gateway does not know: a bug, reported as INTERNAL.
		return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_EXACT_CACHE, Generation: 1}, nil
	}
}

type fakeAgent struct{}

func (fakeAgent) Answer(_ context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	for _, d := range []string{"Reviews ", "are ", "weekly."} {
		onDelta(d)
	}
	return &quarryv1.AgentAnswer{Answer: "Reviews are weekly."}, nil
}

type fakeGens struct{}

func (fakeGens) State(kb string) (generations.State, bool, error) {
	return generations.State{Generation: 1}, kb == "kb" || kb == "secret-hr", nil
}

func (fakeGens) Names() []string { return []string{"kb", "secret-hr"} }

func (fakeGens) WaitReady(context.Context) error { return nil }

func start(t *testing.T) quarryv1.QueryServiceClient {
	return quarryv1.NewQueryServiceClient(startConn(t))
}

// startConn serves the QueryService on a loopback socket and returns a connection to it.
func startConn(t *testing.T) *grpc.ClientConn {
	t.Helper()
	conn, err := grpcx.Dial(serve(t, route.DefaultConfig(), fakeAgent{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// serve serves the QueryService, answering LLM tiers with agent, on a loopback socket
// until the test ends, and returns its address.
func serve(t *testing.T, cfg route.Config, agent route.Agent) string {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	router := route.New(cfg, cache.NewMemory(cache.DefaultConfig(), time.Now), fakeSearch{}, agent, fakeGens{}, log)
	srv := grpcx.NewServer(log)
	quarryv1.RegisterQueryServiceServer(srv, New(router, log))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return lis.Addr().String()
}

func TestQueryStatusCodes(t *testing.T) {
	client := start(t)
	cases := []struct {
		name    string
		kb      string
		query   string
		timeout time.Duration
		code    codes.Code
		message string // substring of the status message
	}{
		{"an answer is OK", "kb", "rotate keys", 0, codes.OK, ""},
		{"an empty query is INVALID_ARGUMENT", "kb", "  ", 0, codes.InvalidArgument, "query is empty"},
		{"a query of invisible characters is INVALID_ARGUMENT", "kb", "\u00ad\u200b\ufeff", 0, codes.InvalidArgument, "query is empty"},
		{"an oversized query is INVALID_ARGUMENT", "kb", strings.Repeat("x", 5000), 0, codes.InvalidArgument, "limit is 4096"},
		{"a malformed knowledge base id is INVALID_ARGUMENT", "../etc", "rotate keys", 0, codes.InvalidArgument, "knowledge base"},
		{"an unknown knowledge base is NOT_FOUND", "nope", "rotate keys", 0, codes.NotFound, `"nope"`},
		{"search down is UNAVAILABLE", "kb", "down keys", 0, codes.Unavailable, "unavailable"},
		{"a query past its deadline is DEADLINE_EXCEEDED", "kb", "slow keys", 200 * time.Millisecond, codes.DeadlineExceeded, ""},
		{"a bug is INTERNAL", "kb", "bogus keys", 0, codes.Internal, "internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			if c.timeout > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, c.timeout)
				defer cancel()
			}
			resp, err := client.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: c.kb, Query: c.query})
			st := status.Convert(err)
			if st.Code() != c.code || !strings.Contains(st.Message(), c.message) {
				t.Fatalf("status %s %q, want %s containing %q", st.Code(), st.Message(), c.code, c.message)
			}
			if strings.Contains(st.Message(), internalAddr) || strings.Contains(st.Message(), "EXACT_CACHE") {
				t.Fatalf("status message %q leaks internals", st.Message())
			}
			if c.code == codes.OK && (resp.GetTier() != quarryv1.Tier_TIER_DIRECT || resp.GetAnswer() != "Use keyctl.") {
				t.Fatalf("response %v, want the direct answer", resp)
			}
		})
	}
}

func TestQueryCancelledByTheCaller(t *testing.T) {
	client := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	stream, err := client.QueryStream(ctx, &quarryv1.QueryStreamRequest{Request: &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "slow keys"}})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("Recv after cancel: %v, want CANCELED", err)
	}
}

func TestQueryStreamSendsDeltasThenTheFinalResponse(t *testing.T) {
	client := start(t)
	stream, err := client.QueryStream(context.Background(), &quarryv1.QueryStreamRequest{
		Request: &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "design reviews"}})
	if err != nil {
		t.Fatal(err)
	}
	var deltas strings.Builder
	var final *quarryv1.QueryResponse
	for {
		ev, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if final != nil {
			t.Fatalf("event %v after the final response", ev)
		}
		switch e := ev.GetEvent().(type) {
		case *quarryv1.QueryStreamResponse_Delta:
			deltas.WriteString(e.Delta)
		case *quarryv1.QueryStreamResponse_Final:
			final = e.Final
		}
	}
	if final == nil || final.GetTier() != quarryv1.Tier_TIER_SINGLE_LLM || deltas.String() != final.GetAnswer() {
		t.Fatalf("deltas %q, final %v; want deltas that make up the SINGLE_LLM answer", deltas.String(), final)
	}

	bad, err := client.QueryStream(context.Background(), &quarryv1.QueryStreamRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Recv(); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("stream without a request: %v, want INVALID_ARGUMENT", err)
	}
}

// bigAgent streams a long answer: 2 MB in 64 KB deltas, far more than a client's
// HTTP/2 flow-control window.
type bigAgent struct{}

func (bigAgent) Answer(_ context.Context, _ *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	d := strings.Repeat("x", 64<<10)
	for range 32 {
		onDelta(d)
	}
	return &quarryv1.AgentAnswer{Answer: strings.Repeat(d, 32)}, nil
}

// A QueryStream client that stops reading (a stalled mobile client, a paused consumer)
// blocks stream.Send under HTTP/2 flow control. Callers of the same question share one
// agent flight, so that send must hold up only its own stream: not the flight, nor the
// other callers, streaming or not. Once the client reads again it gets the whole answer.
func TestAStalledStreamClientHoldsUpOnlyItsOwnStream(t *testing.T) {
	addr := serve(t, route.DefaultConfig(), bigAgent{})
	req := &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "design reviews"}

	// The stalled client: a fixed 64 KB window, and it does not call Recv for now.
	slowConn, err := grpcx.Dial(addr, grpc.WithInitialWindowSize(65535), grpc.WithInitialConnWindowSize(65535))
	if err != nil {
		t.Fatal(err)
	}
	defer slowConn.Close()
	sctx, scancel := context.WithCancel(context.Background())
	defer scancel() // before the server stops, which waits for the stream
	slow, err := quarryv1.NewQueryServiceClient(slowConn).QueryStream(sctx, &quarryv1.QueryStreamRequest{Request: req})
	if err != nil {
		t.Fatal(err)
	}
	// Lets the flight start and fill the stalled client's window, so the next caller
	// joins it rather than starting its own (which would pass without showing anything).
	time.Sleep(300 * time.Millisecond)

	conn, err := grpcx.Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	began := time.Now()
	resp, err := quarryv1.NewQueryServiceClient(conn).Query(ctx, req)
	if err != nil || resp.GetDegraded() || len(resp.GetAnswer()) != 2<<20 {
		t.Fatalf("unary Query of the same question: %v after %v, degraded %v, %d bytes; want the agent's whole answer despite a stalled stream client",
			err, time.Since(began).Round(time.Millisecond), resp.GetDegraded(), len(resp.GetAnswer()))
	}

	var deltas strings.Builder
	for {
		ev, err := slow.Recv()
		if err != nil {
			t.Fatalf("stalled client, reading again: %v after %d bytes of deltas", err, deltas.Len())
		}
		if final := ev.GetFinal(); final != nil {
			if deltas.String() != final.GetAnswer() || final.GetAnswer() != resp.GetAnswer() {
				t.Fatalf("stalled client: %d bytes of deltas, final answer of %d; want the deltas to make up the same answer",
					deltas.Len(), len(final.GetAnswer()))
			}
			return
		}
		deltas.WriteString(ev.GetDelta())
	}
}

func queryWire(kb, query string) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.BytesType)
	b = protowire.AppendString(b, kb)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendString(b, query)
	b = protowire.AppendTag(b, 3, protowire.VarintType)
	return protowire.AppendVarint(b, 1)
}

func TestNonUTF8QueryIsInvalidArgument(t *testing.T) {
	conn := startConn(t)
	codec := wiretest.CallOption()
	ctx := context.Background()

	var resp quarryv1.QueryResponse
	err := conn.Invoke(ctx, "/quarry.v1.QueryService/Query", wiretest.Bytes(queryWire("kb", "rotate \xff keys")), &resp, codec)
	if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "UTF-8") {
		t.Fatalf("Query with a non-UTF-8 query: %v, want INVALID_ARGUMENT naming UTF-8", err)
	}
	// The same request without the bad byte is answered as usual.
	if err := conn.Invoke(ctx, "/quarry.v1.QueryService/Query", wiretest.Bytes(queryWire("kb", "rotate keys")), &resp, codec); err != nil {
		t.Fatal(err)
	}
	if resp.GetExplain() == nil || resp.GetTier() != quarryv1.Tier_TIER_DIRECT {
		t.Fatalf("response %v, want a traced direct answer", &resp)
	}

	var stream []byte
	stream = protowire.AppendTag(stream, 1, protowire.BytesType)
	stream = protowire.AppendBytes(stream, queryWire("kb", "design \xfe"))
	desc := &grpc.StreamDesc{ServerStreams: true}
	s, err := conn.NewStream(ctx, desc, "/quarry.v1.QueryService/QueryStream", codec)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SendMsg(wiretest.Bytes(stream)); err != nil {
		t.Fatal(err)
	}
	if err := s.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var ev quarryv1.QueryStreamResponse
	if err := s.RecvMsg(&ev); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("QueryStream with a non-UTF-8 query: %v, want INVALID_ARGUMENT", err)
	}
}

func TestToStatus(t *testing.T) {
	cases := []struct {
		name string
		err  error
		code codes.Code
	}{
		{"invalid query", fmt.Errorf("%w: query is empty", route.ErrInvalidQuery), codes.InvalidArgument},
		{"invalid knowledge base", fmt.Errorf("%w \"A\"", route.ErrInvalidKB), codes.InvalidArgument},
		{"unknown knowledge base", fmt.Errorf("%w \"x\"", route.ErrUnknownKB), codes.NotFound},
		{"unavailable wins over the deadline it wraps", fmt.Errorf("%w: resolve: %w", route.ErrUnavailable, context.DeadlineExceeded), codes.Unavailable},
		{"deadline", context.DeadlineExceeded, codes.DeadlineExceeded},
		{"cancelled", fmt.Errorf("wait: %w", context.Canceled), codes.Canceled},
		{"anything else", errors.New("boom at 10.0.0.1"), codes.Internal},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			st := status.Convert(toStatus(c.err))
			if st.Code() != c.code {
				t.Fatalf("toStatus(%v) = %s, want %s", c.err, st.Code(), c.code)
			}
			if c.code == codes.Internal && strings.Contains(st.Message(), "10.0.0.1") {
				t.Fatalf("INTERNAL message %q leaks the cause", st.Message())
			}
		})
	}
}
