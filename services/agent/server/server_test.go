package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/grpcx/wiretest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

// serve runs an AgentService backed by a on loopback and returns a client.
func serve(t *testing.T, a Answerer) quarryv1.AgentServiceClient {
	t.Helper()
	return quarryv1.NewAgentServiceClient(serveConn(t, a))
}

// serveConn runs an AgentService backed by a on loopback and returns a connection to it.
func serveConn(t *testing.T, a Answerer) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpcx.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	quarryv1.RegisterAgentServiceServer(s.Server, New(a))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Serve(ctx, lis); close(done) }()
	conn, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(); cancel(); <-done })
	return conn
}

func TestAnswerStatus(t *testing.T) {
	c := serve(t, nil)

	tests := []struct {
		name string
		req  *quarryv1.AnswerRequest
		want codes.Code
	}{
		{"no provider is FAILED_PRECONDITION", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: quarryv1.Tier_TIER_AGENTIC}, codes.FailedPrecondition},
		{"a non-LLM tier is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: quarryv1.Tier_TIER_DIRECT}, codes.InvalidArgument},
		{"a missing query is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Tier: quarryv1.Tier_TIER_SINGLE_LLM}, codes.InvalidArgument},
		{"a missing knowledge base is INVALID_ARGUMENT", &quarryv1.AnswerRequest{Query: "q", Tier: quarryv1.Tier_TIER_SINGLE_LLM}, codes.InvalidArgument},
		{"no tier is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q"}, codes.InvalidArgument},
		{"a tier out of the enum's range is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: 99}, codes.InvalidArgument},
		{"a negative tier is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: -1}, codes.InvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer ccancel()
			stream, err := c.Answer(cctx, tt.req)
			if err == nil {
				_, err = stream.Recv()
			}
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}

// scripted streams two deltas, then answers, or waits for its caller to go.
type scripted struct {
	started chan struct{} // a "wait" call has reached the answerer
	gone    chan error
}

func (s scripted) Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string) error) (*quarryv1.AgentAnswer, error) {
	if req.GetQuery() == "wait" {
		s.started <- struct{}{}
		<-ctx.Done()
		s.gone <- ctx.Err()
		return nil, ctx.Err()
	}
	for _, d := range []string{"Rotate ", "weekly."} {
		if err := onDelta(d); err != nil {
			return nil, err
		}
	}
	return &quarryv1.AgentAnswer{Answer: "Rotate weekly.", Llm: &quarryv1.LlmTrace{Calls: 1}}, nil
}

func TestAnswerStreamsDeltasThenTheFinalAnswer(t *testing.T) {
	gone, started := make(chan error, 1), make(chan struct{}, 1)
	c := serve(t, scripted{started: started, gone: gone})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	stream, err := c.Answer(ctx, &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: quarryv1.Tier_TIER_SINGLE_LLM})
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for {
		msg, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := msg.GetEvent().(*quarryv1.AnswerResponse_Delta); ok {
			events = append(events, "delta:"+d.Delta)
		} else {
			events = append(events, "final:"+msg.GetFinal().GetAnswer())
		}
	}
	if want := []string{"delta:Rotate ", "delta:weekly.", "final:Rotate weekly."}; strings.Join(events, "|") != strings.Join(want, "|") {
		t.Fatalf("events %q, want %q", events, want)
	}

	t.Run("a caller that cancels cancels the answer", func(t *testing.T) {
		cctx, ccancel := context.WithCancel(context.Background())
		stream, err := c.Answer(cctx, &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "wait", Tier: quarryv1.Tier_TIER_AGENTIC})
		if err != nil {
			t.Fatal(err)
		}
		// Cancel only once the call is in the answerer: cancelled earlier, it never
		// reaches the server at all.
		select {
		case <-started:
		case <-time.After(5 * time.Second):
			t.Fatal("the call never reached the answerer")
		}
		ccancel()
		_, _ = stream.Recv()
		select {
		case err := <-gone:
			if err != context.Canceled {
				t.Errorf("answerer saw %v, want context.Canceled", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the answerer's context was not cancelled")
		}
	})
}

// Text that is not UTF-8, which Go's clients refuse to send but others send, is
// INVALID_ARGUMENT naming the field, not the INTERNAL of a failed decode, and reaches no
// answerer.
func TestNonUTF8TextIsInvalidArgument(t *testing.T) {
	conn := serveConn(t, scripted{})
	doc := protowire.AppendTag(nil, 3, protowire.BytesType) // Document.content
	doc = protowire.AppendString(doc, "caf\xe9")
	tests := []struct {
		name, field, kb, query string
		prefetched             []byte
	}{
		{"query", "query", "kb", "rotate \xff keys", nil},
		{"knowledge base", "knowledge_base", "k\xc0b", "rotate keys", nil},
		{"a prefetched document's content", "prefetched.content", "kb", "rotate keys", doc},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var req []byte
			req = protowire.AppendTag(req, 1, protowire.BytesType)
			req = protowire.AppendString(req, tt.kb)
			req = protowire.AppendTag(req, 2, protowire.BytesType)
			req = protowire.AppendString(req, tt.query)
			req = protowire.AppendTag(req, 3, protowire.VarintType)
			req = protowire.AppendVarint(req, uint64(quarryv1.Tier_TIER_SINGLE_LLM))
			if tt.prefetched != nil {
				req = protowire.AppendTag(req, 4, protowire.BytesType)
				req = protowire.AppendBytes(req, tt.prefetched)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			w := wiretest.Bytes(req)
			s, err := conn.NewStream(ctx, &quarryv1.AgentService_ServiceDesc.Streams[0], quarryv1.AgentService_Answer_FullMethodName,
				wiretest.CallOption())
			if err != nil {
				t.Fatal(err)
			}
			if err := s.SendMsg(&w); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseSend()
			var ev quarryv1.AnswerResponse
			err = s.RecvMsg(&ev)
			if st := status.Convert(err); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), tt.field) || !strings.Contains(st.Message(), "UTF-8") {
				t.Fatalf("status = %v %q, want INVALID_ARGUMENT saying %s is not UTF-8", st.Code(), st.Message(), tt.field)
			}
		})
	}
}

// goneStream is the server side of an Answer call whose caller has left: its context
// is done and sends fail.
type goneStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s goneStream) Context() context.Context { return s.ctx }

func (goneStream) Send(*quarryv1.AnswerResponse) error {
	return status.Error(codes.Unavailable, "transport is closing")
}

// A call whose caller left while the answer streamed ends CANCELED (or
// DEADLINE_EXCEEDED), as the call log and the metrics then record it, not INTERNAL.
func TestAnAnswerWhoseCallerLeftIsNotAnAgentFailure(t *testing.T) {
	for _, tt := range []struct {
		name string
		end  func() (context.Context, context.CancelFunc)
		want codes.Code
	}{
		{"cancelled", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, codes.Canceled},
		{"out of time", func() (context.Context, context.CancelFunc) { return context.WithTimeout(context.Background(), 0) }, codes.DeadlineExceeded},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.end()
			cancel()
			req := &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "rotate", Tier: quarryv1.Tier_TIER_SINGLE_LLM}
			err := New(scripted{}).Answer(req, goneStream{ctx: ctx})
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
		})
	}
}
