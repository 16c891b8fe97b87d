package meili_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/meilisearch/meilisearch-go"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
)

// srvDocs returns the ids of the documents the index of cfg holds, as the server lists
// them.
func srvDocs(t *testing.T, cfg meili.Config) []string {
	t.Helper()
	c := meilisearch.New(cfg.URL, meilisearch.WithAPIKey(cfg.Key))
	defer c.Close()
	var ids []string
	for offset := int64(0); ; offset += 1000 {
		var res meilisearch.DocumentsResult
		if err := c.Index(cfg.IndexUID("kb")).GetDocuments(&meilisearch.DocumentsQuery{Fields: []string{"id"}, Limit: 1000, Offset: offset}, &res); err != nil {
			t.Fatal(err)
		}
		for _, d := range res.Results {
			var id string
			_ = json.Unmarshal(d["id"], &id)
			ids = append(ids, id)
		}
		if len(res.Results) < 1000 {
			return ids
		}
	}
}

// bigDocs returns n documents of about size bytes of analysed content each, every one
// holding the word "zeppelin" and a word of its own.
func bigDocs(prefix string, n, size int) []engine.Doc {
	out := make([]engine.Doc, n)
	for i := range out {
		var b strings.Builder
		fmt.Fprintf(&b, "zeppelin %sunique%d ", prefix, i)
		for j := 0; b.Len() < size; j++ {
			fmt.Fprintf(&b, "lorem%d ", j)
		}
		out[i] = engine.Doc{Path: fmt.Sprintf("big/%s%03d.md", prefix, i), Folder: "big", Title: "Big " + prefix, Content: b.String()}
	}
	return out
}

// TestLargeWritesFitThePayloadLimit: add requests were cut at -meili-batch-size
// documents (1000) whatever their size, and Meilisearch refuses a body over its
// --http-payload-size-limit (100 MB by default; an ingress in front often allows far
// less: nginx's client_max_body_size is 1 MB) with 413. Files are loaded up to 1 MiB
// each, so a knowledge base of large files (generated API references) made an add
// request over the limit: its start failed, every time, and so did a sync of those
// files. Batches are cut at -meili-batch-bytes too, and a batch the server still
// refuses as too large is sent in halves.
func TestLargeWritesFitThePayloadLimit(t *testing.T) {
	const limit = 64 << 10
	docs := append(enginetest.Docs(), bigDocs("a", 24, 8<<10)...) // ~200 KB in all
	adds := "/indexes/quarry_kb/documents"
	tooLarge := func(srv *meilitest.Server) int {
		n := 0
		for _, r := range srv.Requests() {
			if r.Method == http.MethodPost && r.Path == adds && len(r.Body) > limit {
				n++
			}
		}
		return n
	}
	check := func(t *testing.T, ix *meili.Index, want int) {
		t.Helper()
		if ix.Len() != want {
			t.Errorf("Len() = %d, want %d", ix.Len(), want)
		}
		hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"zeppelin"}, Limit: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if got := len(hits); got != want-len(enginetest.Docs()) {
			t.Errorf("a word every large document holds finds %d of them, want %d", got, want-len(enginetest.Docs()))
		}
	}

	t.Run("a batch the server refuses as too large is sent in halves", func(t *testing.T) {
		srv := meilitest.New(t, key)
		srv.SetPayloadLimit(limit)
		ix, err := meili.Open(context.Background(), testConfig(srv.URL, key), "kb", docs)
		if err != nil {
			t.Fatalf("Open of a knowledge base over the payload limit: %v", err)
		}
		defer ix.Close()
		check(t, ix, len(docs))
		more := bigDocs("b", 16, 8<<10)
		changes := make([]engine.Change, len(more))
		for i := range more {
			changes[i] = engine.Change{New: &more[i]}
		}
		if err := ix.Apply(context.Background(), changes); err != nil {
			t.Fatalf("Apply of changes over the payload limit: %v", err)
		}
		check(t, ix, len(docs)+len(more))
	})

	t.Run("batches are cut at -meili-batch-bytes", func(t *testing.T) {
		srv := meilitest.New(t, key)
		srv.SetPayloadLimit(limit)
		cfg := testConfig(srv.URL, key)
		cfg.BatchBytes = limit
		ix, err := meili.Open(context.Background(), cfg, "kb", docs)
		if err != nil {
			t.Fatal(err)
		}
		defer ix.Close()
		if n := tooLarge(srv); n != 0 {
			t.Errorf("%d add requests were over -meili-batch-bytes (%d bytes)", n, limit)
		}
		check(t, ix, len(docs))
	})

	t.Run("one document over the limit is named with the limit", func(t *testing.T) {
		srv := meilitest.New(t, key)
		srv.SetPayloadLimit(4 << 10)
		_, err := meili.Open(context.Background(), testConfig(srv.URL, key), "kb", append(enginetest.Docs(), bigDocs("c", 1, 8<<10)...))
		if err == nil || !strings.Contains(err.Error(), "big/c000.md") || !strings.Contains(err.Error(), "payload") {
			t.Errorf("Open = %v, want an error naming the document and the payload limit", err)
		}
	})

	// An nginx in front with client_max_body_size: 413 and an HTML page, no Meilisearch
	// error.
	behindLimit := func(t *testing.T, upstream string) string {
		u, err := url.Parse(upstream)
		if err != nil {
			t.Fatal(err)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ContentLength > limit {
				_, _ = io.Copy(io.Discard, r.Body)
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusRequestEntityTooLarge)
				_, _ = io.WriteString(w, "<html><body><h1>413 Request Entity Too Large</h1></body></html>")
				return
			}
			rp.ServeHTTP(w, r)
		}))
		t.Cleanup(proxy.Close)
		return proxy.URL
	}
	t.Run("scripted server behind a proxy with a lower limit", func(t *testing.T) {
		srv := meilitest.New(t, key)
		ix, err := meili.Open(context.Background(), testConfig(behindLimit(t, srv.URL), key), "kb", docs)
		if err != nil {
			t.Fatalf("Open through a proxy with a %d-byte limit: %v", limit, err)
		}
		defer ix.Close()
		check(t, ix, len(docs))
	})
	t.Run("real server behind a proxy with a lower limit", func(t *testing.T) {
		real := os.Getenv("MEILI_URL")
		if real == "" {
			t.Skip("MEILI_URL not set (see README: Meilisearch)")
		}
		cfg := realConfig(t, real, os.Getenv("MEILI_MASTER_KEY"), func(u string) string { return behindLimit(t, u) })
		ix, err := meili.Open(context.Background(), cfg, "kb", docs)
		if err != nil {
			t.Fatalf("Open through a proxy with a %d-byte limit: %v", limit, err)
		}
		defer ix.Close()
		check(t, ix, len(docs))
	})

	// Deletions were sent as one request whatever their number: a start or a sync that
	// removed more than ~1000 files (67 bytes an id) had a body over a 64 KiB limit
	// (nginx's default is 1 MB: ~15,000 files), refused with 413 on every try, so the
	// knowledge base could never drop them.
	many := bigDocs("d", 2500, 16)
	deletions := func(t *testing.T, cfg meili.Config) {
		t.Helper()
		ix, err := meili.Open(context.Background(), cfg, "kb", append(enginetest.Docs(), many...))
		if err != nil {
			t.Fatal(err)
		}
		// Removed by a sync...
		gone := many[:1200]
		changes := make([]engine.Change, len(gone))
		for i := range gone {
			changes[i] = engine.Change{Old: &gone[i]}
		}
		if err := ix.Apply(context.Background(), changes); err != nil {
			t.Fatalf("Apply of %d deletions over the payload limit: %v", len(changes), err)
		}
		if got, want := len(srvDocs(t, cfg)), len(enginetest.Docs())+len(many)-len(gone); got != want {
			t.Errorf("after the sync the index holds %d documents, want %d", got, want)
		}
		_ = ix.Close()
		// ... and by a start.
		kept := many[2400:]
		ix, err = meili.Open(context.Background(), cfg, "kb", append(enginetest.Docs(), kept...))
		if err != nil {
			t.Fatalf("Open dropping %d documents over the payload limit: %v", len(many)-len(gone)-len(kept), err)
		}
		defer ix.Close()
		check(t, ix, len(enginetest.Docs())+len(kept))
	}
	t.Run("deletions the server refuses as too large are sent in parts", func(t *testing.T) {
		srv := meilitest.New(t, key)
		srv.SetPayloadLimit(limit)
		deletions(t, testConfig(srv.URL, key))
	})
	t.Run("real server: deletions behind a proxy with a lower limit", func(t *testing.T) {
		real := os.Getenv("MEILI_URL")
		if real == "" {
			t.Skip("MEILI_URL not set (see README: Meilisearch)")
		}
		cfg := realConfig(t, real, os.Getenv("MEILI_MASTER_KEY"), func(u string) string { return behindLimit(t, u) })
		deletions(t, cfg)
	})
}
