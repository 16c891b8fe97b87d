package kb

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

// Every reload gives a knowledge base a new signals store. The saver remembered each
// store it had saved, keyed by the store itself, and never forgot one: every reload (a
// large sync, a repair) kept the replaced store and all its entries alive for the life
// of the process, a leak of a KB's worth of signals per reload.
func TestTheSignalSaverForgetsReplacedStores(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "a.md"), []byte("# A\n\nText.\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := fs.Parse([]string{"-data-dir", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	ctx := context.Background()
	var sv signalSaver
	for range 5 {
		k, err := reg.Load(ctx, "docs", root)
		if err != nil {
			t.Fatal(err)
		}
		k.Signals.RecordHits([]string{"a.md"})
		sv.flush(reg)
	}
	if len(sv.saved) != 1 {
		t.Errorf("the saver holds %d signal stores after 5 loads of one knowledge base, want 1", len(sv.saved))
	}
	k, _ := reg.Get("docs")
	if _, ok := sv.saved[k.Signals]; !ok {
		t.Error("the saver does not hold the current store")
	}
}
