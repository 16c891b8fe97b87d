package kb_test

import (
	"bytes"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

// corpusFiles lists the term statistics kept for a knowledge base, hidden files too.
func corpusFiles(t *testing.T, dataDir, id string) []string {
	return dataDirEntries(t, dataDir, id, func(e fs.DirEntry) bool { return strings.Contains(e.Name(), "corpus-") })
}

func writeCorpus(t *testing.T, path string, c *rank.Corpus, key string) {
	t.Helper()
	var b bytes.Buffer
	if err := c.WriteTo(&b, key); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A restart reads the term statistics the first start kept for the same tree instead
// of computing them again; what it cannot trust it computes, keeps, and says why.
func TestTermStatisticsAreKeptForTheSameTree(t *testing.T) {
	tests := []struct {
		name string
		// between changes the kept file of the first run; fp is the tree's fingerprint.
		between func(t *testing.T, file, fp string, docs []*tree.Document)
		read    bool   // the second run's corpus is the planted one
		log     string // what the second run logs about it
	}{
		{
			name: "kept for this tree: read, not computed",
			between: func(t *testing.T, file, fp string, docs []*tree.Document) {
				// Planted statistics that differ from what the tree says, as only a
				// read (and no computation) can return them.
				planted := make([]*tree.Document, len(docs))
				for i, d := range docs {
					p := *d
					p.Content += " zorblatt"
					planted[i] = &p
				}
				writeCorpus(t, file, rank.NewCorpus(planted), fp)
			},
			read: true,
		},
		{
			name: "kept for other documents",
			between: func(t *testing.T, file, fp string, docs []*tree.Document) {
				writeCorpus(t, file, rank.NewCorpus(docs), "another-tree")
			},
			log: "from another version",
		},
		{
			name: "damaged",
			between: func(t *testing.T, file, fp string, docs []*tree.Document) {
				data, err := os.ReadFile(file)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(file, data[:len(data)/2], 0o644); err != nil {
					t.Fatal(err)
				}
			},
			log: "unreadable",
		},
		{
			name: "counting fewer documents",
			between: func(t *testing.T, file, fp string, docs []*tree.Document) {
				writeCorpus(t, file, rank.NewCorpus(docs[1:]), fp)
			},
			log: "count other documents",
		},
		{
			name: "removed",
			between: func(t *testing.T, file, fp string, docs []*tree.Document) {
				if err := os.Remove(file); err != nil {
					t.Fatal(err)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.DataDir = t.TempDir()
			root := copyTree(t, exampleKB)

			first := newRegistry(t, cfg)
			k := load(t, first, "platform", root)
			first.Close()
			want := rank.NewCorpus(k.Tree.Docs)
			if !reflect.DeepEqual(k.Corpus, want) {
				t.Fatal("first run's corpus differs from rank.NewCorpus's")
			}
			files := corpusFiles(t, cfg.DataDir, "platform")
			if len(files) != 1 {
				t.Fatalf("kept after the first run: %v, want one file", files)
			}
			file := filepath.Join(cfg.DataDir, "platform", files[0])
			fp := strings.TrimPrefix(files[0], "corpus-")
			tc.between(t, file, fp, k.Tree.Docs)

			var logs syncbuf.Buffer
			second := kb.NewRegistry(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			t.Cleanup(second.Close)
			k = load(t, second, "platform", root)
			if got := k.Corpus.DF("zorblatt") == k.Corpus.N(); got != tc.read {
				t.Fatalf("second run read the planted statistics: %v, want %v", got, tc.read)
			}
			if !tc.read && !reflect.DeepEqual(k.Corpus, want) {
				t.Error("second run's corpus differs from rank.NewCorpus's")
			}
			if tc.log != "" && !strings.Contains(logs.String(), tc.log) {
				t.Errorf("logs = %q, want a line saying %q", logs.String(), tc.log)
			}
			if tc.read {
				return
			}
			// Computed again, and kept for the next start.
			f, err := os.Open(file)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			kept, err := rank.ReadCorpus(f, fp)
			if err != nil || !reflect.DeepEqual(kept, want) {
				t.Errorf("kept after the second run: %v; want the computed statistics", err)
			}
		})
	}
}

func appendFile(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}
