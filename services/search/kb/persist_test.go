package kb_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/services/search/kb"
)

// The removal of a stale index that was cut short (the process killed after the drain
// timeout while it removed an index at shutdown) can take index_meta.json first and
// leave Bleve's store behind. Such remains were never recognised as an index again, so
// they were kept for ever, however large; and a later tree with the same content, whose
// index goes in that folder, failed to load as "not a bleve index".
func TestTheRemainsOfAnInterruptedIndexRemovalAreRemoved(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.DataDir = t.TempDir()
	root := writeTree(t, smallTree)

	first := newRegistry(t, cfg)
	load(t, first, "team", root)
	first.Close()
	dirs := indexDirs(t, cfg.DataDir, "team")
	if len(dirs) != 1 {
		t.Fatalf("index folders after the first run = %v, want one", dirs)
	}
	// Remains of an older tree's index: its store, its index_meta.json already gone.
	remains := filepath.Join(cfg.DataDir, "team", "0123abcd")
	if err := os.MkdirAll(filepath.Join(remains, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(remains, "store", "000000000002.zap"), make([]byte, 1024), 0o644); err != nil {
		t.Fatal(err)
	}
	// Remains in the very folder this tree's index lives in.
	if err := os.Remove(filepath.Join(cfg.DataDir, "team", dirs[0], "index_meta.json")); err != nil {
		t.Fatal(err)
	}

	second := newRegistry(t, cfg)
	k := load(t, second, "team", root)
	if k.Engine.Len() != k.Tree.Len() {
		t.Errorf("index holds %d documents, want %d", k.Engine.Len(), k.Tree.Len())
	}
	if got := indexDirs(t, cfg.DataDir, "team"); !slices.Equal(got, dirs) {
		t.Errorf("index folders after the second run = %v, want only %v", got, dirs)
	}
}

// signals.json carries the version of its format. One written by a newer release (after
// a rollback) may mean other things by the same names, or other names for them (a
// missing importance read as 0 demoted every file): it is not applied, and the start
// says so. Files of this format, with or without the version (releases before it wrote
// none), are restored.
func TestSavedSignalsOfANewerFormatAreNotApplied(t *testing.T) {
	recent := time.Now().UTC().Add(-time.Hour).Format(time.RFC3339Nano)
	tests := []struct {
		name    string
		file    string
		want    float64
		warning bool
	}{
		{"this format", `{"version":1,"saved":"` + recent + `","records":[{"Path":"ops/pager.md","Importance":90,"Maturity":2,"LastAccess":"` + recent + `"}]}`, 90, false},
		{"no version (an older release)", `{"saved":"` + recent + `","records":[{"Path":"ops/pager.md","Importance":90,"Maturity":2,"LastAccess":"` + recent + `"}]}`, 90, false},
		{"a newer format", `{"version":2,"saved":"` + recent + `","records":[{"Path":"ops/pager.md","Weight":0.9,"Stage":"core","Seen":"` + recent + `"}]}`, 50, true},
		{"truncated", `{"version":1,"saved":"` + recent + `","records":[{"Path":"ops/pa`, 50, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.DataDir = t.TempDir()
			if err := os.MkdirAll(filepath.Join(cfg.DataDir, "team"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(cfg.DataDir, "team", "signals.json"), []byte(tt.file), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			reg := kb.NewRegistry(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			t.Cleanup(reg.Close)
			k := load(t, reg, "team", writeTree(t, smallTree))
			if got := k.Signals.Get("ops/pager.md").Importance; got < tt.want-0.1 || got > tt.want+0.01 {
				t.Errorf("importance after the start = %v, want %v", got, tt.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tt.warning {
				t.Errorf("warned %v, want %v; logs:\n%s", warned, tt.warning, logs.String())
			}

			// What this release saves is read back by it.
			stopped, stop := context.WithCancel(context.Background())
			stop()
			k.Signals.RecordCuration("ops/pager.md")
			reg.RunSignals(stopped, time.Hour)
			raw, err := os.ReadFile(filepath.Join(cfg.DataDir, "team", "signals.json"))
			if err != nil || !strings.HasPrefix(string(raw), `{"version":1,`) {
				t.Errorf("saved signals = %.40s…, %v; want the format's version first", raw, err)
			}
		})
	}
}
