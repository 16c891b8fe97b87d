package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"unicode"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/services/search/lexicon"
)

// phrasing is a way people wrap a question in words that name nothing it asks about:
// a greeting, a request to be told, thanks, a ticket number. "quarry eval -phrasings"
// asks every known-item and out-of-domain question wrapped each way and counts the
// ones routed as without.
type phrasing struct {
	Name, Prefix, Suffix string
	// Rewrite, if set, rewrites the question before the prefix and suffix.
	Rewrite func(string) string
}

var phrasings = []phrasing{
	{"a discourse label", "Quick question: ", "", nil},
	{"a greeting", "Hey team, ", "", nil},
	{"an apology", "Sorry if this is a dumb question, but ", "", nil},
	{"an apology without a but", "Sorry to bother you, ", "", nil},
	{"a greeting and a label", "Hi everyone! Quick one: ", "", nil},
	{"a request to be told", "Can someone tell me ", "", nil},
	{"a request to know", "I need to know ", "", nil},
	{"a request to explain", "Explain ", "", nil},
	{"politeness", "", " please", nil},
	{"urgency", "", " asap", nil},
	{"thanks in advance", "", " TIA", nil},
	{"a request for detail", "", " in detail", nil},
	{"a request for pace", "", " right now", nil},
	{"a call for ideas", "", ", any ideas", nil},
	{"a call for help", "", " pls help", nil},
	{"an aside", "", " (asking for a friend)", nil},
	{"a ticket number", "", " (#4711)", nil},
	{"a version", "", " in v9", nil}, // one no KB here uses: "v2" is content in the Go KB (math/rand/v2)
	{"title case", "", "", titleCase},
}

// titleCase capitalises the first letter of every word, as a heading is written.
func titleCase(q string) string {
	words := strings.Fields(q)
	for i, w := range words {
		r, n := utf8.DecodeRuneInString(w)
		words[i] = string(unicode.ToUpper(r)) + w[n:]
	}
	return strings.Join(words, " ")
}

// applies reports whether p wraps q: a prefix does not go before a question that opens
// with a topic label ("Pandas: how do I ..."), which is a label only at the start.
func (p phrasing) applies(q string) bool {
	if p.Prefix == "" {
		return true
	}
	i := strings.Index(q, ": ")
	return i < 0 || len(strings.Fields(q[:i])) > lexicon.LabelMaxWords
}

// wrap returns q wrapped: a prefix starts the sentence, so q's first letter is lowered
// (unless q starts with a name in capitals, "TLS", "GKE"); a suffix goes before the
// question mark.
func (p phrasing) wrap(q string) string {
	if p.Rewrite != nil {
		q = p.Rewrite(q)
	}
	if p.Prefix != "" {
		first, n := utf8.DecodeRuneInString(q)
		if second, _ := utf8.DecodeRuneInString(q[n:]); !unicode.IsUpper(second) {
			q = string(unicode.ToLower(first)) + q[n:]
		}
	}
	if p.Suffix != "" {
		q = strings.TrimRight(q, "?") + p.Suffix + "?"
	}
	return p.Prefix + q
}

// routing is how a question was routed: its tier (the origin tier of a cached answer) and,
// for a direct answer, the document it answered from.
// A verified cache hit stands for the route the fresh search would take (same stems,
// or the fresh search agreed), so it is read as the route it carries.
type routing struct {
	Tier   quarryv1.Tier
	Source string
}

func (r routing) String() string {
	if r.Source == "" {
		return tierName(r.Tier)
	}
	return tierName(r.Tier) + " " + r.Source
}

func routeOf(resp *quarryv1.QueryResponse) routing {
	tier := resp.GetTier()
	if resp.GetFromCache() {
		tier = resp.GetOriginTier()
	}
	r := routing{Tier: tier}
	if tier == quarryv1.Tier_TIER_DIRECT {
		if s := resp.GetSources(); len(s) > 0 {
			r.Source = s[0].GetPath()
		}
	}
	return r
}

// phrasingResult is how the questions wrapped one way were routed, against the same
// questions unwrapped.
type phrasingResult struct {
	Phrasing  string   `json:"phrasing"`
	Example   string   `json:"example"`
	Questions int      `json:"questions"`
	Kept      rate     `json:"route_kept"`
	Changed   []string `json:"changed,omitempty"`
}

// wrapped asks every known-item and out-of-domain question wrapped as p and compares
// each route with the unwrapped question's (items, which must have run first).
func (e *evaluator) wrapped(ctx context.Context, c quarryv1.QueryServiceClient, qs []labelled, p phrasing) error {
	res := phrasingResult{Phrasing: p.Name, Example: p.wrap("Which port does Redis use?")}
	kept := 0
	for _, q := range qs {
		base, ok := e.routes[q.Query]
		if !ok || !p.applies(q.Query) {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		w := p.wrap(q.Query)
		resp, err := e.query(ctx, c, w)
		if err != nil {
			continue
		}
		res.Questions++
		if got := routeOf(resp); got == base {
			kept++
		} else {
			res.Changed = append(res.Changed, fmt.Sprintf("%q: %s, unwrapped %s", w, got, base))
		}
	}
	res.Kept = newRate(kept, res.Questions)
	e.rep.Phrasings = append(e.rep.Phrasings, res)
	return nil
}

func printPhrasings(w io.Writer, rs []phrasingResult, verbose bool) {
	if len(rs) == 0 {
		return
	}
	fmt.Fprintln(w, "route kept when a question is wrapped (-phrasings):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, r := range rs {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", r.Phrasing, r.Kept, r.Example)
	}
	tw.Flush()
	if verbose {
		for _, r := range rs {
			for _, c := range r.Changed {
				fmt.Fprintf(w, "- route changed by %s: %s\n", r.Phrasing, c)
			}
		}
	}
}
