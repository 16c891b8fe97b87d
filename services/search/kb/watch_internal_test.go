package kb

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/quarry-router/quarry/platform/syncbuf"
)

// The service's own writes reach the folder watcher as events; applying them must change
// nothing, or every write would cost two generations.
func TestOwnWritesSeenByTheWatcherChangeNothing(t *testing.T) {
	root := t.TempDir()
	for p, body := range map[string]string{"ops/pager.md": "# Pager\n\nThe pager rotates weekly.\n", "ops/_index.md": "# Ops\n"} {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var cfg Config
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer reg.Close()
	ctx := context.Background()
	if _, err := reg.Load(ctx, "team", root); err != nil {
		t.Fatal(err)
	}
	edits := []struct {
		name  string
		write func() (*WriteResult, error)
		paths []string
	}{
		{"an upsert", func() (*WriteResult, error) {
			return reg.UpsertFile(ctx, "team", "ops/kafka.md", []byte("# Kafka\n\nConsumer lag.\n"))
		}, []string{"ops/kafka.md", "ops"}},
		{"an archive", func() (*WriteResult, error) {
			a, err := reg.ArchiveFile(ctx, "team", "ops/pager.md")
			if err != nil {
				return nil, err
			}
			return a.WriteResult, nil
		}, []string{"ops/pager.md", "ops/_archived", "ops/_archived/pager.stub.md", "ops/_archived/pager.md"}},
		{"a delete", func() (*WriteResult, error) { return reg.DeleteFile(ctx, "team", "ops/kafka.md") }, []string{"ops/kafka.md"}},
	}
	for _, e := range edits {
		res, err := e.write()
		if err != nil {
			t.Fatalf("%s: %v", e.name, err)
		}
		echo, err := reg.applyEdits(ctx, "team", e.paths)
		if err != nil {
			t.Fatal(err)
		}
		if echo.Changed || echo.KB.Generation != res.KB.Generation {
			t.Errorf("the watcher's echo of %s changed the knowledge base: %+v", e.name, echo.Files)
		}
	}
}

// unwatch drops the watches of a removed or renamed folder and those below it, and
// looks at no watch for a path walk did not watch (a file: most removals).
func TestUnwatchDropsAFoldersWatchesOnly(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"a/b", "c"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fw := newFolderWatcher(w)
	reg := NewRegistry(Config{}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	fw.walk(root, "team", reg)
	watched := func() []string {
		l := w.WatchList()
		slices.Sort(l)
		return l
	}
	all := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b"), filepath.Join(root, "c")}
	if got := watched(); !slices.Equal(got, all) {
		t.Fatalf("watched %v, want %v", got, all)
	}
	fw.unwatch(filepath.Join(root, "a", "x.md"))
	fw.unwatch(filepath.Join(root, "ab")) // a name that a watched folder's name starts
	if got := watched(); !slices.Equal(got, all) {
		t.Fatalf("after removals of files: watched %v, want %v", got, all)
	}
	fw.unwatch(filepath.Join(root, "a"))
	if got, want := watched(), []string{root, filepath.Join(root, "c")}; !slices.Equal(got, want) {
		t.Fatalf("after the removal of a: watched %v, want %v", got, want)
	}
	if fw.watched[filepath.Join(root, "a", "b")] {
		t.Error("a/b is still counted as watched")
	}
}

// After the kernel's event queue overflowed, what the lost events reported (a folder
// created, so never watched; files written in it) is found: every folder is walked
// again and read whole once.
func TestAnOverflowedWatcherCatchesUp(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nThe old text.\n")
	if err := os.Mkdir(filepath.Join(root, "ops"), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	wait, err := reg.WatchFolders(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	time.Sleep(1500 * time.Millisecond) // past the read of the folder a watch begins with (maxWatchDelay)
	reg.loadMu.Lock()
	fw := reg.watcher
	reg.loadMu.Unlock()
	// As if the events of ops' creation had been lost: no watch on it.
	ops := filepath.Join(root, "ops")
	if err := fw.w.Remove(ops); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ops, "pager.md"), []byte("# Pager\n\nThe pager rotates weekly.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	indexed := func(path, word string) bool {
		k, err := reg.Get("docs")
		if err != nil {
			t.Fatal(err)
		}
		d := k.Tree.ByPath[path]
		return d != nil && strings.Contains(d.Content, word)
	}
	time.Sleep(200 * time.Millisecond)
	if indexed("ops/pager.md", "weekly") {
		t.Fatal("the file was indexed without an event; the test shows nothing")
	}
	fw.overflowed(reg)
	waitUntil(t, func() bool { return indexed("ops/pager.md", "weekly") }, "the file written while events were lost")
	// And ops is watched again: an edit in it is seen by its event.
	if err := os.WriteFile(filepath.Join(ops, "pager.md"), []byte("# Pager\n\nThe pager follows the sun.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return indexed("ops/pager.md", "sun") }, "an edit in the folder watched again")
}

func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// -kb-root's rescan loads the folders the registry does not serve. Checked apart from
// the load, a first sync creating the knowledge base between the check and the load
// (it holds loadMu meanwhile) was followed by a second load of it: a new generation,
// and with no -data-dir a whole re-index, for nothing.
func TestLoadNewLeavesAKnowledgeBaseCreatedMeanwhile(t *testing.T) {
	root, _, reg := oneFileKB(t, "# Pager\n\nThe pager rotates weekly.\n")
	ctx := context.Background()
	if _, err := reg.Get("team"); err == nil {
		t.Fatal("served before any load")
	}
	// A write creating "team" holds loadMu while the rescan, which found it missing,
	// asks to load it.
	reg.loadMu.Lock()
	done := make(chan error, 1)
	go func() {
		_, loaded, err := reg.LoadNew(ctx, "team", root)
		if err == nil && loaded {
			err = errors.New("loaded again")
		}
		done <- err
	}()
	made, err := reg.loadLocked(ctx, "team", root)
	reg.loadMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("LoadNew of a knowledge base created meanwhile: %v", err)
	}
	if k, _ := reg.Get("team"); k != made {
		t.Errorf("generation %d, want %d: loaded twice", k.Generation, made.Generation)
	}
}

// Past the kernel's limit on inotify watches (fs.inotify.max_user_watches, shared by
// every process of the user on the node), each folder left unwatched logged a warning of
// its own ("no space left on device"): thousands of lines for a large tree, at each start
// and overflow, none saying which limit or what still applies its edits. One warning
// says so per walk, and the rest of the walk does not knock at the full table.
func TestAWalkPastTheWatchLimitWarnsOnce(t *testing.T) {
	root := t.TempDir()
	for i := range 20 {
		if err := os.MkdirAll(filepath.Join(root, "team", string(rune('a'+i))), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	fw := newFolderWatcher(w)
	tries := 0
	fw.addWatch = func(name string) error {
		if tries++; tries > 3 {
			return fmt.Errorf("%s: %w", name, syscall.ENOSPC) // as inotify_add_watch fails then
		}
		return w.Add(name)
	}
	var logs strings.Builder
	reg := NewRegistry(Config{}, slog.New(slog.NewTextHandler(&logs, nil)))
	fw.walk(root, "team", reg)
	if got := len(w.WatchList()); got != 3 {
		t.Errorf("%d folders watched, want the 3 the limit left room for", got)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 1 || !strings.Contains(lines[0], "max_user_watches") || !strings.Contains(lines[0], "unwatched=19") {
		t.Errorf("logged %d lines, want one naming the limit and the 19 folders left unwatched:\n%s", len(lines), logs.String())
	}
	if tries > 4 {
		t.Errorf("%d watches tried, want none after the first refused for the limit", tries)
	}
}

// A knowledge base's folder removed (a team's folder taken out of -kb-root, rm -r) made
// the watcher, applying the removals of its files, create the folder again, empty (the
// write side opens a folder so, to write into it): the removed folder was back, and a
// restart served it as an empty knowledge base. The edits wait for the folder instead,
// and are not retried (and logged) every second meanwhile.
func TestTheWatcherLeavesARemovedFolderRemoved(t *testing.T) {
	// A long debounce: the folder put back is given the removed one's identity below
	// before the watcher looks at it.
	root, _, reg := oneFileKB(t, "# A\n\nThe old text.\n", "-watch-debounce=900ms")
	if err := os.MkdirAll(filepath.Join(root, "ops"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ops", "pager.md"), []byte("# Pager\n\nWeekly.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := reg.Load(ctx, "docs", root); err != nil {
		t.Fatal(err)
	}
	var logs syncbuf.Buffer
	reg.log = slog.New(slog.NewTextHandler(&logs, nil))
	wctx, cancel := context.WithCancel(ctx)
	wait, err := reg.WatchFolders(wctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); wait() }()
	time.Sleep(1500 * time.Millisecond) // past the read of the folder a watch begins with
	was, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(root); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2500 * time.Millisecond)
	if _, err := os.Lstat(root); err == nil {
		t.Error("the removed folder was created again")
	}
	if n := strings.Count(logs.String(), "apply folder edits"); n > 1 {
		t.Errorf("the edits of the removed folder were tried and logged %d times", n)
	}
	// Put back, it is read whole again, though the file system may well give it the
	// removed folder's inode (ext4 does), which os.SameFile then takes for the same folder.
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	now, err := os.Stat(root)
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(was, now) {
		// As if it had the removed one's inode: what the watcher recorded is now
		// indistinguishable from it.
		reg.loadMu.Lock()
		fw := reg.watcher
		reg.loadMu.Unlock()
		fw.mu.Lock()
		fw.folders[root] = now
		fw.mu.Unlock()
	}
	if err := os.Mkdir(filepath.Join(root, "ops"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "ops", "pager.md"), []byte("# Pager\n\nThe pager follows the sun.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		k, _ := reg.Get("docs")
		d := k.Tree.ByPath["ops/pager.md"]
		return d != nil && strings.Contains(d.Content, "sun") && k.Tree.ByPath["a.md"] == nil
	}, "the folder put back")
}
