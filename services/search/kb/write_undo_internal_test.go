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
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/bleve"
	"github.com/quarry-router/quarry/services/search/tree"
)

// oneFileKB returns a folder holding a.md with text, and a registry configured by args,
// closed when the test ends.
func oneFileKB(t *testing.T, text string, args ...string) (root string, cfg Config, reg *Registry) {
	t.Helper()
	root = t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	reg = NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	return root, cfg, reg
}

// TestAnUndoneBatchIsSynced: a write of several files skips each file's fsync and syncs
// them all once. When such a write fails, the files put back were written the same way,
// and without a sync after them a crash could bring back the refused write's bytes.
func TestAnUndoneBatchIsSynced(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nThe old text.\n")
	if _, err := reg.Load(context.Background(), "docs", root); err != nil {
		t.Fatal(err)
	}

	// What a.md held each time the folder was synced.
	var seen []string
	real := syncDir
	syncDir = func(d *tree.Dir) error {
		b, _ := os.ReadFile(filepath.Join(root, "a.md"))
		seen = append(seen, string(b))
		return real(d)
	}
	t.Cleanup(func() { syncDir = real })

	_, err := reg.SyncFiles(context.Background(), "docs", []Upload{
		{Path: "a.md", Data: []byte("# A\n\nThe new text.\n")},
		{Path: "x.md/y.md", Data: []byte("# Y\n")},
		{Path: "x.md", Data: []byte("# X\n")}, // a file where the write above made a folder
	}, true)
	if err == nil {
		t.Fatal("a write of a file and a folder of the same name succeeded")
	}
	if b, _ := os.ReadFile(filepath.Join(root, "a.md")); string(b) != "# A\n\nThe old text.\n" {
		t.Fatalf("after the undo a.md holds %q", b)
	}
	if len(seen) == 0 || seen[len(seen)-1] != "# A\n\nThe old text.\n" {
		t.Errorf("folder synced with a.md holding %q; want a sync after the undo put the old text back", seen)
	}
}

// halfWriter is an engine whose write fails after changing the index, and whose undo
// fails too: the index is left holding part of a write that did not happen. onUndo, if
// set, runs when the undo is asked for.
type halfWriter struct {
	engine.Backend
	w      engine.Writer
	calls  int
	onUndo func()
}

func (h *halfWriter) Apply(ctx context.Context, changes []engine.Change) error {
	h.calls++
	if h.calls == 1 {
		if err := h.w.Apply(ctx, changes); err != nil {
			return err
		}
	} else if h.onUndo != nil {
		h.onUndo()
	}
	return errors.New("the engine broke mid-write")
}

// A persisted index that a failed write may have changed is rebuilt from the folder, not
// reopened from the open index of the same tree, and is not kept for the next start:
// neither when the rebuild succeeds, nor when it fails (the folder unreadable for a
// moment) and the service stops before the repair.
func TestAHalfWrittenPersistedIndexIsRebuilt(t *testing.T) {
	for _, rebuildFails := range []bool{false, true} {
		t.Run(fmt.Sprintf("rebuild fails %v", rebuildFails), func(t *testing.T) {
			root, cfg, reg := oneFileKB(t, "# A\n\nThe old text.\n", "-data-dir", t.TempDir())
			ctx := context.Background()
			k, err := reg.Load(ctx, "docs", root)
			if err != nil {
				t.Fatal(err)
			}
			broken := &halfWriter{Backend: k.Engine, w: k.Engine.(engine.Writer)}
			if rebuildFails {
				broken.onUndo = func() {
					if err := os.Rename(root, root+".away"); err != nil {
						t.Fatal(err)
					}
				}
			}
			k.Engine = broken

			if _, err := reg.UpsertFile(ctx, "docs", "b.md", []byte("# B\n\nThe zorblatt sizer.\n")); !errors.Is(err, ErrEngine) {
				t.Fatalf("write through a broken engine = %v, want ErrEngine", err)
			}
			if broken.calls != 2 {
				t.Fatalf("the engine was asked %d times, want the write and its undo", broken.calls)
			}
			zorblatt := func(k *KB) bool {
				hits, err := k.Engine.Search(ctx, engine.Query{Terms: []string{"zorblatt"}})
				if err != nil {
					t.Fatal(err)
				}
				return len(hits) > 0
			}
			if rebuildFails {
				// The folder is back before the repair (a second away) can run.
				if err := os.Rename(root+".away", root); err != nil {
					t.Fatal(err)
				}
			} else {
				now, err := reg.Get("docs")
				if err != nil {
					t.Fatal(err)
				}
				if now.Engine == k.Engine || now.ref == k.ref || zorblatt(now) {
					t.Fatal("after the failed write the knowledge base still searches the half-written index")
				}
			}
			reg.Close()
			if zorblatt(nextStart(t, cfg, root)) {
				t.Error("the next start finds the failed write")
			}
		})
	}
}

// failingWriter is an engine whose write fails without changing the index, and whose undo
// works: the index holds what it held, but BM25 statistics counted by batch need not.
type failingWriter struct {
	engine.Backend
	w     engine.Writer
	calls int
}

func (f *failingWriter) Apply(ctx context.Context, changes []engine.Change) error {
	if f.calls++; f.calls == 1 {
		return errors.New("the engine refused the batch")
	}
	return f.w.Apply(ctx, changes)
}

// An index a write failed on is not kept for the next start even when the write was
// undone: the undo takes back counts the failed batch never added, and kept statistics
// would score every later search wrongly.
func TestAnIndexAWriteFailedOnIsNotKept(t *testing.T) {
	root, cfg, reg := oneFileKB(t, "# A\n\nPools of connections.\n", "-data-dir", t.TempDir())
	ctx := context.Background()
	k, err := reg.Load(ctx, "docs", root)
	if err != nil {
		t.Fatal(err)
	}
	k.Engine = &failingWriter{Backend: k.Engine, w: k.Engine.(engine.Writer)}
	if _, err := reg.UpsertFile(ctx, "docs", "a.md", []byte("# A\n\nPools of connections, sized per replica and per database.\n")); !errors.Is(err, ErrEngine) {
		t.Fatalf("write through a failing engine = %v, want ErrEngine", err)
	}
	reg.Close()
	if ix, ok := nextStart(t, cfg, root).Engine.(*bleve.Index); !ok || ix.Reused() {
		t.Error("the next start reopened the index a write failed on")
	}
}

// slowWriter is an engine whose write takes longer than a write may (-write-timeout),
// and whose undo, as any engine call, fails at once on a context that is done.
type slowWriter struct {
	engine.Backend
	w      engine.Writer
	calls  int
	undone bool
}

func (s *slowWriter) Apply(ctx context.Context, changes []engine.Change) error {
	if s.calls++; s.calls == 1 {
		<-ctx.Done()
		return ctx.Err()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	s.undone = true
	return s.w.Apply(ctx, changes)
}

// A write that runs out of time is undone in the index, not left for a rebuild: the undo
// has time of its own.
func TestAWriteOutOfTimeIsUndone(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nPools of connections.\n", "-write-timeout", "50ms")
	ctx := context.Background()
	k, err := reg.Load(ctx, "docs", root)
	if err != nil {
		t.Fatal(err)
	}
	slow := &slowWriter{Backend: k.Engine, w: k.Engine.(engine.Writer)}
	k.Engine = slow
	if _, err := reg.UpsertFile(ctx, "docs", "b.md", []byte("# B\n\nThe zorblatt sizer.\n")); !errors.Is(err, ErrEngine) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write past -write-timeout = %v, want ErrEngine (deadline exceeded)", err)
	}
	if slow.calls != 2 || !slow.undone {
		t.Fatalf("the engine was asked %d times, undone %v: want the write and its undo, done", slow.calls, slow.undone)
	}
	now, err := reg.Get("docs")
	if err != nil {
		t.Fatal(err)
	}
	if now.ref != k.ref {
		t.Error("the index was rebuilt although the undo could run")
	}
	if _, err := os.Stat(filepath.Join(root, "b.md")); !os.IsNotExist(err) {
		t.Errorf("b.md after the undone write: %v, want it gone", err)
	}
}

// nextStart loads the knowledge base "docs" from root as the next start of the service
// does, with cfg (its -data-dir among it), and closes it when the test ends.
func nextStart(t *testing.T, cfg Config, root string) *KB {
	t.Helper()
	next := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(next.Close)
	k, err := next.Load(context.Background(), "docs", root)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// lateHalfWriter is an engine whose write changes the index, then takes longer than a
// write may (-write-timeout), and whose undo fails: the index holds part of a write
// that ran out of time.
type lateHalfWriter struct {
	engine.Backend
	w     engine.Writer
	calls int
}

func (l *lateHalfWriter) Apply(ctx context.Context, changes []engine.Change) error {
	if l.calls++; l.calls == 1 {
		if err := l.w.Apply(ctx, changes); err != nil {
			return err
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return errors.New("the engine broke mid-undo")
}

// A write that ran out of time and could not be undone is rebuilt from the folder before
// the write returns, as one that failed otherwise is: the rebuild has time of its own
// too. On the write's context, already past its deadline, it failed at once, and the
// knowledge base searched the half-written index until the background repair.
func TestAWriteOutOfTimeNotUndoneIsRebuiltAtOnce(t *testing.T) {
	root, _, reg := oneFileKB(t, "# A\n\nPools of connections.\n", "-write-timeout", "100ms")
	ctx := context.Background()
	k, err := reg.Load(ctx, "docs", root)
	if err != nil {
		t.Fatal(err)
	}
	late := &lateHalfWriter{Backend: k.Engine, w: k.Engine.(engine.Writer)}
	k.Engine = late
	if _, err := reg.UpsertFile(ctx, "docs", "b.md", []byte("# B\n\nThe zorblatt sizer.\n")); !errors.Is(err, ErrEngine) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a write past -write-timeout = %v, want ErrEngine (deadline exceeded)", err)
	}
	if late.calls != 2 {
		t.Fatalf("the engine was asked %d times, want the write and its undo", late.calls)
	}
	reg.loadMu.Lock()
	_, repairing := reg.repairs["docs"]
	reg.loadMu.Unlock()
	now, err := reg.Get("docs")
	if err != nil {
		t.Fatal(err)
	}
	hits, err := now.Engine.Search(ctx, engine.Query{Terms: []string{"zorblatt"}})
	if err != nil {
		t.Fatal(err)
	}
	if repairing || now.ref == k.ref || len(hits) > 0 {
		t.Errorf("after the write: repair pending %v, same index %v, %d hits for the undone write; want the index rebuilt at once",
			repairing, now.ref == k.ref, len(hits))
	}
}
