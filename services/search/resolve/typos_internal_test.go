package resolve

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/kb"
)

// Typo correction tries the first maxTypoTerms words that may be typos and no more: a
// question of a hundred long misspelt words costs what one of eight does.
func TestTypoCorrectionTriesABoundedNumberOfWords(t *testing.T) {
	fs := flag.NewFlagSet("test", flag.ContinueOnError)
	var kc kb.Config
	kc.RegisterFlags(fs)
	var rc Config
	rc.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	reg := kb.NewRegistry(kc, slog.New(slog.NewTextHandler(io.Discard, nil)))
	t.Cleanup(reg.Close)
	k, err := reg.Load(context.Background(), "platform", "../../../examples/kb/platform")
	if err != nil {
		t.Fatal(err)
	}
	r := New(rc, reg, time.Now)
	// "transacton" is one edit from the KB's "transaction"; a short word ("zq"), a word
	// the KB holds ("pgbouncer"), an English word ("birthday") and one with a digit
	// ("node12x") are not tries, however many come first.
	var terms []string
	for range 3 * maxTypoTerms {
		terms = append(terms, "zq", "pgbouncer", "birthday", "node12x")
	}
	terms = append(terms, "transacton")
	fixes := r.typos(k, strings.Join(terms, " "), terms)
	if len(fixes) != 1 || fixes["transacton"] != "transaction" {
		t.Fatalf("fixes = %v, want transacton → transaction", fixes)
	}
	distinct := make([]string, 0, 2*maxTypoTerms)
	for i := range 2 * maxTypoTerms {
		distinct = append(distinct, "zzqx"+string(rune('a'+i))+"vw") // no KB word is one edit away
	}
	distinct[maxTypoTerms-1] = "transacton"
	if fixes := r.typos(k, strings.Join(distinct, " "), distinct); fixes["transacton"] != "transaction" {
		t.Errorf("the %dth word was not tried: fixes %v", maxTypoTerms, fixes)
	}
	distinct[maxTypoTerms-1], distinct[maxTypoTerms] = distinct[maxTypoTerms], "transacton"
	if fixes := r.typos(k, strings.Join(distinct, " "), distinct); len(fixes) != 0 {
		t.Errorf("the %dth word was tried: fixes %v", maxTypoTerms+1, fixes)
	}
}

// A question's searches ask Near about the same words: once a word is worked out it is
// never worked out again, and the answers are Near's, whichever search asks first, in
// parallel or not (two first asks at once may both work it out).
func TestNearIsWorkedOutOncePerWordOfAQuestion(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	m := &nearMemo{seen: map[string]bool{}, near: func(stem string) bool {
		mu.Lock()
		calls[stem]++
		mu.Unlock()
		return strings.HasPrefix(stem, "near")
	}}
	asks := []string{"nearby", "zzqx", "nearby", "zzqx", "nearish", "zzqx"}
	var wg sync.WaitGroup
	for _, stem := range asks {
		wg.Go(func() {
			if got, want := m.Near(stem), strings.HasPrefix(stem, "near"); got != want {
				t.Errorf("Near(%q) = %v, want %v", stem, got, want)
			}
		})
	}
	wg.Wait()
	for _, stem := range asks {
		if got, want := m.Near(stem), strings.HasPrefix(stem, "near"); got != want {
			t.Errorf("Near(%q) after = %v, want %v", stem, got, want)
		}
	}
	// Parallel first asks may both work a word out; asks after that never do.
	before := maps.Clone(calls)
	for _, stem := range asks {
		m.Near(stem)
	}
	if !maps.Equal(calls, before) {
		t.Errorf("asked again: %v calls, were %v", calls, before)
	}
}
