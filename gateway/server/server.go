// Package server exposes the router as the public gRPC QueryService.
package server

import (
	"context"
	"errors"
	"log/slog"

	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

type server struct {
	quarryv1.UnimplementedQueryServiceServer
	r   *route.Router
	log *slog.Logger
}

// New returns the QueryService backed by r; log receives the causes of failures that
// callers only see as a generic status.
func New(r *route.Router, log *slog.Logger) quarryv1.QueryServiceServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &server{r: r, log: log}
}

// Query implements quarryv1.QueryServiceServer.
func (s *server) Query(ctx context.Context, req *quarryv1.QueryRequest) (*quarryv1.QueryResponse, error) {
	resp, err := s.r.Query(ctx, req, nil)
	if err != nil {
		return nil, s.fail(ctx, err)
	}
	return resp, nil
}

// QueryStream implements quarryv1.QueryServiceServer.
func (s *server) QueryStream(req *quarryv1.QueryStreamRequest, stream quarryv1.QueryService_QueryStreamServer) error {
	ctx := stream.Context()
	resp, err := s.r.Query(ctx, req.GetRequest(), func(delta string) {
		// A failed send means the caller has gone; its context ends the query.
		_ = stream.Send(&quarryv1.QueryStreamResponse{Event: &quarryv1.QueryStreamResponse_Delta{Delta: delta}})
	})
	if err != nil {
		return s.fail(ctx, err)
	}
	return stream.Send(&quarryv1.QueryStreamResponse{Event: &quarryv1.QueryStreamResponse_Final{Final: resp}})
}

// fail logs the cause of a failure the caller is not told about and returns its status.
func (s *server) fail(ctx context.Context, err error) error {
	st := toStatus(err)
	switch status.Code(st) {
	case codes.Internal:
		s.log.ErrorContext(ctx, "query failed", "err", err)
	case codes.Unavailable:
		s.log.WarnContext(ctx, "query unavailable", "err", err)
	}
	return st
}

// toStatus maps the router's errors to gRPC status codes. Messages of caller mistakes
// are the router's own and name the problem; other messages are generic so internal
// details (addresses, upstream errors) never reach callers.
func toStatus(err error) error {
	switch {
	case errors.Is(err, route.ErrInvalidQuery), errors.Is(err, route.ErrInvalidKB):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, route.ErrUnknownKB):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, route.ErrUnavailable):
		return status.Error(codes.Unavailable, "search is unavailable and no cached answer matched; retry later")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "the query did not finish before its deadline")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "the query was cancelled")
	default:
		return status.Error(codes.Internal, "internal error")
	}
}
