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
