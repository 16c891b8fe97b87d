package bleve

import (
	"context"
	"slices"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

// With Query.Near set to the corpus's Near, every search finds exactly what it finds
// without: the typo matching it skips is only the one that would have found nothing.
func TestNearChangesNoHits(t *testing.T) {
	kbs := newSynthetic(400, 3)
	ix := build(t, kbs.docs, DefaultConfig())
	docs := make([]*tree.Document, len(kbs.docs))
	for i, d := range kbs.docs {
		docs[i] = &tree.Document{Path: d.Path, Title: d.Title, Content: d.Content}
	}
	corpus := rank.NewCorpus(docs)
	var asked, skipped int
	near := func(stem string) bool {
		asked++
		ok := corpus.Near(stem)
		if !ok {
			skipped++
		}
		return ok
	}
	// The synthetic questions (every fifth misspelt) and, for words no document has,
	// each with one more word made of syllables no document uses.
	qs := kbs.queries(300, 11)
	for i := range qs {
		if i%3 == 0 {
			qs[i] = append(qs[i], "plunkwhistle")
		}
	}
	ctx := context.Background()
	var typoHits int
	for _, terms := range qs {
		for _, all := range []bool{true, false} {
			q := engine.Query{Terms: terms, AllTerms: all}
			want, err := ix.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			q.Near = near
			got, err := ix.Search(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Fatalf("%q (all terms %v): hits with Near\n%v\nwithout\n%v", terms, all, got, want)
			}
			if len(want) > 0 && terms[0][2] == 'y' {
				typoHits++
			}
		}
	}
	if skipped == 0 || skipped == asked || typoHits == 0 {
		t.Fatalf("Near said no to %d of %d words, and %d misspelt questions found something: "+
			"the questions do not tell skipping from matching", skipped, asked, typoHits)
	}
}

// A word Near says has no neighbour gets no typo matching.
func TestNearFalseSkipsTypoMatching(t *testing.T) {
	ix := build(t, []engine.Doc{{Path: "exact.md", Title: "Notes", Content: "Secrets live in the vault."}}, DefaultConfig())
	for _, tc := range []struct {
		near func(string) bool
		want []string
	}{
		{nil, []string{"exact.md"}},
		{func(string) bool { return true }, []string{"exact.md"}},
		{func(string) bool { return false }, nil},
	} {
		hits, err := ix.Search(context.Background(), engine.Query{Terms: []string{"vaulr"}, Near: tc.near})
		if err != nil {
			t.Fatal(err)
		}
		if got := paths(hits); !slices.Equal(got, tc.want) {
			t.Errorf("near %v: hits %v, want %v", tc.near != nil, got, tc.want)
		}
	}
}
