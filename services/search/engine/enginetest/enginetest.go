// Package enginetest is the conformance suite every engine.Backend passes: the embedded
// Bleve index and Meilisearch run the same tests, so the query path gets the same
// candidates and the same order from either.
package enginetest

import (
	"context"
	"slices"
	"sort"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
)

// Opener returns a backend holding docs. The suite closes it.
type Opener func(t *testing.T, docs []engine.Doc) engine.Backend

// Docs is the suite's knowledge base: every test's expectation is written against it.
func Docs() []engine.Doc {
	return []engine.Doc{
		{Path: "auth/jwt/signing-key-rotation.md", Folder: "auth/jwt", Title: "Rotate the JWT signing key",
			Content: "Rotation of the signing key happens every 90 days. Publish the new key in the JWKS endpoint before signing with it."},
		{Path: "auth/jwt/refresh-tokens.md", Folder: "auth/jwt", Title: "Refresh tokens",
			Content: "Refresh tokens live for 30 days and are rotated on every use. A signing key change does not revoke them."},
		{Path: "auth/sessions.md", Folder: "auth", Title: "Session cookies",
			Content: "Sessions are stored in Redis with a sliding expiry."},
		{Path: "authz/policies.md", Folder: "authz", Title: "Authorization policies",
			Content: "Policies are written in Rego and evaluated by OPA. Session checks happen first."},
		{Path: "data/postgres/pgbouncer-pooling.md", Folder: "data/postgres", Title: "PgBouncer pooling",
			Content: "Run pgbouncer in transaction pool mode. Prepared statements need session mode."},
		{Path: "data/postgres/backups.md", Folder: "data/postgres", Title: "Postgres backups",
			Content: "Base backups run nightly with WAL archiving to object storage. Restore with pg_restore."},
		{Path: "ops/vault.md", Folder: "ops", Title: "Vault secrets",
			Content: "Secrets live in Vault under the kv engine. Raft storage backs it."},
		{Path: "ops/faults.md", Folder: "ops", Title: "Fault injection",
			Content: "Chaos experiments inject faults into staging every Friday."},
		{Path: "ops/ownership.md", Folder: "ops", Title: "Service ownership",
			Content: "Every service is owned by one team, which answers its pages."},
		{Path: "ops/_archived/pagerduty.stub.md", Folder: "ops/_archived", Title: "PagerDuty escalation",
			Content: "Archived: the old PagerDuty escalation policy, replaced by Opsgenie.", Archived: true},
		{Path: "ops/_index.md", Folder: "ops", Title: "Operations", Content: "Runbooks for operating the platform.", Summary: true},
	}
}

// longQuery is eleven words: nine that auth/jwt/signing-key-rotation.md holds, a partial
// word of it, and last.
func longQuery(last string) []string {
	return []string{"rotate", "jwt", "signing", "key", "happens", "days", "publish", "jwks", "endpoint", "publis", last}
}

// Run runs the suite against the backends open returns.
func Run(t *testing.T, open Opener) {
	ctx := context.Background()
	b := open(t, Docs())
	t.Cleanup(func() { _ = b.Close() })

	search := func(t *testing.T, q engine.Query) []engine.Hit {
		t.Helper()
		hits, err := b.Search(ctx, q)
		if err != nil {
			t.Fatalf("Search(%+v): %v", q, err)
		}
		return hits
	}

	t.Run("Len counts the documents", func(t *testing.T) {
		if got, want := b.Len(), len(Docs()); got != want {
			t.Errorf("Len() = %d, want %d", got, want)
		}
	})

	order := []struct {
		name  string
		q     engine.Query
		top   string
		exact []string // the whole hit set, when the test pins it
		has   []string // paths that must be among the hits
		none  []string // paths that must not be
	}{
		{name: "a title match outranks content matches", q: engine.Query{Terms: []string{"session"}},
			top: "auth/sessions.md", has: []string{"authz/policies.md", "data/postgres/pgbouncer-pooling.md"}},
		{name: "all terms requires every term", q: engine.Query{Terms: []string{"signing", "key"}, AllTerms: true},
			top: "auth/jwt/signing-key-rotation.md", exact: []string{"auth/jwt/refresh-tokens.md", "auth/jwt/signing-key-rotation.md"}},
		{name: "any term finds a document holding only the last term", q: engine.Query{Terms: []string{"vault", "pgbouncer"}},
			exact: []string{"data/postgres/pgbouncer-pooling.md", "ops/vault.md"}},
		{name: "any term ranks the document matching more terms first", q: engine.Query{Terms: []string{"refresh", "rotation", "redis"}},
			top: "auth/jwt/refresh-tokens.md", has: []string{"auth/jwt/signing-key-rotation.md", "auth/sessions.md"}},
		{name: "a scope keeps its folder and subfolders only", q: engine.Query{Terms: []string{"session"}, Scope: "auth"},
			exact: []string{"auth/sessions.md"}},
		{name: "a scope is a folder, not a name prefix", q: engine.Query{Terms: []string{"policies"}, Scope: "auth"},
			exact: nil, none: []string{"authz/policies.md"}},
		{name: "a nested scope", q: engine.Query{Terms: []string{"key"}, Scope: "auth/jwt/"},
			top: "auth/jwt/signing-key-rotation.md", exact: []string{"auth/jwt/refresh-tokens.md", "auth/jwt/signing-key-rotation.md"}},
		{name: "archived stubs are searchable", q: engine.Query{Terms: []string{"opsgenie"}},
			exact: []string{"ops/_archived/pagerduty.stub.md"}},
		{name: "folder summaries are searchable", q: engine.Query{Terms: []string{"runbooks"}},
			exact: []string{"ops/_index.md"}},
		{name: "inflections match through their stem", q: engine.Query{Terms: []string{"rotating"}},
			has: []string{"auth/jwt/signing-key-rotation.md", "auth/jwt/refresh-tokens.md"}},
		{name: "a misspelt word the index lacks matches with a typo", q: engine.Query{Terms: []string{"pgbouncr"}},
			exact: []string{"data/postgres/pgbouncer-pooling.md"}},
		{name: "a partial word the index lacks matches as a prefix", q: engine.Query{Terms: []string{"pgbounc"}},
			exact: []string{"data/postgres/pgbouncer-pooling.md"}},
		{name: "a word the index has does not match its typo neighbours", q: engine.Query{Terms: []string{"vault"}},
			exact: []string{"ops/vault.md"}, none: []string{"ops/faults.md"}},
		{name: "an entity-style single term", q: engine.Query{Terms: []string{"jwks"}, AllTerms: true},
			exact: []string{"auth/jwt/signing-key-rotation.md"}},
		{name: "a word whose stem is a stop word is still a word", q: engine.Query{Terms: []string{"owns"}},
			exact: []string{"ops/ownership.md"}},
		{name: "stop words alone find nothing", q: engine.Query{Terms: []string{"the", "and", "with"}}, exact: nil},
		{name: "no terms find nothing", q: engine.Query{}, exact: nil},
		{name: "a word nobody wrote finds nothing", q: engine.Query{Terms: []string{"kafka"}, AllTerms: true}, exact: nil},
		// Meilisearch reads ten words of a query and ignores the rest.
		{name: "all terms past ten words requires every one", q: engine.Query{Terms: longQuery("kafka"), AllTerms: true}, exact: nil},
		{name: "all terms past ten words finds the document holding them", q: engine.Query{Terms: longQuery("endpoi"), AllTerms: true},
			exact: []string{"auth/jwt/signing-key-rotation.md"}},
	}
	for _, tt := range order {
		t.Run(tt.name, func(t *testing.T) {
			hits := search(t, tt.q)
			got := paths(hits)
			checkOrder(t, hits)
			if tt.top != "" && (len(got) == 0 || got[0] != tt.top) {
				t.Errorf("top hit of %+v = %v, want %s first", tt.q, got, tt.top)
			}
			if tt.exact != nil || (tt.top == "" && tt.has == nil && tt.none == nil) {
				sorted := slices.Clone(got)
				sort.Strings(sorted)
				want := slices.Clone(tt.exact)
				sort.Strings(want)
				if !slices.Equal(sorted, want) {
					t.Errorf("hits of %+v = %v, want exactly %v", tt.q, got, want)
				}
			}
			for _, p := range tt.has {
				if !slices.Contains(got, p) {
					t.Errorf("hits of %+v = %v, want %s among them", tt.q, got, p)
				}
			}
			for _, p := range tt.none {
				if slices.Contains(got, p) {
					t.Errorf("hits of %+v = %v, want no %s", tt.q, got, p)
				}
			}
		})
	}

	t.Run("a limit caps the hits", func(t *testing.T) {
		hits := search(t, engine.Query{Terms: []string{"session"}, Limit: 1})
		if len(hits) != 1 || hits[0].Path != "auth/sessions.md" {
			t.Errorf("hits = %v, want only auth/sessions.md", paths(hits))
		}
	})

	t.Run("a cancelled search fails", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.Search(cctx, engine.Query{Terms: []string{"session"}}); err == nil {
			t.Error("Search with a cancelled context succeeded")
		}
	})

	if ms, ok := b.(engine.MultiSearcher); ok {
		t.Run("SearchMany answers like Search, in order", func(t *testing.T) {
			qs := []engine.Query{
				{Terms: []string{"session"}, AllTerms: true},
				{Terms: []string{"vault", "pgbouncer"}},
				{Terms: []string{"the"}},
				{Terms: []string{"key"}, Scope: "auth/jwt", AllTerms: true},
			}
			many, err := ms.SearchMany(ctx, qs)
			if err != nil {
				t.Fatal(err)
			}
			if len(many) != len(qs) {
				t.Fatalf("SearchMany returned %d results for %d queries", len(many), len(qs))
			}
			for i, q := range qs {
				if want := search(t, q); !slices.Equal(paths(many[i]), paths(want)) {
					t.Errorf("SearchMany[%d] = %v, Search = %v", i, paths(many[i]), paths(want))
				}
			}
		})
	}

	t.Run("writes then reads", func(t *testing.T) {
		w, ok := b.(engine.Writer)
		if !ok {
			t.Skip("backend is read-only")
		}
		n := b.Len()
		added := engine.Doc{Path: "streaming/kafka.md", Folder: "streaming", Title: "Kafka consumers", Content: "Consumer groups rebalance when a member leaves."}
		if err := w.Apply(ctx, []engine.Change{{New: &added}}); err != nil {
			t.Fatal(err)
		}
		if got := paths(search(t, engine.Query{Terms: []string{"kafka"}, AllTerms: true})); !slices.Equal(got, []string{added.Path}) {
			t.Errorf("after adding, kafka finds %v, want [%s]", got, added.Path)
		}
		if got := paths(search(t, engine.Query{Terms: []string{"consumer"}, Scope: "streaming"})); !slices.Equal(got, []string{added.Path}) {
			t.Errorf("after adding, a scoped search finds %v, want [%s]", got, added.Path)
		}
		if b.Len() != n+1 {
			t.Errorf("Len() after an add = %d, want %d", b.Len(), n+1)
		}

		changed := added
		changed.Title, changed.Content = "Pulsar consumers", "Subscriptions replace consumer groups."
		if err := w.Apply(ctx, []engine.Change{{Old: &added, New: &changed}}); err != nil {
			t.Fatal(err)
		}
		if got := paths(search(t, engine.Query{Terms: []string{"rebalance"}})); len(got) != 0 {
			t.Errorf("after a change, the old word still finds %v", got)
		}
		if got := paths(search(t, engine.Query{Terms: []string{"pulsar"}})); !slices.Equal(got, []string{added.Path}) {
			t.Errorf("after a change, the new word finds %v, want [%s]", got, added.Path)
		}
		if b.Len() != n+1 {
			t.Errorf("Len() after a change = %d, want %d", b.Len(), n+1)
		}

		// The inverse of a batch puts the index back, as the write side does when a
		// later step fails.
		gone := Docs()[6] // ops/vault.md
		batch := []engine.Change{{Old: &changed}, {Old: &gone}}
		if err := w.Apply(ctx, batch); err != nil {
			t.Fatal(err)
		}
		for _, word := range []string{"pulsar", "vault"} {
			got := paths(search(t, engine.Query{Terms: []string{word}}))
			// "vault" is now a word the index lacks, so it may match "fault" as a typo.
			if slices.Contains(got, changed.Path) || slices.Contains(got, gone.Path) {
				t.Errorf("after deleting, %s still finds %v", word, got)
			}
		}
		if b.Len() != n-1 {
			t.Errorf("Len() after deleting two = %d, want %d", b.Len(), n-1)
		}
		if err := w.Apply(ctx, engine.Inverse(batch)); err != nil {
			t.Fatal(err)
		}
		if got := paths(search(t, engine.Query{Terms: []string{"vault"}})); !slices.Equal(got, []string{gone.Path}) {
			t.Errorf("after undoing the delete, vault finds %v, want [%s]", got, gone.Path)
		}
		if b.Len() != n+1 {
			t.Errorf("Len() after undoing = %d, want %d", b.Len(), n+1)
		}
	})
}

func paths(hits []engine.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Path
	}
	return out
}

// checkOrder checks what the query path relies on: positive scores, best first, ties by
// path, no path twice.
func checkOrder(t *testing.T, hits []engine.Hit) {
	t.Helper()
	seen := map[string]bool{}
	for i, h := range hits {
		if !(h.Score > 0) {
			t.Errorf("hit %s has score %v, want > 0", h.Path, h.Score)
		}
		if seen[h.Path] {
			t.Errorf("hit %s appears twice", h.Path)
		}
		seen[h.Path] = true
		if i > 0 {
			p := hits[i-1]
			if p.Score < h.Score || (p.Score == h.Score && p.Path > h.Path) {
				t.Errorf("hits out of order: %s (%v) before %s (%v)", p.Path, p.Score, h.Path, h.Score)
			}
		}
	}
}
