package manifest

import (
	"flag"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quarry-router/quarry/services/search/tree"
)

func paths(l Lane) []string {
	var out []string
	for _, e := range l.Entries {
		out = append(out, e.Path)
	}
	return out
}

func TestBuildOrdersLanes(t *testing.T) {
	tr := tree.New("kb", []*tree.Document{
		{Path: "a/b/_index.md", Title: "ab", Summary: true, Content: "Deep."},
		{Path: "b/_index.md", Title: "b", Summary: true, Content: "B."},
		{Path: "_index.md", Title: "root", Summary: true, Content: "Root."},
		{Path: "a/_index.md", Title: "a", Summary: true, Content: "A."},
		{Path: "a/low.md", Title: "low", Importance: 10},
		{Path: "b/high.md", Title: "high", Importance: 90},
		{Path: "a/tie2.md", Title: "tie", Importance: 50},
		{Path: "a/tie1.md", Title: "tie", Importance: 50},
		{Path: "z/_archived/z.stub.md", Title: "z", Archived: true},
		{Path: "_archived/a.stub.md", Title: "a", Archived: true},
	})
	m := Build(tr, nil, DefaultConfig())
	tests := []struct {
		rule string
		lane Lane
		want []string
	}{
		{"summaries are broadest first, then by path", m.Summaries, []string{"_index.md", "a/_index.md", "b/_index.md", "a/b/_index.md"}},
		{"contexts are by importance, highest first, ties by path", m.Contexts, []string{"b/high.md", "a/tie1.md", "a/tie2.md", "a/low.md"}},
		{"stubs are by path", m.Stubs, []string{"_archived/a.stub.md", "z/_archived/z.stub.md"}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			if got := paths(tt.lane); !slices.Equal(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestBuildOrdersContextsByRuntimeImportance(t *testing.T) {
	tr := tree.New("kb", []*tree.Document{
		{Path: "a.md", Importance: 90},
		{Path: "b.md", Importance: 10},
		{Path: "c.md", Importance: 50},
	})
	runtime := map[string]float64{"a.md": 20, "b.md": 95, "c.md": math.NaN()}
	m := Build(tr, func(p string) float64 { return runtime[p] }, DefaultConfig())
	if got := paths(m.Contexts); !slices.Equal(got, []string{"b.md", "a.md", "c.md"}) {
		t.Errorf("contexts = %v, want runtime order [b.md a.md c.md] (NaN counts as 0)", got)
	}
	if m.Contexts.Entries[0].Importance != 95 || m.Contexts.Entries[2].Importance != 0 {
		t.Errorf("entries carry importance %v and %v, want 95 and 0", m.Contexts.Entries[0].Importance, m.Contexts.Entries[2].Importance)
	}
}

// doc makes a knowledge file whose entry costs exactly n tokens at 4 characters a token:
// a 4-character path ("a.md") and 4n-4 characters of title, no content.
func doc(name string, n int, importance float64) *tree.Document {
	return &tree.Document{Path: name + ".md", Title: strings.Repeat("t", 4*n-4), Importance: importance}
}

func TestBuildRespectsBudgets(t *testing.T) {
	tests := []struct {
		rule        string
		docs        []*tree.Document
		budget      int
		wantPaths   []string
		wantUsed    int
		wantOmitted int
	}{
		{
			rule:      "everything fits under a large budget",
			docs:      []*tree.Document{doc("a", 10, 3), doc("b", 10, 2), doc("c", 10, 1)},
			budget:    100,
			wantPaths: []string{"a.md", "b.md", "c.md"}, wantUsed: 30,
		},
		{
			rule:      "entries that exactly fill the budget all fit",
			docs:      []*tree.Document{doc("a", 10, 3), doc("b", 10, 2), doc("c", 10, 1)},
			budget:    30,
			wantPaths: []string{"a.md", "b.md", "c.md"}, wantUsed: 30,
		},
		{
			rule:      "entries past the budget are omitted and counted",
			docs:      []*tree.Document{doc("a", 10, 3), doc("b", 10, 2), doc("c", 10, 1)},
			budget:    25,
			wantPaths: []string{"a.md", "b.md"}, wantUsed: 20, wantOmitted: 1,
		},
		{
			rule:      "once an entry does not fit, smaller ones after it are omitted too",
			docs:      []*tree.Document{doc("a", 10, 3), doc("b", 20, 2), doc("c", 1, 1)},
			budget:    25,
			wantPaths: []string{"a.md"}, wantUsed: 10, wantOmitted: 2,
		},
		{
			rule:   "a zero budget omits everything",
			docs:   []*tree.Document{doc("a", 1, 1)},
			budget: 0, wantOmitted: 1,
		},
		{
			rule:   "an empty lane uses nothing",
			budget: 10,
		},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.ContextsBudget = tt.budget
			m := Build(tree.New("kb", tt.docs), nil, cfg)
			l := m.Contexts
			if got := paths(l); !slices.Equal(got, tt.wantPaths) {
				t.Errorf("entries = %v, want %v", got, tt.wantPaths)
			}
			if l.Used != tt.wantUsed || l.Omitted != tt.wantOmitted || l.Budget != tt.budget {
				t.Errorf("used %d omitted %d budget %d; want %d, %d, %d", l.Used, l.Omitted, l.Budget, tt.wantUsed, tt.wantOmitted, tt.budget)
			}
			sum := 0
			for _, e := range l.Entries {
				sum += e.Tokens
			}
			if sum != l.Used || l.Used > l.Budget {
				t.Errorf("entries cost %d, Used %d, budget %d", sum, l.Used, l.Budget)
			}
		})
	}
}

func TestBuildUsesEachLanesBudget(t *testing.T) {
	var docs []*tree.Document
	for _, n := range []string{"a", "b", "c", "d"} {
		docs = append(docs,
			// Each entry costs 10 tokens: 40 characters of path and title.
			&tree.Document{Path: n + "/_index.md", Summary: true, Title: strings.Repeat("s", 29)},
			&tree.Document{Path: n + "/f.md", Title: strings.Repeat("c", 34)},
			&tree.Document{Path: n + "/_archived/x.stub.md", Archived: true, Title: strings.Repeat("x", 19)},
		)
	}
	cfg := Config{SummariesBudget: 20, ContextsBudget: 30, StubsBudget: 10, SummaryChars: 200, CharsPerToken: 4}
	m := Build(tree.New("kb", docs), nil, cfg)
	for _, l := range []struct {
		name          string
		lane          Lane
		kept, omitted int
	}{
		{"summaries", m.Summaries, 2, 2},
		{"contexts", m.Contexts, 3, 1},
		{"stubs", m.Stubs, 1, 3},
	} {
		if len(l.lane.Entries) != l.kept || l.lane.Omitted != l.omitted {
			t.Errorf("%s kept %d omitted %d, want %d and %d (entries %v)", l.name, len(l.lane.Entries), l.lane.Omitted, l.kept, l.omitted, paths(l.lane))
		}
	}
}

func TestEntryTokensAreCharactersOverFourRoundedUp(t *testing.T) {
	tests := []struct {
		path, title, content string
		want                 int
	}{
		{"a.md", "T", "Hello.", 3},            // 4+1+6 = 11 characters
		{"a.md", "Tt", "Hello.", 3},           // 12
		{"a.md", "Ttt", "Hello.", 4},          // 13
		{"é.md", "ü", "", 2},                  // characters, not bytes: 4+1
		{"abcd.md", "", "", 2},                // 7
		{"x.md", "", "# Only a heading\n", 1}, // headings are not described
	}
	for _, tt := range tests {
		m := Build(tree.New("kb", []*tree.Document{{Path: tt.path, Title: tt.title, Content: tt.content}}), nil, DefaultConfig())
		if got := m.Contexts.Entries[0].Tokens; got != tt.want {
			t.Errorf("tokens(%q, %q, %q) = %d, want %d", tt.path, tt.title, tt.content, got, tt.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct {
		rule    string
		content string
		max     int
		want    string
	}{
		{"whole sentences up to the limit", "One two. Three four. Five six.", 20, "One two. Three four."},
		{"a sentence that would pass the limit is left out", "One two. Three four five six seven.", 12, "One two."},
		{"everything when it fits", "Short text.", 200, "Short text."},
		{"headings are dropped", "# Title\n\n## Part\nBody text.", 200, "Body text."},
		{"fenced code is dropped", "Intro.\n```\ncode here.\n```\nAfter.", 200, "Intro. After."},
		{"tables and rules are dropped", "| a | b |\n|---|---|\n---\nText.", 200, "Text."},
		{"indented code is dropped", "    code line\nText.", 200, "Text."},
		{"links keep their text", "See [the guide](http://x/y) and ![diagram](d.png).", 200, "See the guide and diagram."},
		{"emphasis and code marks are removed", "Use **bold** and `code` and __this__.", 200, "Use bold and code and this."},
		{"lines of a paragraph are joined", "First line\ncontinues here.", 200, "First line continues here."},
		{"list items stand alone", "Steps:\n- rotate keys\n- publish JWKS", 200, "Steps: rotate keys. publish JWKS."},
		{"numbered items stand alone", "1. first\n2) second", 200, "first. second."},
		{"block quotes lose their marker", "> Quoted text.", 200, "Quoted text."},
		{"a long first sentence is cut at a word with an ellipsis", "Alpha beta gamma delta epsilon.", 15, "Alpha beta…"},
		{"a long word is cut hard", "Supercalifragilistic.", 8, "Superca…"},
		{"white space is collapsed", "Too   many \t spaces.", 200, "Too many spaces."},
		{"an empty body has no description", "", 200, ""},
		{"a body of only headings has no description", "# A\n## B\n", 200, ""},
		{"a question and an exclamation end sentences", "Why? Because! Done.", 15, "Why? Because!"},
		{"abbreviations without a following space do not split", "Use v1.2 now. Then stop.", 13, "Use v1.2 now."},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			got := describe(tt.content, tt.max)
			if got != tt.want {
				t.Errorf("describe(%q, %d) = %q, want %q", tt.content, tt.max, got, tt.want)
			}
			if n := utf8.RuneCountInString(got); n > tt.max {
				t.Errorf("description has %d characters, over the %d limit", n, tt.max)
			}
		})
	}
}

func TestConfig(t *testing.T) {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	if c != DefaultConfig() {
		t.Errorf("flag defaults %+v differ from DefaultConfig %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Errorf("defaults do not validate: %v", err)
	}
	tests := []struct {
		name   string
		mutate func(*Config)
		flag   string
	}{
		{"a negative budget is refused", func(c *Config) { c.StubsBudget = -1 }, "manifest-stubs-budget"},
		{"zero characters per token is refused", func(c *Config) { c.CharsPerToken = 0 }, "manifest-chars-per-token"},
		{"a zero summary length is refused", func(c *Config) { c.SummaryChars = 0 }, "manifest-summary-chars"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%s: err = %v, want one naming -%s", tt.name, err, tt.flag)
		}
	}
}

func TestZeroConfigMeansDefaults(t *testing.T) {
	tr := tree.New("kb", []*tree.Document{{Path: "a.md", Title: "A", Content: "Some text."}})
	if got, want := Build(tr, nil, Config{}), Build(tr, nil, DefaultConfig()); !slices.Equal(got.Contexts.Entries, want.Contexts.Entries) || got.Contexts.Budget != 4000 {
		t.Errorf("zero Config built %+v, want %+v", got.Contexts, want.Contexts)
	}
}
