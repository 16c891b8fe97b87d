package llm

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// TestARedirectIsNotFollowed: the key and the knowledge base's documents go only to
// -llm-base-url. Followed, a 307 or 308 to another server would send it the same
// request, prompt and pre-fetched documents in its body, and when it has the same host
// name on another port (a plain-HTTP listener, another tenant's service) the API key
// too: Go keeps Authorization on a redirect to the same host whatever the port or
// scheme. openai-go refuses a request whose origin is not the base URL's; this keeps
// an upgrade, or another HTTP client, from losing that.
func TestARedirectIsNotFollowed(t *testing.T) {
	var mu sync.Mutex
	var got []string // what reached the other server
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
		http.Error(w, "no", http.StatusTeapot)
	}))
	t.Cleanup(other.Close)
	for _, code := range []int{http.StatusTemporaryRedirect, http.StatusPermanentRedirect, http.StatusFound} {
		named := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Location", other.URL+r.URL.Path)
			w.WriteHeader(code)
		}))
		t.Cleanup(named.Close)
		cfg := testConfig(named.URL + "/v1")
		cfg.MaxRetries = 0
		onDelta, _ := collect(t)
		_, err := New(cfg).Chat(context.Background(), chatRequest(), onDelta)
		if err == nil {
			t.Errorf("%d: the call succeeded, want it failed", code)
		}
		mu.Lock()
		if len(got) > 0 {
			t.Errorf("%d: a redirect was followed; the other server received %q", code, got)
		}
		got = nil
		mu.Unlock()
	}
}
