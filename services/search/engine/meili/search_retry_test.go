package meili_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meilisearch/meilisearch-go"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// faultProxy stands between the backend and a Meilisearch (scripted or real), as a load
// balancer or ingress does, and fails the next search requests as told.
type faultProxy struct {
	*httptest.Server
	mu       sync.Mutex
	fault    func(w http.ResponseWriter) // nil: pass searches through
	times    int                         // searches still failed; < 0: every one
	searches int                         // search requests received
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	p := &faultProxy{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/search") || r.URL.Path == "/multi-search") {
			p.mu.Lock()
			p.searches++
			fault := p.fault
			if p.times == 0 {
				fault = nil
			} else if p.times > 0 {
				p.times--
			}
			p.mu.Unlock()
			if fault != nil {
				_, _ = io.Copy(io.Discard, r.Body)
				fault(w)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// failSearches makes the next n searches (every one for n < 0) fail with fault.
func (p *faultProxy) failSearches(n int, fault func(w http.ResponseWriter)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fault, p.times = fault, n
}

func (p *faultProxy) searchCount() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.searches
}

// cutConnection drops the connection without an answer: what a client sees when a
// proxy or load balancer closes an idle keep-alive connection just as a request goes
// out on it, or when a Meilisearch restarts under it.
func cutConnection(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			_ = conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// proxyUnavailable answers as a proxy with no healthy upstream.
func proxyUnavailable(code int) func(w http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(code)
		_, _ = io.WriteString(w, "no healthy upstream")
	}
}

// meiliBusy answers as Meilisearch does when its search queue is full (v1.8+): its own
// 503, which asks for less load, not for the same search again at once.
func meiliBusy(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = io.WriteString(w, `{"message":"Too many search requests running at the same time: 10. Retry after 10s.","code":"too_many_search_requests","type":"system","link":"https://docs.meilisearch.com/errors#too_many_search_requests"}`)
}

// behindProxy opens the suite's documents on the scripted server, and on a real
// Meilisearch when MEILI_URL is set, each reached through a faultProxy.
func behindProxy(t *testing.T, run func(t *testing.T, ix *meili.Index, p *faultProxy)) {
	t.Run("scripted server", func(t *testing.T) {
		srv := meilitest.New(t, key)
		p := newFaultProxy(t, srv.URL)
		ix := open(t, p.URL, key, "kb", enginetest.Docs())
		defer ix.Close()
		run(t, ix, p)
	})
	t.Run("real server", func(t *testing.T) {
		real := os.Getenv("MEILI_URL")
		if real == "" {
			t.Skip("MEILI_URL not set (see README: Meilisearch)")
		}
		mkey := os.Getenv("MEILI_MASTER_KEY")
		p := newFaultProxy(t, real)
		var rnd [4]byte
		_, _ = rand.Read(rnd[:])
		cfg := testConfig(p.URL, mkey)
		cfg.IndexPrefix = "quarry_test_" + hex.EncodeToString(rnd[:]) + "_"
		ix, err := meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		t.Cleanup(func() {
			c := meilisearch.New(real, meilisearch.WithAPIKey(mkey))
			defer c.Close()
			if _, err := c.DeleteIndex(cfg.IndexUID("kb")); err != nil {
				t.Logf("delete test index: %v", err)
			}
		})
		run(t, ix, p)
	})
}

// TestASearchIsRetriedOnceWhenItsConnectionFails: a search is a read, so sending it
// again cannot change anything. Go's transport re-sends only GET-like requests on a
// connection the other side closed, and a search is a POST: when a load balancer or
// ingress closed an idle keep-alive connection (AWS ALB after 60 s, nginx after 60-75 s;
// the transport keeps them 90 s) just as a search went out on it, or a proxy had no
// healthy upstream for a moment (a Meilisearch restarting), the query failed and the
// gateway degraded its answer. It is sent once more, on a fresh connection, within the
// caller's deadline; Meilisearch's own "too many searches" is not, nor is anything a
// second time.
func TestASearchIsRetriedOnceWhenItsConnectionFails(t *testing.T) {
	behindProxy(t, func(t *testing.T, ix *meili.Index, p *faultProxy) {
		ctx := context.Background()
		one := engine.Query{Terms: []string{"vault"}, AllTerms: true}
		many := engine.Query{Terms: []string{"vault", "pgbouncer"}} // one multi-search
		tests := []struct {
			name      string
			q         engine.Query
			fail      int
			fault     func(http.ResponseWriter)
			ok        bool
			wantTries int
		}{
			{"a cut connection, one search", one, 1, cutConnection, true, 2},
			{"a cut connection, a multi-search", many, 1, cutConnection, true, 2},
			{"a proxy's 502", one, 1, proxyUnavailable(http.StatusBadGateway), true, 2},
			{"a proxy's 503", many, 1, proxyUnavailable(http.StatusServiceUnavailable), true, 2},
			{"a proxy's 504", one, 1, proxyUnavailable(http.StatusGatewayTimeout), true, 2},
			{"cut every time: tried twice, not more", one, -1, cutConnection, false, 2},
			{"Meilisearch too busy: not retried", one, -1, meiliBusy, false, 1},
			{"a 429: not retried", one, -1, func(w http.ResponseWriter) {
				w.WriteHeader(http.StatusTooManyRequests)
			}, false, 1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				before := p.searchCount()
				p.failSearches(tt.fail, tt.fault)
				defer p.failSearches(0, nil)
				hits, err := ix.Search(ctx, tt.q)
				if tries := p.searchCount() - before; tries != tt.wantTries {
					t.Errorf("the search was sent %d times, want %d", tries, tt.wantTries)
				}
				if !tt.ok {
					if err == nil {
						t.Fatal("Search succeeded, want the failure reported")
					}
					return
				}
				if err != nil {
					t.Fatalf("Search = %v, want the retry to answer", err)
				}
				if len(hits) == 0 || hits[0].Path != "ops/vault.md" && hits[0].Path != "data/postgres/pgbouncer-pooling.md" {
					t.Errorf("hits after the retry = %v", hits)
				}
			})
		}
	})
}

// TestASearchTheCallerGaveUpOnIsNotRetried: the retry lives within the caller's deadline;
// a search whose caller has gone is not sent again.
func TestASearchTheCallerGaveUpOnIsNotRetried(t *testing.T) {
	srv := meilitest.New(t, key)
	p := newFaultProxy(t, srv.URL)
	ix := open(t, p.URL, key, "kb", enginetest.Docs())
	defer ix.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p.failSearches(-1, func(w http.ResponseWriter) {
		cancel() // the caller gives up while the request is out
		cutConnection(w)
	})
	before := p.searchCount()
	_, err := ix.Search(ctx, engine.Query{Terms: []string{"vault"}})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Search = %v, want context.Canceled", err)
	}
	if tries := p.searchCount() - before; tries != 1 {
		t.Errorf("a search whose caller gave up was sent %d times, want 1", tries)
	}
}

// TestASearchMeilisearchCouldNotAnswerIsUnavailable: a search that failed because
// Meilisearch could not be reached, was too busy or hung, was an error like any other,
// which the search service answers INTERNAL (and logs as its own failure). It is
// ErrUnavailable, so the edge can answer UNAVAILABLE, the code gRPC clients retry on;
// a search Meilisearch refused is not.
func TestASearchMeilisearchCouldNotAnswerIsUnavailable(t *testing.T) {
	srv := meilitest.New(t, key)
	p := newFaultProxy(t, srv.URL)
	cfg := testConfig(p.URL, key)
	cfg.RequestTimeout = 200 * time.Millisecond
	ix, err := meili.Open(context.Background(), cfg, "kb", enginetest.Docs())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	tests := []struct {
		name  string
		fault func(http.ResponseWriter)
		want  bool
	}{
		{"connection cut", cutConnection, true},
		{"a proxy's 503", proxyUnavailable(http.StatusServiceUnavailable), true},
		{"Meilisearch too busy", meiliBusy, true},
		{"no answer within -meili-request-timeout", func(http.ResponseWriter) { time.Sleep(time.Second) }, true},
		{"a request Meilisearch refused", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_, _ = io.WriteString(w, `{"message":"Attribute `+"`x`"+` is not filterable.","code":"invalid_search_filter","type":"invalid_request","link":"https://docs.meilisearch.com/errors#invalid_search_filter"}`)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p.failSearches(-1, tt.fault)
			defer p.failSearches(0, nil)
			_, err := ix.Search(context.Background(), engine.Query{Terms: []string{"vault"}})
			if err == nil {
				t.Fatal("Search succeeded")
			}
			if got := errors.Is(err, meili.ErrUnavailable); got != tt.want {
				t.Errorf("errors.Is(%v, ErrUnavailable) = %v, want %v", err, got, tt.want)
			}
		})
	}
}
