package kb_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/bleve"
	"github.com/quarry-router/quarry/services/search/kb"
)

// exampleKB is the 50-file example knowledge base of the repository.
const exampleKB = "../../../examples/kb/platform"

// wait bounds every wait on a channel or a Load that must not block.
const wait = 30 * time.Second

// Bleve's analysis workers are one process-wide pool started at package init, not per
// index; everything else (index goroutines, retired snapshots) must be gone after Close.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

// defaultConfig returns the flag defaults, which are the SPEC defaults.
func defaultConfig(t *testing.T) kb.Config {
	t.Helper()
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var c kb.Config
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	return c
}

func newRegistry(t *testing.T, cfg kb.Config) *kb.Registry {
	t.Helper()
	reg := kb.NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	return reg
}

// load loads a knowledge base and fails the test if Load errs or does not return in time:
// a Load that blocks (for example on an index directory another snapshot holds open) must
// fail the test, not hang it.
func load(t *testing.T, reg *kb.Registry, id, dir string) *kb.KB {
	t.Helper()
	type result struct {
		k   *kb.KB
		err error
	}
	done := make(chan result, 1)
	go func() {
		k, err := reg.Load(context.Background(), id, dir)
		done <- result{k, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("Load(%q, %q): %v", id, dir, r.err)
		}
		return r.k
	case <-time.After(wait):
		t.Fatalf("Load(%q, %q) did not return within %v", id, dir, wait)
		return nil
	}
}

// writeTree writes files (path → content) under a new temporary folder.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, body := range files {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// copyTree copies the example knowledge base to a temporary folder the test may change.
func copyTree(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// countMarkdown counts a folder's markdown files from the file system: all of them, and
// the knowledge files among them (no _index.md summary, no archived stub).
func countMarkdown(t *testing.T, root string) (all, knowledge int) {
	t.Helper()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		all++
		if d.Name() != "_index.md" && !strings.HasSuffix(d.Name(), ".stub.md") {
			knowledge++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return all, knowledge
}

func search(t *testing.T, k *kb.KB, terms ...string) []engine.Hit {
	t.Helper()
	hits, err := k.Engine.Search(context.Background(), engine.Query{Terms: terms, AllTerms: true})
	if err != nil {
		t.Fatalf("search %v: %v", terms, err)
	}
	return hits
}

func hasPath(hits []engine.Hit, p string) bool {
	return slices.ContainsFunc(hits, func(h engine.Hit) bool { return h.Path == p })
}

func reused(t *testing.T, k *kb.KB) bool {
	t.Helper()
	ix, ok := k.Engine.(*bleve.Index)
	if !ok {
		t.Fatalf("engine is %T, want *bleve.Index", k.Engine)
	}
	return ix.Reused()
}

// indexDirs lists the index folders persisted for one knowledge base.
func indexDirs(t *testing.T, dataDir, id string) []string {
	return dataDirEntries(t, dataDir, id, fs.DirEntry.IsDir)
}

// dataDirEntries lists the names in a knowledge base's folder of -data-dir that keep
// says to.
func dataDirEntries(t *testing.T, dataDir, id string, keep func(fs.DirEntry) bool) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, id))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if keep(e) {
			out = append(out, e.Name())
		}
	}
	return out
}

func recv(t *testing.T, ch <-chan []kb.State) []kb.State {
	t.Helper()
	select {
	case st := <-ch:
		return st
	case <-time.After(wait):
		t.Fatalf("no state within %v", wait)
		return nil
	}
}

func assertNothingPending(t *testing.T, ch <-chan []kb.State) {
	t.Helper()
	select {
	case st := <-ch:
		t.Fatalf("unexpected pending state %+v", st)
	default:
	}
}

func stateOf(states []kb.State, id string) (kb.State, bool) {
	i := slices.IndexFunc(states, func(s kb.State) bool { return s.ID == id })
	if i < 0 {
		return kb.State{}, false
	}
	return states[i], true
}

func TestLoadIndexesEveryDocumentOfTheExampleKB(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	k := load(t, reg, "platform", exampleKB)
	all, knowledge := countMarkdown(t, exampleKB)

	if k.ID != "platform" {
		t.Errorf("ID = %q, want platform", k.ID)
	}
	if k.Tree.Len() != all {
		t.Errorf("Tree.Len() = %d, want the %d markdown files on disk", k.Tree.Len(), all)
	}
	if k.Engine.Len() != all {
		t.Errorf("Engine.Len() = %d, want %d", k.Engine.Len(), all)
	}
	if k.Corpus.N() != all {
		t.Errorf("Corpus.N() = %d, want %d", k.Corpus.N(), all)
	}
	if k.Files() != knowledge {
		t.Errorf("Files() = %d, want the %d knowledge files on disk", k.Files(), knowledge)
	}
	if want := []string{"auth", "data", "deploy", "observability"}; !slices.Equal(k.Tree.Domains(), want) {
		t.Errorf("Domains() = %v, want %v", k.Tree.Domains(), want)
	}
	if k.Generation == 0 {
		t.Error("Generation = 0, want a generation")
	}
	if hits := search(t, k, "pgbouncer"); !hasPath(hits, "data/postgres/pgbouncer-pooling.md") {
		t.Errorf("search pgbouncer = %v, want data/postgres/pgbouncer-pooling.md", hits)
	}
	got, err := reg.Get("platform")
	if err != nil || got != k {
		t.Errorf("Get(platform) = %p, %v; want the loaded snapshot %p", got, err, k)
	}
	want := []kb.State{{ID: "platform", Generation: k.Generation, Documents: all, Domains: k.Tree.Domains()}}
	if st := reg.States(); !statesEqual(st, want) {
		t.Errorf("States() = %+v, want %+v", st, want)
	}
}

func statesEqual(a, b []kb.State) bool {
	return slices.EqualFunc(a, b, func(x, y kb.State) bool {
		return x.ID == y.ID && x.Generation == y.Generation && x.Documents == y.Documents && slices.Equal(x.Domains, y.Domains)
	})
}

func TestFilesCountsOnlyKnowledgeFiles(t *testing.T) {
	tests := []struct {
		name      string
		files     map[string]string
		wantFiles int
		wantDocs  int
	}{
		{
			name: "summaries and archived stubs are not knowledge files",
			files: map[string]string{
				"auth/_index.md":                  "# Auth\n\nIdentity.\n",
				"auth/jwt/_index.md":              "# JWT\n\nTokens.\n",
				"auth/jwt/rotation.md":            "# Rotation\n\nRotate keys.\n",
				"auth/oauth.md":                   "# OAuth\n\nClients.\n",
				"auth/_archived/sessions.stub.md": "# Sessions\n\nOld session cookies.\n",
			},
			wantFiles: 2,
			wantDocs:  5,
		},
		{
			name: "a file at the root counts",
			files: map[string]string{
				"readme.md":     "# Readme\n\nAbout.\n",
				"ops/deploy.md": "# Deploy\n\nShip it.\n",
				"ops/_index.md": "# Ops\n\nOperations.\n",
				"ops/drain.md":  "# Drain\n\nDrain nodes.\n",
				"_index.md":     "# Root\n\nEverything.\n",
			},
			wantFiles: 3,
			wantDocs:  5,
		},
		{
			name: "a tree of summaries only has no knowledge files",
			files: map[string]string{
				"_index.md":     "# Root\n\nEverything.\n",
				"ops/_index.md": "# Ops\n\nOperations.\n",
			},
			wantFiles: 0,
			wantDocs:  2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reg := newRegistry(t, defaultConfig(t))
			k := load(t, reg, "kb", writeTree(t, tt.files))
			if k.Files() != tt.wantFiles {
				t.Errorf("Files() = %d, want %d", k.Files(), tt.wantFiles)
			}
			if k.Tree.Len() != tt.wantDocs {
				t.Errorf("Tree.Len() = %d, want %d (summaries and stubs are still documents)", k.Tree.Len(), tt.wantDocs)
			}
		})
	}
}

func TestEveryReloadBumpsTheGeneration(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	var last uint64
	for i := range 4 {
		k := load(t, reg, "platform", exampleKB)
		if k.Generation <= last {
			t.Fatalf("load %d: generation %d, want more than the previous %d", i, k.Generation, last)
		}
		last = k.Generation
		got, err := reg.Get("platform")
		if err != nil || got.Generation != k.Generation {
			t.Fatalf("load %d: Get = %+v, %v; want generation %d", i, got, err, k.Generation)
		}
		st, ok := stateOf(reg.States(), "platform")
		if !ok || st.Generation != k.Generation {
			t.Fatalf("load %d: States() = %+v, want generation %d", i, reg.States(), k.Generation)
		}
	}
}

func TestAFailedReloadKeepsTheCurrentSnapshot(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	k := load(t, reg, "platform", exampleKB)
	if _, err := reg.Load(context.Background(), "platform", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("Load of a missing folder: want an error")
	}
	got, err := reg.Get("platform")
	if err != nil || got != k {
		t.Fatalf("Get after a failed reload = %p, %v; want the previous snapshot %p", got, err, k)
	}
}

func TestGetRejectsUnknownAndMalformedIDs(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	load(t, reg, "platform", exampleKB)
	tests := []struct {
		name    string
		id      string
		wantErr error
	}{
		{"unknown id", "nope", kb.ErrUnknownKB},
		{"unknown id that differs only in a suffix", "platform2", kb.ErrUnknownKB},
		{"empty id", "", kb.ErrInvalidID},
		{"upper case", "Platform", kb.ErrInvalidID},
		{"space", "plat form", kb.ErrInvalidID},
		{"path", "../platform", kb.ErrInvalidID},
		{"slash", "a/b", kb.ErrInvalidID},
		{"leading dash", "-platform", kb.ErrInvalidID},
		{"65 characters", strings.Repeat("a", 65), kb.ErrInvalidID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k, err := reg.Get(tt.id)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Get(%q) error = %v, want %v", tt.id, err, tt.wantErr)
			}
			if k != nil {
				t.Fatalf("Get(%q) = %+v, want nil", tt.id, k)
			}
		})
	}
}

func TestLoadRejectsMalformedIDs(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	for _, id := range []string{"", "Platform", "a/b", "../x", strings.Repeat("a", 65)} {
		if _, err := reg.Load(context.Background(), id, exampleKB); !errors.Is(err, kb.ErrInvalidID) {
			t.Errorf("Load(%q) error = %v, want ErrInvalidID", id, err)
		}
	}
	if st := reg.States(); len(st) != 0 {
		t.Errorf("States() = %+v after rejected loads, want none", st)
	}
}

func TestValidID(t *testing.T) {
	tests := []struct {
		id   string
		want bool
	}{
		{"platform", true},
		{"a", true},
		{"0", true},
		{"team_a-1", true},
		{strings.Repeat("a", 64), true},
		{strings.Repeat("a", 65), false},
		{"", false},
		{"_a", false},
		{"-a", false},
		{"A", false},
		{"a.b", false},
		{"a b", false},
		{"é", false},
	}
	for _, tt := range tests {
		if got := kb.ValidID(tt.id); got != tt.want {
			t.Errorf("ValidID(%q) = %v, want %v", tt.id, got, tt.want)
		}
	}
}

func TestWatchReceivesTheInitialStateThenEachReload(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	k1 := load(t, reg, "platform", exampleKB)
	ch, stop := reg.Watch()
	defer stop()

	first := recv(t, ch)
	if !statesEqual(first, reg.States()) {
		t.Fatalf("first state = %+v, want every knowledge base %+v", first, reg.States())
	}
	if st, _ := stateOf(first, "platform"); st.Generation != k1.Generation {
		t.Fatalf("first state generation = %d, want %d", st.Generation, k1.Generation)
	}

	k2 := load(t, reg, "platform", exampleKB)
	change := recv(t, ch)
	if len(change) != 1 || change[0].ID != "platform" || change[0].Generation != k2.Generation {
		t.Fatalf("change = %+v, want only platform at generation %d", change, k2.Generation)
	}
	if change[0].Generation <= k1.Generation {
		t.Fatalf("change generation %d, want more than %d", change[0].Generation, k1.Generation)
	}

	other := load(t, reg, "other", exampleKB)
	change = recv(t, ch)
	if len(change) != 1 || change[0].ID != "other" || change[0].Generation != other.Generation {
		t.Fatalf("change = %+v, want only other at generation %d", change, other.Generation)
	}
	assertNothingPending(t, ch)
}

func TestSlowWatcherGetsTheLatestFullStateNotABacklog(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	load(t, reg, "platform", exampleKB)
	ch, stop := reg.Watch()
	defer stop()

	// The watcher reads nothing while three loads happen.
	load(t, reg, "platform", exampleKB)
	load(t, reg, "other", exampleKB)
	latest := load(t, reg, "platform", exampleKB)

	got := recv(t, ch)
	if !statesEqual(got, reg.States()) {
		t.Fatalf("state after falling behind = %+v, want the full current state %+v", got, reg.States())
	}
	if st, _ := stateOf(got, "platform"); st.Generation != latest.Generation {
		t.Fatalf("platform generation = %d, want the latest %d", st.Generation, latest.Generation)
	}
	assertNothingPending(t, ch)
}

func TestStoppedWatcherReceivesNothing(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	load(t, reg, "platform", exampleKB)
	ch, stop := reg.Watch()
	recv(t, ch)
	stop()
	load(t, reg, "platform", exampleKB)
	assertNothingPending(t, ch)
}

func TestLearnedSignalsSurviveAReload(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	k1 := load(t, reg, "platform", exampleKB)
	const hit = "auth/jwt/token-validation.md"
	const untouched = "data/postgres/connection-limits.md"
	seeded := k1.Signals.Get(hit).Importance
	untouchedSeed := k1.Signals.Get(untouched).Importance

	for range 3 {
		k1.Signals.RecordHits([]string{hit})
	}
	k1.Signals.Flush()
	learned := k1.Signals.Get(hit)
	if learned.Importance <= seeded {
		t.Fatalf("importance after 3 hits = %g, want more than the seeded %g", learned.Importance, seeded)
	}

	k2 := load(t, reg, "platform", exampleKB)
	if k2.Signals == k1.Signals {
		t.Fatal("reload reused the signal store; want a new store restored from the old one")
	}
	// Decay over the test's run time is far below the tolerance.
	got := k2.Signals.Get(hit)
	if math.Abs(got.Importance-learned.Importance) > 0.01 {
		t.Errorf("importance after reload = %g, want the learned %g", got.Importance, learned.Importance)
	}
	if got.Maturity != learned.Maturity {
		t.Errorf("maturity after reload = %v, want the learned %v", got.Maturity, learned.Maturity)
	}
	if u := k2.Signals.Get(untouched).Importance; math.Abs(u-untouchedSeed) > 0.01 {
		t.Errorf("untouched importance after reload = %g, want the seeded %g", u, untouchedSeed)
	}
}

// The index and the term statistics kept in -data-dir are reused for the same tree and
// replaced for a changed one.
func TestPersistedIndexIsReusedForTheSameTreeAndRebuiltForAChangedOne(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	root := copyTree(t, exampleKB)

	// Each registry stands for one run of the service; Close ends the run.
	reg1 := newRegistry(t, cfg)
	k := load(t, reg1, "platform", root)
	if reused(t, k) {
		t.Fatal("first load into an empty data dir reused an index")
	}
	reg1.Close()

	reg2 := newRegistry(t, cfg)
	k = load(t, reg2, "platform", root)
	if !reused(t, k) {
		t.Fatal("second run over the same tree rebuilt the index, want the persisted one reused")
	}
	if k.Engine.Len() != k.Tree.Len() {
		t.Errorf("reused index holds %d documents, want %d", k.Engine.Len(), k.Tree.Len())
	}
	if hits := search(t, k, "pgbouncer"); !hasPath(hits, "data/postgres/pgbouncer-pooling.md") {
		t.Errorf("search in the reused index = %v, want data/postgres/pgbouncer-pooling.md", hits)
	}
	reg2.Close()
	kept := corpusFiles(t, cfg.DataDir, "platform")
	// What a write a crash cut short leaves behind, to be removed, and files that only
	// look alike, to be left alone (a -data-dir may hold anything).
	others := []string{"corpus-linguistics.md", "corpus-" + strings.Repeat("a", 63), ".corpus-" + strings.Repeat("b", 64) + ".tmp"}
	for _, name := range append([]string{".corpus-" + strings.Repeat("c", 64) + "-123.tmp"}, others...) {
		if err := os.WriteFile(filepath.Join(cfg.DataDir, "platform", name), []byte("part of a file"), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	const changed = "data/postgres/connection-limits.md"
	appendFile(t, filepath.Join(root, filepath.FromSlash(changed)), "\nThe zorblatt pool sizer caps every replica.\n")

	reg3 := newRegistry(t, cfg)
	k = load(t, reg3, "platform", root)
	if reused(t, k) {
		t.Fatal("run over a changed tree reused the index built for the old tree")
	}
	if hits := search(t, k, "zorblatt"); !hasPath(hits, changed) {
		t.Errorf("search for the new word = %v, want %s", hits, changed)
	}
	if dirs := indexDirs(t, cfg.DataDir, "platform"); len(dirs) != 1 {
		t.Errorf("index folders after the rebuild = %v, want only the current tree's", dirs)
	}
	// Its term statistics too: kept for the new tree alone.
	if !k.Corpus.Contains(changed, "zorblatt") {
		t.Error("the changed file's new word is not counted")
	}
	now := corpusFiles(t, cfg.DataDir, "platform")
	if now = slices.DeleteFunc(now, func(n string) bool { return slices.Contains(others, n) }); len(kept) != 1 || len(now) != 1 || now[0] == kept[0] {
		t.Errorf("term statistics kept after the rebuild = %v, want one file other than %v", now, kept)
	}
	for _, name := range others {
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "platform", name)); err != nil {
			t.Errorf("a file not kept by the service is gone: %v", err)
		}
	}
}

// A reload in a running service must not reopen the index directory its previous snapshot
// still holds open: Bleve locks it, and the second open waits forever.
func TestReloadWithADataDirSharesAnUnchangedIndexAndKeepsTheOldOneServing(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	root := copyTree(t, exampleKB)
	reg := newRegistry(t, cfg)

	k1 := load(t, reg, "platform", root)
	k2 := load(t, reg, "platform", root)
	if k2.Generation <= k1.Generation {
		t.Fatalf("generation %d after reload, want more than %d", k2.Generation, k1.Generation)
	}
	if k2.Engine != k1.Engine {
		t.Error("reload of an unchanged tree built a second index, want the open one shared")
	}

	const added = "data/postgres/zorblatt.md"
	writeFile(t, root, added, "# Zorblatt\n\nThe zorblatt pool sizer.\n")
	k3 := load(t, reg, "platform", root)
	if k3.Engine == k1.Engine {
		t.Fatal("reload of a changed tree kept the old index")
	}
	if hits := search(t, k3, "zorblatt"); !hasPath(hits, added) {
		t.Errorf("new snapshot: search zorblatt = %v, want %s", hits, added)
	}
	// Queries that started on the replaced snapshot keep searching it.
	if hits := search(t, k2, "pgbouncer"); !hasPath(hits, "data/postgres/pgbouncer-pooling.md") {
		t.Errorf("replaced snapshot: search pgbouncer = %v, want data/postgres/pgbouncer-pooling.md", hits)
	}
	if hits := search(t, k2, "zorblatt"); len(hits) != 0 {
		t.Errorf("replaced snapshot found %v, want nothing from the newer tree", hits)
	}

	reg.Close()
	if dirs := indexDirs(t, cfg.DataDir, "platform"); len(dirs) != 1 {
		t.Fatalf("index folders after Close = %v, want only the current tree's", dirs)
	}
	next := newRegistry(t, cfg)
	if k := load(t, next, "platform", root); !reused(t, k) {
		t.Error("restart after a reload rebuilt the index, want the current tree's index reused")
	}
}

func writeFile(t *testing.T, root, rel, body string) {
	t.Helper()
	full := filepath.Join(root, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestQueriesDuringReloadsSeeACompleteSnapshot(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	load(t, reg, "platform", exampleKB)

	stop := make(chan struct{})
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				k, err := reg.Get("platform")
				if err == nil && k.Engine.Len() != k.Tree.Len() {
					err = errors.New("snapshot with an incomplete index")
				}
				if err == nil {
					var hits []engine.Hit
					hits, err = k.Engine.Search(context.Background(), engine.Query{Terms: []string{"rollback"}, AllTerms: true})
					if err == nil && len(hits) == 0 {
						err = errors.New("search rollback found nothing")
					}
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
					return
				}
			}
		})
	}
	for range 3 {
		load(t, reg, "platform", exampleKB)
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}
