package tree

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode"

	"gopkg.in/yaml.v3"
)

// errFrontMatter marks a front matter block the loader refuses; the file is skipped.
var errFrontMatter = errors.New("front matter")

// maxYAMLDepth bounds nesting in front matter. yaml.v3 allows 10,000 levels; nothing a
// person writes comes near 32, and deep nesting only serves to make decoding expensive.
const maxYAMLDepth = 32

// frontMatter is the interpreted front matter of one file.
type frontMatter struct {
	title         string
	tags          []string
	related       []string
	importance    float64
	hasImportance bool
	maturity      Maturity
	updated       time.Time
	hasUpdated    bool
	extra         map[string]any
	// notes are problems that did not cost the file (a dropped related path, an
	// unparseable date that falls back to the modification time), for the load log.
	notes []string
}

// splitFrontMatter separates a leading "---" front matter block from the body. A file
// that does not start with a "---" line has none. A block that opens but never closes, or
// is larger than maxBytes, is an error: guessing where it ends would index YAML as prose.
func splitFrontMatter(data []byte, maxBytes int) (fm, body []byte, err error) {
	first, rest, ok := cutLine(data)
	if !ok || string(trimCR(first)) != "---" {
		return nil, data, nil
	}
	start := len(data) - len(rest)
	for off := start; off <= len(data); {
		line, next, more := cutLine(data[off:])
		if s := string(trimCR(line)); s == "---" || s == "..." {
			if off-start > maxBytes {
				return nil, nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", errFrontMatter, off-start, maxBytes)
			}
			return data[start:off], next, nil
		}
		if off-start > maxBytes {
			return nil, nil, fmt.Errorf("%w: over the %d-byte limit", errFrontMatter, maxBytes)
		}
		if !more {
			break
		}
		off = len(data) - len(next)
	}
	return nil, nil, fmt.Errorf("%w: opening \"---\" has no closing line", errFrontMatter)
}

// cutLine returns the first line of b without its "\n", the bytes after it, and whether
// a "\n" was found.
func cutLine(b []byte) (line, rest []byte, found bool) {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		return b[:i], b[i+1:], true
	}
	return b, nil, false
}

func trimCR(b []byte) []byte { return bytes.TrimSuffix(b, []byte("\r")) }

// parseFrontMatter interprets a front matter block. The YAML is parsed into nodes first
// so that anchors and aliases (the only way to make a small YAML document expand into a
// huge one) and deep nesting are refused before anything is decoded.
func parseFrontMatter(src []byte) (fm frontMatter, err error) {
	return decodeFrontMatter(src, true)
}

// decodeFrontMatter is parseFrontMatter, through fastFrontMatter when fast is set and
// it reads src.
func decodeFrontMatter(src []byte, fast bool) (fm frontMatter, err error) {
	defer func() {
		// yaml.v3 recovers its own panics; this guards the node walk below against
		// shapes it did not anticipate, so a hostile file can never take the loader down.
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: unparseable: %v", errFrontMatter, r)
		}
	}()
	doc, ok := (*yaml.Node)(nil), false
	if fast {
		doc, ok = fastFrontMatter(src)
	}
	if !ok {
		doc = new(yaml.Node)
		if err := yaml.Unmarshal(src, doc); err != nil {
			return fm, fmt.Errorf("%w: %v", errFrontMatter, err)
		}
	}
	if doc.Kind == 0 {
		return fm, nil // empty block
	}
	if err := checkNode(doc, 0); err != nil {
		return fm, err
	}
	if len(doc.Content) != 1 {
		return fm, fmt.Errorf("%w: expected one YAML document", errFrontMatter)
	}
	top := doc.Content[0]
	if top.Kind == yaml.ScalarNode && top.ShortTag() == "!!null" {
		return fm, nil
	}
	if top.Kind != yaml.MappingNode {
		return fm, fmt.Errorf("%w: not a mapping of keys to values", errFrontMatter)
	}
	seen := map[string]bool{}
	for i := 0; i+1 < len(top.Content); i += 2 {
		k, v := top.Content[i], top.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return fm, fmt.Errorf("%w: line %d: key is not a plain string", errFrontMatter, k.Line)
		}
		key := strings.ToLower(strings.TrimSpace(k.Value))
		if seen[key] {
			return fm, fmt.Errorf("%w: line %d: duplicate key %q", errFrontMatter, k.Line, k.Value)
		}
		seen[key] = true
		if err := fm.set(key, k.Value, v); err != nil {
			return fm, fmt.Errorf("%w: line %d: %w", errFrontMatter, v.Line, err)
		}
	}
	return fm, nil
}

// checkNode refuses anchors, aliases and nesting deeper than maxYAMLDepth.
func checkNode(n *yaml.Node, depth int) error {
	if depth > maxYAMLDepth {
		return fmt.Errorf("%w: nested deeper than %d levels", errFrontMatter, maxYAMLDepth)
	}
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return fmt.Errorf("%w: line %d: YAML anchors and aliases are not accepted", errFrontMatter, n.Line)
	}
	for _, c := range n.Content {
		if err := checkNode(c, depth+1); err != nil {
			return err
		}
	}
	return nil
}

func isNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

func (fm *frontMatter) set(key, rawKey string, v *yaml.Node) error {
	switch key {
	case "title":
		if isNull(v) {
			return nil
		}
		if v.Kind != yaml.ScalarNode {
			return errors.New("title must be a string")
		}
		fm.title = cleanTitle(v.Value)
	case "tags":
		tags, err := stringList(v, "tags")
		if err != nil {
			return err
		}
		fm.tags = dedupe(tags)
	case "related":
		raw, err := stringList(v, "related")
		if err != nil {
			return err
		}
		var out []string
		for _, r := range raw {
			c, err := cleanRelated(r)
			if err != nil {
				fm.notes = append(fm.notes, fmt.Sprintf("related %q dropped: %v", r, err))
				continue
			}
			out = append(out, c)
		}
		fm.related = dedupe(out)
	case "importance":
		if isNull(v) {
			return nil
		}
		if v.Kind != yaml.ScalarNode {
			return errors.New("importance must be a number from 0 to 100")
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v.Value), 64)
		if err != nil || math.IsNaN(f) || f < 0 || f > 100 {
			return fmt.Errorf("importance %q is not a number from 0 to 100", v.Value)
		}
		fm.importance, fm.hasImportance = f, true
	case "maturity":
		if isNull(v) {
			return nil
		}
		if v.Kind != yaml.ScalarNode {
			return errors.New("maturity must be draft, validated or core")
		}
		m, ok := ParseMaturity(v.Value)
		if !ok {
			return fmt.Errorf("maturity %q is not draft, validated or core", v.Value)
		}
		fm.maturity = m
	case "updated":
		if isNull(v) {
			return nil
		}
		t, ok := time.Time{}, false
		if v.Kind == yaml.ScalarNode {
			t, ok = parseUpdated(v.Value)
		}
		if !ok {
			fm.notes = append(fm.notes, fmt.Sprintf("updated %q is not RFC 3339 or YYYY-MM-DD; using the modification time", v.Value))
			return nil
		}
		fm.updated, fm.hasUpdated = t, true
	default:
		val, err := nodeValue(v)
		if err != nil {
			return fmt.Errorf("key %q: %w", rawKey, err)
		}
		if fm.extra == nil {
			fm.extra = map[string]any{}
		}
		fm.extra[rawKey] = val
	}
	return nil
}

// ParseMaturity reads a front-matter maturity (case and surrounding space ignored).
func ParseMaturity(s string) (Maturity, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "draft":
		return Draft, true
	case "validated":
		return Validated, true
	case "core":
		return Core, true
	}
	return Draft, false
}

func parseUpdated(s string) (time.Time, bool) {
	s = strings.TrimSpace(s)
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, true
	}
	if t, err := time.Parse(time.DateOnly, s); err == nil {
		return t, true
	}
	return time.Time{}, false
}

// stringList reads a list of scalars, or one scalar of comma-separated values.
func stringList(v *yaml.Node, name string) ([]string, error) {
	var raw []string
	switch v.Kind {
	case yaml.ScalarNode:
		if isNull(v) {
			return nil, nil
		}
		raw = strings.Split(v.Value, ",")
	case yaml.SequenceNode:
		for _, c := range v.Content {
			if c.Kind != yaml.ScalarNode {
				return nil, fmt.Errorf("%s must be a list of strings or a comma-separated string", name)
			}
			if !isNull(c) {
				raw = append(raw, c.Value)
			}
		}
	default:
		return nil, fmt.Errorf("%s must be a list of strings or a comma-separated string", name)
	}
	out := raw[:0]
	for _, s := range raw {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

func dedupe(in []string) []string {
	if len(in) == 0 {
		return nil
	}
	seen := make(map[string]bool, len(in))
	out := make([]string, 0, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

// cleanTitle collapses white space and control characters, so a title is one line.
func cleanTitle(s string) string {
	return strings.Join(strings.FieldsFunc(s, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }), " ")
}

// nodeValue converts a front-matter value to plain Go values that survive a JSON or
// protobuf Struct round trip: string, bool, int64, float64, nil, []any, map[string]any.
// Timestamps, binary and custom-tagged scalars are kept as written, and non-finite or
// out-of-range numbers become their written form, because Struct cannot hold them.
func nodeValue(n *yaml.Node) (any, error) {
	switch n.Kind {
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return nil, nil
		case "!!bool":
			var b bool
			if err := n.Decode(&b); err == nil {
				return b, nil
			}
		case "!!int":
			var i int64
			if err := n.Decode(&i); err == nil {
				return i, nil
			}
		case "!!float":
			var f float64
			if err := n.Decode(&f); err == nil && !math.IsInf(f, 0) && !math.IsNaN(f) {
				return f, nil
			}
		}
		return n.Value, nil
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			if k.Kind != yaml.ScalarNode {
				return nil, errors.New("nested key is not a plain string")
			}
			if _, dup := out[k.Value]; dup {
				return nil, fmt.Errorf("duplicate nested key %q", k.Value)
			}
			v, err := nodeValue(n.Content[i+1])
			if err != nil {
				return nil, err
			}
			out[k.Value] = v
		}
		return out, nil
	}
	return nil, fmt.Errorf("unsupported YAML node kind %d", n.Kind)
}
