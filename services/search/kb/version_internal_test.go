package kb

import (
	"context"
	"testing"

	"github.com/quarry-router/quarry/services/search/kbgen"
	"github.com/quarry-router/quarry/services/search/tree"
)

// BenchmarkContentVersion is what naming the content adds to every write of a 5,000-file
// knowledge base.
func BenchmarkContentVersion(b *testing.B) {
	dir := b.TempDir()
	if _, err := kbgen.Generate(dir, kbgen.Options{Files: 5000, Seed: 1}); err != nil {
		b.Fatal(err)
	}
	t, err := tree.Load(context.Background(), dir, tree.DefaultConfig(), nil)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		contentVersion("salt", t)
	}
}
