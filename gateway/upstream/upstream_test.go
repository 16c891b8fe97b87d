package upstream

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

type stubs struct {
	quarryv1.UnimplementedSearchServiceServer
	quarryv1.UnimplementedAgentServiceServer
}

// Resolve fails with the code named by the query, or routes DIRECT.
func (stubs) Resolve(_ context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	if c, ok := codeOf(req.GetQuery()); ok {
		return nil, status.Error(c, "stub says "+req.GetQuery())
	}
	return &quarryv1.ResolveResponse{Route: quarryv1.Tier_TIER_DIRECT, Answer: "direct", Generation: 3}, nil
}

func (stubs) Answer(req *quarryv1.AnswerRequest, stream quarryv1.AgentService_AnswerServer) error {
	if c, ok := codeOf(req.GetQuery()); ok {
		return status.Error(c, "stub says "+req.GetQuery())
	}
	for _, d := range []string{"Rotate ", "weekly."} {
		if err := stream.Send(&quarryv1.AnswerResponse{Event: &quarryv1.AnswerResponse_Delta{Delta: d}}); err != nil {
			return err
		}
	}
	if req.GetQuery() == "no final" {
		return nil
	}
	return stream.Send(&quarryv1.AnswerResponse{Event: &quarryv1.AnswerResponse_Final{Final: &quarryv1.AgentAnswer{Answer: "Rotate weekly."}}})
}

func codeOf(q string) (codes.Code, bool) {
	for _, c := range []codes.Code{codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.Unavailable, codes.DeadlineExceeded} {
		if q == c.String() {
			return c, true
		}
	}
	return codes.OK, false
}

func dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	quarryv1.RegisterSearchServiceServer(srv, stubs{})
	quarryv1.RegisterAgentServiceServer(srv, stubs{})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestStatusCodesBecomeRouterErrors(t *testing.T) {
	conn := dial(t)
	search, agent := NewSearch(quarryv1.NewSearchServiceClient(conn)), NewAgent(quarryv1.NewAgentServiceClient(conn))
	cases := []struct {
		name string
		call func(q string) error
		code codes.Code
		want error
	}{
		{"search NOT_FOUND is an unknown knowledge base", resolveErr(search), codes.NotFound, route.ErrUnknownKB},
		{"search INVALID_ARGUMENT is an invalid query", resolveErr(search), codes.InvalidArgument, route.ErrInvalidQuery},
		{"search DEADLINE_EXCEEDED is a deadline", resolveErr(search), codes.DeadlineExceeded, context.DeadlineExceeded},
		{"agent FAILED_PRECONDITION is no provider", answerErr(agent), codes.FailedPrecondition, route.ErrNoProvider},
		{"agent DEADLINE_EXCEEDED is a deadline", answerErr(agent), codes.DeadlineExceeded, context.DeadlineExceeded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.call(c.code.String()); !errors.Is(err, c.want) {
				t.Fatalf("error %v, want %v", err, c.want)
			}
		})
	}
	if err := resolveErr(search)(codes.Unavailable.String()); err == nil || status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Fatalf("search UNAVAILABLE: %v, want the status wrapped", err)
	}
}

func resolveErr(s *Search) func(string) error {
	return func(q string) error {
		_, err := s.Resolve(context.Background(), &quarryv1.ResolveRequest{KnowledgeBase: "kb", Query: q})
		return err
	}
}

func answerErr(a *Agent) func(string) error {
	return func(q string) error {
		_, err := a.Answer(context.Background(), &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: q}, nil)
		return err
	}
}

func TestAgentStreamsDeltasThenTheFinalAnswer(t *testing.T) {
	conn := dial(t)
	agent := NewAgent(quarryv1.NewAgentServiceClient(conn))
	var deltas []string
	ans, err := agent.Answer(context.Background(), &quarryv1.AnswerRequest{Query: "how often?"}, func(d string) { deltas = append(deltas, d) })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(deltas, "") != ans.GetAnswer() || len(deltas) != 2 {
		t.Fatalf("deltas %q, final %q", deltas, ans.GetAnswer())
	}
	if _, err := agent.Answer(context.Background(), &quarryv1.AnswerRequest{Query: "no final"}, nil); !errors.Is(err, errNoFinal) {
		t.Fatalf("stream without a final answer: %v, want errNoFinal", err)
	}
	res, err := NewSearch(quarryv1.NewSearchServiceClient(conn)).Resolve(context.Background(), &quarryv1.ResolveRequest{Query: "ok"})
	if err != nil || res.GetRoute() != quarryv1.Tier_TIER_DIRECT {
		t.Fatalf("Resolve: %v, %v", res, err)
	}
}
