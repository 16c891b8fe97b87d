package gate

import (
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

// results builds ranked results with the given relevances, paths r0.md, r1.md, ...
func results(rel ...float64) []rank.Result {
	out := make([]rank.Result, len(rel))
	for i, r := range rel {
		out[i] = rank.Result{Doc: &tree.Document{Path: fmt.Sprintf("r%d.md", i)}, Relevance: r}
	}
	return out
}

func TestDirectGate(t *testing.T) {
	tests := []struct {
		name       string
		rel        []float64
		pass       bool
		reason     string // a substring of Decision.Reason
		top, secnd float64
	}{
		{"T2 passes on a single result above 0.85", []float64{0.86}, true, "single result above 0.85", 0.86, 0},
		{"T2 counts only results with R >= 0.7 as results", []float64{0.86, 0.69, 0.5}, true, "single result", 0.86, 0},
		{"T2 fails on a single result below 0.85", []float64{0.84}, false, "top 0.84 < 0.85", 0.84, 0},
		{"T2 passes when the top reaches 0.93 whatever the second", []float64{0.95, 0.94}, true, "top 0.95 >= 0.93", 0.95, 0.94},
		{"T2 passes on a lead of 0.08 or more", []float64{0.90, 0.78}, true, "gap 0.12 >= 0.08", 0.90, 0.78},
		{"T2 passes on a lead of exactly 0.08", []float64{0.88, 0.80}, true, "gap 0.08 >= 0.08", 0.88, 0.80},
		{"T2 fails on a crowd below 0.93 with a lead under 0.08", []float64{0.90, 0.85, 0.80}, false,
			"top 0.90 < 0.93 and gap 0.05 < 0.08 over 3 results", 0.90, 0.85},
		{"T2 fails when the top is below 0.85 even with a big lead", []float64{0.80, 0.70}, false, "top 0.80 < 0.85", 0.80, 0.70},
		{"T2 fails with no result at 0.7", []float64{0.6, 0.5}, false, "no result with relevance >= 0.70 (top 0.60)", 0.6, 0},
		{"T2 fails with no results", nil, false, "no result with relevance", 0, 0},
		{"T2 fails when the first result is not the top relevance (DirectLead)", []float64{0.75, 0.95}, false,
			"first result r0.md has relevance 0.75 < top 0.95", 0.95, 0.75},
		{"T2 fails when a result below 0.7 leads a lone candidate (DirectLead)", []float64{0.69, 0.89}, false,
			"first result r0.md has relevance 0.69 < top 0.89", 0.89, 0},
		{"T2 passes when the first result ties the top relevance", []float64{0.95, 0.95}, true, "top 0.95 >= 0.93", 0.95, 0.95},
		{"T2 passes when a weaker result follows the top (DirectLead)", []float64{0.95, 0.75}, true, "top 0.95 >= 0.93", 0.95, 0.75},
	}
	cfg := DefaultConfig()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := cfg.Direct(results(tc.rel...))
			if d.Pass != tc.pass || !strings.Contains(d.Reason, tc.reason) || d.Top != tc.top || d.Second != tc.secnd {
				t.Fatalf("Direct = %+v, want pass %v, reason containing %q, top %g, second %g",
					d, tc.pass, tc.reason, tc.top, tc.secnd)
			}
			if (d.Route == Direct) != tc.pass {
				t.Fatalf("Route %v with pass %v", d.Route, d.Pass)
			}
		})
	}
}

// TestDirectLeadOff checks that without DirectLead the gate judges relevance, not the
// compound order.
func TestDirectLeadOff(t *testing.T) {
	cfg := DefaultConfig()
	cfg.DirectLead = false
	d := cfg.Direct(results(0.75, 0.95))
	if !d.Pass || !strings.Contains(d.Reason, "top 0.95 >= 0.93") {
		t.Fatalf("Direct = %+v, want a pass on top 0.95", d)
	}
}

// TestDirectMinStrength checks that a direct answer needs the top-relevance result to
// match with at least DirectMinStrength, and that the rule is off at 0.
func TestDirectMinStrength(t *testing.T) {
	withStrength := func(rel []float64, str []float64) []rank.Result {
		rs := results(rel...)
		for i := range rs {
			rs[i].Strength = str[i]
		}
		return rs
	}
	tests := []struct {
		name   string
		min    float64
		rel    []float64
		str    []float64
		pass   bool
		reason string
	}{
		{"a lone weak match of common words is no direct answer", 0.01, []float64{0.92}, []float64{0.003}, false, "top strength 0.003 < 0.010"},
		{"a lone dense match stays direct", 0.01, []float64{0.92}, []float64{0.2}, true, "single result"},
		{"a match of exactly the minimum stays direct", 0.01, []float64{0.92}, []float64{0.01}, true, "single result"},
		{"a weak runner-up does not block a dense top", 0.01, []float64{0.95, 0.75}, []float64{0.3, 0.001}, true, "top 0.95 >= 0.93"},
		{"a weak top fails even with a dense runner-up", 0.01, []float64{0.97, 0.75}, []float64{0.005, 0.4}, false, "top strength 0.005"},
		{"0 turns the rule off", 0, []float64{0.92}, []float64{0}, true, "single result"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.DirectMinStrength = tc.min
			d := cfg.Direct(withStrength(tc.rel, tc.str))
			if d.Pass != tc.pass || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("Direct = %+v, want pass %v, reason containing %q", d, tc.pass, tc.reason)
			}
		})
	}
}

func TestRoute(t *testing.T) {
	tests := []struct {
		name string
		rel  []float64
		want Route
	}{
		{"a passing T2 gate routes to the direct answer", []float64{0.97}, Direct},
		{"a failed gate with some R >= 0.7 routes to one LLM call", []float64{0.84, 0.80}, SingleLLM},
		{"R of exactly 0.7 counts for the single LLM call", []float64{0.70}, SingleLLM},
		{"nothing at 0.7 routes to the agentic loop", []float64{0.69, 0.3}, Agentic},
		{"no results route to the agentic loop", nil, Agentic},
	}
	cfg := DefaultConfig()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if d := cfg.Route(results(tc.rel...)); d.Route != tc.want {
				t.Fatalf("Route = %+v, want %v", d, tc.want)
			}
		})
	}
}

func TestPrefetch(t *testing.T) {
	tests := []struct {
		name string
		rel  []float64
		want []string
	}{
		{"keeps results with R >= 0.7 in result order", []float64{0.75, 0.5, 0.9}, []string{"r0.md", "r2.md"}},
		{"keeps at most 5", []float64{0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9}, []string{"r0.md", "r1.md", "r2.md", "r3.md", "r4.md"}},
		{"keeps nothing below 0.7", []float64{0.69}, nil},
	}
	cfg := DefaultConfig()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, r := range cfg.Prefetch(results(tc.rel...)) {
				got = append(got, r.Doc.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("Prefetch = %v, want %v", got, tc.want)
			}
		})
	}
}

// A folder summary that scored only through a document below it is no answer candidate,
// whatever its relevance (a PropagationFactor near 1 gives it the document's): it is
// neither prefetched nor the second place that fails the direct answer's gap rule.
func TestAPropagatedSummaryIsNoCandidate(t *testing.T) {
	rs := results(0.95, 0.93)
	rs[1].Doc = &tree.Document{Path: "ops/_index.md", Summary: true}
	rs[1].Propagated, rs[1].PropagatedFrom = true, "r0.md"
	cfg := DefaultConfig()
	var got []string
	for _, r := range cfg.Prefetch(rs) {
		got = append(got, r.Doc.Path)
	}
	if !slices.Equal(got, []string{"r0.md"}) {
		t.Errorf("Prefetch = %v, want only r0.md", got)
	}
	if d := cfg.Route(rs); d.Route != Direct {
		t.Errorf("Route = %+v, want the direct answer of r0.md", d)
	}
}

// kbContains is a Contains func over documents given as path → stems.
func kbContains(docs map[string][]string) func(path, stem string) bool {
	return func(path, stem string) bool { return slices.Contains(docs[path], stem) }
}

func TestOutOfDomain(t *testing.T) {
	docs := kbContains(map[string][]string{
		"r0.md": {"refresh", "token", "rotat"},
		"r1.md": {"token", "session"},
		"r2.md": {"arecord", "audio"},
	})
	tests := []struct {
		name     string
		in       OODInput
		wantRule string
	}{
		{"no_results fires when the searches find nothing",
			OODInput{Files: 10, AllTermsMatched: false}, RuleNoResults},
		{"low_relevance fires in a KB of 50+ files when the best R < 0.45",
			OODInput{Results: results(0.44, 0.2), Files: 50, AllTermsMatched: true}, RuleLowRelevance},
		{"low_relevance does not fire in a KB under 50 files",
			OODInput{Results: results(0.44), Files: 49, AllTermsMatched: true}, ""},
		{"low_relevance does not fire at R 0.45",
			OODInput{Results: results(0.45), Files: 5000, AllTermsMatched: true}, ""},
		{"low_relevance looks at the best R, not the first result",
			OODInput{Results: results(0.3, 0.6), Files: 5000, AllTermsMatched: true}, ""},
		{"unmatched_term fires when a 3+ char word is in none of the top results",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"rotate", "terraform"}, Contains: docs}, RuleUnmatchedTerm},
		{"unmatched_term matches exact stems, not prefixes: are/arecord is no evidence",
			OODInput{Results: results(0.6, 0.5, 0.4), Files: 10, Terms: []string{"record", "token"}, Contains: docs}, RuleUnmatchedTerm},
		{"unmatched_term matches stems: rotating is rotation",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"rotating", "tokens"}, Contains: docs}, ""},
		{"unmatched_term counts a word found in any of the top results",
			OODInput{Results: results(0.6, 0.5), Files: 10, Terms: []string{"refresh", "session"}, Contains: docs}, ""},
		{"unmatched_term counts a name of 3 characters (ssh)",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"ssh", "token"}, Contains: docs}, RuleUnmatchedTerm},
		{"unmatched_term ignores words under 3 characters",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"gz", "token"}, Contains: docs}, ""},
		{"unmatched_term with -gate-ood-term-min-len 4 ignores a 3-character name",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"ssh", "token"}, Contains: docs}, ""},
		{"unmatched_term ignores stop words",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"which", "token"}, Contains: docs}, ""},
		{"unmatched_term ignores a contraction that lost its apostrophe (isn't)",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"isnt", "token"}, Contains: docs}, ""},
		{"unmatched_term does not fire when the all-terms search matched",
			OODInput{Results: results(0.6), Files: 10, AllTermsMatched: true, Terms: []string{"terraform"}, Contains: docs}, ""},
		{"unmatched_term does not fire when the best R reaches 0.85",
			OODInput{Results: results(0.85), Files: 10, Terms: []string{"terraform"}, Contains: docs}, ""},
		{"unmatched_term looks only at the top 10 results",
			OODInput{Results: results(0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6), Files: 10,
				Terms: []string{"session"}, Contains: kbContains(map[string][]string{"r10.md": {"session"}})}, RuleUnmatchedTerm},
		{"unmatched_term finds a word in the 10th result",
			OODInput{Results: results(0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6, 0.6), Files: 10,
				Terms: []string{"session"}, Contains: kbContains(map[string][]string{"r9.md": {"session"}})}, ""},
		{"unmatched_term cannot run without a Contains func",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"terraform"}}, ""},
		{"unmatched_term ignores a word the KB uses elsewhere: a rewording, not a new topic",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"rotate", "session"}, Contains: kbContains(map[string][]string{"r0.md": {"rotat"}}),
				InKB: func(stem string) bool { return stem == "session" }}, ""},
		{"unmatched_term still fires on a name the KB never uses",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"rotate", "terraform"}, Contains: kbContains(map[string][]string{"r0.md": {"rotat"}}),
				InKB: func(stem string) bool { return stem == "rotat" }}, RuleUnmatchedTerm},
		{"unfamiliar_words fires when everyday words the KB never uses are half the question, whatever R",
			OODInput{Results: results(0.95), Files: 10, Terms: []string{"rotate", "tires", "wheels"}, Contains: kbContains(map[string][]string{"r0.md": {"rotat"}}),
				InKB: func(stem string) bool { return stem == "rotat" }, IsName: func(string) bool { return false }}, RuleUnfamiliarWords},
		{"one everyday word the KB never uses is a rewording, not a new topic",
			OODInput{Results: results(0.6), Files: 10, Terms: []string{"often", "backup", "schedule"}, Contains: kbContains(map[string][]string{"r0.md": {"backup", "schedul"}}),
				InKB: func(stem string) bool { return stem != "often" }, IsName: func(string) bool { return false }}, ""},
		{"a name the KB never uses does not fire once R reaches 0.85",
			OODInput{Results: results(0.9), Files: 10, Terms: []string{"rotate", "kafka"}, Contains: kbContains(map[string][]string{"r0.md": {"rotat"}}),
				InKB: func(stem string) bool { return stem == "rotat" }, IsName: func(string) bool { return true }}, ""},
		{"an in-domain question passes every rule",
			OODInput{Results: results(0.95, 0.3), Files: 5000, AllTermsMatched: true, Terms: []string{"refresh", "token"}, Contains: docs}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if strings.Contains(tc.name, "-gate-ood-term-min-len 4") {
				cfg.OODTermMinLen = 4
			}
			rule, ood := cfg.OutOfDomain(tc.in)
			if rule != tc.wantRule || ood != (tc.wantRule != "") {
				t.Fatalf("OutOfDomain = %q, %v; want %q", rule, ood, tc.wantRule)
			}
		})
	}
}

func TestDecide(t *testing.T) {
	cfg := DefaultConfig()
	d, rule := cfg.Decide(OODInput{Files: 100})
	if d.Route != OutOfDomain || rule != RuleNoResults || !strings.Contains(d.Reason, RuleNoResults) {
		t.Fatalf("Decide with no results = %+v, %q", d, rule)
	}
	d, rule = cfg.Decide(OODInput{Results: results(0.97), Files: 100, AllTermsMatched: true})
	if d.Route != Direct || rule != "" {
		t.Fatalf("Decide with a clear answer = %+v, %q", d, rule)
	}
}

func TestEntitySearch(t *testing.T) {
	cfg := DefaultConfig()
	trigger := []struct {
		name string
		n    int
		want bool
	}{
		{"entity search runs on 0 results", 0, true},
		{"entity search runs on 2 results", 2, true},
		{"entity search does not run on 3 results", 3, false},
	}
	for _, tc := range trigger {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfg.NeedEntitySearch(tc.n); got != tc.want {
				t.Fatalf("NeedEntitySearch(%d) = %v", tc.n, got)
			}
		})
	}
	terms := []struct {
		name  string
		words []string
		want  []string
	}{
		{"entity terms skip stop words and words under 3 characters",
			[]string{"how", "do", "i", "use", "k8", "vault"}, []string{"use", "vault"}},
		{"entity terms are the first 3",
			[]string{"terraform", "vault", "consul", "nomad"}, []string{"terraform", "vault", "consul"}},
		{"entity terms do not repeat", []string{"vault", "vault", "consul"}, []string{"vault", "consul"}},
		{"entity terms count characters, not bytes", []string{"çé", "ñandú"}, []string{"ñandú"}},
		{"no words, no entity terms", nil, nil},
	}
	for _, tc := range terms {
		t.Run(tc.name, func(t *testing.T) {
			if got := cfg.EntityTerms(tc.words); !slices.Equal(got, tc.want) {
				t.Fatalf("EntityTerms(%v) = %v, want %v", tc.words, got, tc.want)
			}
		})
	}
}

func TestRouteString(t *testing.T) {
	for r, want := range map[Route]string{OutOfDomain: "out_of_domain", Direct: "direct", SingleLLM: "single_llm", Agentic: "agentic", 0: "unspecified"} {
		if r.String() != want {
			t.Errorf("%d.String() = %q, want %q", r, r.String(), want)
		}
	}
}

func TestConfig(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if c != DefaultConfig() {
		t.Fatalf("flag defaults %+v differ from DefaultConfig %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	if got := c.Thresholds()["direct_min"]; got != 0.85 {
		t.Errorf("Thresholds()[direct_min] = %g", got)
	}
	bad := []struct{ flag, value string }{
		{"gate-direct-min", "1.2"},
		{"gate-direct-high", "0.8"},  // below direct-min
		{"gate-prefetch-min", "0.9"}, // above direct-min
		{"gate-direct-max-docs", "0"},
		{"gate-ood-top-k", "0"},
		{"gate-entity-min-len", "0"},
		{"gate-ood-written-name-max", "1.5"},
		{"gate-ood-written-name-min-len", "0"},
		{"gate-ood-unfamiliar-share", "-0.1"},
		{"gate-ood-rare-name-share", "1.1"},
		{"gate-ood-subject-coverage", "-0.5"},
		{"gate-direct-min-strength", "-0.01"},
	}
	for _, tc := range bad {
		t.Run(tc.flag, func(t *testing.T) {
			var c Config
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			c.RegisterFlags(fs)
			if err := fs.Parse([]string{"-" + tc.flag, tc.value}); err != nil {
				t.Fatal(err)
			}
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "-"+tc.flag) {
				t.Fatalf("Validate = %v, want an error naming -%s", err, tc.flag)
			}
		})
	}
}

// TestOutOfDomainNamesByWritingAndWordsByForm checks the rules on how a question writes a
// word (OODWrittenNames) and on everyday words the KB never uses (OODUnfamiliarAllTerms,
// OODUnfamiliarShare), each with the question that must stay in domain beside the one
// that must not.
func TestOutOfDomainWrittenNamesAndUnfamiliarWords(t *testing.T) {
	// known returns an InKB over the stems of words.
	known := func(words ...string) func(string) bool {
		stems := text.Stems(words)
		return func(stem string) bool { return slices.Contains(stems, stem) }
	}
	set := func(words ...string) func(string) bool {
		return func(w string) bool { return slices.Contains(words, w) }
	}
	everyday := func(string) bool { return false }
	top := kbContains(map[string][]string{"r0.md": text.Stems([]string{"split", "string", "log", "file", "code", "rotate", "signing", "key"})})
	tests := []struct {
		name string
		edit func(*Config)
		in   OODInput
		want string
	}{
		{"written name the KB never uses fires although the all-terms search matched (by typo)", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"react", "split", "string"}, Contains: top,
				InKB: known("split", "string"), IsName: set("react"), Written: set("react")}, RuleUnmatchedTerm},
		{"written names off: the all-terms match protects a written name", func(c *Config) { c.OODWrittenNames = false },
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"react", "split", "string"}, Contains: top,
				InKB: known("split", "string"), IsName: set("react"), Written: set("react")}, ""},
		{"a lower-case word no dictionary has keeps the all-terms protection: it may be a typo of a KB word", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"sigining", "key"}, Contains: top,
				InKB: known("signing", "key"), IsName: set("sigining"), Written: set()}, ""},
		{"a written name of 3 characters counts (Vue)", nil,
			OODInput{Results: results(0.6), Terms: []string{"vue", "log", "file"}, Contains: top,
				InKB: known("log", "file"), IsName: set("vue"), Written: set("vue")}, RuleUnmatchedTerm},
		{"a written name of 2 characters counts (Qt)", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"qt", "log", "file"}, Contains: top,
				InKB: known("log", "file"), IsName: set("qt"), Written: set("qt")}, RuleUnmatchedTerm},
		{"a written name of 1 character does not count (C#)", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"c", "log", "file"}, Contains: top,
				InKB: known("log", "file"), IsName: set("c"), Written: set("c")}, ""},
		{"a written name the KB uses is no evidence (JWT: how do I rotate the signing key)", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"jwt", "rotate", "signing", "key"}, Contains: top,
				InKB: known("jwt", "rotate", "signing", "key"), IsName: set("jwt"), Written: set("jwt")}, ""},
		{"a written name does not fire once R reaches 0.85", nil,
			OODInput{Results: results(0.9), AllTermsMatched: true, Terms: []string{"rails", "split", "string"}, Contains: top,
				InKB: known("split", "string"), IsName: set("rails"), Written: set("rails")}, ""},
		{"one word in three the KB never uses is a rewording (which permission scope should I use)", nil,
			OODInput{Results: results(0.84), Terms: []string{"permission", "scope", "use"}, Contains: kbContains(map[string][]string{"r0.md": {"scope", "use"}}),
				InKB: known("scope", "use"), IsName: everyday}, ""},
		{"two everyday words in five the KB never uses (what does the error light on my washing machine mean)", nil,
			OODInput{Results: results(0.96), Terms: []string{"error", "light", "washing", "machine", "mean"}, Contains: kbContains(map[string][]string{"r0.md": text.Stems([]string{"error", "machine", "mean"})}),
				InKB: known("error", "machine", "mean"), IsName: everyday}, RuleUnfamiliarWords},
		{"a share of 0.5 leaves two everyday words in five alone", func(c *Config) { c.OODUnfamiliarShare = 0.5 },
			OODInput{Results: results(0.96), Terms: []string{"error", "light", "washing", "machine", "mean"}, Contains: kbContains(map[string][]string{"r0.md": text.Stems([]string{"error", "machine", "mean"})}),
				InKB: known("error", "machine", "mean"), IsName: everyday}, ""},
		{"everyday words of 3 characters count (can I bring my dog to the office)", nil,
			OODInput{Results: results(1), Terms: []string{"bring", "dog", "office"}, Contains: kbContains(map[string][]string{"r0.md": {"offic"}}),
				InKB: known("office"), IsName: everyday}, RuleUnfamiliarWords},
		{"a share of 1/3 calls one word in three out of domain", func(c *Config) { c.OODUnfamiliarShare = 0.33 },
			OODInput{Results: results(0.84), Terms: []string{"permission", "scope", "use"}, Contains: kbContains(map[string][]string{"r0.md": {"scope", "use"}}),
				InKB: known("scope", "use"), IsName: everyday}, RuleUnfamiliarWords},
		{"unfamiliar_words runs although the all-terms search matched: dress matched address by typo", nil,
			OODInput{Results: results(0.87), AllTermsMatched: true, Terms: []string{"dress", "code"}, Contains: top,
				InKB: known("code"), IsName: everyday}, RuleUnfamiliarWords},
		{"unfamiliar_words off after an all-terms match", func(c *Config) { c.OODUnfamiliarAllTerms = false },
			OODInput{Results: results(0.87), AllTermsMatched: true, Terms: []string{"dress", "code"}, Contains: top,
				InKB: known("code"), IsName: everyday}, ""},
		{"an all-terms match still protects a name not written as one", nil,
			OODInput{Results: results(0.6), AllTermsMatched: true, Terms: []string{"pandas", "split", "string"}, Contains: top,
				InKB: known("split", "string"), IsName: set("pandas"), Written: set()}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			tc.in.Files = 10
			rule, ood := cfg.OutOfDomain(tc.in)
			if rule != tc.want || ood != (tc.want != "") {
				t.Fatalf("OutOfDomain = %q, %v; want %q", rule, ood, tc.want)
			}
		})
	}
}

// TestOutOfDomainRareNamesSubjectsAndLiterals checks rare_name, uncovered_subject and
// quoted values, each with the questions that must stay in domain.
func TestOutOfDomainRareNamesSubjectsAndLiterals(t *testing.T) {
	// kb is a KB of 100 documents: df gives each stem's document count, r0.md..r2.md are
	// the top results with their stems.
	df := map[string]int{}
	for _, w := range []string{"marshal", "messag", "protobuf", "request", "new", "key", "offic", "front",
		"name", "scope", "servic", "error", "convers", "tell", "wrong", "strconv", "atoi", "go"} {
		df[text.Stem(w)] = 20
	}
	df["java"] = 2       // mentioned in passing, in 2 % of the documents
	df["javascript"] = 9 // in 9 %
	in := func(q string, all bool, r []rank.Result, docs map[string][]string, written ...string) OODInput {
		words := text.Words(q)
		var terms []string
		for _, w := range words {
			if !text.IsStopWord(w) {
				terms = append(terms, w)
			}
		}
		return OODInput{
			Results: r, Files: 100, AllTermsMatched: all, Terms: terms, Words: words,
			Contains: kbContains(docs),
			InKB:     func(stem string) bool { return df[stem] > 0 },
			DF:       func(stem string) int { return df[stem] },
			IDF:      func(stem string) float64 { return math.Log(1 + (100-float64(df[stem])+0.5)/(float64(df[stem])+0.5)) },
			IsName:   func(w string) bool { return slices.Contains(written, w) },
			Written:  func(w string) bool { return slices.Contains(written, w) },
		}
	}
	stems := func(ws ...string) []string { return text.Stems(ws) }
	tests := []struct {
		name string
		edit func(*Config)
		in   OODInput
		want string
	}{
		{"rare_name: a name few documents use and no top result holds", nil,
			in("How do I marshal a protobuf message in Java?", false, results(0.56), map[string][]string{"r0.md": stems("marshal", "protobuf", "message")}, "java"),
			RuleRareName},
		{"rare_name: not when a top result holds the name", nil,
			in("How do I marshal a protobuf message in Java?", false, results(0.56), map[string][]string{"r0.md": stems("marshal", "message", "java")}, "java"),
			""},
		{"rare_name: not for a name in more than 5 % of the documents", nil,
			in("How do I marshal a message in JavaScript?", false, results(0.56), map[string][]string{"r0.md": stems("marshal", "message")}, "javascript"),
			""},
		{"rare_name: not after an all-terms match", nil,
			in("How do I marshal a protobuf message in Java?", true, results(0.56), map[string][]string{"r0.md": stems("marshal", "protobuf", "message")}, "java"),
			""},
		{"rare_name: not once the best relevance reaches 0.85", nil,
			in("How do I marshal a protobuf message in Java?", false, results(0.9), map[string][]string{"r0.md": stems("marshal", "protobuf", "message")}, "java"),
			""},
		{"rare_name: not for a word the question does not write as a name", nil,
			in("How do I marshal a protobuf message in java?", false, results(0.56), map[string][]string{"r0.md": stems("marshal", "protobuf", "message")}),
			""},
		{"rare_name off at share 0", func(c *Config) { c.OODRareNameShare = 0 },
			in("How do I marshal a protobuf message in Java?", false, results(0.56), map[string][]string{"r0.md": stems("marshal", "protobuf", "message")}, "java"),
			""},
		{"uncovered_subject: the head of a noun phrase is a word the KB never uses", nil,
			in("How do I request a new key for the office front door?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key")}),
			RuleUncoveredSubject},
		{"uncovered_subject: not when a top result holds half the question's weight", nil,
			in("How do I request a new key for the office front door?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key", "office", "front")}),
			""},
		{"uncovered_subject: a modifier the KB lacks is a rewording (a new permission scope)", nil,
			in("How should I name a new permission scope for my service?", false, results(0.84), map[string][]string{"r0.md": stems("name", "scope", "service")}),
			""},
		{"uncovered_subject: a noun phrase must start at a determiner or preposition", nil,
			in("how do I request door keys", false, results(0.54), map[string][]string{"r0.md": stems("request", "key")}),
			""},
		{"uncovered_subject: the user's data after the head is not the head", nil,
			func() OODInput {
				i := in("How do I request a new key for the office front door (#4711)?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key")})
				i.Literal = func(w string) bool { return w == "4711" }
				return i
			}(),
			RuleUncoveredSubject},
		{"uncovered_subject: a phrase of the user's data only has no head", nil,
			func() OODInput {
				i := in("How do I request a new key for 4711?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key")})
				i.Literal = func(w string) bool { return w == "4711" }
				return i
			}(),
			""},
		{"uncovered_subject off at coverage 0", func(c *Config) { c.OODSubjectCoverage = 0 },
			in("How do I request a new key for the office front door?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key")}),
			""},
		{"uncovered_subject needs the question's words", nil,
			func() OODInput {
				i := in("How do I request a new key for the office front door?", false, results(0.54), map[string][]string{"r0.md": stems("request", "new", "key")})
				i.Words = nil
				return i
			}(),
			""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			if tc.edit != nil {
				tc.edit(&cfg)
			}
			rule, ood := cfg.OutOfDomain(tc.in)
			if rule != tc.want || ood != (tc.want != "") {
				t.Fatalf("OutOfDomain = %q, %v; want %q", rule, ood, tc.want)
			}
		})
	}

	// A quoted value is the user's data: no rule counts it, while the same word unquoted is a
	// name the KB never uses.
	q := in(`strconv.Atoi gives an error for "12abc", how do I tell what went wrong?`, false, results(0.6),
		map[string][]string{"r0.md": stems("strconv", "atoi", "error")}, "strconv", "atoi", "12abc")
	cfg := DefaultConfig()
	if rule, _ := cfg.OutOfDomain(q); rule != RuleUnmatchedTerm {
		t.Fatalf("unquoted 12abc: rule %q, want %q", rule, RuleUnmatchedTerm)
	}
	q.Literal = func(w string) bool { return w == "12abc" }
	if rule, ood := cfg.OutOfDomain(q); ood {
		t.Fatalf("quoted 12abc: rule %q, want in domain", rule)
	}
}
