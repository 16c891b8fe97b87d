package bleve

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/lang/en"

	"github.com/quarry-router/quarry/platform/text"
)

// The memoised stemmer stems as Bleve's Snowball filter does, every word of the example
// knowledge base, seen once and again.
func TestMemoStemmerStemsAsBlevesSnowball(t *testing.T) {
	var words []string
	err := filepath.WalkDir("../../../../examples/kb", func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".md") {
			return err
		}
		data, err := os.ReadFile(p)
		words = append(words, text.Words(string(data))...)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// A word too long to memoise, and one just short enough.
	words = append(words, strings.Repeat("connections", 5), strings.Repeat("x", maxRememberedWord-len("ing"))+"ing")
	if len(words) < 5000 {
		t.Fatalf("%d words in the example knowledge base, want a real sample", len(words))
	}
	stream := func() analysis.TokenStream {
		ts := make(analysis.TokenStream, len(words))
		for i, w := range words {
			ts[i] = &analysis.Token{Term: []byte(w)}
		}
		return ts
	}
	want := en.NewEnglishStemmerFilter().Filter(stream())
	for round := range 2 { // the second round reads every stem from the memo
		got := memoStemmer{}.Filter(stream())
		for i := range want {
			if string(got[i].Term) != string(want[i].Term) {
				t.Fatalf("round %d: %q stems to %q, want %q", round, words[i], got[i].Term, want[i].Term)
			}
		}
	}
}
