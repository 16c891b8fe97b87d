package rank

import (
	"math/rand/v2"
	"testing"

	"github.com/quarry-router/quarry/services/search/tree"
)

func TestCorpusNear(t *testing.T) {
	c := NewCorpus(corpusDocs()).With([]*tree.Document{
		{Path: "cafe.md", Title: "Café", Content: "Naïve pgbouncer pools."},
	}, []string{"ops/_archived/pager_duty.stub.md"})
	tests := []struct {
		name, stem string
		want       bool
	}{
		{"the stem itself", "kubernet", true},
		{"a rune deleted", "pgbouncr", true},
		{"a rune inserted", "tokken", true},
		{"a rune replaced", "tokan", true},
		{"two adjacent runes swapped", "tokne", true},
		{"the first rune replaced", "sokan", false},
		{"a rune inserted first", "xtoken", true},
		{"a rune inserted last", "tokenx", true},
		{"a non-ASCII rune replaced", "cafe", true},
		{"a non-ASCII rune deleted", "naiv", true},
		{"two edits away", "tkoenx", false},
		{"a word the KB lacks", "payrol", false},
		{"a word only a deleted document held", "escal", false},
		{"the empty stem", "", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Near(tc.stem); got != tc.want {
				t.Errorf("Near(%q) = %v, want %v", tc.stem, got, tc.want)
			}
		})
	}
}

// Near agrees with the edit distance it stands in for, over random words of a small
// alphabet, where near misses are common.
func TestCorpusNearIsEditDistanceOne(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	word := func() string {
		r := make([]rune, 1+rng.IntN(6))
		for i := range r {
			r[i] = []rune("abcé")[rng.IntN(4)]
		}
		return string(r)
	}
	var docs []*tree.Document
	var stems []string
	for i := range 40 {
		w := word()
		docs = append(docs, &tree.Document{Path: "d" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".md", Content: w})
		stems = append(stems, DocStems(docs[i])...)
	}
	c := NewCorpus(docs)
	checked := 0
	for range 3000 {
		q := word()
		want := false
		for _, s := range stems {
			if c.DF(s) > 0 && osaDistance([]rune(q), []rune(s)) <= 1 {
				want = true
			}
		}
		if got := c.Near(q); got != want {
			t.Fatalf("Near(%q) = %v, want %v (stems %q)", q, got, want, stems)
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("nothing checked")
	}
}

// osaDistance is the optimal-string-alignment distance: insertions, deletions,
// replacements and swaps of adjacent runes, each counting one.
func osaDistance(a, b []rune) int {
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

func BenchmarkCorpusNear(b *testing.B) {
	c := NewCorpus(corpusDocs())
	for _, stem := range []string{"payrol", "kubernetz"} {
		b.Run(stem, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				c.Near(stem)
			}
		})
	}
}
