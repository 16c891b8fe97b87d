package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestAnswerStatus(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpcx.NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	quarryv1.RegisterAgentServiceServer(s.Server, New(nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go s.Serve(ctx, lis)
	conn, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := quarryv1.NewAgentServiceClient(conn)

	tests := []struct {
		name string
		req  *quarryv1.AnswerRequest
		want codes.Code
	}{
		{"no provider is FAILED_PRECONDITION", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: quarryv1.Tier_TIER_AGENTIC}, codes.FailedPrecondition},
		{"a non-LLM tier is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Query: "q", Tier: quarryv1.Tier_TIER_DIRECT}, codes.InvalidArgument},
		{"a missing query is INVALID_ARGUMENT", &quarryv1.AnswerRequest{KnowledgeBase: "kb", Tier: quarryv1.Tier_TIER_SINGLE_LLM}, codes.InvalidArgument},
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
