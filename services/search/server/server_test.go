package server

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/search/gate"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
	"github.com/quarry-router/quarry/services/search/tree"
)

const (
	exampleKB = "../../../examples/kb/platform"
	questions = "../../../examples/questions.jsonl"
	platform  = "platform"
	// extras is a small KB whose one document carries front-matter keys Quarry does not
	// interpret.
	extras = "extras"

	// wait bounds every call and every wait for a stream message.
	wait = 30 * time.Second
)

// The server, the client connection and Bleve's indexes must all be gone after each test;
// Bleve's analysis workers are one process-wide pool started at package init.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

const extrasDoc = `---
title: Extra keys
tags: [alpha, beta]
related: [ops/other.md]
importance: 70
maturity: validated
updated: 2026-10-01
owner: team-data
reviewers: [ana, bo]
sla_hours: 4
ratio: 0.5
public: true
reviewed: 2026-09-30
links:
  runbook: https://runbooks.example/extra
  pages: 3
---
# Extra keys

The body of a document with extra front matter.
`

type fixture struct {
	client quarryv1.SearchServiceClient
	reg    *kb.Registry
	cfg    resolve.Config
}

// start serves the example KB and the extras KB on a loopback socket, as the search
// service does, and returns a client of it. Everything stops when the test ends.
func start(t *testing.T) *fixture {
	t.Helper()
	extrasDir := writeTree(t, map[string]string{
		"ops/extra.md":  extrasDoc,
		"ops/other.md":  "# Other\n\nNo front matter.\n",
		"ops/_index.md": "# Ops\n\nOperations.\n",
	})
	return serve(t, map[string]string{platform: exampleKB, extras: extrasDir})
}

// writeTree writes files (slash paths to contents) under a new temporary folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	writeFiles(t, dir, files)
	return dir
}

// serve loads kbs (IDs to folders) with the default flags and serves them on a
// loopback socket.
func serve(t *testing.T, kbs map[string]string) *fixture {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var kc kb.Config
	kc.RegisterFlags(fs)
	var rc resolve.Config
	rc.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := kb.NewRegistry(kc, log)
	t.Cleanup(reg.Close)
	ctx := context.Background()
	for id, dir := range kbs {
		if _, err := reg.Load(ctx, id, dir); err != nil {
			t.Fatal(err)
		}
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpcx.NewServer(log)
	now := func() time.Time { return time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC) }
	quarryv1.RegisterSearchServiceServer(gs.Server, New(reg, resolve.New(rc, reg, now), log))
	serveCtx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gs.Serve(serveCtx, lis) }()
	t.Cleanup(func() {
		stop()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(wait):
			t.Errorf("server did not stop within %v", wait)
		}
	})

	conn, err := grpcx.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return &fixture{client: quarryv1.NewSearchServiceClient(conn), reg: reg, cfg: rc}
}

func callCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return ctx
}

func (f *fixture) generation(t *testing.T, id string) uint64 {
	t.Helper()
	k, err := f.reg.Get(id)
	if err != nil {
		t.Fatal(err)
	}
	return k.Generation
}

func TestResolveReturnsTheRouteAnswerAndSources(t *testing.T) {
	f := start(t)
	tests := []struct {
		name      string
		query     string
		wantRoute quarryv1.Tier
		wantTop   string
		wantRule  string
	}{
		{"a clear match is answered directly", "pgbouncer pool mode", quarryv1.Tier_TIER_DIRECT, "data/postgres/pgbouncer-pooling.md", ""},
		{"a never-mentioned product is out of domain", "How do I rotate Kafka consumer credentials?", quarryv1.Tier_TIER_OUT_OF_DOMAIN, "", "unmatched_term"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.client.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: tt.query, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetRoute() != tt.wantRoute {
				t.Fatalf("route = %v, want %v", resp.GetRoute(), tt.wantRoute)
			}
			if resp.GetGeneration() != f.generation(t, platform) {
				t.Errorf("generation = %d, want %d", resp.GetGeneration(), f.generation(t, platform))
			}
			if resp.GetAnswer() == "" {
				t.Error("empty answer")
			}
			g := resp.GetGate()
			if g == nil {
				t.Fatal("explain set but no gate trace")
			}
			if g.GetOutOfDomainRule() != tt.wantRule {
				t.Errorf("gate out-of-domain rule = %q, want %q", g.GetOutOfDomainRule(), tt.wantRule)
			}
			if g.GetSearchText() == "" || len(g.GetThresholds()) == 0 {
				t.Errorf("gate trace without search text or thresholds: %v", g)
			}
			if got := g.GetThresholds()["direct_min"]; got != f.cfg.Gate.DirectMin {
				t.Errorf("threshold direct_min = %g, want %g", got, f.cfg.Gate.DirectMin)
			}
			var names []string
			for _, s := range resp.GetStages() {
				names = append(names, s.GetName())
				if s.GetDuration() == nil {
					t.Errorf("stage %s without a duration", s.GetName())
				}
			}
			for _, want := range []string{"parse", "search", "rank", "gate"} {
				if !slices.Contains(names, want) {
					t.Errorf("stages %v lack %q", names, want)
				}
			}
			if tt.wantRoute == quarryv1.Tier_TIER_OUT_OF_DOMAIN {
				if len(resp.GetSources()) != 0 || len(resp.GetPrefetched()) != 0 {
					t.Errorf("out-of-domain answer with %d sources, %d prefetched; want none", len(resp.GetSources()), len(resp.GetPrefetched()))
				}
				return
			}
			if len(resp.GetSources()) == 0 || resp.GetSources()[0].GetPath() != tt.wantTop {
				t.Fatalf("sources = %v, want %s first", resp.GetSources(), tt.wantTop)
			}
			top := resp.GetSources()[0]
			if top.GetTitle() == "" || top.GetExcerpt() == "" || top.GetRelevance() < f.cfg.Gate.DirectMin {
				t.Errorf("top source = %v, want a title, an excerpt and relevance >= %g", top, f.cfg.Gate.DirectMin)
			}
			if g.GetTopRelevance() != top.GetRelevance() || len(g.GetResults()) != len(resp.GetSources()) {
				t.Errorf("gate trace (top %g, %d results) disagrees with the sources (top %g, %d)",
					g.GetTopRelevance(), len(g.GetResults()), top.GetRelevance(), len(resp.GetSources()))
			}
			if !slices.Contains(names, "answer") {
				t.Errorf("stages %v lack answer", names)
			}
		})
	}
}

func TestResolveWithoutExplainHasNoTrace(t *testing.T) {
	f := start(t)
	resp, err := f.client.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: "pgbouncer pool mode"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGate() != nil || len(resp.GetStages()) != 0 {
		t.Errorf("gate %v, %d stages without explain; want none", resp.GetGate(), len(resp.GetStages()))
	}
}

// LLM routes carry the documents for the prompt with full content, and a flagged fallback.
func TestResolveLLMRouteCarriesPrefetchedDocuments(t *testing.T) {
	f := start(t)
	file, err := os.Open(questions)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	seen := 0
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		var q struct{ Query, Kind string }
		if err := json.Unmarshal(sc.Bytes(), &q); err != nil {
			t.Fatal(err)
		}
		if q.Kind != "known_item" {
			continue
		}
		resp, err := f.client.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: q.Query})
		if err != nil {
			t.Fatal(err)
		}
		if resp.GetRoute() != quarryv1.Tier_TIER_SINGLE_LLM {
			continue
		}
		seen++
		if !resp.GetFallbackDegraded() {
			t.Errorf("%q: fallback not flagged degraded", q.Query)
		}
		pre := resp.GetPrefetched()
		if len(pre) == 0 || len(pre) > f.cfg.Gate.DirectMaxDocs {
			t.Errorf("%q: %d prefetched documents, want 1 to %d", q.Query, len(pre), f.cfg.Gate.DirectMaxDocs)
		}
		for _, d := range pre {
			if d.GetContent() == "" || d.GetTitle() == "" || d.GetMaturity() == quarryv1.Maturity_MATURITY_UNSPECIFIED {
				t.Errorf("%q: prefetched %s lacks content, title or maturity", q.Query, d.GetPath())
			}
		}
	}
	if seen == 0 {
		t.Fatal("no known-item question routed to SINGLE_LLM, nothing checked")
	}
}

func TestSearchReturnsScopedResultsWithinTheLimit(t *testing.T) {
	f := start(t)
	tests := []struct {
		name      string
		query     string
		scope     string
		limit     int32
		wantUnder string
		wantMax   int
	}{
		{"explicit scope", "rollback", "deploy/kubernetes", 5, "deploy/kubernetes/", 5},
		{"limit of one", "postgres", "", 1, "", 1},
		{"limit 0 means 10", "postgres", "", 0, "", 10},
		{"limit of 50 is allowed", "postgres", "", 50, "", 50},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.client.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: platform, Query: tt.query, Scope: tt.scope, Limit: tt.limit})
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetGeneration() != f.generation(t, platform) {
				t.Errorf("generation = %d, want %d", resp.GetGeneration(), f.generation(t, platform))
			}
			rs := resp.GetResults()
			if len(rs) == 0 || len(rs) > tt.wantMax {
				t.Fatalf("%d results, want 1 to %d", len(rs), tt.wantMax)
			}
			for _, r := range rs {
				if !strings.HasPrefix(r.GetPath(), tt.wantUnder) {
					t.Errorf("result %s outside %q", r.GetPath(), tt.wantUnder)
				}
				if r.GetTitle() == "" {
					t.Errorf("result %s without a title", r.GetPath())
				}
			}
		})
	}
}

func TestReadDocumentReturnsFrontMatterAndExtraKeys(t *testing.T) {
	f := start(t)
	tests := []struct {
		name      string
		kb        string
		path      string
		wantTitle string
		wantExtra map[string]any // nil: no extra keys
	}{
		{
			name: "every kind of extra value", kb: extras, path: "ops/extra.md", wantTitle: "Extra keys",
			wantExtra: map[string]any{
				"owner":     "team-data",
				"reviewers": []any{"ana", "bo"},
				"sla_hours": float64(4),
				"ratio":     0.5,
				"public":    true,
				"reviewed":  "2026-09-30",
				"links":     map[string]any{"runbook": "https://runbooks.example/extra", "pages": float64(3)},
			},
		},
		{"example file with an owner", platform, "auth/jwt/signing-key-rotation.md", "Rotating JWT signing keys", map[string]any{"owner": "team-identity"}},
		{"document without front matter", extras, "ops/other.md", "Other", nil},
		{"path in a non-canonical form", extras, "./ops//other.md", "Other", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := f.client.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: tt.kb, Path: tt.path})
			if err != nil {
				t.Fatal(err)
			}
			d := resp.GetDocument()
			if d.GetTitle() != tt.wantTitle || d.GetContent() == "" {
				t.Errorf("document %q with %d bytes of content, want title %q and content", d.GetTitle(), len(d.GetContent()), tt.wantTitle)
			}
			if resp.GetGeneration() != f.generation(t, tt.kb) {
				t.Errorf("generation = %d, want %d", resp.GetGeneration(), f.generation(t, tt.kb))
			}
			if tt.wantExtra == nil {
				if d.GetExtra() != nil {
					t.Errorf("extra = %v, want none", d.GetExtra().AsMap())
				}
				return
			}
			if got := d.GetExtra().AsMap(); !reflect.DeepEqual(got, tt.wantExtra) {
				t.Errorf("extra = %#v, want %#v", got, tt.wantExtra)
			}
		})
	}

	resp, err := f.client.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: extras, Path: "ops/extra.md"})
	if err != nil {
		t.Fatal(err)
	}
	d := resp.GetDocument()
	if d.GetPath() != "ops/extra.md" || !slices.Equal(d.GetTags(), []string{"alpha", "beta"}) || !slices.Equal(d.GetRelated(), []string{"ops/other.md"}) {
		t.Errorf("path %q, tags %v, related %v; want ops/extra.md, [alpha beta], [ops/other.md]", d.GetPath(), d.GetTags(), d.GetRelated())
	}
	if d.GetImportance() < 69.9 || d.GetImportance() > 70 || d.GetMaturity() != quarryv1.Maturity_MATURITY_VALIDATED {
		t.Errorf("importance %g, maturity %v; want 70 and VALIDATED", d.GetImportance(), d.GetMaturity())
	}
	if want := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC); !d.GetUpdated().AsTime().Equal(want) {
		t.Errorf("updated = %v, want %v", d.GetUpdated().AsTime(), want)
	}
}

func TestListFolderPutsFoldersFirst(t *testing.T) {
	f := start(t)
	tests := []struct {
		path        string
		wantFolders []string
		wantFiles   []string
	}{
		{"", []string{"auth", "data", "deploy", "observability"}, nil},
		{"deploy/ci", []string{"deploy/ci/_archived"}, []string{"deploy/ci/_index.md", "deploy/ci/build-cache.md", "deploy/ci/github-actions-workflows.md"}},
		{"deploy/ci/_archived", nil, []string{"deploy/ci/_archived/jenkins-pipelines.stub.md"}},
		{"auth/", []string{"auth/api-keys", "auth/jwt", "auth/oauth"}, []string{"auth/_index.md"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%q", tt.path), func(t *testing.T) {
			resp, err := f.client.ListFolder(callCtx(t), &quarryv1.ListFolderRequest{KnowledgeBase: platform, Path: tt.path})
			if err != nil {
				t.Fatal(err)
			}
			var folders, files []string
			for i, e := range resp.GetEntries() {
				if e.GetFolder() {
					if len(files) > 0 {
						t.Errorf("folder %s at %d after a file", e.GetPath(), i)
					}
					folders = append(folders, e.GetPath())
					continue
				}
				files = append(files, e.GetPath())
				if e.GetArchived() != strings.HasSuffix(e.GetPath(), ".stub.md") {
					t.Errorf("%s archived = %v", e.GetPath(), e.GetArchived())
				}
			}
			if !slices.Equal(folders, tt.wantFolders) || !slices.Equal(files, tt.wantFiles) {
				t.Errorf("folders %v, files %v; want %v, %v", folders, files, tt.wantFolders, tt.wantFiles)
			}
		})
	}

	// A limit lists the first entries and says how many there are; a negative one is
	// the caller's mistake.
	for _, tt := range []struct {
		limit int32
		want  []string
	}{
		{1, []string{"deploy/ci/_archived"}},
		{2, []string{"deploy/ci/_archived", "deploy/ci/_index.md"}},
		{0, []string{"deploy/ci/_archived", "deploy/ci/_index.md", "deploy/ci/build-cache.md", "deploy/ci/github-actions-workflows.md"}},
		{9, []string{"deploy/ci/_archived", "deploy/ci/_index.md", "deploy/ci/build-cache.md", "deploy/ci/github-actions-workflows.md"}},
	} {
		resp, err := f.client.ListFolder(callCtx(t), &quarryv1.ListFolderRequest{KnowledgeBase: platform, Path: "deploy/ci", Limit: tt.limit})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, e := range resp.GetEntries() {
			got = append(got, e.GetPath())
		}
		if !slices.Equal(got, tt.want) || resp.GetTotal() != 4 {
			t.Errorf("limit %d: entries %v, total %d; want %v, 4", tt.limit, got, resp.GetTotal(), tt.want)
		}
	}
	if _, err := f.client.ListFolder(callCtx(t), &quarryv1.ListFolderRequest{KnowledgeBase: platform, Path: "deploy/ci", Limit: -1}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("limit -1: %v, want INVALID_ARGUMENT", err)
	}

	// A folder with an _index.md carries its title.
	resp, err := f.client.ListFolder(callCtx(t), &quarryv1.ListFolderRequest{KnowledgeBase: platform, Path: "auth"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range resp.GetEntries() {
		if e.GetFolder() && (!e.GetHasSummary() || e.GetTitle() == "") {
			t.Errorf("folder %s: has_summary %v, title %q; want its _index.md title", e.GetPath(), e.GetHasSummary(), e.GetTitle())
		}
	}
}

func TestGetManifestFillsThreeLanesWithinTheirBudgets(t *testing.T) {
	f := start(t)
	resp, err := f.client.GetManifest(callCtx(t), &quarryv1.GetManifestRequest{KnowledgeBase: platform})
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGeneration() != f.generation(t, platform) {
		t.Errorf("generation = %d, want %d", resp.GetGeneration(), f.generation(t, platform))
	}
	k, err := f.reg.Get(platform)
	if err != nil {
		t.Fatal(err)
	}
	var nSummaries, nStubs, nContexts int
	for _, d := range k.Tree.Docs {
		switch {
		case d.Archived:
			nStubs++
		case d.Summary:
			nSummaries++
		default:
			nContexts++
		}
	}
	kc := kb.Config{}
	fs := flag.NewFlagSet("budgets", flag.ContinueOnError)
	kc.RegisterFlags(fs)
	lanes := []struct {
		name   string
		lane   *quarryv1.ManifestLane
		budget int
		docs   int
		belong func(path string) bool
	}{
		{"summaries", resp.GetSummaries(), kc.Manifest.SummariesBudget, nSummaries, func(p string) bool { return strings.HasSuffix(p, "_index.md") }},
		{"contexts", resp.GetContexts(), kc.Manifest.ContextsBudget, nContexts, func(p string) bool {
			return !strings.HasSuffix(p, "_index.md") && !strings.HasSuffix(p, ".stub.md")
		}},
		{"stubs", resp.GetStubs(), kc.Manifest.StubsBudget, nStubs, func(p string) bool { return strings.HasSuffix(p, ".stub.md") }},
	}
	for _, l := range lanes {
		t.Run(l.name, func(t *testing.T) {
			if got := int(l.lane.GetBudgetTokens()); got != l.budget {
				t.Errorf("budget = %d, want %d", got, l.budget)
			}
			if l.lane.GetUsedTokens() > l.lane.GetBudgetTokens() {
				t.Errorf("used %d tokens of a %d budget", l.lane.GetUsedTokens(), l.lane.GetBudgetTokens())
			}
			if len(l.lane.GetEntries()) == 0 {
				t.Fatal("empty lane")
			}
			sum := 0
			for _, e := range l.lane.GetEntries() {
				sum += int(e.GetTokens())
				if !l.belong(e.GetPath()) {
					t.Errorf("%s does not belong in this lane", e.GetPath())
				}
			}
			if sum != int(l.lane.GetUsedTokens()) {
				t.Errorf("entries cost %d tokens, lane says %d", sum, l.lane.GetUsedTokens())
			}
			if got := len(l.lane.GetEntries()) + int(l.lane.GetOmitted()); got != l.docs {
				t.Errorf("entries + omitted = %d, want the %d documents of this kind", got, l.docs)
			}
		})
	}
	ctxs := resp.GetContexts().GetEntries()
	if !slices.IsSortedFunc(ctxs, func(a, b *quarryv1.ManifestEntry) int {
		switch {
		case a.GetImportance() > b.GetImportance():
			return -1
		case a.GetImportance() < b.GetImportance():
			return 1
		}
		return 0
	}) {
		t.Error("contexts are not ordered by importance, highest first")
	}
	sums := resp.GetSummaries().GetEntries()
	if !slices.IsSortedFunc(sums, func(a, b *quarryv1.ManifestEntry) int {
		return strings.Count(a.GetPath(), "/") - strings.Count(b.GetPath(), "/")
	}) {
		t.Error("summaries are not ordered broadest first")
	}
}

func TestListKnowledgeBasesReportsEveryKBSortedByID(t *testing.T) {
	f := start(t)
	resp, err := f.client.ListKnowledgeBases(callCtx(t), &quarryv1.ListKnowledgeBasesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	assertStates(t, resp.GetKnowledgeBases(), f.reg.States())
	if ids := stateIDs(resp.GetKnowledgeBases()); !slices.Equal(ids, []string{extras, platform}) {
		t.Errorf("ids = %v, want [%s %s]", ids, extras, platform)
	}
}

func stateIDs(ss []*quarryv1.KnowledgeBaseState) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.GetId()
	}
	return out
}

func assertStates(t *testing.T, got []*quarryv1.KnowledgeBaseState, want []kb.State) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d knowledge bases %v, want %d", len(got), stateIDs(got), len(want))
	}
	for i, w := range want {
		g := got[i]
		if g.GetId() != w.ID || g.GetGeneration() != w.Generation || int(g.GetDocumentCount()) != w.Documents || !slices.Equal(g.GetDomains(), w.Domains) {
			t.Errorf("state %d = %v, want %+v", i, g, w)
		}
	}
}

func TestWatchGenerationsSendsTheSnapshotThenEachChange(t *testing.T) {
	f := start(t)
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	stream, err := f.client.WatchGenerations(ctx, &quarryv1.WatchGenerationsRequest{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	assertStates(t, first.GetKnowledgeBases(), f.reg.States())
	before := f.generation(t, platform)

	k, err := f.reg.Load(context.Background(), platform, exampleKB)
	if err != nil {
		t.Fatal(err)
	}
	change, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	got := change.GetKnowledgeBases()
	if len(got) != 1 || got[0].GetId() != platform || got[0].GetGeneration() != k.Generation {
		t.Fatalf("change = %v, want only %s at generation %d", got, platform, k.Generation)
	}
	if k.Generation <= before {
		t.Errorf("generation %d after reload, want more than %d", k.Generation, before)
	}
}

func TestErrorsMapToStatusCodes(t *testing.T) {
	f := start(t)
	long := strings.Repeat("rollback ", maxQueryBytes/len("rollback ")+1)
	tests := []struct {
		name string
		call func(ctx context.Context, c quarryv1.SearchServiceClient) error
		want codes.Code
	}{
		{"Resolve: unknown knowledge base", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "nope", Query: "rollback"})
			return err
		}, codes.NotFound},
		{"Resolve: malformed knowledge base id", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: "Not An ID", Query: "rollback"})
			return err
		}, codes.InvalidArgument},
		{"Resolve: oversized query", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: long})
			return err
		}, codes.InvalidArgument},
		{"Resolve: empty query", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: " \t "})
			return err
		}, codes.InvalidArgument},
		{"Resolve: a query of invisible characters", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Resolve(ctx, &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: "\u00ad\u200b\ufeff"})
			return err
		}, codes.InvalidArgument},
		{"Search: empty query", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform})
			return err
		}, codes.InvalidArgument},
		{"Search: oversized query", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform, Query: long})
			return err
		}, codes.InvalidArgument},
		{"Search: limit 51", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform, Query: "rollback", Limit: 51})
			return err
		}, codes.InvalidArgument},
		{"Search: negative limit", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform, Query: "rollback", Limit: -1})
			return err
		}, codes.InvalidArgument},
		{"Search: scope with ..", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform, Query: "rollback", Scope: "../etc"})
			return err
		}, codes.InvalidArgument},
		{"Search: absolute scope", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: platform, Query: "rollback", Scope: "/etc"})
			return err
		}, codes.InvalidArgument},
		{"Search: unknown knowledge base", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.Search(ctx, &quarryv1.SearchRequest{KnowledgeBase: "nope", Query: "rollback"})
			return err
		}, codes.NotFound},
		{"ReadDocument: path with ..", readDoc(platform, "../etc/passwd"), codes.InvalidArgument},
		{"ReadDocument: path with .. inside", readDoc(platform, "auth/../../etc/passwd"), codes.InvalidArgument},
		{"ReadDocument: .. that stays inside", readDoc(platform, "auth/../auth/_index.md"), codes.InvalidArgument},
		{"ReadDocument: absolute path", readDoc(platform, "/etc/passwd"), codes.InvalidArgument},
		{"ReadDocument: backslash", readDoc(platform, `auth\_index.md`), codes.InvalidArgument},
		{"ReadDocument: NUL byte", readDoc(platform, "auth/\x00.md"), codes.InvalidArgument},
		{"ReadDocument: missing document", readDoc(platform, "auth/missing.md"), codes.NotFound},
		{"ReadDocument: a folder", readDoc(platform, "auth/jwt"), codes.NotFound},
		{"ReadDocument: unknown knowledge base", readDoc("nope", "auth/_index.md"), codes.NotFound},
		{"ReadDocument: malformed knowledge base id", readDoc("../platform", "auth/_index.md"), codes.InvalidArgument},
		{"ListFolder: path with ..", listFolder(platform, "../"), codes.InvalidArgument},
		{"ListFolder: absolute path", listFolder(platform, "/auth"), codes.InvalidArgument},
		{"ListFolder: missing folder", listFolder(platform, "billing"), codes.NotFound},
		{"ListFolder: a document", listFolder(platform, "auth/_index.md"), codes.NotFound},
		{"ListFolder: unknown knowledge base", listFolder("nope", ""), codes.NotFound},
		{"GetManifest: unknown knowledge base", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.GetManifest(ctx, &quarryv1.GetManifestRequest{KnowledgeBase: "nope"})
			return err
		}, codes.NotFound},
		{"GetManifest: malformed knowledge base id", func(ctx context.Context, c quarryv1.SearchServiceClient) error {
			_, err := c.GetManifest(ctx, &quarryv1.GetManifestRequest{KnowledgeBase: ""})
			return err
		}, codes.InvalidArgument},
	}
	before := f.reg.States()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.call(callCtx(t), f.client)
			if got := status.Code(err); got != tt.want {
				t.Fatalf("code = %v (%v), want %v", got, err, tt.want)
			}
			if msg := status.Convert(err).Message(); msg == "" {
				t.Error("status without a message")
			}
		})
	}
	// Bad requests change nothing.
	after := f.reg.States()
	if len(after) != len(before) {
		t.Fatalf("states %+v after bad requests, want %+v", after, before)
	}
	for i := range before {
		if after[i].ID != before[i].ID || after[i].Generation != before[i].Generation {
			t.Errorf("state %+v after bad requests, want %+v", after[i], before[i])
		}
	}
}

func readDoc(kbID, path string) func(context.Context, quarryv1.SearchServiceClient) error {
	return func(ctx context.Context, c quarryv1.SearchServiceClient) error {
		_, err := c.ReadDocument(ctx, &quarryv1.ReadDocumentRequest{KnowledgeBase: kbID, Path: path})
		return err
	}
}

func listFolder(kbID, path string) func(context.Context, quarryv1.SearchServiceClient) error {
	return func(ctx context.Context, c quarryv1.SearchServiceClient) error {
		_, err := c.ListFolder(ctx, &quarryv1.ListFolderRequest{KnowledgeBase: kbID, Path: path})
		return err
	}
}

// Errors the caller cannot act on become INTERNAL without their cause, which is logged.
func TestToStatusMapsDomainErrors(t *testing.T) {
	s := &Server{log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	cause := errors.New("disk on fire at /var/lib/quarry")
	tests := []struct {
		name string
		err  error
		want codes.Code
		// private: the message must not repeat the error, which may name server internals.
		private bool
	}{
		{"invalid id", fmt.Errorf("get: %w", kb.ErrInvalidID), codes.InvalidArgument, false},
		{"path outside the tree", fmt.Errorf("scope: %w", tree.ErrOutsideTree), codes.InvalidArgument, false},
		{"invalid path", fmt.Errorf("scope: %w", tree.ErrInvalidPath), codes.InvalidArgument, false},
		{"unknown knowledge base", fmt.Errorf("get: %w", kb.ErrUnknownKB), codes.NotFound, false},
		{"missing document", fmt.Errorf("doc: %w", tree.ErrNotFound), codes.NotFound, false},
		{"deadline", fmt.Errorf("search /var/lib/quarry: %w", context.DeadlineExceeded), codes.DeadlineExceeded, true},
		{"cancelled", fmt.Errorf("search /var/lib/quarry: %w", context.Canceled), codes.Canceled, true},
		{"a full volume", fmt.Errorf("write /var/lib/quarry/kb/a.md: %w", syscall.ENOSPC), codes.ResourceExhausted, true},
		{"a full quota", fmt.Errorf("write /var/lib/quarry/kb/a.md: %w", syscall.EDQUOT), codes.ResourceExhausted, true},
		{"anything else", fmt.Errorf("search: %w", cause), codes.Internal, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := status.Convert(s.toStatus(context.Background(), tt.err))
			if st.Code() != tt.want {
				t.Errorf("code = %v, want %v", st.Code(), tt.want)
			}
			if tt.private && strings.Contains(st.Message(), "/var/lib") {
				t.Errorf("message %q leaks the cause", st.Message())
			}
			if !tt.private && !strings.Contains(st.Message(), tt.err.Error()) {
				t.Errorf("message %q, want the caller's mistake %q", st.Message(), tt.err.Error())
			}
		})
	}
}

// Every source carries the document's runtime maturity (types.proto Source.maturity):
// never the enum's zero value, and the value the document itself reports.
func TestSourcesCarryTheRuntimeMaturity(t *testing.T) {
	f := start(t)
	resolved, err := f.client.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: "pgbouncer pool mode"})
	if err != nil {
		t.Fatal(err)
	}
	searched, err := f.client.Search(callCtx(t), &quarryv1.SearchRequest{KnowledgeBase: platform, Query: "postgres"})
	if err != nil {
		t.Fatal(err)
	}
	for name, ss := range map[string][]*quarryv1.Source{"Resolve": resolved.GetSources(), "Search": searched.GetResults()} {
		if len(ss) == 0 {
			t.Fatalf("%s returned no sources", name)
		}
		for _, s := range ss {
			doc, err := f.client.ReadDocument(callCtx(t), &quarryv1.ReadDocumentRequest{KnowledgeBase: platform, Path: s.GetPath()})
			if err != nil {
				t.Fatal(err)
			}
			if s.GetMaturity() == quarryv1.Maturity_MATURITY_UNSPECIFIED || s.GetMaturity() != doc.GetDocument().GetMaturity() {
				t.Errorf("%s: source %s maturity = %v, want the document's %v", name, s.GetPath(), s.GetMaturity(), doc.GetDocument().GetMaturity())
			}
		}
	}
}

// The gate trace's thresholds hold every -gate-* flag by name (types.proto
// GateTrace.thresholds): counts as whole numbers, switches as 0 or 1.
func TestGateTraceReportsEveryGateThreshold(t *testing.T) {
	f := start(t)
	resp, err := f.client.Resolve(callCtx(t), &quarryv1.ResolveRequest{KnowledgeBase: platform, Query: "pgbouncer pool mode", Explain: true})
	if err != nil {
		t.Fatal(err)
	}
	got := resp.GetGate().GetThresholds()
	fs := flag.NewFlagSet("gate", flag.ContinueOnError)
	var gc gate.Config
	gc.RegisterFlags(fs)
	fs.VisitAll(func(fl *flag.Flag) {
		name := strings.ReplaceAll(strings.TrimPrefix(fl.Name, "gate-"), "-", "_")
		v, ok := got[name]
		if !ok {
			t.Errorf("thresholds lack %q (flag -%s)", name, fl.Name)
			return
		}
		want := fl.DefValue
		switch want {
		case "true":
			want = "1"
		case "false":
			want = "0"
		}
		if fmt.Sprint(v) != want {
			t.Errorf("thresholds[%q] = %v, want -%s's default %s", name, v, fl.Name, want)
		}
	})
}
