package rank

import (
	"flag"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

const eps = 1e-9

func near(a, b float64) bool { return math.Abs(a-b) < eps }

// doc returns a document updated now.
func doc(path string) *tree.Document {
	return &tree.Document{Path: path, Updated: now, Summary: strings.HasSuffix(path, "_index.md")}
}

// signals returns a signal func with importance 50 and the given maturity for every doc.
func signals(m tree.Maturity) func(*tree.Document) Signal {
	return func(*tree.Document) Signal { return Signal{Importance: 50, Maturity: m} }
}

// summaries returns a summary func over the _index.md documents given.
func summaries(docs ...*tree.Document) func(string) (*tree.Document, bool) {
	return func(folder string) (*tree.Document, bool) {
		for _, d := range docs {
			if d.Folder() == folder {
				return d, true
			}
		}
		return nil, false
	}
}

func noSummaries(string) (*tree.Document, bool) { return nil, false }

func byPath(rs []Result) map[string]Result {
	m := make(map[string]Result, len(rs))
	for _, r := range rs {
		m[r.Doc.Path] = r
	}
	return m
}

func TestCompoundFormula(t *testing.T) {
	tests := []struct {
		name    string
		cfg     func(*Config)
		sig     Signal
		updated time.Time
		want    float64
	}{
		{"score = (0.6 R + 0.2 importance/100 + 0.2 recency) × boost",
			func(*Config) {}, Signal{Importance: 50, Maturity: tree.Validated}, now,
			0.6*1 + 0.2*0.5 + 0.2*1},
		{"importance 100 adds its full weight", func(*Config) {}, Signal{Importance: 100, Maturity: tree.Validated}, now,
			0.6 + 0.2 + 0.2},
		{"importance is clamped to [0,100]", func(*Config) {}, Signal{Importance: 250, Maturity: tree.Validated}, now,
			0.6 + 0.2 + 0.2},
		{"weights are configurable", func(c *Config) { c.RelevanceWeight, c.ImportanceWeight, c.RecencyWeight = 1, 0, 0 },
			Signal{Importance: 50, Maturity: tree.Validated}, now, 1},
		{"the boost multiplies the whole sum", func(*Config) {}, Signal{Importance: 0, Maturity: tree.Core},
			now.Add(-30 * 24 * time.Hour), (0.6 + 0.2*math.Exp(-1)) * 1.15},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			d := doc("a.md")
			d.Updated = tc.updated
			rs := cfg.Rank(now, nil, []string{"x"}, []Candidate{{Doc: d, EngineScore: 3}},
				func(*tree.Document) Signal { return tc.sig }, noSummaries)
			if len(rs) != 1 || !near(rs[0].Score, tc.want) {
				t.Fatalf("results %+v, want one scoring %g", rs, tc.want)
			}
		})
	}
}

func TestMaturityBoost(t *testing.T) {
	tests := []struct {
		name string
		m    tree.Maturity
		want float64
	}{
		{"core boosts by 1.15", tree.Core, 1.15},
		{"validated boosts by 1.0", tree.Validated, 1.0},
		{"draft boosts by 0.85", tree.Draft, 0.85},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := DefaultConfig().Rank(now, nil, []string{"x"}, []Candidate{{Doc: doc("a.md"), EngineScore: 1}},
				signals(tc.m), noSummaries)
			if len(rs) != 1 || rs[0].Boost != tc.want || !near(rs[0].Score, 0.9*tc.want) {
				t.Fatalf("results %+v, want boost %g and score %g", rs, tc.want, 0.9*tc.want)
			}
		})
	}
	t.Run("a draft file with default signals cannot reach a compound 0.85", func(t *testing.T) {
		rs := DefaultConfig().Rank(now, nil, []string{"x"}, []Candidate{{Doc: doc("a.md"), EngineScore: 1}},
			signals(tree.Draft), noSummaries)
		if rs[0].Relevance != 1 || rs[0].Score >= 0.85 {
			t.Fatalf("R %g score %g; the SPEC's point is R 1 and score < 0.85", rs[0].Relevance, rs[0].Score)
		}
	})
}

func TestRecency(t *testing.T) {
	day := 24 * time.Hour
	tests := []struct {
		name    string
		updated time.Time
		want    float64
	}{
		{"updated now is 1", now, 1},
		{"30 days old is e^-1", now.Add(-30 * day), math.Exp(-1)},
		{"60 days old is e^-2", now.Add(-60 * day), math.Exp(-2)},
		{"12 hours old is e^-(0.5/30)", now.Add(-12 * time.Hour), math.Exp(-0.5 / 30)},
		{"a future update counts as now", now.Add(5 * day), 1},
		{"no update time is 0", time.Time{}, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := doc("a.md")
			d.Updated = tc.updated
			rs := DefaultConfig().Rank(now, nil, []string{"x"}, []Candidate{{Doc: d, EngineScore: 1}},
				signals(tree.Validated), noSummaries)
			if !near(rs[0].Recency, tc.want) {
				t.Fatalf("recency %g, want %g", rs[0].Recency, tc.want)
			}
		})
	}
}

func TestCalibration(t *testing.T) {
	tests := []struct {
		name     string
		crowding float64
		scores   []float64 // engine scores of a.md, b.md, ...
		want     []float64 // relevance, same order
	}{
		{"a single result has R = coverage", 0.15, []float64{7.3}, []float64{1}},
		{"a tie at the top gives both 1/(1+λ)", 0.15, []float64{4, 4}, []float64{1 / 1.15, 1 / 1.15}},
		{"a clear winner stays near 1, the runner-up far below", 0.15, []float64{10, 2},
			[]float64{10 / 10.3, 2 / 10.3}},
		{"only the best two scores set the scale", 0.15, []float64{10, 2, 1},
			[]float64{10 / 10.3, 2 / 10.3, 1 / 10.3}},
		{"crowding 0 gives the top 1 even in a tie", 0, []float64{4, 4}, []float64{1, 1}},
		{"all-zero engine scores tie", 0.15, []float64{0, 0}, []float64{1 / 1.15, 1 / 1.15}},
		{"a lone zero engine score counts as a single result", 0.15, []float64{0}, []float64{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Crowding = tc.crowding
			cfg.GapRatio = 0
			var cands []Candidate
			for i, s := range tc.scores {
				cands = append(cands, Candidate{Doc: doc(string(rune('a'+i)) + ".md"), EngineScore: s})
			}
			got := byPath(cfg.Rank(now, nil, []string{"x"}, cands, signals(tree.Validated), noSummaries))
			for i, w := range tc.want {
				p := string(rune('a'+i)) + ".md"
				if !near(got[p].Relevance, w) {
					t.Errorf("R(%s) = %g, want %g", p, got[p].Relevance, w)
				}
			}
		})
	}
}

// TestCrowdSize checks that with CrowdSize K the evidence of results 2..K divides every
// relevance, and that 2 is the SPEC formula.
func TestCrowdSize(t *testing.T) {
	tests := []struct {
		name   string
		size   int
		scores []float64
		want   []float64
	}{
		{"size 2 counts the runner-up only", 2, []float64{10, 2, 2}, []float64{10 / 10.3, 2 / 10.3, 2 / 10.3}},
		{"size 3 counts the next two", 3, []float64{10, 2, 2}, []float64{10 / 10.6, 2 / 10.6, 2 / 10.6}},
		{"a crowd of equal matches lowers the top", 4, []float64{4, 4, 4, 4}, []float64{1 / 1.45, 1 / 1.45, 1 / 1.45, 1 / 1.45}},
		{"a lone clear match stays at 1 whatever the size", 10, []float64{7}, []float64{1}},
		{"size 1 counts no runner-up", 1, []float64{4, 4}, []float64{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.CrowdSize = tc.size
			cfg.GapRatio = 0
			var cands []Candidate
			for i, s := range tc.scores {
				cands = append(cands, Candidate{Doc: doc(string(rune('a'+i)) + ".md"), EngineScore: s})
			}
			got := byPath(cfg.Rank(now, nil, []string{"x"}, cands, signals(tree.Validated), noSummaries))
			for i, w := range tc.want {
				p := string(rune('a'+i)) + ".md"
				if !near(got[p].Relevance, w) {
					t.Errorf("R(%s) = %g, want %g", p, got[p].Relevance, w)
				}
			}
		})
	}
}

// TestStrength checks that Strength is the engine score over the summed idf of the
// query's distinct stems, and 0 without a corpus.
func TestStrength(t *testing.T) {
	docs := []*tree.Document{doc("a.md"), doc("b.md"), doc("c.md")}
	docs[0].Content = "alpha beta"
	docs[1].Content = "alpha"
	docs[2].Content = "gamma"
	corpus := NewCorpus(docs)
	stems := []string{"alpha", "beta", "alpha"}
	idf := corpus.IDF("alpha") + corpus.IDF("beta")
	cfg := DefaultConfig()
	cfg.GapRatio, cfg.RelevanceFloor = 0, 0
	cands := []Candidate{{Doc: docs[0], EngineScore: 3}, {Doc: docs[1], EngineScore: 1}}
	got := byPath(cfg.Rank(now, corpus, stems, cands, signals(tree.Validated), noSummaries))
	if !near(got["a.md"].Strength, 3/idf) || !near(got["b.md"].Strength, 1/idf) {
		t.Fatalf("strength a %g b %g, want %g and %g", got["a.md"].Strength, got["b.md"].Strength, 3/idf, 1/idf)
	}
	got = byPath(cfg.Rank(now, nil, stems, cands, signals(tree.Validated), noSummaries))
	if got["a.md"].Strength != 0 {
		t.Fatalf("strength without a corpus %g, want 0", got["a.md"].Strength)
	}
}

func TestCoverageScalesRelevance(t *testing.T) {
	docs := []*tree.Document{
		{Path: "jwt.md", Title: "Token rotation", Content: "Rotate refresh tokens.", Updated: now},
		{Path: "other.md", Title: "Sessions", Content: "Sessions expire.", Updated: now},
	}
	corpus := NewCorpus(docs)
	tests := []struct {
		name  string
		stems []string
		want  float64
	}{
		{"a document holding every query stem keeps its calibrated R", QueryStems([]string{"token", "rotation"}), 1},
		{"a name the KB never mentions pulls R down by its idf share", QueryStems([]string{"token", "rotation", "vaultwarden"}),
			corpus.Coverage("jwt.md", QueryStems([]string{"token", "rotation", "vaultwarden"}))},
		{"no stems mean no evidence", nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := DefaultConfig().Rank(now, corpus, tc.stems, []Candidate{{Doc: docs[0], EngineScore: 5}},
				signals(tree.Validated), noSummaries)
			// A single result: R = coverage^γ.
			if !near(rs[0].Coverage, tc.want) || !near(rs[0].Relevance, math.Pow(tc.want, DefaultConfig().CoverageExponent)) {
				t.Fatalf("coverage %g relevance %g, want coverage %g and R its power γ", rs[0].Coverage, rs[0].Relevance, tc.want)
			}
		})
	}
	if cov := corpus.Coverage("jwt.md", QueryStems([]string{"token", "rotation", "vaultwarden"})); cov > 0.6 {
		t.Errorf("coverage with an unknown name %g, want it well below the 2/3 of a plain word count", cov)
	}
}

func TestCoverageWeighsTheScaleOfRelevance(t *testing.T) {
	// A short folder summary matching two common words of the question can out-score,
	// in raw BM25, the one document holding every word. The summary must not set the
	// scale the real answer is measured against.
	docs := []*tree.Document{
		{Path: "auth/keyring/_index.md", Title: "Keyring approval", Content: "Keyring approval overview.", Summary: true, Updated: now},
		{Path: "auth/keyring/vremenux.md", Title: "Thresholds", Content: "Keyring approval with vremenux.", Updated: now},
	}
	corpus := NewCorpus(docs)
	stems := QueryStems([]string{"vremenux", "keyring", "approval"})
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	rs := byPath(cfg.Rank(now, corpus, stems, []Candidate{
		{Doc: docs[0], EngineScore: 2.5},
		{Doc: docs[1], EngineScore: 1.7},
	}, signals(tree.Validated), noSummaries))
	answer, summary := rs["auth/keyring/vremenux.md"], rs["auth/keyring/_index.md"]
	if answer.Relevance < 0.9 {
		t.Errorf("the document covering every word has R %.3f, want >= 0.9 (summary R %.3f)", answer.Relevance, summary.Relevance)
	}
	if summary.Relevance >= answer.Relevance {
		t.Errorf("summary R %.3f >= answer R %.3f", summary.Relevance, answer.Relevance)
	}
}

func TestOrder(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	tests := []struct {
		name  string
		cands []Candidate
		sig   func(*tree.Document) Signal
		want  []string
	}{
		{"higher score first", []Candidate{{Doc: doc("b.md"), EngineScore: 1}, {Doc: doc("a.md"), EngineScore: 5}},
			signals(tree.Validated), []string{"a.md", "b.md"}},
		{"maturity can reorder equal relevance", []Candidate{{Doc: doc("a.md"), EngineScore: 5}, {Doc: doc("b.md"), EngineScore: 5}},
			func(d *tree.Document) Signal {
				if d.Path == "b.md" {
					return Signal{Importance: 50, Maturity: tree.Core}
				}
				return Signal{Importance: 50, Maturity: tree.Validated}
			}, []string{"b.md", "a.md"}},
		{"equal scores fall back to path", []Candidate{{Doc: doc("b.md"), EngineScore: 5}, {Doc: doc("a.md"), EngineScore: 5}},
			signals(tree.Validated), []string{"a.md", "b.md"}},
		{"a duplicate path keeps its best engine score once",
			[]Candidate{{Doc: doc("a.md"), EngineScore: 1}, {Doc: doc("b.md"), EngineScore: 2}, {Doc: doc("a.md"), EngineScore: 3}},
			signals(tree.Validated), []string{"a.md", "b.md"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := cfg.Rank(now, nil, []string{"x"}, tc.cands, tc.sig, noSummaries)
			var got []string
			for _, r := range rs {
				got = append(got, r.Doc.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("order %v, want %v", got, tc.want)
			}
		})
	}
}

func TestTieBreak(t *testing.T) {
	rs := []Result{
		{Doc: doc("c.md"), Score: 0.5, Relevance: 0.9},
		{Doc: doc("b.md"), Score: 0.5, Relevance: 0.7},
		{Doc: doc("a.md"), Score: 0.5, Relevance: 0.7},
		{Doc: doc("d.md"), Score: 0.6, Relevance: 0.1},
	}
	sortResults(rs)
	var got []string
	for _, r := range rs {
		got = append(got, r.Doc.Path)
	}
	// Score first, then relevance, then path.
	if want := []string{"d.md", "c.md", "a.md", "b.md"}; !slices.Equal(got, want) {
		t.Fatalf("order %v, want %v", got, want)
	}
}

func TestFromEntity(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	rs := byPath(cfg.Rank(now, nil, []string{"x"}, []Candidate{
		{Doc: doc("main.md"), EngineScore: 2},
		{Doc: doc("both.md"), EngineScore: 2, FromEntity: true},
		{Doc: doc("both.md"), EngineScore: 1},
		{Doc: doc("entity.md"), EngineScore: 2, FromEntity: true},
	}, signals(tree.Validated), noSummaries))
	for path, want := range map[string]bool{"main.md": false, "both.md": false, "entity.md": true} {
		if rs[path].FromEntity != want {
			t.Errorf("%s FromEntity = %v, want %v", path, rs[path].FromEntity, want)
		}
	}
}

func TestPropagation(t *testing.T) {
	jwtIndex, authIndex, rootIndex := doc("auth/jwt/_index.md"), doc("auth/_index.md"), doc("_index.md")
	f := 0.55
	type want struct {
		score, relevance float64 // as multiples of the direct child's
		from             string
	}
	tests := []struct {
		name      string
		cands     []Candidate
		summaries []*tree.Document
		check     map[string]want // summary path → expected propagation
		absent    []string
	}{
		{"a match propagates one level to its folder's summary",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}},
			[]*tree.Document{jwtIndex},
			map[string]want{"auth/jwt/_index.md": {f, f, "auth/jwt/rotation.md"}}, nil},
		{"a match propagates two levels with factor squared",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}},
			[]*tree.Document{jwtIndex, authIndex},
			map[string]want{"auth/jwt/_index.md": {f, f, "auth/jwt/rotation.md"}, "auth/_index.md": {f * f, f * f, "auth/jwt/rotation.md"}}, nil},
		{"a folder without a summary is skipped but still counts as a level",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}},
			[]*tree.Document{authIndex},
			map[string]want{"auth/_index.md": {f * f, f * f, "auth/jwt/rotation.md"}}, []string{"auth/jwt/_index.md"}},
		{"the root summary is an ancestor too",
			[]Candidate{{Doc: doc("readme.md"), EngineScore: 5}},
			[]*tree.Document{rootIndex},
			map[string]want{"_index.md": {f, f, "readme.md"}}, nil},
		{"a summary's first ancestor is its parent folder, not itself",
			[]Candidate{{Doc: jwtIndex, EngineScore: 5}},
			[]*tree.Document{jwtIndex, authIndex},
			map[string]want{"auth/_index.md": {f, f, "auth/jwt/_index.md"}}, nil},
		{"no summaries, no propagation",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}},
			nil, nil, []string{"auth/jwt/_index.md", "auth/_index.md"}},
	}
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := cfg.Rank(now, nil, []string{"x"}, tc.cands, signals(tree.Validated), summaries(tc.summaries...))
			got := byPath(rs)
			child := got[tc.cands[0].Doc.Path]
			for path, w := range tc.check {
				r, ok := got[path]
				if !ok {
					t.Fatalf("no result for %s in %v", path, rs)
				}
				if !r.Propagated || r.PropagatedFrom != w.from ||
					!near(r.Score, child.Score*w.score) || !near(r.Relevance, child.Relevance*w.relevance) {
					t.Errorf("%s = %+v, want propagated from %s with score %g and R %g",
						path, r, w.from, child.Score*w.score, child.Relevance*w.relevance)
				}
			}
			for _, p := range tc.absent {
				if _, ok := got[p]; ok {
					t.Errorf("unexpected result %s", p)
				}
			}
		})
	}
}

func TestPropagationBestChildWins(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	idx := doc("auth/_index.md")
	cands := []Candidate{
		{Doc: doc("auth/weak.md"), EngineScore: 1},
		{Doc: doc("auth/strong.md"), EngineScore: 5},
		{Doc: doc("auth/jwt/deep.md"), EngineScore: 6}, // stronger, but two levels down
	}
	got := byPath(cfg.Rank(now, nil, []string{"x"}, cands, signals(tree.Validated), summaries(idx)))
	p := got["auth/_index.md"]
	// deep: 2 levels → ×0.3025 of the best score; strong: 1 level → ×0.55 of a slightly lower one.
	if p.PropagatedFrom != "auth/strong.md" || !near(p.Score, got["auth/strong.md"].Score*0.55) {
		t.Fatalf("summary %+v, want the best scaled child auth/strong.md", p)
	}
}

func TestPropagationDirectHitKeepsTheBetter(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GapRatio = 0
	idx := doc("auth/_index.md")
	tests := []struct {
		name           string
		idxScore       float64 // engine score of the summary as a direct hit
		wantPropagated bool
	}{
		{"a strong direct hit keeps its own score", 10, false},
		{"a weak direct hit takes the propagated score", 0.1, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cands := []Candidate{{Doc: doc("auth/child.md"), EngineScore: 5}, {Doc: idx, EngineScore: tc.idxScore}}
			rs := cfg.Rank(now, nil, []string{"x"}, cands, signals(tree.Validated), summaries(idx))
			n := 0
			for _, r := range rs {
				if r.Doc.Path == "auth/_index.md" {
					n++
					if r.Propagated != tc.wantPropagated {
						t.Errorf("summary %+v, want propagated %v", r, tc.wantPropagated)
					}
				}
			}
			if n != 1 {
				t.Fatalf("summary listed %d times, want once", n)
			}
		})
	}
}

func TestGapFilter(t *testing.T) {
	tests := []struct {
		name   string
		ratio  float64
		scores []float64
		want   []string
	}{
		{"results under 0.7 × top are dropped", 0.7, []float64{10, 9, 1}, []string{"a.md", "b.md"}},
		{"a single result survives", 0.7, []float64{3}, []string{"a.md"}},
		{"ratio 0 keeps everything above the relevance floor", 0, []float64{10, 9, 2}, []string{"a.md", "b.md", "c.md"}},
		{"the relevance floor drops a result under 0.1 × the best R", 0, []float64{10, 9, 0.5}, []string{"a.md", "b.md"}},
		{"ratio 1 keeps only ties with the top", 1, []float64{5, 5, 4}, []string{"a.md", "b.md"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.GapRatio = tc.ratio
			cfg.GapKeepShare = 0 // the score gap alone; rivals are TestGapFilter's last cases
			// Only relevance counts, so scores are proportional to engine scores.
			cfg.ImportanceWeight, cfg.RecencyWeight = 0, 0
			var cands []Candidate
			for i, s := range tc.scores {
				cands = append(cands, Candidate{Doc: doc(string(rune('a'+i)) + ".md"), EngineScore: s})
			}
			rs := cfg.Rank(now, nil, []string{"x"}, cands, signals(tree.Validated), noSummaries)
			var got []string
			for _, r := range rs {
				got = append(got, r.Doc.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("kept %v, want %v", got, tc.want)
			}
		})
	}
	t.Run("GapKeepShare keeps a rival relevance that importance pushed under the gap", func(t *testing.T) {
		cfg := DefaultConfig()
		// a.md is popular and slightly more relevant; b.md's score falls under 0.7 × a's.
		pop := func(d *tree.Document) Signal {
			if d.Path == "a.md" {
				return Signal{Importance: 100, Maturity: tree.Core}
			}
			return Signal{Importance: 0, Maturity: tree.Draft}
		}
		cands := []Candidate{{Doc: doc("a.md"), EngineScore: 10}, {Doc: doc("b.md"), EngineScore: 9}, {Doc: doc("c.md"), EngineScore: 2}}
		for _, tc := range []struct {
			share float64
			want  []string
		}{{0, []string{"a.md"}}, {0.8, []string{"a.md", "b.md"}}} {
			cfg.GapKeepShare = tc.share
			cfg.RecencyWeight = 0
			var got []string
			for _, r := range cfg.Rank(now, nil, []string{"x"}, cands, pop, noSummaries) {
				got = append(got, r.Doc.Path)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("GapKeepShare %g kept %v, want %v", tc.share, got, tc.want)
			}
		}
	})
	t.Run("a propagated summary far below the top is dropped", func(t *testing.T) {
		idx := doc("a/b/_index.md")
		top := doc("a/b/c/top.md")
		rs := DefaultConfig().Rank(now, nil, []string{"x"}, []Candidate{{Doc: top, EngineScore: 1}},
			signals(tree.Validated), summaries(idx))
		if len(rs) != 1 || rs[0].Doc != top {
			t.Fatalf("results %+v, want only the direct hit (0.55² < 0.7)", rs)
		}
	})
}

func TestRankEmpty(t *testing.T) {
	if rs := DefaultConfig().Rank(now, nil, []string{"x"}, nil, signals(tree.Draft), noSummaries); rs != nil {
		t.Fatalf("Rank of no candidates = %v, want nil", rs)
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
	tests := []struct{ flag, value string }{
		{"rank-gap-ratio", "1.5"},
		{"rank-propagation-factor", "-0.1"},
		{"rank-recency-days", "0"},
		{"rank-boost-draft", "0"},
		{"rank-crowding", "-1"},
		{"rank-crowd-size", "0"},
		{"rank-gap-keep-share", "1.2"},
		{"rank-relevance-weight", "-0.6"},
	}
	for _, tc := range tests {
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

func TestRankCarriesTheEnginesPassage(t *testing.T) {
	jwtIndex := doc("auth/jwt/_index.md")
	tests := []struct {
		name  string
		cands []Candidate
		want  map[string]string // path → passage of its result
	}{
		// The summary's result is the child's match scaled, not a match of its own text.
		{"a result keeps its candidate's passage, a propagated summary has none",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5, Passage: "rotat key"}},
			map[string]string{"auth/jwt/rotation.md": "rotat key", "auth/jwt/_index.md": ""}},
		{"a duplicate path keeps the first passage an engine picked",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}, {Doc: doc("auth/jwt/rotation.md"), EngineScore: 1, Passage: "rotat"},
				{Doc: doc("auth/jwt/rotation.md"), EngineScore: 2, Passage: "key"}},
			map[string]string{"auth/jwt/rotation.md": "rotat", "auth/jwt/_index.md": ""}},
		{"no passage stays none",
			[]Candidate{{Doc: doc("auth/jwt/rotation.md"), EngineScore: 5}},
			map[string]string{"auth/jwt/rotation.md": ""}},
	}
	cfg := DefaultConfig()
	cfg.GapRatio = 0 // keep the propagated summary
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs := byPath(cfg.Rank(now, nil, []string{"x"}, tc.cands, signals(tree.Validated), summaries(jwtIndex)))
			for path, want := range tc.want {
				r, ok := rs[path]
				if !ok {
					t.Fatalf("no result for %s in %v", path, rs)
				}
				if r.Passage != want {
					t.Errorf("%s: passage %q, want %q", path, r.Passage, want)
				}
			}
		})
	}
}

// An engine score that is not a number (a backend's bug, a division by zero in its
// normalisation) counts as no evidence: NaN passed max(·, 0), every comparison with it
// was false, and the sort and the relevance calibration of every other result broke.
func TestRankIgnoresScoresThatAreNotNumbers(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		rs := DefaultConfig().Rank(now, nil, []string{"x"}, []Candidate{
			{Doc: doc("bad.md"), EngineScore: bad},
			{Doc: doc("good.md"), EngineScore: 2},
			{Doc: doc("fair.md"), EngineScore: 1},
		}, signals(tree.Draft), noSummaries)
		if len(rs) == 0 || rs[0].Doc.Path != "good.md" {
			t.Errorf("score %v: ranked %v, want good.md first", bad, paths(rs))
		}
		for _, r := range rs {
			if math.IsNaN(r.Score) || math.IsInf(r.Score, 0) || math.IsNaN(r.Relevance) || math.IsInf(r.Relevance, 0) {
				t.Errorf("score %v: %s has score %v, relevance %v", bad, r.Doc.Path, r.Score, r.Relevance)
			}
		}
	}
}

func paths(rs []Result) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.Doc.Path)
	}
	return out
}

// TestRankNonFiniteInputs: an engine score or a runtime importance that is NaN or
// infinite (a backend's or a signal source's bug) makes no score, relevance or strength
// non-finite, and costs no other result its place.
func TestRankNonFiniteInputs(t *testing.T) {
	a, b := doc("a/x.md"), doc("a/y.md")
	a.Content, b.Content = "alpha beta", "alpha"
	corpus := NewCorpus([]*tree.Document{a, b})
	for _, tc := range []struct {
		name   string
		scores [2]float64
		imp    float64
		want   int // results kept: a non-finite engine score is no evidence
	}{
		{"NaN engine score", [2]float64{math.NaN(), 1}, 50, 1},
		{"infinite engine score", [2]float64{math.Inf(1), 1}, 50, 1},
		// No finite positive score: the engine did not rank, every result ties.
		{"NaN engine score in a tie", [2]float64{math.NaN(), 0}, 50, 2},
		{"infinite engine score in a tie", [2]float64{math.Inf(1), 0}, 50, 2},
		{"NaN importance", [2]float64{2, 1.9}, math.NaN(), 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cands := []Candidate{{Doc: a, EngineScore: tc.scores[0]}, {Doc: b, EngineScore: tc.scores[1]}}
			rs := DefaultConfig().Rank(now, corpus, []string{"alpha"}, cands,
				func(*tree.Document) Signal { return Signal{Importance: tc.imp} }, noSummaries)
			if len(rs) != tc.want {
				t.Errorf("got %d results, want %d", len(rs), tc.want)
			}
			for _, r := range rs {
				for name, v := range map[string]float64{"Score": r.Score, "Relevance": r.Relevance, "Strength": r.Strength, "Importance": r.Importance} {
					if math.IsNaN(v) || math.IsInf(v, 0) {
						t.Errorf("%s: %s = %v", r.Doc.Path, name, v)
					}
				}
			}
		})
	}
}
