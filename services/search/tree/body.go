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
		var f Fence
		in := false
		for line := range strings.Lines(content) {
			line = strings.TrimRight(line, "\r\n")
			trimmed := strings.TrimSpace(line)
			if in {
				in = !f.ClosedBy(trimmed)
				continue
			}
			if f, in = OpenFence(trimmed); in {
				line, trimmed = "", ""
			}
			if !yield(line, trimmed) {
				return
			}
		}
	}
}

// Fence is an open fenced code block, as CommonMark reads one: the character and length
// of the run that opened it. Titles and summaries skip code with it, and a direct answer
// closes a block it cut open.
type Fence struct {
	char byte
	n    int
}

// fenceRun reads a line as CommonMark reads a fence: up to three spaces, a run of three
// or more backticks or tildes, and the rest of the line.
func fenceRun(line string) (char byte, n int, rest string, ok bool) {
	t := strings.TrimLeft(line, " ")
	if len(line)-len(t) > 3 || len(t) < 3 || (t[0] != '`' && t[0] != '~') {
		return 0, 0, "", false
	}
	for n < len(t) && t[n] == t[0] {
		n++
	}
	if n < 3 {
		return 0, 0, "", false
	}
	return t[0], n, t[n:], true
}

// OpenFence returns the fence a line opens, if it opens one: a backtick fence's info
// string holds no backtick ("```x``` y" is inline code).
func OpenFence(line string) (Fence, bool) {
	c, n, rest, ok := fenceRun(line)
	if !ok || (c == '`' && strings.ContainsRune(rest, '`')) {
		return Fence{}, false
	}
	return Fence{c, n}, true
}

// ClosedBy reports whether line closes f: a run of f's character at least as long as the
// one that opened it, then nothing but spaces and tabs. A shorter run ("```" in a "````"
// block, a document showing markdown) or one with an info string ("```go") is content:
// closing on either read the code after it as prose (a "# comment" in it became the
// document's title) and then the prose after the block as code.
func (f Fence) ClosedBy(line string) bool {
	c, n, rest, ok := fenceRun(line)
	return ok && c == f.char && n >= f.n && strings.Trim(rest, " \t\r\n") == ""
}

func (f Fence) String() string { return strings.Repeat(string(f.char), f.n) }
