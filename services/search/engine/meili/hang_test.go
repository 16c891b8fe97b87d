package meili_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
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
