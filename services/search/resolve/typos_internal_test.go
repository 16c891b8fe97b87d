package resolve

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"strings"
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
