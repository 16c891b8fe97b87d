package kb

import (
	"bytes"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"

	"github.com/quarry-router/quarry/services/search/tree"
)

// charsPerToken converts the ghost cue's token budget to characters, as the manifest
// estimates tokens.
const charsPerToken = 4

// ghostCue returns a short extract of what an archived file held, within maxTokens: its
// opening sentences, then one sentence from each later section, then the names of the
// sections that did not fit. It is extractive: every sentence is the file's own, so a
// search for what the file covered still finds the cue, and nothing is made up.
func ghostCue(d *tree.Document, original string, maxTokens int) string {
	budget := maxTokens * charsPerToken
	var b strings.Builder
	fmt.Fprintf(&b, "Archived: a ghost cue of %q. The full text is kept at %s; restore it to search it again.\n\n", d.Title, original)
	budget -= b.Len()

	sections := splitSections(d.Content, d.Title)
	var picked []string
	var left []string
	used := 0
	take := func(s string) bool {
		if used+len(s)+1 > budget {
			return false
		}
		picked = append(picked, s)
		used += len(s) + 1
		return true
	}
	for i, sec := range sections {
		n := 1
		if i == 0 {
			n = 3 // the opening says most about what a file is for
		}
		took := 0
		for _, s := range sec.sentences {
			if took == n || !take(s) {
				break
			}
			took++
		}
		if took == 0 && sec.heading != "" {
			left = append(left, sec.heading)
		}
	}
	b.WriteString(strings.Join(picked, " "))
	if len(left) > 0 {
		line := "\n\nAlso covered: " + strings.Join(left, "; ") + "."
		if used+len(line) > budget {
			line = cutRunes(line, max(0, budget-used))
		}
		b.WriteString(line)
	}
	return strings.TrimSpace(b.String()) + "\n"
}

type section struct {
	heading   string
	sentences []string
}

// splitSections splits markdown into sections at headings and each section's prose into
// sentences, skipping code blocks, tables and the title heading.
func splitSections(content, title string) []section {
	var out []section
	cur := section{}
	var para []string
	flushPara := func() {
		if len(para) > 0 {
			cur.sentences = append(cur.sentences, sentences(strings.Join(para, " "))...)
			para = nil
		}
	}
	for _, trimmed := range tree.BodyLines(content) {
		switch {
		case strings.HasPrefix(trimmed, "#"):
			flushPara()
			h := strings.TrimSpace(strings.TrimLeft(trimmed, "#"))
			if h == title && len(out) == 0 && len(cur.sentences) == 0 {
				continue
			}
			if cur.heading != "" || len(cur.sentences) > 0 {
				out = append(out, cur)
			}
			cur = section{heading: h}
		case trimmed == "" || strings.HasPrefix(trimmed, "|") || strings.HasPrefix(trimmed, "<"):
			flushPara()
		default:
			para = append(para, strings.TrimLeft(trimmed, "-*+> 0123456789."))
		}
	}
	flushPara()
	if cur.heading != "" || len(cur.sentences) > 0 {
		out = append(out, cur)
	}
	return out
}

// sentences splits prose at ". ", "? " and "! " followed by a capital or a digit.
func sentences(p string) []string {
	p = strings.Join(strings.Fields(p), " ")
	var out []string
	start := 0
	rs := []rune(p)
	for i := 0; i < len(rs); i++ {
		if rs[i] != '.' && rs[i] != '?' && rs[i] != '!' {
			continue
		}
		if i+2 < len(rs) && rs[i+1] == ' ' && (unicode.IsUpper(rs[i+2]) || unicode.IsDigit(rs[i+2])) {
			out = append(out, strings.TrimSpace(string(rs[start:i+1])))
			start = i + 2
		}
	}
	if rest := strings.TrimSpace(string(rs[start:])); rest != "" {
		out = append(out, rest)
	}
	return out
}

func cutRunes(s string, n int) string {
	rs := []rune(s)
	if len(rs) <= n {
		return s
	}
	return string(rs[:n])
}

// stubFront is the front matter of a ghost cue: the file's title and tags (so the cue is
// found and listed like the file), its importance when it was archived (so the cue does
// not start over at the default), and where it came from and where its full text is.
type stubFront struct {
	Title        string   `yaml:"title"`
	Tags         []string `yaml:"tags,omitempty,flow"` // flow: a block list doubles a long tag line, past the front-matter limit the file itself met
	Importance   float64  `yaml:"importance"`
	ArchivedFrom string   `yaml:"archived_from"`
	ArchivedAt   string   `yaml:"archived_at"`
	Original     string   `yaml:"original"`
}

// stubFile returns the bytes of a ghost cue file.
func stubFile(d *tree.Document, original string, importance float64, cue string, now time.Time) ([]byte, error) {
	fm, err := yaml.Marshal(stubFront{
		Title:        d.Title,
		Tags:         d.Tags,
		Importance:   math.Round(math.Max(0, math.Min(100, importance))*10) / 10,
		ArchivedFrom: d.Path,
		ArchivedAt:   now.UTC().Format(time.RFC3339),
		Original:     original,
	})
	if err != nil {
		return nil, fmt.Errorf("ghost cue front matter: %w", err)
	}
	var b bytes.Buffer
	b.WriteString("---\n")
	b.Write(fm)
	b.WriteString("---\n")
	b.WriteString(cue)
	return b.Bytes(), nil
}
