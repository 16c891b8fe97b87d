// Package server is the gRPC edge of the agent service, which answers the questions the
// gates route to an LLM (T3 and T4).
package server

import (
	"context"
	"errors"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrNoProvider means no LLM provider is configured. The gateway then falls back to
// the extractive answer from the search service, marked degraded.
var ErrNoProvider = errors.New("no LLM provider configured")

// Answerer produces an LLM answer, calling onDelta with each piece of text as it
// arrives. The LLM provider issue plugs T3/T4 in here.
type Answerer interface {
	Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string) error) (*quarryv1.AgentAnswer, error)
}

// Server implements quarryv1.AgentServiceServer.
type Server struct {
	quarryv1.UnimplementedAgentServiceServer
	answerer Answerer
}

// New returns the agent's gRPC server. A nil answerer means no provider is configured:
// every call gets FAILED_PRECONDITION, which callers treat as "use the fallback".
func New(a Answerer) *Server { return &Server{answerer: a} }

// Answer streams the answer of the configured provider.
func (s *Server) Answer(req *quarryv1.AnswerRequest, stream grpc.ServerStreamingServer[quarryv1.AnswerResponse]) error {
	switch req.GetTier() {
	case quarryv1.Tier_TIER_SINGLE_LLM, quarryv1.Tier_TIER_AGENTIC:
	default:
		return status.Errorf(codes.InvalidArgument, "tier must be SINGLE_LLM or AGENTIC, got %s", req.GetTier())
	}
	if req.GetKnowledgeBase() == "" || req.GetQuery() == "" {
		return status.Error(codes.InvalidArgument, "knowledge_base and query are required")
	}
	if s.answerer == nil {
		return toStatus(ErrNoProvider)
	}
	ans, err := s.answerer.Answer(stream.Context(), req, func(d string) error {
		return stream.Send(&quarryv1.AnswerResponse{Event: &quarryv1.AnswerResponse_Delta{Delta: d}})
	})
	if err != nil {
		if cerr := stream.Context().Err(); cerr != nil {
			// The caller left, or its deadline passed: whatever failed after that (a send
			// on the closed stream, the work given up) is that, not an agent failure.
			return status.FromContextError(cerr).Err()
		}
		return toStatus(err)
	}
	return stream.Send(&quarryv1.AnswerResponse{Event: &quarryv1.AnswerResponse_Final{Final: ans}})
}

func toStatus(err error) error {
	switch {
	case errors.Is(err, ErrNoProvider):
		return status.Error(codes.FailedPrecondition, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "agent deadline exceeded")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled")
	default:
		return status.Error(codes.Internal, "agent failed")
	}
}
