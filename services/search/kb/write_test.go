package kb_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

var smallTree = map[string]string{
	"ops/_index.md":  "# Ops\n\nOperations runbooks.\n",
	"ops/pager.md":   "# Pager\n\nThe pager rotates weekly.\n",
	"ops/backups.md": "# Backups\n\nNightly backups go to object storage.\n",
}

// watch starts the folder watcher and stops it when the test ends.
func watch(t *testing.T, reg *kb.Registry) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait, err := reg.WatchFolders(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); wait() })
}

// followers are the two ways the service follows the edits of a folder, for tests
// that must hold for both: its watcher, and its rescans alone (as on a network volume,
// which raises no events).
var followers = []struct {
	name  string
	start func(*testing.T, *kb.Registry)
}{
	{"watcher", watch},
	{"rescan", func(t *testing.T, reg *kb.Registry) { poll(t, reg, 50*time.Millisecond) }},
}

// poll starts the folder rescans and stops them when the test ends.
func poll(t *testing.T, reg *kb.Registry, every time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	wait := reg.PollFolders(ctx, every)
	t.Cleanup(func() { cancel(); wait() })
}

// Editing a markdown file in the folder is reflected in answers within a second, with no
// restart: each burst of edits is one new generation. The folder watcher sees edits as
// they happen; the rescans (alone here, as on a network volume that raises no events)
// find them at their next pass.
func TestWatchFoldersAppliesEditsMadeInTheFolder(t *testing.T) {
	for _, tc := range followers {
		t.Run(tc.name, func(t *testing.T) { editsAreApplied(t, tc.start) })
	}
}

// A rescan that finds files restamped but holding the same bytes (the service's own
// write, a touch, a copy over itself) changes nothing: no generation, no reindexing.
func TestRescansOfUnchangedFilesChangeNothing(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, smallTree)
	k0 := load(t, reg, "team", root)
	poll(t, reg, 20*time.Millisecond)
	ch, stop := reg.Watch()
	defer stop()
	recv(t, ch)

	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(filepath.Join(root, "ops/pager.md"), later, later); err != nil {
		t.Fatal(err)
	}
	writeFile(t, root, "ops/backups.md", smallTree["ops/backups.md"])
	res, err := reg.UpsertFile(context.Background(), "team", "ops/new.md", []byte("# New\n\nWritten through the service.\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := stateOf(recv(t, ch), "team"); s.Generation != res.KB.Generation || s.Generation <= k0.Generation {
		t.Fatalf("the upsert's state %+v, want generation %d", s, res.KB.Generation)
	}
	time.Sleep(200 * time.Millisecond) // ten rescans
	assertNothingPending(t, ch)
	if k, _ := reg.Get("team"); k.Generation != res.KB.Generation {
		t.Errorf("generation %d after the rescans, want the upsert's %d", k.Generation, res.KB.Generation)
	}
}

func editsAreApplied(t *testing.T, start func(*testing.T, *kb.Registry)) {
	cfg := defaultConfig(t)
	cfg.Write.WatchDebounce = 20 * time.Millisecond
	reg := newRegistry(t, cfg)
	root := writeTree(t, smallTree)
	k0 := load(t, reg, "team", root)
	start(t, reg)
	ch, stop := reg.Watch()
	defer stop()
	recv(t, ch)

	steps := []struct {
		name   string
		do     func()
		word   string
		want   string // path the word must find ("" for none)
		gone   string // path that must no longer be in the tree
		docs   int
		counts bool
	}{
		{"a changed file", func() { writeFile(t, root, "ops/pager.md", "# Pager\n\nThe pager follows the sun.\n") },
			"sun", "ops/pager.md", "", 3, true},
		{"a new folder with a file", func() { writeFile(t, root, "data/kafka/lag.md", "# Lag\n\nConsumer lag alerts.\n") },
			"consumer", "data/kafka/lag.md", "", 4, true},
		{"a removed file", func() {
			if err := os.Remove(filepath.Join(root, "ops/backups.md")); err != nil {
				t.Fatal(err)
			}
		}, "nightly", "", "ops/backups.md", 3, true},
		{"a removed folder", func() {
			if err := os.RemoveAll(filepath.Join(root, "data")); err != nil {
				t.Fatal(err)
			}
		}, "consumer", "", "data/kafka/lag.md", 2, true},
	}
	gen := k0.Generation
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			start := time.Now()
			st.do()
			got := recv(t, ch)
			took := time.Since(start)
			t.Logf("applied in %v", took.Round(time.Millisecond))
			s, ok := stateOf(got, "team")
			if !ok || s.Generation <= gen || s.Documents != st.docs {
				t.Fatalf("state after the edit = %v, want a generation above %d and %d documents", got, gen, st.docs)
			}
			gen = s.Generation
			k, err := reg.Get("team")
			if err != nil {
				t.Fatal(err)
			}
			hits := search(t, k, st.word)
			if st.want != "" && !hasPath(hits, st.want) {
				t.Errorf("%q finds %v, want %s", st.word, hits, st.want)
			}
			if st.gone != "" {
				if _, ok := k.Tree.ByPath[st.gone]; ok || hasPath(hits, st.gone) {
					t.Errorf("%s is still indexed", st.gone)
				}
			}
			if took > time.Second {
				t.Errorf("the edit took %v to reach answers, want under a second", took)
			}
		})
	}

	t.Run("an edit the loader refuses keeps the indexed version", func(t *testing.T) {
		writeFile(t, root, "ops/pager.md", "---\ntitle: [unclosed\n---\n# Broken\n")
		// A valid edit after it shows the watcher has passed the broken one.
		writeFile(t, root, "ops/zz.md", "# Marker\n\nA marker file.\n")
		for {
			got := recv(t, ch)
			k, _ := reg.Get("team")
			if s, _ := stateOf(got, "team"); s.Generation > gen && hasPath(search(t, k, "marker"), "ops/zz.md") {
				break
			}
		}
		k, _ := reg.Get("team")
		if !hasPath(search(t, k, "sun"), "ops/pager.md") {
			t.Error("a refused edit removed the indexed version")
		}
	})
}

func TestSyncFilesCreatesAKnowledgeBase(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.NewRoot = t.TempDir()
	reg := newRegistry(t, cfg)
	var files []kb.Upload
	for p, body := range smallTree {
		files = append(files, kb.Upload{Path: p, Data: []byte(body)})
	}
	res, err := reg.SyncFiles(context.Background(), "fresh", files, false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || res.Count(kb.Indexed) != 3 || res.KB.Tree.Len() != 3 {
		t.Fatalf("sync into a new knowledge base = %+v", res)
	}
	if _, err := os.Stat(filepath.Join(cfg.Write.NewRoot, "fresh", "ops", "pager.md")); err != nil {
		t.Errorf("the new knowledge base's files are not in its folder: %v", err)
	}
	if !hasPath(search(t, res.KB, "pager"), "ops/pager.md") {
		t.Error("the new knowledge base does not answer")
	}

	// A refused first sync creates nothing.
	dup := []kb.Upload{{Path: "a.md", Data: []byte("# A\n")}, {Path: "./a.md", Data: []byte("# A\n")}}
	if _, err := reg.SyncFiles(context.Background(), "refused", dup, false); !errors.Is(err, kb.ErrDuplicatePath) {
		t.Fatalf("first sync with a duplicate = %v, want ErrDuplicatePath", err)
	}
	if _, err := reg.Get("refused"); !errors.Is(err, kb.ErrUnknownKB) {
		t.Errorf("a refused first sync created the knowledge base: %v", err)
	}
	if _, err := os.Stat(filepath.Join(cfg.Write.NewRoot, "refused")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused first sync left a folder: %v", err)
	}

	// Without a folder for new knowledge bases, an unknown one stays unknown.
	other := newRegistry(t, defaultConfig(t))
	if _, err := other.SyncFiles(context.Background(), "fresh", files, false); !errors.Is(err, kb.ErrUnknownKB) {
		t.Errorf("SyncFiles into an unknown KB without a root = %v, want ErrUnknownKB", err)
	}
}

// A persisted index changed in place is not reused by a later Load of the tree it was
// first built from, and is rebuilt at the next start.
func TestWritesToAPersistedIndexAreNotReusedForAnotherTree(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	reg := newRegistry(t, cfg)
	root := writeTree(t, smallTree)
	k1 := load(t, reg, "team", root)
	ctx := context.Background()
	res, err := reg.UpsertFile(ctx, "team", "ops/kafka.md", []byte("# Kafka\n\nConsumer lag.\n"))
	if err != nil {
		t.Fatal(err)
	}
	if res.KB.Engine != k1.Engine {
		t.Error("a write rebuilt the index instead of changing it in place")
	}
	// Put the folder back to the first tree behind the registry's back, and reload.
	if err := os.Remove(filepath.Join(root, "ops/kafka.md")); err != nil {
		t.Fatal(err)
	}
	k3 := load(t, reg, "team", root)
	if k3.Engine == k1.Engine || reused(t, k3) {
		t.Error("a Load of the first tree reused the index the write changed")
	}
	if hasPath(search(t, k3, "kafka"), "ops/kafka.md") {
		t.Error("the reloaded snapshot finds the file removed from the folder")
	}
}

// A knowledge base written in place (writes, the watcher) keeps its index and term
// statistics when the service stops, under the written tree's fingerprint: the next start
// on that folder reopens them instead of indexing every document again, and answers as a
// start that indexed the folder would.
func TestAWrittenKnowledgeBaseRestartsWarm(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	root := copyTree(t, exampleKB)
	const added, removed = "ops/zorblatt.md", "data/postgres/pgbouncer-pooling.md"
	ctx := context.Background()

	first := newRegistry(t, cfg)
	k1 := load(t, first, "platform", root)
	if _, err := first.UpsertFile(ctx, "platform", added, []byte("# Zorblatt\n\nThe zorblatt pool sizer caps every replica.\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := first.DeleteFile(ctx, "platform", removed); err != nil {
		t.Fatal(err)
	}
	written, err := first.Get("platform")
	if err != nil {
		t.Fatal(err)
	}
	if written.Engine != k1.Engine {
		t.Fatal("the writes rebuilt the index instead of changing it in place")
	}
	first.Close()
	dirs, corpora := indexDirs(t, cfg.DataDir, "platform"), corpusFiles(t, cfg.DataDir, "platform")
	if len(dirs) != 1 || len(corpora) != 1 || corpora[0] != "corpus-"+dirs[0] {
		t.Fatalf("kept after the run: index folders %v and term statistics %v, want one of each, for one tree", dirs, corpora)
	}
	keptCorpus, err := os.Stat(filepath.Join(cfg.DataDir, "platform", corpora[0]))
	if err != nil {
		t.Fatal(err)
	}

	second := newRegistry(t, cfg)
	k2 := load(t, second, "platform", root)
	if !reused(t, k2) {
		t.Fatal("the start after the writes rebuilt the index, want the kept one reopened")
	}
	if now, err := os.Stat(filepath.Join(cfg.DataDir, "platform", corpora[0])); err != nil || !os.SameFile(now, keptCorpus) {
		t.Errorf("the term statistics were written again (%v), want the kept ones read", err)
	}
	if k2.Engine.Len() != k2.Tree.Len() || k2.Tree.Len() != written.Tree.Len() {
		t.Errorf("reopened index holds %d documents, the folder %d, the written snapshot %d", k2.Engine.Len(), k2.Tree.Len(), written.Tree.Len())
	}
	if !hasPath(search(t, k2, "zorblatt"), added) {
		t.Error("the reopened index does not find the written file")
	}
	if hasPath(search(t, k2, "pgbouncer"), removed) {
		t.Error("the reopened index finds the deleted file")
	}
	// The kept statistics are those the folder's documents give.
	fresh := rank.NewCorpus(k2.Tree.Docs)
	if k2.Corpus.N() != fresh.N() {
		t.Fatalf("kept statistics count %d documents, want %d", k2.Corpus.N(), fresh.N())
	}
	for _, d := range k2.Tree.Docs {
		for _, stem := range rank.DocStems(d) {
			if k2.Corpus.DF(stem) != fresh.DF(stem) || !k2.Corpus.Contains(d.Path, stem) {
				t.Fatalf("kept statistics for %q in %s: DF %d, want %d", stem, d.Path, k2.Corpus.DF(stem), fresh.DF(stem))
			}
		}
	}
	if k2.Corpus.DF("pgbouncer") != fresh.DF("pgbouncer") {
		t.Errorf("DF(pgbouncer) = %d, want %d after the delete", k2.Corpus.DF("pgbouncer"), fresh.DF("pgbouncer"))
	}
}

func TestArchiveRestoreRoundTripsTheBytes(t *testing.T) {
	cfg := defaultConfig(t)
	reg := newRegistry(t, cfg)
	pager := "---\ntitle: Pager\ntags: [oncall]\n---\n# Pager\n\nThe pager rotates weekly. Escalate after fifteen minutes.\n"
	root := writeTree(t, map[string]string{"ops/pager.md": pager, "ops/_index.md": "# Ops\n"})
	load(t, reg, "team", root)
	ctx := context.Background()
	a, err := reg.ArchiveFile(ctx, "team", "ops/pager.md")
	if err != nil {
		t.Fatal(err)
	}
	stub, ok := a.KB.Tree.ByPath[a.StubPath]
	if !ok || !stub.Archived || stub.Title != "Pager" || !slices.Equal(stub.Tags, []string{"oncall"}) {
		t.Fatalf("ghost cue = %+v, want an archived document with the file's title and tags", stub)
	}
	if kept, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(a.ArchivedPath))); err != nil || string(kept) != pager {
		t.Fatalf("full text kept at %s = %q, %v", a.ArchivedPath, kept, err)
	}
	// A reload sees what the write left: the cue indexed, the full text not.
	k := load(t, reg, "team", root)
	if _, ok := k.Tree.ByPath[a.StubPath]; !ok {
		t.Error("a reload lost the ghost cue")
	}
	if _, ok := k.Tree.ByPath[a.ArchivedPath]; ok {
		t.Error("a reload indexed the archived full text")
	}
	if _, err := reg.RestoreFile(ctx, "team", "ops/pager.md"); err != nil {
		t.Fatal(err)
	}
	if back, err := os.ReadFile(filepath.Join(root, "ops", "pager.md")); err != nil || string(back) != pager {
		t.Errorf("restored bytes = %q, %v; want the original", back, err)
	}
	if _, err := reg.RestoreFile(ctx, "team", "ops/pager.md"); !errors.Is(err, kb.ErrNotArchived) {
		t.Errorf("restoring twice = %v, want ErrNotArchived", err)
	}
	// Restoring over a file that came back meanwhile is refused.
	if _, err := reg.ArchiveFile(ctx, "team", "ops/pager.md"); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.UpsertFile(ctx, "team", "ops/pager.md", []byte("# New pager\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := reg.RestoreFile(ctx, "team", "ops/pager.md"); !errors.Is(err, kb.ErrExists) {
		t.Errorf("restore over an existing file = %v, want ErrExists", err)
	}
}

// The ghost cue is an extract: sentences of the file, within its budget, code left out.
func TestGhostCueIsAShortExtract(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Write.GhostCueTokens = 60
	reg := newRegistry(t, cfg)
	var body strings.Builder
	body.WriteString("# Long\n\nFirst sentence of the file. Second sentence here. Third one too. Fourth is cut.\n\n```sh\nrm -rf /\n```\n")
	for i := range 30 {
		body.WriteString("\n## Section " + string(rune('A'+i%26)) + "\n\nSome sentence about this section.\n")
	}
	root := writeTree(t, map[string]string{"long.md": body.String()})
	load(t, reg, "team", root)
	a, err := reg.ArchiveFile(context.Background(), "team", "long.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(a.GhostCue); n > 60*4 {
		t.Errorf("ghost cue is %d characters, over the %d of 60 tokens:\n%s", n, 60*4, a.GhostCue)
	}
	if !strings.Contains(a.GhostCue, "First sentence of the file.") || strings.Contains(a.GhostCue, "rm -rf") {
		t.Errorf("ghost cue is not an extract without code:\n%s", a.GhostCue)
	}
}

func TestUpsertRejectsWithTheLoadersReason(t *testing.T) {
	reg := newRegistry(t, defaultConfig(t))
	root := writeTree(t, smallTree)
	k := load(t, reg, "team", root)
	_, err := reg.UpsertFile(context.Background(), "team", "ops/x.md", []byte("---\nmaturity: legendary\n---\n# x\n"))
	if !errors.Is(err, tree.ErrRejected) || !strings.Contains(err.Error(), "legendary") {
		t.Errorf("upsert with a bad maturity = %v, want ErrRejected naming it", err)
	}
	if cur, _ := reg.Get("team"); cur.Generation != k.Generation {
		t.Error("a rejected upsert bumped the generation")
	}
}

// What the runtime learned lives beside the files in -data-dir, never in the markdown,
// and the next start carries it over.
func TestLearnedSignalsSurviveARestartWithADataDir(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	root := writeTree(t, smallTree)
	first := newRegistry(t, cfg)
	load(t, first, "team", root)
	ctx := context.Background()
	if _, err := first.UpsertFile(ctx, "team", "ops/pager.md", []byte("# Pager\n\nThe pager follows the sun.\n")); err != nil {
		t.Fatal(err)
	}
	k, _ := first.Get("team")
	want := k.Signals.Get("ops/pager.md").Importance
	if want < 54.9 {
		t.Fatalf("importance after a curation update = %v, want about 55", want)
	}
	stopped, stop := context.WithCancel(ctx)
	stop()
	first.RunSignals(stopped, time.Hour) // returns at once, after the final flush and save
	first.Close()

	second := newRegistry(t, cfg)
	k2 := load(t, second, "team", root)
	if got := k2.Signals.Get("ops/pager.md").Importance; got < want-0.01 || got > want+0.01 {
		t.Errorf("importance after a restart = %v, want the learned %v", got, want)
	}
	if got := k2.Signals.Get("ops/backups.md").Importance; got < 49.99 || got > 50.01 {
		t.Errorf("an untouched file's importance after a restart = %v, want its starting 50", got)
	}
	if data, _ := os.ReadFile(filepath.Join(root, "ops", "pager.md")); strings.Contains(string(data), "importance") {
		t.Error("learned importance was written into the markdown")
	}
}

// Replicas that hold the same tree agree on its content version, though each numbers
// generations from its own clock; every change of content changes the version, a write
// of the same bytes does not, and content put back as it was has its version back.
func TestReplicasOfOneTreeAgreeOnItsVersion(t *testing.T) {
	root := writeTree(t, smallTree)
	a := load(t, newRegistry(t, defaultConfig(t)), "team", root)
	time.Sleep(5 * time.Millisecond) // a later load: a later generation
	bReg := newRegistry(t, defaultConfig(t))
	b := load(t, bReg, "team", root)
	if a.Version == 0 || a.Version != b.Version {
		t.Fatalf("versions %x and %x of one tree, want equal and not 0", a.Version, b.Version)
	}
	if a.Generation == b.Generation {
		t.Fatalf("both loads have generation %d; the test needs them apart", a.Generation)
	}
	// The same files elsewhere, written in another order, are the same content.
	other := writeTree(t, smallTree)
	if c := load(t, newRegistry(t, defaultConfig(t)), "team", other); c.Version != a.Version {
		t.Errorf("a copy of the tree has version %x, want %x", c.Version, a.Version)
	}
	// A replica configured or built otherwise answers otherwise: its own versions.
	salted := defaultConfig(t)
	salted.VersionSalt = "rank-coverage-exponent=0.65"
	if c := load(t, newRegistry(t, salted), "team", root); c.Version == a.Version {
		t.Error("another salt gave the same version")
	}

	ctx := context.Background()
	steps := []struct {
		name    string
		do      func() (*kb.WriteResult, error)
		changed bool // the version differs from the original's
	}{
		{"a changed file", func() (*kb.WriteResult, error) {
			return bReg.UpsertFile(ctx, "team", "ops/pager.md", []byte("# Pager\n\nChanged.\n"))
		}, true},
		{"the same bytes again", func() (*kb.WriteResult, error) {
			return bReg.UpsertFile(ctx, "team", "ops/pager.md", []byte("# Pager\n\nChanged.\n"))
		}, true},
		{"the file put back", func() (*kb.WriteResult, error) {
			return bReg.UpsertFile(ctx, "team", "ops/pager.md", []byte(smallTree["ops/pager.md"]))
		}, false},
		{"a removed file", func() (*kb.WriteResult, error) {
			return bReg.DeleteFile(ctx, "team", "ops/backups.md")
		}, true},
	}
	for _, st := range steps {
		res, err := st.do()
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		if got := res.KB.Version != a.Version; got != st.changed {
			t.Errorf("%s: version %x, original %x: changed %v, want %v", st.name, res.KB.Version, a.Version, got, st.changed)
		}
		if s, _ := stateOf(bReg.States(), "team"); s.Version != res.KB.Version {
			t.Errorf("%s: the state says version %x, the snapshot %x", st.name, s.Version, res.KB.Version)
		}
	}
}
