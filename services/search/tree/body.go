package tree

import (
	"iter"
	"strings"
)

// BodyLines yields the lines of a markdown body that are outside fenced code blocks, each
// as written (line ending dropped) and trimmed of white space. A fence's opening line is
// yielded as an empty line, a paragraph break; its contents and closing line are not.
// Summaries and cues are built from prose, and code in them would read as sentences.
func BodyLines(content string) iter.Seq2[string, string] {
	return func(yield func(line, trimmed string) bool) {
		fence := ""
		for line := range strings.Lines(content) {
			line = strings.TrimRight(line, "\r\n")
			trimmed := strings.TrimSpace(line)
			switch {
			case fence != "":
				if strings.HasPrefix(trimmed, fence) {
					fence = ""
				}
				continue
			case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
				fence = trimmed[:3]
				line, trimmed = "", ""
			}
			if !yield(line, trimmed) {
				return
			}
		}
	}
}
