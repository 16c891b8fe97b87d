package resolve_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/gate"
)

// BenchmarkResolve resolves the example set's questions on the example knowledge base,
// grouped by the route they take: the search service's CPU per question, which is most
// of what Quarry adds to an LLM call (SPEC §5: < 5 ms) and of a T2 answer.
//
//	go test -run '^$' -bench Resolve -count 6 ./resolve
func BenchmarkResolve(b *testing.B) {
	f := newFixture(b, false)
	byRoute := map[gate.Route][]string{}
	for _, kind := range []string{"known_item", "out_of_domain"} {
		for _, q := range loadQuestions(b, kind) {
			r, err := f.res.Resolve(context.Background(), platform, q.Query)
			if err != nil {
				b.Fatal(err)
			}
			byRoute[r.Route] = append(byRoute[r.Route], q.Query)
		}
	}
	for _, route := range []gate.Route{gate.Direct, gate.SingleLLM, gate.Agentic, gate.OutOfDomain} {
		qs := byRoute[route]
		if len(qs) == 0 {
			b.Fatalf("no example question routes to %v", route)
		}
		b.Run(route.String(), func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				if _, err := f.res.Resolve(context.Background(), platform, qs[i%len(qs)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkResolveHostile resolves questions built to be expensive beside an ordinary
// one, interleaved so that each sees the machine in the same moments: 128 words of 31
// letters the knowledge base lacks (4,095 bytes, within the gateway's 4 KiB limit) and
// 128 of 8. Each such word is a candidate for typo correction and for Bleve's prefix and
// typo automata; the bounds on both (at most 8 words corrected, 16 approximated) keep a
// question of them to tens of milliseconds where it took 308 ms. It reports each kind's
// median and its ratio to the ordinary question's.
//
//	go test -run '^$' -bench ResolveHostile -benchtime 50x ./resolve
func BenchmarkResolveHostile(b *testing.B) {
	f := newFixture(b, false)
	kinds := []struct{ name, query string }{
		{"ordinary", loadQuestions(b, "known_item")[0].Query},
		{"long_unknown_words", madeUpWords(128, 31)},
		{"short_unknown_words", madeUpWords(128, 8)},
	}
	took := make([][]time.Duration, len(kinds))
	for i := range b.N {
		for j := range kinds {
			k := kinds[(i+j)%len(kinds)] // which goes first turns round
			t := time.Now()
			if _, err := f.res.Resolve(context.Background(), platform, k.query); err != nil {
				b.Fatalf("%s: %v", k.name, err)
			}
			took[(i+j)%len(kinds)] = append(took[(i+j)%len(kinds)], time.Since(t))
		}
	}
	base := median(took[0])
	for j, k := range kinds {
		m := median(took[j])
		b.ReportMetric(float64(m.Microseconds())/1000, k.name+"-p50-ms")
		if j > 0 {
			b.ReportMetric(float64(m)/float64(base), k.name+"-x-ordinary")
		}
	}
}

// madeUpWords returns n words of size letters each that no knowledge base holds, the
// same on every run.
func madeUpWords(n, size int) string {
	r := rand.New(rand.NewPCG(1, 2))
	words := make([]string, n)
	for i := range words {
		w := make([]byte, size)
		for j := range w {
			w[j] = byte('a' + r.IntN(26))
		}
		words[i] = string(w)
	}
	return strings.Join(words, " ")
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
