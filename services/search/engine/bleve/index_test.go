package bleve

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine"
)

// kb is a small knowledge base whose documents each exercise one search rule.
var kb = []engine.Doc{
	{Path: "auth/jwt/rotation.md", Folder: "auth/jwt", Title: "Refresh token rotation",
		Content: "Rotate the refresh token on every use. The old token is revoked at once."},
	{Path: "auth/jwt/signing.md", Folder: "auth/jwt", Title: "Signing keys",
		Content: "Keys are stored in the vault. A rotation of the signing keys happens yearly."},
	{Path: "auth/sessions.md", Folder: "auth", Title: "Sessions",
		Content: "Sessions expire after an hour of inactivity; the refresh endpoint extends them."},
	{Path: "auth/_index.md", Folder: "auth", Title: "Authentication", Summary: true,
		Content: "How services authenticate callers: tokens, sessions and keys."},
	{Path: "ops/deploy/kubernetes.md", Folder: "ops/deploy", Title: "Kubernetes deployment",
		Content: "Deployments roll out with a surge of one pod; readiness probes gate traffic."},
	{Path: "ops/monitoring.md", Folder: "ops", Title: "Monitoring",
		Content: "Dashboards show latency percentiles. Alerts page the on-call engineer."},
	{Path: "ops/_archived/pagerduty.stub.md", Folder: "ops/_archived", Title: "PagerDuty escalation",
		Archived: true, Content: "Ghost cue: the old escalation policy for the pager rotation."},
	{Path: "data/postgres_backups.md", Folder: "data", Title: "Nightly jobs",
		Content: "Snapshots are taken at midnight and kept for thirty days."},
}

func build(t testing.TB, docs []engine.Doc, cfg Config) *Index {
	t.Helper()
	ix, err := Build(context.Background(), docs, cfg)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	t.Cleanup(func() { _ = ix.Close() })
	return ix
}

func paths(hits []engine.Hit) []string {
	out := make([]string, len(hits))
	for i, h := range hits {
		out[i] = h.Path
	}
	return out
}

func TestSearchRules(t *testing.T) {
	ix := build(t, kb, DefaultConfig())
	if got := ix.Len(); got != len(kb) {
		t.Fatalf("Len = %d, want %d", got, len(kb))
	}
	tests := []struct {
		name string
		q    engine.Query
		// want lists paths that must be hits; first, if set, must be the top hit.
		want  []string
		first string
		// none lists paths that must not be hits; exact requires want to be all the hits.
		none  []string
		exact bool
	}{
		{
			name:  "a title match outranks a content match",
			q:     engine.Query{Terms: []string{"rotation"}},
			want:  []string{"auth/jwt/rotation.md", "auth/jwt/signing.md"},
			first: "auth/jwt/rotation.md",
		},
		{
			name:  "terms are stemmed: rotating finds rotation",
			q:     engine.Query{Terms: []string{"rotating"}},
			first: "auth/jwt/rotation.md",
		},
		{
			name:  "a path segment matches",
			q:     engine.Query{Terms: []string{"postgres"}},
			want:  []string{"data/postgres_backups.md"},
			exact: true,
		},
		{
			name:  "a prefix of four or more characters matches",
			q:     engine.Query{Terms: []string{"kube"}},
			want:  []string{"ops/deploy/kubernetes.md"},
			exact: true,
		},
		{
			name: "a prefix shorter than four characters does not match",
			q:    engine.Query{Terms: []string{"kub"}},
			none: []string{"ops/deploy/kubernetes.md"},
		},
		{
			name:  "a one-letter typo in a long word matches",
			q:     engine.Query{Terms: []string{"dashbords"}},
			want:  []string{"ops/monitoring.md"},
			exact: true,
		},
		{
			name: "a typo in a short word does not match",
			q:    engine.Query{Terms: []string{"kezs"}},
			none: []string{"auth/jwt/signing.md"},
		},
		{
			name:  "all terms: every term must match",
			q:     engine.Query{Terms: []string{"refresh", "revoked"}, AllTerms: true},
			want:  []string{"auth/jwt/rotation.md"},
			exact: true,
		},
		{
			name:  "any term: one matching term is enough",
			q:     engine.Query{Terms: []string{"refresh", "midnight"}},
			want:  []string{"auth/jwt/rotation.md", "auth/sessions.md", "data/postgres_backups.md"},
			exact: true,
		},
		{
			name:  "all terms with an unknown term finds nothing",
			q:     engine.Query{Terms: []string{"refresh", "zanzibar"}, AllTerms: true},
			exact: true,
		},
		{
			name:  "scope keeps only documents under the folder",
			q:     engine.Query{Terms: []string{"rotation"}, Scope: "auth/jwt"},
			want:  []string{"auth/jwt/rotation.md", "auth/jwt/signing.md"},
			exact: true,
		},
		{
			name:  "scope matches every ancestor folder",
			q:     engine.Query{Terms: []string{"refresh"}, Scope: "auth"},
			want:  []string{"auth/jwt/rotation.md", "auth/sessions.md"},
			exact: true,
		},
		{
			name:  "scope with slashes around it is the same folder",
			q:     engine.Query{Terms: []string{"rotation"}, Scope: "/ops/"},
			want:  []string{"ops/_archived/pagerduty.stub.md"},
			exact: true,
		},
		{
			name:  "scope is a folder, not a string prefix",
			q:     engine.Query{Terms: []string{"rotation"}, Scope: "au"},
			exact: true,
		},
		{
			name:  "archived stubs are searchable",
			q:     engine.Query{Terms: []string{"escalation"}},
			want:  []string{"ops/_archived/pagerduty.stub.md"},
			exact: true,
		},
		{
			name: "the _archived folder name is not a search word",
			q:    engine.Query{Terms: []string{"archived"}},
			none: []string{"ops/_archived/pagerduty.stub.md"},
		},
		{
			name:  "an empty query has no hits",
			q:     engine.Query{},
			exact: true,
		},
		{
			name:  "a query of stop words has no hits",
			q:     engine.Query{Terms: []string{"how", "the", "is"}},
			exact: true,
		},
		{
			name:  "limit caps the hits",
			q:     engine.Query{Terms: []string{"refresh", "rotation"}, Limit: 1},
			want:  []string{"auth/jwt/rotation.md"},
			exact: true,
		},
		{
			name:  "terms are re-split on punctuation",
			q:     engine.Query{Terms: []string{"refresh-token"}, AllTerms: true},
			want:  []string{"auth/jwt/rotation.md"},
			exact: true,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := ix.Search(context.Background(), tc.q)
			if err != nil {
				t.Fatalf("Search: %v", err)
			}
			got := paths(hits)
			for _, w := range tc.want {
				if !slices.Contains(got, w) {
					t.Errorf("hits %v lack %s", got, w)
				}
			}
			for _, n := range tc.none {
				if slices.Contains(got, n) {
					t.Errorf("hits %v contain %s", got, n)
				}
			}
			if tc.exact && len(got) != len(tc.want) {
				t.Errorf("hits %v, want exactly %v", got, tc.want)
			}
			if tc.first != "" && (len(got) == 0 || got[0] != tc.first) {
				t.Errorf("top hit of %v is not %s", got, tc.first)
			}
			for i := 1; i < len(hits); i++ {
				if hits[i].Score > hits[i-1].Score {
					t.Errorf("hits not ordered by score: %v", hits)
				}
			}
			for _, h := range hits {
				if h.Score <= 0 {
					t.Errorf("hit %s has score %g, want > 0", h.Path, h.Score)
				}
			}
		})
	}
}

func TestBoostsDecideTheOrder(t *testing.T) {
	docs := []engine.Doc{
		{Path: "a/title.md", Folder: "a", Title: "Vault", Content: "Where secrets live."},
		{Path: "a/content.md", Folder: "a", Title: "Secrets", Content: "Stored in the vault."},
	}
	tests := []struct {
		name  string
		cfg   func(*Config)
		first string
	}{
		{"title boost 3 puts the title match first", func(*Config) {}, "a/title.md"},
		{"content boost above title boost puts the content match first",
			func(c *Config) { c.TitleBoost, c.ContentBoost = 1, 5 }, "a/content.md"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			ix := build(t, docs, cfg)
			hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"vault"}})
			if err != nil {
				t.Fatal(err)
			}
			if len(hits) != 2 || hits[0].Path != tc.first {
				t.Fatalf("hits %v, want %s first of 2", hits, tc.first)
			}
		})
	}
}

func TestApproximateMatching(t *testing.T) {
	docs := []engine.Doc{
		{Path: "exact.md", Title: "Notes", Content: "Secrets live in the vault."},
		{Path: "prefix.md", Title: "Notes", Content: "Secrets live in vaultwarden."},
		{Path: "typo.md", Title: "Notes", Content: "Secrets live in the fault."},
	}
	tests := []struct {
		name string
		cfg  func(*Config)
		term string
		want []string // in order
	}{
		{"a word the KB contains matches exactly only", func(*Config) {}, "vault",
			[]string{"exact.md"}},
		{"prefix matching of known words when enabled ranks below the exact word",
			func(c *Config) { c.PrefixKnown = true }, "vault", []string{"exact.md", "prefix.md"}},
		{"typo matching of known words when enabled ranks below the exact word",
			func(c *Config) { c.FuzzyKnown = true }, "vault", []string{"exact.md", "typo.md"}},
		{"exact, then prefix, then typo when both are enabled",
			func(c *Config) { c.PrefixKnown, c.FuzzyKnown = true, true }, "vault",
			[]string{"exact.md", "prefix.md", "typo.md"}},
		{"a partial word the KB lacks matches as a prefix", func(*Config) {}, "vaul",
			[]string{"exact.md", "prefix.md"}},
		{"a misspelt word the KB lacks matches within one edit", func(*Config) {}, "vaulr",
			[]string{"exact.md"}},
		{"a zero prefix boost turns prefix matching off", func(c *Config) { c.PrefixBoost = 0 }, "vaul",
			nil},
		{"zero fuzziness turns typo matching off", func(c *Config) { c.Fuzziness = 0 }, "vaulr",
			nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			ix := build(t, docs, cfg)
			hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{tc.term}})
			if err != nil {
				t.Fatal(err)
			}
			if got := paths(hits); !slices.Equal(got, tc.want) {
				t.Fatalf("hits %v, want %v", hits, tc.want)
			}
		})
	}
}

func TestConcurrentSearches(t *testing.T) {
	ix := build(t, kb, DefaultConfig())
	want, err := ix.Search(context.Background(), engine.Query{Terms: []string{"refresh", "token"}})
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for range 8 {
		go func() {
			for range 50 {
				got, err := ix.Search(context.Background(), engine.Query{Terms: []string{"refresh", "token"}})
				if err == nil && !slices.Equal(got, want) {
					err = fmt.Errorf("concurrent search got %v, want %v", got, want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestSearchRespectsCancellation(t *testing.T) {
	ix := build(t, kb, DefaultConfig())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	hits, err := ix.Search(ctx, engine.Query{Terms: []string{"refresh"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Search on a cancelled context = %v, %v; want context.Canceled", hits, err)
	}
}

func TestBuildRespectsCancellation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ix, err := Build(ctx, kb, DefaultConfig())
	if !errors.Is(err, context.Canceled) {
		if ix != nil {
			_ = ix.Close()
		}
		t.Fatalf("Build on a cancelled context: %v, want context.Canceled", err)
	}
}

func TestBuildRejects(t *testing.T) {
	tests := []struct {
		name string
		docs []engine.Doc
		cfg  func(*Config)
	}{
		{"a document without a path", []engine.Doc{{Title: "x"}}, func(*Config) {}},
		{"a negative boost", kb, func(c *Config) { c.TitleBoost = -1 }},
		{"fuzziness above 2", kb, func(c *Config) { c.Fuzziness = 3 }},
		{"a zero batch size", kb, func(c *Config) { c.BatchSize = 0 }},
		{"all field boosts zero", kb, func(c *Config) { c.TitleBoost, c.PathBoost, c.ContentBoost = 0, 0, 0 }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			ix, err := Build(context.Background(), tc.docs, cfg)
			if err == nil {
				_ = ix.Close()
				t.Fatal("Build succeeded, want an error")
			}
		})
	}
}

func TestDuplicatePathsIndexOnce(t *testing.T) {
	docs := append(slices.Clone(kb), kb[0])
	ix := build(t, docs, DefaultConfig())
	if ix.Len() != len(kb) {
		t.Fatalf("Len = %d, want %d", ix.Len(), len(kb))
	}
}

func TestPersistence(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "kb")
	newer := append(slices.Clone(kb), engine.Doc{Path: "new.md", Title: "Zanzibar", Content: "An island."})
	steps := []struct {
		name       string
		docs       []engine.Doc
		fp         string
		wantReused bool
		wantLen    int
		// zanzibar reports whether the doc only in newer must be found.
		zanzibar bool
	}{
		{"a missing directory is built", kb, "v1", false, len(kb), false},
		{"the same fingerprint reopens the index", nil, "v1", true, len(kb), false},
		{"a new fingerprint rebuilds", newer, "v2", false, len(kb) + 1, true},
		{"the rebuilt index reopens", nil, "v2", true, len(kb) + 1, true},
		{"an empty fingerprint always rebuilds", kb, "", false, len(kb), false},
		{"an index without a fingerprint is not reused", kb, "v2", false, len(kb), false},
	}
	for _, st := range steps {
		cfg := DefaultConfig()
		cfg.Dir, cfg.Fingerprint = dir, st.fp
		ix, err := Build(context.Background(), st.docs, cfg)
		if err != nil {
			t.Fatalf("%s: Build: %v", st.name, err)
		}
		hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"zanzibar"}})
		if err != nil {
			t.Fatalf("%s: Search: %v", st.name, err)
		}
		if ix.Reused() != st.wantReused || ix.Len() != st.wantLen || (len(hits) > 0) != st.zanzibar {
			t.Errorf("%s: reused %v len %d zanzibar hits %d; want reused %v len %d zanzibar %v",
				st.name, ix.Reused(), ix.Len(), len(hits), st.wantReused, st.wantLen, st.zanzibar)
		}
		// A reopened index must score like the one that was built (same mapping, BM25).
		rot, err := ix.Search(context.Background(), engine.Query{Terms: []string{"rotation"}})
		if err != nil || len(rot) == 0 || rot[0].Path != "auth/jwt/rotation.md" {
			t.Errorf("%s: rotation search = %v, %v", st.name, rot, err)
		}
		if err := ix.Close(); err != nil {
			t.Fatalf("%s: Close: %v", st.name, err)
		}
	}
}

func TestPersistenceRefusesForeignDirectory(t *testing.T) {
	dir := t.TempDir()
	keep := filepath.Join(dir, "notes.txt")
	if err := os.WriteFile(keep, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Dir, cfg.Fingerprint = dir, "v1"
	ix, err := Build(context.Background(), kb, cfg)
	if !errors.Is(err, ErrNotIndex) {
		if ix != nil {
			_ = ix.Close()
		}
		t.Fatalf("Build into a foreign directory: %v, want ErrNotIndex", err)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Fatalf("foreign file removed: %v", err)
	}
}

func TestBM25UsesTheRealAverageLength(t *testing.T) {
	// Bleve's own BM25 takes the average field length as distinct terms / documents. On
	// a KB that repeats its vocabulary that "average" is a few tokens, so every document
	// of ordinary length looks far longer than average and a short document with one
	// mention beats a document of average length that is about the term. With the real
	// average (~200 tokens here) the document about the term wins.
	words := func(n int) string {
		pool := []string{"alpha", "beta", "gamma", "delta"}
		var b strings.Builder
		for i := range n {
			b.WriteString(pool[i%len(pool)] + " ")
		}
		return b.String()
	}
	docs := []engine.Doc{
		{Path: "about.md", Title: "note", Content: strings.Repeat("vremenux ", 20) + words(180)},
		{Path: "mention.md", Title: "note", Content: "vremenux " + words(19)},
	}
	for i := range 40 {
		docs = append(docs, engine.Doc{Path: fmt.Sprintf("filler%d.md", i), Title: "note", Content: words(200)})
	}
	ix := build(t, docs, DefaultConfig())
	hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"vremenux"}, AllTerms: true, Limit: 5})
	if err != nil || len(hits) != 2 {
		t.Fatalf("hits %v, err %v", hits, err)
	}
	if hits[0].Path != "about.md" {
		t.Errorf("hits %v: the average-length document about the term must win; length normalisation is off", hits)
	}
}

func TestAncestors(t *testing.T) {
	tests := []struct {
		folder string
		want   []string
	}{
		{"", nil},
		{"auth", []string{"auth"}},
		{"auth/jwt/keys", []string{"auth", "auth/jwt", "auth/jwt/keys"}},
		{"/auth/", []string{"auth"}},
	}
	for _, tc := range tests {
		if got := engine.Ancestors(tc.folder); !slices.Equal(got, tc.want) {
			t.Errorf("ancestors(%q) = %v, want %v", tc.folder, got, tc.want)
		}
	}
}

func TestConfigFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c != DefaultConfig() {
		t.Fatalf("flag defaults %+v differ from DefaultConfig %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if err := fs.Parse([]string{"-bleve-fuzziness", "5"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-bleve-fuzziness") {
		t.Fatalf("Validate = %v, want an error naming -bleve-fuzziness", err)
	}
}

// synthetic generates a knowledge base shaped like the 5,000-file one in TOOLCHAIN.md:
// short titles, bodies of a few hundred words drawn from a Zipf-distributed vocabulary,
// folders three levels deep.
type synthetic struct {
	vocab []string
	docs  []engine.Doc
}

func newSynthetic(n int, seed uint64) *synthetic {
	r := rand.New(rand.NewPCG(seed, seed+1))
	syll := []string{"ka", "lo", "mi", "ten", "ra", "vo", "shi", "pe", "dor", "qua", "zen",
		"bri", "mu", "sa", "tor", "ni", "gle", "fa", "xo", "ber"}
	seen := map[string]bool{}
	var vocab []string
	for len(vocab) < 20000 {
		var b strings.Builder
		for k := 2 + r.IntN(3); k > 0; k-- {
			b.WriteString(syll[r.IntN(len(syll))])
		}
		w := b.String()
		if !seen[w] {
			seen[w] = true
			vocab = append(vocab, w)
		}
	}
	zipf := rand.NewZipf(r, 1.1, 1, uint64(len(vocab)-1))
	s := &synthetic{vocab: vocab}
	words := func(k int) string {
		out := make([]string, k)
		for i := range out {
			out[i] = vocab[zipf.Uint64()]
		}
		return strings.Join(out, " ")
	}
	for i := range n {
		folder := fmt.Sprintf("%s/%s/%s", vocab[r.IntN(20)], vocab[20+r.IntN(100)], vocab[200+r.IntN(400)])
		title := words(2 + r.IntN(4))
		s.docs = append(s.docs, engine.Doc{
			Path:    fmt.Sprintf("%s/%s-%d.md", folder, strings.ReplaceAll(title, " ", "-"), i),
			Folder:  folder,
			Title:   title,
			Content: words(200 + r.IntN(500)),
		})
	}
	return s
}

// queries returns n three-word questions, each built from one document's title and body,
// with every fifth word misspelt, as users type them.
func (s *synthetic) queries(n int, seed uint64) [][]string {
	r := rand.New(rand.NewPCG(seed, seed+7))
	out := make([][]string, n)
	for i := range out {
		d := s.docs[r.IntN(len(s.docs))]
		tw := strings.Fields(d.Title)
		cw := strings.Fields(d.Content)
		q := []string{tw[r.IntN(len(tw))], cw[r.IntN(len(cw))], cw[r.IntN(len(cw))]}
		if i%5 == 0 && len(q[0]) > 5 {
			b := []byte(q[0])
			b[2] = 'y'
			q[0] = string(b)
		}
		out[i] = q
	}
	return out
}

// BenchmarkSearch measures one search as the query path runs it on a 5,000-file KB: all
// terms, any term, and scoped. p50/p99 come from per-call wall times. Baselines in the same
// run: the index built in one batch (one segment, ~3x the build memory), exact matching only
// (no prefix or typo), and prefix and typo matching applied to every word (PrefixKnown and
// FuzzyKnown), which is what the defaults avoid.
func BenchmarkSearch(b *testing.B) {
	kbs := newSynthetic(5000, 42)
	qs := kbs.queries(1000, 7)
	ctx := context.Background()
	variants := []struct {
		name string
		cfg  func(*Config)
	}{
		{"default", func(*Config) {}},
		{"one-segment", func(c *Config) { c.BatchSize = 10000 }},
		{"baseline-exact-only", func(c *Config) { c.PrefixBoost, c.FuzzyBoost = 0, 0 }},
		{"expand-known-words", func(c *Config) { c.PrefixKnown, c.FuzzyKnown = true, true }},
	}
	scope := kbs.docs[0].Folder[:strings.IndexByte(kbs.docs[0].Folder, '/')]
	kinds := []struct {
		name string
		q    func(terms []string) engine.Query
	}{
		{"all-terms", func(t []string) engine.Query { return engine.Query{Terms: t, AllTerms: true, Limit: 50} }},
		{"any-term", func(t []string) engine.Query { return engine.Query{Terms: t, Limit: 50} }},
		{"scoped-any-term", func(t []string) engine.Query { return engine.Query{Terms: t, Limit: 50, Scope: scope} }},
	}
	for _, v := range variants {
		cfg := DefaultConfig()
		v.cfg(&cfg)
		start := time.Now()
		ix := build(b, kbs.docs, cfg)
		b.Logf("%s: build of %d docs %v", v.name, len(kbs.docs), time.Since(start).Round(time.Millisecond))
		for _, k := range kinds {
			b.Run(v.name+"/"+k.name, func(b *testing.B) {
				lat := make([]time.Duration, 0, b.N)
				hits := 0
				for i := 0; b.Loop(); i++ {
					t0 := time.Now()
					h, err := ix.Search(ctx, k.q(qs[i%len(qs)]))
					lat = append(lat, time.Since(t0))
					if err != nil {
						b.Fatal(err)
					}
					hits += len(h)
				}
				reportPercentiles(b, lat)
				b.ReportMetric(float64(hits)/float64(len(lat)), "hits/op")
			})
		}
	}
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	at := func(p float64) float64 {
		return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}
