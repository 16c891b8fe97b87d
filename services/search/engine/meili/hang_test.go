package meili_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// TestAServerThatNeverAnswersFailsTheOpen: a Meilisearch that takes connections and
// never answers (a hung process, a half-open proxy) held the search service's start,
// whose context has no deadline, for ever. Each request is bounded by
// -meili-request-timeout, and the open fails after its retries.
func TestAServerThatNeverAnswersFailsTheOpen(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srv.Close()
	defer close(release)
	cfg := testConfig(srv.URL, key)
	cfg.RequestTimeout = 100 * time.Millisecond
	cfg.Retries, cfg.RetryBackoff = 1, time.Millisecond
	done := make(chan error, 1)
	go func() {
		ix, err := meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
		if ix != nil {
			ix.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Open of a server that never answers succeeded")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Open of a server that never answers still waits after 10 s")
	}
}

// TestConcurrentSearchesKeepTheirConnections: the client built for -meili-request-timeout
// must keep as many idle connections to Meilisearch as the library's own did (100). An
// http.Client without a Transport uses http.DefaultTransport, which keeps 2 per host, so
// every search beyond two at a time opened a connection and closed it after its answer:
// a handshake per query and sockets piling up in TIME_WAIT under load.
func TestConcurrentSearchesKeepTheirConnections(t *testing.T) {
	const concurrent, rounds = 8, 10
	srv := meilitest.New(t, key)
	// The same scripted server behind a listener that counts connections, and that holds
	// each search until all of a round's have arrived, so they are truly concurrent.
	var (
		mu      sync.Mutex
		conns   int
		arrived int
		gate    = make(chan struct{})
	)
	counting := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/indexes/quarry_kb/search" {
			mu.Lock()
			g := gate
			if arrived++; arrived == concurrent {
				close(gate)
				gate, arrived = make(chan struct{}), 0
			}
			mu.Unlock()
			select {
			case <-g:
			case <-time.After(5 * time.Second):
				t.Error("a round's searches did not all arrive together")
			}
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	counting.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			conns++
			mu.Unlock()
		}
	}
	counting.Start()
	defer counting.Close()

	ix := open(t, counting.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	ctx := context.Background()
	for range rounds {
		var wg sync.WaitGroup
		for range concurrent {
			wg.Go(func() {
				if _, err := ix.Search(ctx, engine.Query{Terms: []string{"vault"}}); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	mu.Lock()
	defer mu.Unlock()
	// One connection per concurrent search, kept and reused; twice that allows for the
	// transport dialling while another connection frees up.
	if conns > 2*concurrent {
		t.Errorf("%d rounds of %d concurrent searches opened %d connections, want at most %d: idle connections are not kept", rounds, concurrent, conns, 2*concurrent)
	}
}

// TestASearchTheCallerGivesUpOnFailsWithTheContextsError: the library's errors do not
// unwrap to their cause, so a search cut short by the caller's deadline or cancellation
// while Meilisearch was answering was no context error to errors.Is: the gRPC edge
// answered INTERNAL and logged a failure for a caller that had given up, where it
// answers DEADLINE_EXCEEDED or CANCELLED for the embedded engine.
func TestASearchTheCallerGivesUpOnFailsWithTheContextsError(t *testing.T) {
	srv := meilitest.New(t, key)
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (r.URL.Path == "/indexes/quarry_kb/search" || r.URL.Path == "/multi-search") {
			// Answers no search before the caller gives up. The body is read first: the
			// server notices a closed connection only once it has.
			_, _ = io.Copy(io.Discard, r.Body)
			<-r.Context().Done()
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer slow.Close()
	ix := open(t, slow.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	tests := []struct {
		name  string
		ctx   func() (context.Context, context.CancelFunc)
		terms []string
		want  error
	}{
		{"deadline, one request", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, []string{"vault"}, context.DeadlineExceeded},
		{"deadline, a multi-search", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 50*time.Millisecond)
		}, []string{"vault", "pgbouncer"}, context.DeadlineExceeded},
		{"cancelled", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(50*time.Millisecond, cancel)
			return ctx, cancel
		}, []string{"vault"}, context.Canceled},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := tt.ctx()
			defer cancel()
			_, err := ix.Search(ctx, engine.Query{Terms: tt.terms})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Search = %v, want an error that is %v", err, tt.want)
			}
		})
	}
}
