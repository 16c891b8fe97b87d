package kb_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/tree"
)

// TestWritesKeepTheKnowledgeBaseWithinMaxFiles: a knowledge base may hold at most
// -kb-max-files markdown files, or the next start refuses to load it. Writes never
// checked: an upsert or an additive sync took a knowledge base past the limit, every
// call succeeded, and the restart served no knowledge base at all.
func TestWritesKeepTheKnowledgeBaseWithinMaxFiles(t *testing.T) {
	cfg := defaultConfig(t)
	cfg.Tree.MaxFiles = 5
	ctx := context.Background()
	files := func(n int) []kb.Upload {
		var out []kb.Upload
		for i := range n {
			out = append(out, kb.Upload{Path: fmt.Sprintf("new/f%d.md", i), Data: []byte(fmt.Sprintf("# F%d\n", i))})
		}
		return out
	}
	tests := []struct {
		name  string
		write func(reg *kb.Registry) error
		// ok: the write is within the limit and must succeed.
		ok bool
	}{
		{"an upsert up to the limit", func(reg *kb.Registry) error {
			_, err := reg.SyncFiles(ctx, "team", files(2), true)
			return err
		}, true},
		{"an upsert past the limit", func(reg *kb.Registry) error {
			if _, err := reg.SyncFiles(ctx, "team", files(2), true); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err := reg.UpsertFile(ctx, "team", "new/one-too-many.md", []byte("# X\n"))
			return err
		}, false},
		{"an additive sync past the limit", func(reg *kb.Registry) error {
			_, err := reg.SyncFiles(ctx, "team", files(3), true)
			return err
		}, false},
		{"a full sync that replaces files stays within", func(reg *kb.Registry) error {
			_, err := reg.SyncFiles(ctx, "team", files(5), false)
			return err
		}, true},
		{"a full sync of more files than the limit", func(reg *kb.Registry) error {
			_, err := reg.SyncFiles(ctx, "team", files(6), false)
			return err
		}, false},
		{"a replaced file is no new file", func(reg *kb.Registry) error {
			if _, err := reg.SyncFiles(ctx, "team", files(2), true); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err := reg.UpsertFile(ctx, "team", "ops/pager.md", []byte("# Pager\n\nChanged.\n"))
			return err
		}, true},
		{"archiving at the limit adds no file Load counts", func(reg *kb.Registry) error {
			if _, err := reg.SyncFiles(ctx, "team", files(2), true); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err := reg.ArchiveFile(ctx, "team", "ops/pager.md")
			return err
		}, true},
		{"a file in the folder the loader refused counts too", func(reg *kb.Registry) error {
			writeFile(t, must(reg.Get("team")).Tree.Root, "ops/broken.md", "---\nimportance: 500\n---\n# Broken\n")
			if _, err := reg.Load(ctx, "team", must(reg.Get("team")).Tree.Root); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			_, err := reg.SyncFiles(ctx, "team", files(2), true)
			return err
		}, false},
		{"deleting a file the loader refused makes room", func(reg *kb.Registry) error {
			writeFile(t, must(reg.Get("team")).Tree.Root, "ops/broken.md", "---\nimportance: 500\n---\n# Broken\n")
			if _, err := reg.Load(ctx, "team", must(reg.Get("team")).Tree.Root); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if _, err := reg.DeleteFile(ctx, "team", "ops/broken.md"); err != nil {
				return fmt.Errorf("delete the refused file: %w", err)
			}
			_, err := reg.SyncFiles(ctx, "team", files(2), true)
			return err
		}, true},
		{"a full sync removes a file the loader refused", func(reg *kb.Registry) error {
			root := must(reg.Get("team")).Tree.Root
			writeFile(t, root, "ops/broken.md", "---\nimportance: 500\n---\n# Broken\n")
			if _, err := reg.Load(ctx, "team", root); err != nil {
				return fmt.Errorf("setup: %w", err)
			}
			if _, err := reg.SyncFiles(ctx, "team", files(5), false); err != nil {
				return err
			}
			if slices.Contains(folderFiles(t, root), "ops/broken.md") {
				return errors.New("the full sync left ops/broken.md in the folder")
			}
			return nil
		}, true},
		{"a new knowledge base past the limit", func(reg *kb.Registry) error {
			_, err := reg.SyncFiles(ctx, "fresh", files(6), false)
			return err
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cfg
			c.Write.NewRoot = t.TempDir()
			reg := newRegistry(t, c)
			root := writeTree(t, smallTree)
			load(t, reg, "team", root)
			err := tt.write(reg)
			if tt.ok {
				if err != nil {
					t.Fatalf("write within the limit: %v", err)
				}
			} else if !errors.Is(err, tree.ErrTooManyFiles) {
				t.Fatalf("write past the limit = %v, want ErrTooManyFiles", err)
			}
			// Whatever was accepted, the next start loads.
			load(t, newRegistry(t, c), "team", root)
			if !tt.ok {
				k, err := reg.Get("team")
				if err != nil {
					t.Fatal(err)
				}
				md := slices.DeleteFunc(folderFiles(t, root), func(p string) bool { return !strings.HasSuffix(p, ".md") })
				if len(md) > c.Tree.MaxFiles {
					t.Errorf("the folder holds %d markdown files, over the limit: %v", len(md), md)
				}
				if slices.ContainsFunc(k.Tree.Docs, func(d *tree.Document) bool { return d.Path == "new/one-too-many.md" }) {
					t.Error("the refused file is indexed")
				}
			}
		})
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
