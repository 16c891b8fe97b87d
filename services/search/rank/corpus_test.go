package rank

import (
	"math"
	"testing"

	"github.com/quarry-router/quarry/services/search/tree"
)

func corpusDocs() []*tree.Document {
	return []*tree.Document{
		{Path: "auth/jwt/rotation.md", Title: "Refresh token rotation", Content: "Rotate the refresh token on every use."},
		{Path: "auth/sessions.md", Title: "Sessions", Content: "Sessions expire; the refresh endpoint extends them."},
		{Path: "ops/deploy/kubernetes.md", Title: "Kubernetes deployment", Content: "Pods roll out one at a time."},
		{Path: "ops/_archived/pager_duty.stub.md", Title: "Escalation", Content: "The old escalation policy."},
	}
}

func TestCorpusStatistics(t *testing.T) {
	c := NewCorpus(corpusDocs())
	idf := func(n, df float64) float64 { return math.Log(1 + (n-df+0.5)/(df+0.5)) }
	tests := []struct {
		name    string
		stem    string
		wantDF  int
		wantIDF float64
	}{
		{"a stem in two documents", "refresh", 2, idf(4, 2)},
		{"a stem in one document", "kubernet", 1, idf(4, 1)},
		{"a stem only in a path counts", "jwt", 1, idf(4, 1)},
		{"an absent stem gets the idf of df=0", "zanzibar", 0, idf(4, 0)},
		{"stop words are not indexed", "the", 0, idf(4, 0)},
		{"the _archived folder is not a term", "archiv", 0, idf(4, 0)},
		{"the file extension is not a term", "md", 0, idf(4, 0)},
	}
	if c.N() != 4 {
		t.Fatalf("N = %d, want 4", c.N())
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.DF(tc.stem); got != tc.wantDF {
				t.Errorf("DF(%q) = %d, want %d", tc.stem, got, tc.wantDF)
			}
			if got := c.IDF(tc.stem); math.Abs(got-tc.wantIDF) > 1e-12 {
				t.Errorf("IDF(%q) = %g, want %g", tc.stem, got, tc.wantIDF)
			}
		})
	}
}

func TestCorpusContains(t *testing.T) {
	c := NewCorpus(corpusDocs())
	tests := []struct {
		name, path, stem string
		want             bool
	}{
		{"a title word, stemmed", "auth/jwt/rotation.md", "rotat", true},
		{"a content word, stemmed", "auth/jwt/rotation.md", "use", true},
		{"a path folder", "auth/jwt/rotation.md", "auth", true},
		{"a path file-name word split on _", "ops/_archived/pager_duty.stub.md", "duti", true},
		{"another document's word", "auth/sessions.md", "rotat", false},
		{"a prefix of a word is not the word", "ops/deploy/kubernetes.md", "kube", false},
		{"an unknown path", "nowhere.md", "refresh", false},
		{"an unknown stem", "auth/sessions.md", "zanzibar", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Contains(tc.path, tc.stem); got != tc.want {
				t.Errorf("Contains(%q, %q) = %v, want %v", tc.path, tc.stem, got, tc.want)
			}
		})
	}
}

func TestCorpusCoverage(t *testing.T) {
	c := NewCorpus(corpusDocs())
	path := "auth/jwt/rotation.md"
	tests := []struct {
		name  string
		stems []string
		want  float64
	}{
		{"no stems cover nothing", nil, 0},
		{"every stem present covers all", []string{"refresh", "rotat"}, 1},
		{"no stem present covers nothing", []string{"kubernet", "pod"}, 0},
		{"shares are weighted by idf", []string{"refresh", "kubernet"},
			c.IDF("refresh") / (c.IDF("refresh") + c.IDF("kubernet"))},
		{"a name absent from the KB weighs the most", []string{"refresh", "rotat", "zanzibar"},
			(c.IDF("refresh") + c.IDF("rotat")) / (c.IDF("refresh") + c.IDF("rotat") + c.IDF("zanzibar"))},
		{"duplicate stems count once", []string{"refresh", "kubernet", "kubernet"},
			c.IDF("refresh") / (c.IDF("refresh") + c.IDF("kubernet"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := c.Coverage(path, tc.stems); math.Abs(got-tc.want) > 1e-12 {
				t.Errorf("Coverage = %g, want %g", got, tc.want)
			}
		})
	}
	// The absent name must pull coverage below the share of words present (2 of 3).
	if got := c.Coverage(path, []string{"refresh", "rotat", "zanzibar"}); got >= 2.0/3 {
		t.Errorf("coverage with an absent name = %g, want < 2/3", got)
	}
}

func TestCorpusDuplicatePathCountsOnce(t *testing.T) {
	docs := corpusDocs()
	docs = append(docs, &tree.Document{Path: "auth/sessions.md", Title: "Cookies"})
	c := NewCorpus(docs)
	if c.N() != 4 {
		t.Fatalf("N = %d, want 4", c.N())
	}
	if got := c.DF("expir"); got != 0 {
		t.Errorf("DF(expir) = %d after the path was replaced, want 0", got)
	}
	if !c.Contains("auth/sessions.md", "cooki") {
		t.Errorf("the later document does not win")
	}
}

func TestQueryStems(t *testing.T) {
	got := QueryStems([]string{"how", "do", "i", "rotate", "rotating", "tokens"})
	want := []string{"rotat", "token"}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("QueryStems = %v, want %v", got, want)
	}
}
