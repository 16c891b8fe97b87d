package answer

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
)

// filler returns n words of text that match no query term.
func filler(n int) string {
	w := make([]string, n)
	for i := range w {
		w[i] = "lorem"
	}
	return strings.Join(w, " ")
}

func TestExcerpt(t *testing.T) {
	// Three regions of 600-1200 characters; the query terms cluster in the middle one.
	early := "Tokens are issued at login. " + filler(200)
	middle := "Rotate the refresh token: rotation revokes the old refresh token. " + filler(90)
	late := filler(100) + " One more token here."
	doc := early + " " + middle + " " + late
	tests := []struct {
		name     string
		content  string
		terms    []string
		size     int
		contains string // must be in the excerpt
		absent   string // must not be in the excerpt
	}{
		{"the chunk with the most stemmed hits wins", doc, []string{"refresh", "rotating", "tokens"}, 800,
			"Rotate the refresh token", "Tokens are issued"},
		{"with no hits the first chunk is returned", doc, []string{"kubernetes"}, 800,
			"Tokens are issued", "One more token"},
		{"without terms the first chunk is returned", doc, nil, 800, "Tokens are issued", ""},
		{"a short content is returned whole", "  Short note about tokens.  ", []string{"token"}, 800,
			"Short note about tokens.", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Excerpt(tc.content, tc.terms, tc.size)
			if !strings.Contains(got, tc.contains) {
				t.Errorf("excerpt lacks %q:\n%s", tc.contains, got)
			}
			if tc.absent != "" && strings.Contains(got, tc.absent) {
				t.Errorf("excerpt contains %q:\n%s", tc.absent, got)
			}
			if n := utf8.RuneCountInString(got); n > tc.size {
				t.Errorf("excerpt of %d characters, want <= %d", n, tc.size)
			}
			if !strings.Contains(tc.content, got) {
				t.Errorf("excerpt is not a passage of the content")
			}
		})
	}
	t.Run("ties go to the earliest chunk", func(t *testing.T) {
		content := "token " + filler(300) + " token " + filler(300)
		got := Excerpt(content, []string{"token"}, 400)
		if !strings.HasPrefix(got, "token lorem") {
			t.Fatalf("excerpt %q..., want the first chunk", got[:20])
		}
	})
}

func TestChunks(t *testing.T) {
	tests := []struct {
		name    string
		s       string
		size    int
		overlap int
	}{
		{"words", filler(1000), 800, 200},
		{"multi-byte runes", strings.Repeat("ünïcödé wörds ", 300), 800, 200},
		{"no white space at all", strings.Repeat("x", 3000), 800, 200},
		{"no overlap", filler(500), 300, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cs := chunks(tc.s, tc.size, tc.overlap)
			if len(cs) < 2 {
				t.Fatalf("%d chunks, want several", len(cs))
			}
			if cs[0].start != 0 || cs[len(cs)-1].end != len(tc.s) {
				t.Fatalf("chunks %v do not cover the text (len %d)", cs, len(tc.s))
			}
			for i, c := range cs {
				piece := tc.s[c.start:c.end]
				if !utf8.ValidString(piece) {
					t.Fatalf("chunk %d cuts a rune", i)
				}
				if n := utf8.RuneCountInString(piece); n > tc.size || (i < len(cs)-1 && n < tc.size/2) {
					t.Errorf("chunk %d has %d characters, want %d..%d", i, n, tc.size/2, tc.size)
				}
				if i == 0 {
					continue
				}
				prev := cs[i-1]
				if c.start <= prev.start || (c.start > prev.end && strings.TrimSpace(tc.s[prev.end:c.start]) != "") {
					t.Fatalf("chunk %d %v does not follow %v without a hole", i, c, prev)
				}
				shared := utf8.RuneCountInString(tc.s[min(c.start, prev.end):prev.end])
				if tc.overlap > 0 && strings.Contains(tc.s, " ") && (shared < tc.overlap/2 || shared > tc.overlap) {
					t.Errorf("chunks %d and %d share %d characters, want about %d", i-1, i, shared, tc.overlap)
				}
				if strings.Contains(tc.s, " ") && tc.s[c.start] == ' ' {
					t.Errorf("chunk %d opens on white space", i)
				}
			}
		})
	}
}

func TestConfigExcerptUsesOverlap(t *testing.T) {
	content := filler(400)
	c := Config{ExcerptChars: 100, ExcerptOverlap: 0}
	if got := c.Excerpt(content, nil); utf8.RuneCountInString(got) > 100 || !strings.HasPrefix(content, got) {
		t.Fatalf("Config.Excerpt = %q", got)
	}
}

func TestExcerptAroundFindsTheEnginesPassage(t *testing.T) {
	// The terms occur early too, so only the passage says which chunk the engine chose.
	early := "Rotate the refresh token at login. " + filler(200)
	middle := "The signing key rotates every ninety days; publish it first. " + filler(120)
	doc := early + " " + middle + " " + filler(100)
	tests := []struct {
		name     string
		content  string
		passage  string
		found    bool
		contains string // must be in the excerpt
		absent   string // must not be in the excerpt
	}{
		{"the chunk holding the passage", doc, "sign key rotat everi nineti day", true,
			"The signing key rotates every ninety days", "Rotate the refresh token"},
		{"a passage of one word", doc, "nineti", true, "ninety days", "at login"},
		{"a passage the file no longer holds", doc, "sign key rotat everi thirti day", false, "", ""},
		{"an empty passage", doc, "", false, "", ""},
		{"a short content is returned whole", "Rotate the key. Then publish it.", "publish", true,
			"Rotate the key. Then publish it.", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := excerptAround(tc.content, tc.passage, 800, 200)
			if ok != tc.found {
				t.Fatalf("found = %v, want %v (excerpt %q)", ok, tc.found, got)
			}
			if !strings.Contains(got, tc.contains) {
				t.Errorf("excerpt %q lacks %q", got, tc.contains)
			}
			if tc.absent != "" && strings.Contains(got, tc.absent) {
				t.Errorf("excerpt %q holds %q", got, tc.absent)
			}
			if n := utf8.RuneCountInString(got); n > 800 {
				t.Errorf("excerpt of %d characters, want at most 800", n)
			}
		})
	}
}

// Excerpt stems only the words that start like a query stem; that is exact only if a
// word's stem starts as the word does. Checked on every word of the example knowledge
// base and on the words the stemmer treats specially.
func TestStemKeepsTheWordsStart(t *testing.T) {
	special := []string{"a", "ab", "ies", "ied", "dying", "lying", "tying", "skies", "skis", "idly", "gently",
		"ugly", "early", "only", "singly", "news", "yelling", "yoyo", "sky", "generously", "communism",
		"arsenal", "ééé", "ærøskøbing", "übermäßig", "2024", "v2"}
	seen := map[string]bool{}
	check := func(w string) {
		if seen[w] {
			return
		}
		seen[w] = true
		if st := text.Stem(w); stemStart(st) != stemStart(w) {
			t.Errorf("Stem(%q) = %q, which does not start with %q", w, st, stemStart(w))
		}
	}
	for _, w := range special {
		check(w)
	}
	err := filepath.WalkDir("../../../examples/kb", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".md") {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, w := range words(string(b)) {
			check(w.word)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 1000 {
		t.Fatalf("checked %d words, want the example knowledge base's thousands", len(seen))
	}
}

// words splits like text.Words, which the engines' analysis and the query side use.
func TestWordsSplitLikeTextWords(t *testing.T) {
	for _, s := range []string{
		"Rotate the Refresh-Token; it's the dogs' job — ÉCOLE, naïve, ﬁle, İstanbul, 2024 v2",
		"  leading and trailing  ", "", "'quoted' ’curly’ don’t",
		"cafe\u0301 ｑｕｏｔａ observ\u00adability side\u200dcar a\u200bb",
	} {
		var got []string
		for _, w := range words(s) {
			got = append(got, w.word)
			if text.FoldWord(s[w.start:w.end]) != w.word {
				t.Errorf("%q: word %q is not s[%d:%d] = %q", s, w.word, w.start, w.end, s[w.start:w.end])
			}
		}
		if want := text.Words(s); !slices.Equal(got, want) {
			t.Errorf("words(%q) = %q, text.Words gives %q", s, got, want)
		}
	}
}
