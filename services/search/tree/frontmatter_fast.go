package tree

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// fastFrontMatter builds the nodes yaml.v3 builds for the front matter most files have,
// in a twentieth of its time: one "key: value" per line, each value empty, a one-line
// plain scalar, a quoted string without escapes, or a flow list of plain scalars. For
// anything else (comments, indentation, block lists, anchors, tags, escapes, CR line
// ends, tabs) ok is false and yaml.v3 parses it: this reads a subset of YAML, never a
// dialect of its own. FuzzFastFrontMatterMatchesYAML holds it to yaml.v3's result.
//
// Parsing YAML was a third of reading a knowledge base's files at load.
func fastFrontMatter(src []byte) (doc *yaml.Node, ok bool) {
	if !utf8.Valid(src) {
		return nil, false // the loader refuses such files before; yaml.v3 says why
	}
	top := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for n := 1; len(src) > 0; n++ {
		var line []byte
		line, src, _ = cutLine(src)
		if len(line) == 0 {
			continue
		}
		key, rest, ok := fastKey(string(line))
		if !ok {
			return nil, false
		}
		for i := 0; i < len(top.Content); i += 2 {
			if top.Content[i].Value == key {
				return nil, false // yaml.v3 says how it is refused
			}
		}
		v, ok := fastValue(rest)
		if !ok {
			return nil, false
		}
		v.Line = n
		for _, c := range v.Content {
			c.Line = n
		}
		if top.Line == 0 {
			top.Line, top.Column = n, 1
		}
		top.Content = append(top.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key, Line: n, Column: 1}, v)
	}
	if len(top.Content) == 0 {
		return &yaml.Node{}, true // blank lines only: no document
	}
	return &yaml.Node{Kind: yaml.DocumentNode, Line: top.Line, Column: 1, Content: []*yaml.Node{top}}, true
}

// maxImplicitKey is the longest key YAML reads without a "?" (YAML 1.2, 7.4.2): its
// colon must come within 1,024 characters.
const maxImplicitKey = 1024

// fastKey splits "key:" and what follows it. A key is ASCII letters, digits, "_" and
// "-", starting with a letter.
func fastKey(line string) (key, rest string, ok bool) {
	for i := 0; i < len(line) && i <= maxImplicitKey; i++ {
		c := line[i]
		switch {
		case 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z':
		case i > 0 && ('0' <= c && c <= '9' || c == '_' || c == '-'):
		case i > 0 && c == ':':
			return line[:i], line[i+1:], true
		default:
			return "", "", false
		}
	}
	return "", "", false
}

// fastValue reads what follows a key's colon.
func fastValue(rest string) (*yaml.Node, bool) {
	if rest == "" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, true
	}
	if rest[0] != ' ' {
		return nil, false // "key:value" is one scalar in YAML, not a pair
	}
	s := trimSpaces(rest)
	if s == "" {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null"}, true
	}
	switch s[0] {
	case '"', '\'':
		q := s[0]
		if len(s) < 2 || s[len(s)-1] != q {
			return nil, false
		}
		body := s[1 : len(s)-1]
		for _, r := range body {
			if r == rune(q) || r == '\\' || !unicode.IsPrint(r) {
				return nil, false
			}
		}
		style := yaml.DoubleQuotedStyle
		if q == '\'' {
			style = yaml.SingleQuotedStyle
		}
		return &yaml.Node{Kind: yaml.ScalarNode, Style: style, Tag: "!!str", Value: body}, true
	case '[':
		if s[len(s)-1] != ']' {
			return nil, false
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle, Tag: "!!seq"}
		inner := trimSpaces(s[1 : len(s)-1])
		if inner == "" {
			return seq, true
		}
		for item := range strings.SplitSeq(inner, ",") {
			item = trimSpaces(item)
			if !plainScalar(item, false) {
				return nil, false
			}
			seq.Content = append(seq.Content, plainNode(item))
		}
		return seq, true
	}
	if !plainScalar(s, true) {
		return nil, false
	}
	return plainNode(s), true
}

// plainNode returns a plain scalar's node with its tag resolved once, as yaml.v3's
// parser resolves it: each read of an unset tag would resolve it again.
func plainNode(value string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Value: value}
	n.Tag = n.ShortTag()
	return n
}

// plainScalar reports whether s is a plain scalar of the subset fastFrontMatter reads:
// it starts with a letter or digit and holds letters, digits, marks, spaces
// and a few punctuation marks that are no YAML indicator where they stand. In a block
// value (block) a comma is text and a colon too when no space follows it; in a flow
// list both end or split items, so neither is accepted there.
func plainScalar(s string, block bool) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r):
		case i == 0:
			return false
		case unicode.IsMark(r):
		case r == ' ' || r == '.' || r == '_' || r == '-' || r == '/' || r == '+' || r == '(' || r == ')' || r == '\'':
		case block && r == ',':
		case block && r == ':' && i+1 < len(s) && s[i+1] != ' ':
		default:
			return false
		}
	}
	return true
}

// trimSpaces trims ASCII spaces, the only white space fastFrontMatter accepts.
func trimSpaces(s string) string { return strings.Trim(s, " ") }
