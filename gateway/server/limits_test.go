package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/route"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/limit"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func serveLimited(t *testing.T, keys []auth.Key, l *limit.Limiter) string {
	t.Helper()
	policy, err := auth.NewPolicy(keys)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	router := route.New(route.DefaultConfig(), cache.NewMemory(cache.DefaultConfig(), time.Now), fakeSearch{}, fakeAgent{}, fakeGens{}, log)
	opts := grpcx.WithAuth(policy)
	opts = append(opts, grpcx.WithLimits(l, grpcx.Methods("/quarry.v1.QueryService/"))...)
	srv := grpcx.NewServer(log, opts...)
	quarryv1.RegisterQueryServiceServer(srv, New(router, log))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); <-done })
	return lis.Addr().String()
}

func keyedClient(t *testing.T, addr, key string) quarryv1.QueryServiceClient {
	conn, err := grpcx.Dial(addr, grpcx.WithBearer(key))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return quarryv1.NewQueryServiceClient(conn)
}

func readStream(ctx context.Context, c quarryv1.QueryServiceClient, kb, q string) error {
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

// TestARefusedStreamTakesNoToken: a call refused for its knowledge base takes nothing
// from the caller's limits. A stream names its knowledge base in its first message,
// read after the limits had already taken a token at the stream's opening: with a rate
// of 1, a refused QueryStream made the caller's next allowed Query RESOURCE_EXHAUSTED.
func TestARefusedStreamTakesNoToken(t *testing.T) {
	l := limit.New(limit.Config{Limits: limit.Limits{Rate: 1, Burst: 1, Concurrency: 2}}, time.Now)
	addr := serveLimited(t, []auth.Key{{Name: "a", SHA256: auth.HashKey("ka"), KnowledgeBases: []string{"kb"}}}, l)
	c := keyedClient(t, addr, "ka")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "other", Query: "rotate keys"}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("Query other: %v", err)
	}
	if err := readStream(ctx, c, "other", "rotate keys"); status.Code(err) != codes.PermissionDenied {
		t.Errorf("QueryStream other: %v", err)
	}
	if _, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: "rotate keys"}); err != nil {
		t.Errorf("first allowed Query after one denied unary and one denied stream: %v", err)
	}
}
