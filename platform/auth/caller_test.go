package auth

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/quarry-router/quarry/platform/limit"
	"google.golang.org/grpc"
)

func TestKeysFileCarriesPerKeyLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys.json")
	if err := os.WriteFile(path, []byte(`[
  {"name": "batch", "sha256": "`+HashKey("b")+`", "knowledge_bases": ["*"], "limits": {"rate": 2.5, "burst": 10, "concurrency": -1}},
  {"name": "plain", "sha256": "`+HashKey("p")+`", "knowledge_bases": ["*"]}
]`), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := (limit.Limits{Rate: 2.5, Burst: 10, Concurrency: -1}); keys[0].Limits != want {
		t.Errorf("batch limits %+v, want %+v", keys[0].Limits, want)
	}
	if keys[1].Limits != (limit.Limits{}) {
		t.Errorf("a key without limits got %+v", keys[1].Limits)
	}
}

// The interceptors hand the authorized key on to what runs after them; an open policy
// and a refused call hand on nothing.
func TestInterceptorsRecordTheCaller(t *testing.T) {
	p := policy(t)
	var got Caller
	var ok bool
	handler := func(ctx context.Context, _ any) (any, error) {
		got, ok = CallerFrom(ctx)
		return nil, nil
	}
	info := &grpc.UnaryServerInfo{FullMethod: query}
	if _, err := p.UnaryInterceptor(nil)(withKey(teamA), nil, info, handler); err != nil {
		t.Fatal(err)
	}
	if !ok || got.Name != "team-a" || got.ID != HashKey(teamA) {
		t.Errorf("caller %+v (found %v), want team-a", got, ok)
	}

	ok = false
	stream := func(_ any, ss grpc.ServerStream) error {
		got, ok = CallerFrom(ss.Context())
		return nil
	}
	if err := p.StreamInterceptor(nil)(nil, fakeStream{ctx: withKey(writer)}, &grpc.StreamServerInfo{FullMethod: query}, stream); err != nil {
		t.Fatal(err)
	}
	if !ok || got.Name != "writer" {
		t.Errorf("stream caller %+v (found %v), want writer", got, ok)
	}

	ok = false
	open, err := NewPolicy(nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := open.UnaryInterceptor(nil)(withKey(teamA), nil, info, handler); err != nil {
		t.Fatal(err)
	}
	if ok {
		t.Errorf("an open policy recorded a caller: %+v", got)
	}
}

type fakeStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s fakeStream) Context() context.Context { return s.ctx }
