package kb

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/quarry-router/quarry/services/search/tree"
)

// TestAnUndoneBatchIsSynced: a write of several files skips each file's fsync and syncs
// them all once. When such a write fails, the files put back were written the same way,
// and without a sync after them a crash could bring back the refused write's bytes.
func TestAnUndoneBatchIsSynced(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nThe old text.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
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
