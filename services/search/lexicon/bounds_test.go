package lexicon

import (
	"strings"
	"testing"
	"time"
)

// TestTypoLeavesLongWordsAlone: the edits Typo tries grow with the square of a word's
// length, and a query reaches it with any unknown lower-case word: a 1,000-letter one
// took seconds. Past TypoMaxLen it looks nothing up.
func TestTypoLeavesLongWordsAlone(t *testing.T) {
	lookups := 0
	df := func(string) int { lookups++; return 1 }
	if _, ok := Typo(strings.Repeat("q", TypoMaxLen+1), df); ok || lookups != 0 {
		t.Errorf("Typo of a %d-letter word: fixed %v after %d look-ups, want none", TypoMaxLen+1, ok, lookups)
	}
	if got, ok := Typo("transacton", func(s string) int { return map[bool]int{true: 3}[s == "transact"] }); !ok || got != "transaction" {
		t.Errorf(`Typo("transacton") = %q, %v; want "transaction"`, got, ok)
	}
}

// TestOpenerIsLinearInTheQuery: a query of one asking verb repeated read the whole query
// again for every verb; 40 KB took seconds.
func TestOpenerIsLinearInTheQuery(t *testing.T) {
	q := strings.Repeat("tell ", 8000)
	start := time.Now()
	Opener(q)
	if took := time.Since(start); took > time.Second {
		t.Errorf("Opener of %d bytes took %v", len(q), took)
	}
	// A verb in capitals is a name, not a request: still told apart.
	if n := Opener("EXPLAIN ANALYZE shows the plan"); n != 0 {
		t.Errorf(`Opener("EXPLAIN ANALYZE ...") = %d, want 0`, n)
	}
	if n := Opener("explain how the planner works"); n != 1 {
		t.Errorf(`Opener("explain how ...") = %d, want 1`, n)
	}
}
