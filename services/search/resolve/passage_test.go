package resolve_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"github.com/quarry-router/quarry/services/search/gate"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
)

// passageKB is a knowledge base whose answering file names one query word many times at
// its start and holds the sentence that matches every query word far below: counting
// query words per chunk (Excerpt) picks the start, Meilisearch's crop (the window with
// the most distinct query words) the sentence.
func passageKB(t *testing.T) string {
	t.Helper()
	filler := func(topic string, n int) string {
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteString(" ")
			}
			b.WriteString("The " + topic + " pipeline builds images, signs them and pushes them to the registry before the canary stage.")
		}
		return b.String()
	}
	files := map[string]string{
		"ops/storage/ledger.md": "# Ledger storage\n\n" +
			"Retention is reviewed every quarter. Retention owners approve each retention change, retention exceptions " +
			"go to the retention board, and retention audits check that retention rules are followed.\n\n" +
			filler("deploy", 25) + "\n\n" +
			"Keep every snapshot of the ledger replicas for a retention window of fourteen days.\n\n" +
			filler("release", 6) + "\n",
		"ops/deploy/canary.md":  "# Canary releases\n\n" + filler("canary", 4) + "\n",
		"ops/network/dns.md":    "# DNS\n\nInternal names resolve through the cluster resolver; external names go upstream.\n",
		"ops/access/tokens.md":  "# Access tokens\n\nTokens expire after an hour and are refreshed by the client library.\n",
		"ops/alerts/paging.md":  "# Paging\n\nA page goes to the primary on call first and to the secondary after ten minutes.\n",
		"ops/metrics/budget.md": "# Error budgets\n\nEach service has a monthly error budget agreed with its consumers.\n",
	}
	dir := t.TempDir()
	for p, body := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A Meilisearch-backed resolve cuts each result's excerpt around the passage the engine
// cropped, not around the densest run of query words; Bleve, which picks no passage,
// keeps the query-word excerpt.
func TestExcerptComesFromTheEnginesPassage(t *testing.T) {
	const (
		id       = "ops"
		question = "snapshot retention window ledger replicas"
		answer   = "ops/storage/ledger.md"
		sentence = "Keep every snapshot of the ledger replicas for a retention window of fourteen days."
		start    = "Retention is reviewed every quarter."
	)
	dir := passageKB(t)
	srv := meilitest.New(t, "key")
	load := func(edit func(*kb.Config)) *resolve.Resolver { return resolverOf(t, id, dir, edit) }
	tests := []struct {
		name     string
		edit     func(*kb.Config)
		contains string // the answer's excerpt holds it
		absent   string // and not this
	}{
		{"meilisearch: around the cropped passage", func(c *kb.Config) {
			c.Engine = kb.EngineMeilisearch
			c.Meili.URL, c.Meili.Key = srv.URL, "key"
		}, sentence, start},
		{"bleve: around the most query words", func(*kb.Config) {}, start, sentence},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res, err := load(tc.edit).Resolve(context.Background(), id, question)
			if err != nil {
				t.Fatal(err)
			}
			if res.Route != gate.Direct {
				t.Fatalf("route %v (%s), want direct", res.Route, res.Trace.Decision.Reason)
			}
			if len(res.Results) == 0 || res.Results[0].Doc.Path != answer {
				t.Fatalf("results %v, want %s first", resultPaths(res), answer)
			}
			ex := res.Excerpts[answer]
			if !strings.Contains(ex, tc.contains) {
				t.Errorf("excerpt of %s lacks %q:\n%s", answer, tc.contains, ex)
			}
			if strings.Contains(ex, tc.absent) {
				t.Errorf("excerpt of %s holds %q:\n%s", answer, tc.absent, ex)
			}
		})
	}
}
