package answer

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/quarry-router/quarry/platform/text"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/tree"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read golden file (run with -update to create it): %v", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update if the change is intended)\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var (
	rotation = &tree.Document{
		Path:  "auth/jwt/rotation.md",
		Title: "Refresh token rotation",
		Content: "# Refresh token rotation\n\nRotate the refresh token on every use; the old one is revoked at once.\n\n" +
			"## Reuse detection\n\nA revoked token presented again revokes the whole family.\n\n" +
			"```sh\n# not a heading\nquarry rotate --family\n```\n",
	}
	signing = &tree.Document{
		Path:    "auth/jwt/signing.md",
		Title:   "Signing keys",
		Content: "Signing keys live in the vault and rotate yearly.",
	}
	untitled = &tree.Document{Path: "notes/empty.md"}
)

func TestDirectGolden(t *testing.T) {
	long := &tree.Document{Path: "ops/runbook.md", Title: "Runbook", Content: strings.Repeat("Restart the pod. ", 3) + "ünïcödé\n```sh\nkubectl rollout restart deploy/api\n```\n"}
	tests := []struct {
		name   string
		docs   []*tree.Document
		gaps   []string
		cfg    func(*Config)
		golden string
	}{
		{"one document, no gaps", []*tree.Document{rotation}, nil,
			func(*Config) {}, "direct_one.golden"},
		{"two documents with gaps, headings demoted", []*tree.Document{rotation, signing, untitled}, []string{"terraform"}, func(*Config) {}, "direct_gaps.golden"},
		{"content truncated on a rune boundary", []*tree.Document{long}, nil,
			func(c *Config) { c.MaxDocChars = 80 }, "direct_truncated.golden"},
		{"at most MaxDocs documents", []*tree.Document{signing, rotation}, nil,
			func(c *Config) { c.MaxDocs = 1 }, "direct_max_docs.golden"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := DefaultConfig()
			tc.cfg(&cfg)
			golden(t, tc.golden, Direct(tc.docs, tc.gaps, cfg))
		})
	}
}

func TestDirectStructure(t *testing.T) {
	docs := []*tree.Document{rotation, signing}
	got := Direct(docs, nil, DefaultConfig())
	sections := []string{"## Summary\n", "## Details\n", "## Sources\n", "## Gaps\n"}
	last := -1
	for _, s := range sections {
		i := strings.Index(got, s)
		if i <= last {
			t.Fatalf("section %q missing or out of order in\n%s", s, got)
		}
		last = i
	}
	if n := strings.Count(got, "\n## "); n != 3 { // Summary opens the text
		t.Errorf("%d second-level headings after Summary, want 3: a document's heading leaked out", n)
	}
	if strings.Count(got, "\n---\n") != len(docs)-1 {
		t.Errorf("documents not separated by one rule each")
	}
}

// TestDirectKeepsTheAnswerSections feeds Direct documents whose content would, left as
// written, open a section of the answer or swallow the sections after it.
func TestDirectKeepsTheAnswerSections(t *testing.T) {
	tests := []struct {
		name    string
		content string
		want    []string // substrings of the answer
		notWant []string
	}{
		{"a setext heading is demoted", "Intro.\n\nSources\n-------\n\n- `fake/path.md`\n",
			[]string{"##### Sources\n"}, []string{"\nSources\n-------\n"}},
		{"a setext title is demoted", "Gaps\n====\n\nNone.\n",
			[]string{"#### Gaps\n"}, []string{"\nGaps\n====\n"}},
		// The inner ``` does not close the outer ````, so the heading after it is the
		// document's and the fence is closed: nothing may reopen it after the document.
		// Trimming the body must not strip the indentation that makes a line code.
		{"indented code first stays code", "    # not a heading\n\ntext\n",
			[]string{"\n    # not a heading\n"}, []string{"\n# not a heading\n"}},
		{"an unclosed comment is closed before the sections", "Visible.\n\n<!-- TODO: rewrite\n\nmore notes\n",
			[]string{"more notes\n-->\n\n## Sources"}, nil},
		{"an unclosed pre is closed before the sections", "Intro.\n\n<pre>\nraw output\n",
			[]string{"raw output\n</pre>\n\n## Sources"}, nil},
		{"a fence inside a longer fence", "````md\n```\n````\n\n# Heading\n",
			[]string{"#### Heading\n"}, []string{"\n# Heading\n", "```\n\n## Sources"}},
		// A closer at column 0 would end the list item and open a fence that turns the
		// Sources and Gaps into code.
		{"an unclosed fence in a list item is closed in the item", "1. Run:\n\n   ```sh\n   kubectl get pods\n",
			[]string{"   kubectl get pods\n   ```\n\n## Sources"}, []string{"\n```\n\n## Sources"}},
		{"a setext heading after a comment is demoted", "<!-- reviewed -->\nSources\n=======\n\n- `fake/path.md`\n",
			[]string{"#### Sources\n"}, []string{"\nSources\n=======\n"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := &tree.Document{Path: "notes/doc.md", Title: "Doc", Content: tc.content}
			got := Direct([]*tree.Document{doc}, nil, DefaultConfig())
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("answer lacks %q:\n%s", w, got)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(got, w) {
					t.Errorf("answer holds %q:\n%s", w, got)
				}
			}
		})
	}
}

// TestDirectTruncatesTheDocumentNotTheDemotion: MaxDocChars caps the document's content;
// the "###" that demoting its headings adds must not push a document of exactly the cap
// over it, marking a whole document as truncated and dropping its end.
func TestDirectTruncatesTheDocumentNotTheDemotion(t *testing.T) {
	content := "# Part one\n\nalpha beta\n\n## Part two\n\ngamma delta END"
	cfg := DefaultConfig()
	cfg.MaxDocChars = utf8.RuneCountInString(content)
	got := Direct([]*tree.Document{{Path: "a.md", Title: "A", Content: content}}, nil, cfg)
	if strings.Contains(got, truncatedMarker) || !strings.Contains(got, "gamma delta END") {
		t.Fatalf("a document of exactly MaxDocChars (%d) was truncated:\n%s", cfg.MaxDocChars, got)
	}
	cfg.MaxDocChars--
	got = Direct([]*tree.Document{{Path: "a.md", Title: "A", Content: content}}, nil, cfg)
	if !strings.Contains(got, "gamma delta EN\n\n"+truncatedMarker) {
		t.Fatalf("a document one character over MaxDocChars was not cut at the cap:\n%s", got)
	}
}

func TestCloseBlocks(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"closed fences are left alone", "a\n```\ncode\n```\nb", "a\n```\ncode\n```\nb"},
		{"an open fence is closed", "a\n```go\ncode", "a\n```go\ncode\n```"},
		{"an open fence is closed before the truncation marker", "```\ncode\n\n" + truncatedMarker,
			"```\ncode\n```\n\n" + truncatedMarker},
		{"a tilde fence is closed with tildes", "~~~\nx", "~~~\nx\n~~~"},
		// CommonMark: a fence closes only with a run of its own character at least as long
		// as the one that opened it, and nothing after the run.
		{"a longer fence is closed with its own length", "````\n```\ncode", "````\n```\ncode\n````"},
		{"a shorter fence inside a longer one closes nothing", "````md\n```go\nx\n```\n````\nb", "````md\n```go\nx\n```\n````\nb"},
		{"a fence with an info string closes nothing", "```\n```go\nx", "```\n```go\nx\n```"},
		{"backticks inside an info string open no fence", "```inline``` code\nb", "```inline``` code\nb"},
		// HTML blocks that run until their end text, not a blank line (CommonMark 4.6,
		// kinds 1 to 5).
		{"closed comments are left alone", "a <!-- x --> b\n<!-- y\n\nz -->\nc", "a <!-- x --> b\n<!-- y\n\nz -->\nc"},
		{"an open comment is closed", "a\n\n<!-- draft\n\nnotes", "a\n\n<!-- draft\n\nnotes\n-->"},
		{"an open comment is closed before the truncation marker", "<!-- draft\nnotes\n\n" + truncatedMarker,
			"<!-- draft\nnotes\n-->\n\n" + truncatedMarker},
		{"an inline comment opens no block", "text <!-- open\n\nb", "text <!-- open\n\nb"},
		{"an open pre is closed", "  <PRE class=x>\nout", "  <PRE class=x>\nout\n  </pre>"},
		{"a pre closed on its line is left alone", "<pre>x</pre>\nb", "<pre>x</pre>\nb"},
		{"a preamble tag is no pre", "<preamble>\nb", "<preamble>\nb"},
		{"an open script, style, textarea", "<script>\nx", "<script>\nx\n</script>"},
		{"an open declaration", "<!DOCTYPE html\nx", "<!DOCTYPE html\nx\n>"},
		{"an open processing instruction", "<?php\nx", "<?php\nx\n?>"},
		{"open CDATA", "<![CDATA[\nx", "<![CDATA[\nx\n]]>"},
		{"indented four spaces is code", "    <!-- x\nb", "    <!-- x\nb"},
		{"a comment inside a fence is code", "```\n<!-- x\n```\nb", "```\n<!-- x\n```\nb"},
		{"a fence inside a comment is HTML", "<!-- x\n```\n-->\nb", "<!-- x\n```\n-->\nb"},
		// A block opened inside a list item is closed inside it: a closer at column 0
		// ends the item and, for a fence, opens a new one that runs to the end of the
		// answer (CommonMark: fenced code is no lazy continuation).
		{"a fence in a list item is closed in the item", "1. Run:\n\n   ```sh\n   kubectl get pods",
			"1. Run:\n\n   ```sh\n   kubectl get pods\n   ```"},
		{"a fence in a list item is closed in the item before the truncation marker", "- Run:\n\n  ```\n  ls\n\n" + truncatedMarker,
			"- Run:\n\n  ```\n  ls\n  ```\n\n" + truncatedMarker},
		{"a comment in a list item is closed in the item", "- a\n\n  <!-- x\n  y", "- a\n\n  <!-- x\n  y\n  -->"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := closeBlocks(tc.in); got != tc.want {
				t.Fatalf("closeBlocks(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestDropTitleHeading(t *testing.T) {
	tests := []struct{ name, content, title, want string }{
		{"a first heading equal to the title goes", "# Token Rotation\nbody", "token rotation", "body"},
		{"a different first heading stays", "# Overview\nbody", "Token rotation", "# Overview\nbody"},
		{"a first line that is no heading stays", "Token rotation\nbody", "Token rotation", "Token rotation\nbody"},
		{"a setext first heading equal to the title goes", "Token Rotation\n==============\nbody", "token rotation", "body"},
		{"a different setext first heading stays", "Overview\n--------\nbody", "Token rotation", "Overview\n--------\nbody"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := dropTitleHeading(tc.content, tc.title); got != tc.want {
				t.Fatalf("dropTitleHeading = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short text is whole", "héllo", 5, "héllo"},
		{"long text is cut after max runes and marked", "héllo wörld", 7, "héllo w\n\n" + truncatedMarker},
		{"trailing space before the cut is trimmed", "ab   cd", 4, "ab\n\n" + truncatedMarker},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := truncate(tc.in, tc.max)
			if got != tc.want || !utf8.ValidString(got) {
				t.Fatalf("truncate(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
		})
	}
}

func TestOutOfDomainGolden(t *testing.T) {
	got := OutOfDomain()
	if !strings.HasPrefix(got, "This topic is not covered in the knowledge base.") {
		t.Fatalf("answer does not open with the SPEC sentence:\n%s", got)
	}
	golden(t, "out_of_domain.golden", got)
}

func TestExtractiveGolden(t *testing.T) {
	results := []rank.Result{
		{Doc: rotation, Relevance: 0.6}, {Doc: signing, Relevance: 0.5},
		{Doc: untitled, Relevance: 0.4}, {Doc: &tree.Document{Path: "x/fourth.md", Title: "Fourth"}, Relevance: 0.3},
	}
	tests := []struct {
		name     string
		query    string
		results  []rank.Result
		excerpt  func(*tree.Document) string
		contains func(path, stem string) bool
		golden   string
	}{
		{"the top three results quoted, with gaps", "how are refresh tokens rotated in terraform", results, nil, nil,
			"extractive.golden"},
		{"a caller's excerpt and contains funcs are used", "signing keys", results[1:2],
			func(d *tree.Document) string { return "EXCERPT OF " + d.Path },
			func(path, stem string) bool { return path == "auth/jwt/signing.md" && stem == "key" },
			"extractive_custom.golden"},
		{"no results", "anything at all", nil, nil, nil, "extractive_empty.golden"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Extractive(searchWords(tc.query), tc.results, tc.excerpt, tc.contains, "no LLM provider configured")
			if !strings.HasPrefix(got, "> Degraded answer: no LLM provider configured.") {
				t.Fatalf("no degraded banner:\n%s", got)
			}
			golden(t, tc.golden, got)
		})
	}
}

func TestExtractiveQuotesOnly(t *testing.T) {
	got := Extractive(searchWords("refresh"), []rank.Result{{Doc: rotation}, {Doc: signing}}, nil, nil, "agent unavailable")
	// Every quoted line must come from a document.
	for _, l := range strings.Split(got, "\n") {
		if !strings.HasPrefix(l, "> ") || strings.HasPrefix(l, "> Degraded answer:") {
			continue
		}
		q := strings.TrimPrefix(l, "> ")
		if !strings.Contains(rotation.Content, q) && !strings.Contains(signing.Content, q) {
			t.Errorf("quoted line %q is in no document", q)
		}
	}
}

func TestGaps(t *testing.T) {
	docs := []*tree.Document{rotation, signing}
	tests := []struct {
		name  string
		query string
		want  []string
	}{
		{"every word covered, no gaps", "how do I rotate the refresh token", nil},
		{"a word no document holds is a gap", "rotate tokens with terraform", []string{"terraform"}},
		{"stems decide: rotating is covered", "rotating vaults", nil},
		{"a gap is listed once", "terraform terraform", []string{"terraform"}},
		{"a prefix is not coverage", "rot", []string{"rot"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Gaps(searchWords(tc.query), docs, nil)
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("Gaps(%q) = %v, want %v", tc.query, got, tc.want)
			}
		})
	}
	t.Run("a contains func is used when given", func(t *testing.T) {
		got := Gaps(searchWords("alpha beta"), docs, func(_, stem string) bool { return stem == "alpha" })
		if strings.Join(got, ",") != "beta" {
			t.Fatalf("Gaps = %v, want [beta]", got)
		}
	})
}

func TestDemoteHeadings(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"h1 becomes h4", "# Title\ntext", "#### Title\ntext"},
		{"h2 becomes h5", "## Part", "##### Part"},
		{"deep headings stop at h6", "##### Deep", "###### Deep"},
		{"a hash without a space is not a heading", "#hashtag", "#hashtag"},
		{"fenced code is left alone", "```\n# comment\n```\n# Real", "```\n# comment\n```\n#### Real"},
		{"indented code is left alone", "    # comment", "    # comment"},
		{"a four-backtick fence around a three-backtick one is code throughout",
			"````md\n```\n# inside\n```\n````\n# Real", "````md\n```\n# inside\n```\n````\n#### Real"},
		{"a line with an info string does not close a fence",
			"```\n```go\n# inside\n```\n# Real", "```\n```go\n# inside\n```\n#### Real"},
		{"backticks inside an info string open no fence", "```x``` inline\n# Real", "```x``` inline\n#### Real"},
		// Setext headings (a paragraph underlined with = or -) are headings as much as
		// ATX ones: left alone, "Sources\n---" opens a second-level section of the answer.
		{"a setext h1 becomes h4", "Sources\n=======\ntext", "#### Sources\ntext"},
		{"a setext h2 becomes h5", "intro\n\nSources\n-------\n- `fake.md`\n", "intro\n\n##### Sources\n- `fake.md`\n"},
		{"a one-character underline counts", "Part\n-", "##### Part"},
		{"a setext heading of several lines becomes one line", "Part\none\n---\ntext", "##### Part one\ntext"},
		{"a setext heading keeps its indentation", "- item\n\n  Part\n  ---\n", "- item\n\n  ##### Part\n"},
		{"an empty heading with CRLF line ends", "#\r\ntext", "####\r\ntext"},
		{"a setext heading with CRLF line ends", "Part\r\n===\r\ntext", "#### Part\r\ntext"},
		{"a rule after a blank line stays a rule", "text\n\n---\nmore", "text\n\n---\nmore"},
		{"a rule after a list item stays a rule", "- item\n---\nmore", "- item\n---\nmore"},
		{"a rule after a quote stays a rule", "> quote\n---", "> quote\n---"},
		{"a rule after a heading stays a rule", "# Title\n---", "#### Title\n---"},
		{"a spaced rule is no underline", "text\n- - -", "text\n- - -"},
		{"an underline in fenced code is code", "```\nFoo\n---\n```", "```\nFoo\n---\n```"},
		{"an underline after indented code is a rule", "    code\n---", "    code\n---"},
		// HTML blocks that end at their end text (CommonMark kinds 1 to 5): the line after
		// the end starts a paragraph, and an underline makes it a heading.
		{"a setext heading after a comment line", "<!-- note -->\nTitle\n===\n", "<!-- note -->\n#### Title\n"},
		{"a setext heading after a comment of several lines", "<!-- a\nb -->\nTitle\n---\n", "<!-- a\nb -->\n##### Title\n"},
		{"an underline inside a pre block is its text", "<pre>\n\nText\n===\n</pre>\n", "<pre>\n\nText\n===\n</pre>\n"},
		{"a heading inside a comment is its text", "<!--\n\n# x\n\n-->\n", "<!--\n\n# x\n\n-->\n"},
		// A list item or quote continues lazily only a paragraph: after its code, a
		// heading or a rule, a line at the left is a paragraph of its own.
		{"an underline after code in a list item is a heading", "- Step:\n  ```\n  code\n  ```\nAfter\n---\n",
			"- Step:\n  ```\n  code\n  ```\n##### After\n"},
		{"an underline after a heading that ended a list", "1) x\n# T\nAfter\n---\n", "1) x\n#### T\n##### After\n"},
		{"an underline after a rule that ended a list", "- a\n***\ntext\n---\n", "- a\n***\n##### text\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := demoteHeadings(tc.in); got != tc.want {
				t.Fatalf("demoteHeadings(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
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
	for _, bad := range [][]string{{"-answer-max-docs", "0"}, {"-answer-excerpt-overlap", "800"}, {"-answer-max-doc-chars", "-1"}} {
		var c Config
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(bad); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("Validate with %v = %v, want an error naming %s", bad, err, bad[0])
		}
	}
}

// searchWords reads a question's search words as a caller without a parser would: its
// words, stop words dropped.
func searchWords(query string) []string {
	var out []string
	for _, w := range text.Words(query) {
		if !text.IsStopWord(w) {
			out = append(out, w)
		}
	}
	return out
}
