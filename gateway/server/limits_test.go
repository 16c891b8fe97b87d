package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
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

// TestAnUnknownKnowledgeBaseNamesTheOnesTheCallerMayUse: "unknown knowledge base
// "platfrom"" left the caller guessing, with no call that lists them. The message names
// the knowledge bases the caller may use, and none it may not.
func TestAnUnknownKnowledgeBaseNamesTheOnesTheCallerMayUse(t *testing.T) {
	const teamKey, allKey = "qk_team_0123456789", "qk_all_0123456789"
	addr := serveLimited(t, []auth.Key{
		{Name: "team", SHA256: auth.HashKey(teamKey), KnowledgeBases: []string{"kb", "platfrom"}},
		{Name: "all", SHA256: auth.HashKey(allKey), KnowledgeBases: []string{"*"}},
	}, limit.New(limit.Config{Limits: limit.Limits{Rate: 1000, Burst: 1000, Concurrency: 10}}, time.Now))
	tests := []struct {
		key, kb string
		want    string
		hidden  string
	}{
		{teamKey, "platfrom", `unknown knowledge base "platfrom" (knowledge bases you may use: kb)`, "secret-hr"},
		{allKey, "nope", `unknown knowledge base "nope" (knowledge bases you may use: kb, secret-hr)`, ""},
	}
	for _, tt := range tests {
		_, err := keyedClient(t, addr, tt.key).Query(context.Background(), &quarryv1.QueryRequest{KnowledgeBase: tt.kb, Query: "rotate keys"})
		st := status.Convert(err)
		if st.Code() != codes.NotFound || st.Message() != tt.want {
			t.Errorf("%s: %v, want NOT_FOUND %q", tt.kb, err, tt.want)
		}
		if tt.hidden != "" && strings.Contains(st.Message(), tt.hidden) {
			t.Errorf("%s: %q names %s, which the key may not use", tt.kb, st.Message(), tt.hidden)
		}
	}
}
