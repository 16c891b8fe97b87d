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
		var f codeFence
		in := false
		for line := range strings.Lines(content) {
			line = strings.TrimRight(line, "\r\n")
			trimmed := strings.TrimSpace(line)
			if in {
				in = !f.closedBy(trimmed)
				continue
			}
			if f, in = openCodeFence(trimmed); in {
				line, trimmed = "", ""
			}
			if !yield(line, trimmed) {
				return
			}
		}
	}
}

// codeFence is an open fenced code block: the character and length of the run that
// opened it. CommonMark closes it only with a run of the same character at least as long
// and nothing after it: a "```" line inside a "````" block (a document showing markdown)
// or a "```go" line is content. Closing on any line that starts with three of the
// character read the code after such a line as prose (a "# comment" in it became the
// document's title) and then the prose after the block as code.
type codeFence struct {
	char byte
	n    int
}

// openCodeFence returns the fence a line (leading white space trimmed) opens, if any: a
// run of three or more backticks or tildes; a backtick fence's info string holds no
// backtick ("```x``` y" is inline code).
func openCodeFence(trimmed string) (codeFence, bool) {
	c, n, rest := fenceRunOf(trimmed)
	if n < 3 || (c == '`' && strings.ContainsRune(rest, '`')) {
		return codeFence{}, false
	}
	return codeFence{c, n}, true
}

// closedBy reports whether a line (leading white space trimmed) closes f.
func (f codeFence) closedBy(trimmed string) bool {
	c, n, rest := fenceRunOf(trimmed)
	return c == f.char && n >= f.n && strings.TrimSpace(rest) == ""
}

// fenceRunOf returns the run of backticks or tildes s starts with, and what follows it.
func fenceRunOf(s string) (char byte, n int, rest string) {
	if s == "" || (s[0] != '`' && s[0] != '~') {
		return 0, 0, s
	}
	for n < len(s) && s[n] == s[0] {
		n++
	}
	return s[0], n, s[n:]
}
