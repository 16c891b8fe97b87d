package auth

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/syncbuf"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// blockingHandler is a log handler whose writes wait until released: a log that
// blocks (a full pipe) must not stall a connection's reader goroutine, where the tap
// runs.
type blockingHandler struct {
	slog.Handler
	release chan struct{}
}

func (h blockingHandler) Handle(ctx context.Context, r slog.Record) error {
	<-h.release
	return h.Handler.Handle(ctx, r)
}

// The tap decides from the keys it holds, never waiting on the keys file or the log; a
// key added to the file is taken at its first call, which the tap lets through with the
// look at the file for its interceptor to do; calls it refuses are counted in the log.
func TestTapNeverWaitsAndTakesANewKeyAtItsFirstCall(t *testing.T) {
	lookEvery(t, 50*time.Millisecond)
	path := filepath.Join(t.TempDir(), "keys.json")
	write := func(ks ...Key) { t.Helper(); replaceFile(t, path, keysJSON(t, ks...)) }
	a := Key{Name: "team-a", SHA256: HashKey(teamA), KnowledgeBases: []string{"platform"}}
	b := Key{Name: "team-b", SHA256: HashKey(teamB), KnowledgeBases: []string{"platform"}}
	write(a)
	var logged syncbuf.Buffer
	release := make(chan struct{})
	h := blockingHandler{Handler: slog.NewTextHandler(&logged, nil), release: release}
	p, err := LoadPolicy(path, slog.New(h))
	if err != nil {
		t.Fatal(err)
	}
	handle := p.Tap(nil)
	tapCall := func(key string) (context.Context, error) {
		t.Helper()
		md := metadata.Pairs("authorization", "Bearer "+key)
		ctx := metadata.NewIncomingContext(context.Background(), md)
		done := make(chan struct{})
		var out context.Context
		var err error
		go func() { out, err = handle(ctx, &tap.Info{FullMethodName: query, Header: md}); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Second):
			t.Fatal("the tap waited (on the keys file or the log)")
		}
		return out, err
	}
	time.Sleep(2 * reloadEvery)
	// A refusal's log line and the changed file's log line both wait on the blocked
	// log: the tap must not.
	write(a, b)
	time.Sleep(2 * reloadEvery)
	ctx, err := tapCall(teamB)
	if err != nil {
		t.Fatalf("the first call of a key just added: %v, want it let through to be checked against the file", err)
	}
	go func() { // the interceptor, on the call's own goroutine, may wait for the log
		info := &grpc.UnaryServerInfo{FullMethod: query}
		handler := func(context.Context, any) (any, error) { return nil, nil }
		if _, err := p.UnaryInterceptor(nil)(ctx, nil, info, handler); err != nil {
			t.Errorf("the interceptor refused the key just added: %v", err)
		}
		if _, err := p.Authorize(ctx, query, "platform"); err != nil {
			t.Errorf("Authorize of the key just added: %v", err)
		}
	}()
	for i := range 3 {
		if _, err := tapCall("qk_nobody_0123456789"); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("unknown key, call %d: %v, want UNAUTHENTICATED", i, err)
		}
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for {
		out := logged.String()
		if strings.Contains(out, "calls refused before their message was read") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no log line counts the refused calls; the log holds:\n%s", out)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := tapCall(teamB); err != nil {
		t.Fatalf("the new key once read: %v", err)
	}
}

// The look at the keys file that the tap takes for an unknown key is made whether or not
// that call reaches an interceptor (a call of an unknown method, or one whose message
// does not decode, never does): a keyless client sending only such calls took every
// look, and a revoked key stayed valid for as long as it kept on.
func TestARevokedKeyIsDroppedThoughNoCallReachesAnInterceptor(t *testing.T) {
	lookEvery(t, 50*time.Millisecond)
	path := filepath.Join(t.TempDir(), "keys.json")
	a := Key{Name: "team-a", SHA256: HashKey(teamA), KnowledgeBases: []string{"platform"}}
	b := Key{Name: "team-b", SHA256: HashKey(teamB), KnowledgeBases: []string{"platform"}}
	replaceFile(t, path, keysJSON(t, a, b))
	p, err := LoadPolicy(path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	handle := p.Tap(nil)
	header := func(key string) metadata.MD { return metadata.Pairs("authorization", "Bearer "+key) }
	if lookup(p.held(), header(teamA)) == nil {
		t.Fatal("team-a's key is not held at the start")
	}
	replaceFile(t, path, keysJSON(t, b)) // team-a revoked
	deadline := time.Now().Add(5 * time.Second)
	for lookup(p.held(), header(teamA)) != nil {
		if time.Now().After(deadline) {
			t.Fatal("team-a's key is still held 5 s after it was revoked")
		}
		// Keyless calls to a method no service has: none reaches an interceptor.
		md := header("qk_nobody_0123456789")
		_, _ = handle(metadata.NewIncomingContext(context.Background(), md), &tap.Info{FullMethodName: "/no.Such/Method", Header: md})
		time.Sleep(time.Millisecond)
	}
}
