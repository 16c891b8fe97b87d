package tree

import (
	"slices"
	"testing"
)

func TestBodyLinesSkipFencedCode(t *testing.T) {
	for _, tc := range []struct {
		name, content string
		want          []string
	}{
		{"prose", "# Title\r\nOne line.\n  Two  \n", []string{"# Title", "One line.", "Two"}},
		{"backtick fence", "Before.\n```sh\nrm -rf /\n```\nAfter.\n", []string{"Before.", "", "After."}},
		{"tilde fence closes only on tildes", "~~~\n```\nstill code\n~~~\nprose\n", []string{"", "prose"}},
		{"unclosed fence hides the rest", "a\n```\nb\nc\n", []string{"a", ""}},
		// CommonMark: only a run of the opening character at least as long, with nothing
		// after it, closes a fence.
		{"a shorter fence inside a longer one is code", "````md\n```sh\n# install\n```\n````\nprose\n", []string{"", "prose"}},
		{"a line with an info string closes no fence", "```\n```go\ncode\n```\nprose\n", []string{"", "prose"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, trimmed := range BodyLines(tc.content) {
				got = append(got, trimmed)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("BodyLines = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestFirstHeadingSkipsNestedFences: a document without a front-matter title is titled
// by its first "# " heading outside code; a "```" line inside a "````" block does not
// close it, so a shell comment there is no title (the title weighs three times in search
// and heads the document in a direct answer).
func TestFirstHeadingSkipsNestedFences(t *testing.T) {
	for _, tc := range []struct{ name, content, want string }{
		{"a longer fence around a shorter one", "````md\n```bash\n# install\n```\n````\n# Real Title\n", "Real Title"},
		{"a line with an info string", "```\n```go\n# in\n```\n# Real Title\n", "Real Title"},
		{"a tilde fence around backticks", "~~~\n```\n# in\n```\n~~~\n# Real Title\n", "Real Title"},
		{"a tab after the mark", "#\tTab Title\n", "Tab Title"},
		{"no space after the mark", "#hashtag\n# Real Title\n", "Real Title"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := firstHeading(tc.content); got != tc.want {
				t.Errorf("firstHeading(%q) = %q, want %q", tc.content, got, tc.want)
			}
		})
	}
}
