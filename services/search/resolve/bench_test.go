package resolve_test

import (
	"context"
	"testing"

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
