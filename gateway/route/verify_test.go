package route

import (
	"slices"
	"strings"
	"testing"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/text"
)

func stems(words ...string) []string {
	var out []string
	for _, w := range words {
		out = append(out, text.Stem(w))
	}
	slices.Sort(out)
	return out
}

func TestWordChanges(t *testing.T) {
	cases := []struct {
		name       string
		from, to   string
		gone, came []string // words, compared as stems
	}{
		{"reordered words change nothing", "how do i rotate keys?", "keys: rotate them", nil, nil},
		{"an inflection is the same word", "when do postgres backups run?", "when does the postgres backup run", nil, nil},
		{"stop words and one-letter words do not count", "what is the retention of audit logs?", "retention of a audit logs, x", nil, nil},
		{"an added qualifier only comes", "when do postgres backups run?", "when do the postgres backups run each week?", nil, []string{"week"}},
		{"a dropped qualifier only goes", "how do i roll back a failed schema migration?", "how do i roll back a schema migration?", []string{"failed"}, nil},
		{"a swapped verb goes and comes (rotate vs revoke)", "how do i rotate the jwt api token?", "how do i revoke the jwt api token?",
			[]string{"rotate"}, []string{"revoke"}},
		{"a swapped subject goes and comes", "how does gzip newreader create a new reader?", "how does zlib newreader create a new reader?",
			[]string{"gzip"}, []string{"zlib"}},
		{"a replaced one-digit number goes and comes", "how do i upgrade to python 2?", "how do i upgrade to python 3?",
			[]string{"2"}, []string{"3"}},
		{"a repeated word that loses an occurrence goes", "how does http serve accept incoming http connections?",
			"how does cgi serve accept incoming http connections?", []string{"http"}, []string{"cgi"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			gone, came := wordChanges(text.Words(c.from), text.Words(c.to))
			if !slices.Equal(gone, stems(c.gone...)) || !slices.Equal(came, stems(c.came...)) {
				t.Fatalf("wordChanges(%q, %q) = gone %v, came %v; want gone %v, came %v",
					c.from, c.to, gone, came, stems(c.gone...), stems(c.came...))
			}
		})
	}
}

func TestFuzzyVerificationByTheFreshSearch(t *testing.T) {
	direct := func(path string) *quarryv1.QueryResponse {
		return &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_FUZZY_CACHE, OriginTier: quarryv1.Tier_TIER_DIRECT, Generation: 1,
			Sources: []*quarryv1.Source{{Path: path}}}
	}
	ood := &quarryv1.QueryResponse{Tier: quarryv1.Tier_TIER_FUZZY_CACHE, OriginTier: quarryv1.Tier_TIER_OUT_OF_DOMAIN, Generation: 1}
	search := func(route quarryv1.Tier, gen uint64, path string) *quarryv1.ResolveResponse {
		res := &quarryv1.ResolveResponse{Route: route, Generation: gen}
		if path != "" {
			res.Sources = []*quarryv1.Source{{Path: path}}
		}
		return res
	}
	versioned := func(res *quarryv1.ResolveResponse, v uint64) *quarryv1.ResolveResponse {
		res.ContentVersion = v
		return res
	}
	cases := []struct {
		name             string
		candidate, query string
		cached           *quarryv1.QueryResponse
		fresh            *quarryv1.ResolveResponse
		ok               bool
		reason           string // the rejects metric's reason
		why              string // substring of the verification
	}{
		{"an added qualifier with the same route and top source is served",
			"when do postgres backups run?", "when do the postgres backups run each week?",
			direct("data/backups.md"), search(quarryv1.Tier_TIER_DIRECT, 1, "data/backups.md"), true, "", "search agrees"},
		{"a dropped qualifier with the same route and top source is served",
			"how do i roll back a failed schema migration?", "how do i roll back a schema migration?",
			direct("data/rollback.md"), search(quarryv1.Tier_TIER_DIRECT, 1, "data/rollback.md"), true, "", "search agrees"},
		{"a replaced subject is rejected though the search ranks the same document first (gzip vs zlib)",
			"how does gzip newreader create a new reader?", "how does zlib newreader create a new reader?",
			direct("compress/gzip.md"), search(quarryv1.Tier_TIER_DIRECT, 1, "compress/gzip.md"), false, rejectWordReplaced, "replaced by"},
		{"a replaced occurrence of a repeated word is rejected",
			"how does http serve accept incoming http connections?", "how does cgi serve accept incoming http connections?",
			direct("net/http.md"), search(quarryv1.Tier_TIER_DIRECT, 1, "net/http.md"), false, rejectWordReplaced, "replaced by"},
		{"a replaced verb whose search finds another document is rejected (rotate vs revoke)",
			"how do i rotate the jwt api token?", "how do i revoke the jwt api token?",
			direct("auth/rotate-keys.md"), search(quarryv1.Tier_TIER_DIRECT, 1, "auth/revoke-token.md"), false, rejectTopSource, "differs"},
		{"two out-of-domain questions agree whatever words differ",
			"weather forecast paris today", "weather forecast paris tomorrow",
			ood, search(quarryv1.Tier_TIER_OUT_OF_DOMAIN, 1, ""), true, "", "both out of domain"},
		{"another route is rejected",
			"weather forecast paris today", "weather forecast paris rotate",
			ood, search(quarryv1.Tier_TIER_DIRECT, 1, "auth/rotate-keys.md"), false, rejectRoute, "routes to"},
		{"an answer of an older generation is rejected",
			"when do postgres backups run?", "when do the postgres backups run each week?",
			direct("data/backups.md"), search(quarryv1.Tier_TIER_DIRECT, 2, "data/backups.md"), false, rejectGeneration, "knowledge base changed"},
		{"another search replica's generation of the same content agrees",
			"when do postgres backups run?", "when do the postgres backups run each week?",
			direct("data/backups.md"), versioned(search(quarryv1.Tier_TIER_DIRECT, 2, "data/backups.md"), 1<<63|7), true, "", "search agrees"},
		{"the same generation number with other content is rejected",
			"when do postgres backups run?", "when do the postgres backups run each week?",
			direct("data/backups.md"), versioned(search(quarryv1.Tier_TIER_DIRECT, 1, "data/backups.md"), 1<<63|8), false, rejectGeneration, "knowledge base changed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// Cached as the router caches, under answerKey: its generation, or in the
			// cases with versions, the content version 1<<63|7.
			key := c.cached.GetGeneration()
			if c.fresh.GetContentVersion() != 0 {
				key = 1<<63 | 7
			}
			ok, reason, why := agrees(text.Words(c.query), text.Words(c.candidate), key, c.cached, c.fresh)
			if ok != c.ok || reason != c.reason || !strings.Contains(why, c.why) {
				t.Fatalf("agrees = %v, %q, %q; want %v, %q with %q", ok, reason, why, c.ok, c.reason, c.why)
			}
		})
	}
}
