// Package upstream adapts the search and agent services' gRPC clients to the router's
// interfaces, turning their status codes back into the router's errors.
package upstream

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Search is the route.Resolver backed by SearchService.
type Search struct {
	client quarryv1.SearchServiceClient
}

var _ route.Resolver = (*Search)(nil)

// NewSearch returns a Resolver that calls client.
func NewSearch(client quarryv1.SearchServiceClient) *Search {
	return &Search{client: client}
}

// Resolve implements route.Resolver.
func (s *Search) Resolve(ctx context.Context, req *quarryv1.ResolveRequest) (*quarryv1.ResolveResponse, error) {
	res, err := s.client.Resolve(ctx, req)
	if err != nil {
		return nil, fromStatus("search resolve", err)
	}
	return res, nil
}

// Agent is the route.Agent backed by AgentService.
type Agent struct {
	client quarryv1.AgentServiceClient
}

var _ route.Agent = (*Agent)(nil)

// NewAgent returns an Agent that calls client.
func NewAgent(client quarryv1.AgentServiceClient) *Agent {
	return &Agent{client: client}
}

// errNoFinal is returned when the agent's stream ends without its final answer.
var errNoFinal = errors.New("agent stream ended without a final answer")

// Answer implements route.Agent.
func (a *Agent) Answer(ctx context.Context, req *quarryv1.AnswerRequest, onDelta func(string)) (*quarryv1.AgentAnswer, error) {
	// Returning on the final event leaves the stream unread; cancelling releases it.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := a.client.Answer(ctx, req)
	if err != nil {
		return nil, fromStatus("agent answer", err)
	}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil, errNoFinal
		}
		if err != nil {
			return nil, fromStatus("agent answer", err)
		}
		switch ev := msg.GetEvent().(type) {
		case *quarryv1.AnswerResponse_Delta:
			if onDelta != nil {
				onDelta(ev.Delta)
			}
		case *quarryv1.AnswerResponse_Final:
			return ev.Final, nil
		}
	}
}

// fromStatus maps the status codes the router acts on to its errors; the rest stay
// wrapped for the logs.
func fromStatus(op string, err error) error {
	st, _ := status.FromError(err)
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%s: %w: %s", op, route.ErrUnknownKB, st.Message())
	case codes.InvalidArgument:
		return fmt.Errorf("%s: %w: %s", op, route.ErrInvalidQuery, st.Message())
	case codes.FailedPrecondition:
		return fmt.Errorf("%s: %w: %s", op, route.ErrNoProvider, st.Message())
	case codes.DeadlineExceeded:
		return fmt.Errorf("%s: %w", op, context.DeadlineExceeded)
	case codes.Canceled:
		return fmt.Errorf("%s: %w", op, context.Canceled)
	default:
		return fmt.Errorf("%s: %w", op, err)
	}
}
