package bleve

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
)

// known remembers its answers only for the index as it is: a write that adds or removes
// a word changes the answer at once.
func TestKnownFollowsWrites(t *testing.T) {
	ctx := context.Background()
	ix, err := Build(ctx, []engine.Doc{{Path: "a.md", Title: "Rotation", Content: "Rotate the signing key."}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	check := func(when string, want ...bool) {
		t.Helper()
		for range 2 { // computed, then remembered
			got, err := ix.known(ctx, []string{"zorblatt", "rotate"})
			if err != nil {
				t.Fatal(err)
			}
			if got[0] != want[0] || got[1] != want[1] {
				t.Fatalf("%s: known(zorblatt, rotate) = %v, want %v", when, got, want)
			}
		}
	}
	check("before any write", false, true)
	added := engine.Doc{Path: "b.md", Title: "Zorblatt", Content: "The zorblatt sizer."}
	if err := ix.Apply(ctx, []engine.Change{{New: &added}}); err != nil {
		t.Fatal(err)
	}
	check("after the word was added", true, true)
	old := engine.Doc{Path: "a.md", Title: "Rotation", Content: "Rotate the signing key."}
	if err := ix.Apply(ctx, []engine.Change{{Old: &old}}); err != nil {
		t.Fatal(err)
	}
	check("after the word's document was removed", true, false)

	// A long word (a question may hold a 64 KiB one) is looked up, not kept.
	before := ix.knownStems.Load().n.Load()
	if _, err := ix.known(ctx, []string{strings.Repeat("z", 4096)}); err != nil {
		t.Fatal(err)
	}
	if after := ix.knownStems.Load().n.Load(); after != before {
		t.Errorf("a 4,096-byte stem was kept (%d stems, then %d)", before, after)
	}
}

// Only the first maxApproxTerms words the index lacks get prefix and typo matches: a
// misspelt word among the first is found, the same word after them is not.
func TestApproximateMatchesAreBoundedPerQuery(t *testing.T) {
	ix := build(t, kb, DefaultConfig())
	filler := make([]string, maxApproxTerms)
	for i := range filler {
		filler[i] = fmt.Sprintf("zzqx%cvw", 'a'+i) // no document holds anything like them
	}
	short := make([]string, 2*maxApproxTerms)
	for i := range short {
		short[i] = fmt.Sprintf("q%d", i)
	}
	for _, tc := range []struct {
		name  string
		terms []string
		found bool
	}{
		{"first", append([]string{"snapshor"}, filler[1:]...), true},
		{"last of the bound", append(slices.Clone(filler[1:]), "snapshor"), true},
		{"past the bound", append(slices.Clone(filler), "snapshor"), false},
		// Words too short for either match take none of the bound.
		{"after short words", append(append(short, filler[1:]...), "snapshor"), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits, err := ix.Search(context.Background(), engine.Query{Terms: tc.terms})
			if err != nil {
				t.Fatal(err)
			}
			if found := slices.Contains(paths(hits), "data/postgres_backups.md"); found != tc.found {
				t.Errorf("the misspelt word found the document: %v, want %v (hits %v)", found, tc.found, paths(hits))
			}
		})
	}
}
