package tree

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"unicode"

	"github.com/quarry-router/quarry/platform/kbpath"
)

// Errors returned for paths and lookups.
var (
	// ErrOutsideTree means a path is absolute or climbs out of the tree with "..".
	ErrOutsideTree = kbpath.ErrOutside
	// ErrInvalidPath means a path holds bytes no tree path may hold (backslash, NUL,
	// control characters, invalid UTF-8) or is too long.
	ErrInvalidPath = kbpath.ErrInvalid
	// ErrNotFound means the path is well formed but names no document or folder.
	ErrNotFound = errors.New("not found")
	// ErrTooManyFiles means a tree holds more markdown files than Config.MaxFiles.
	ErrTooManyFiles = errors.New("too many files")
)

// CleanPath validates a user-supplied path relative to the tree root (the shared rule,
// kbpath.Clean): canonical form, "" for the root; ".." anywhere or an absolute path is
// ErrOutsideTree, bytes no tree path may hold are ErrInvalidPath.
func CleanPath(p string) (string, error) { return kbpath.Clean(p) }

// cleanRelated turns a front-matter "related" entry into a root-relative path. Unlike
// CleanPath it resolves inner ".." (authors write "auth/../ops/x.md"), but a result that
// climbs out of the tree is still rejected.
func cleanRelated(p string) (string, error) {
	p = strings.TrimSpace(p)
	if p == "" {
		return "", fmt.Errorf("%w: empty", ErrInvalidPath)
	}
	if strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("%w: %q is absolute", ErrOutsideTree, p)
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("%w: %q", ErrOutsideTree, p)
	}
	c, err := CleanPath(c)
	if err != nil {
		return "", err
	}
	if c == "" {
		return "", fmt.Errorf("%w: %q names the root", ErrInvalidPath, p)
	}
	return c, nil
}

// ParseScope splits a path-scoped query (SPEC "Path-scoped queries") into the folder it
// is scoped to and the text to search. The first whitespace-separated word scopes the
// query when
//   - it looks like a path (segments of letters, digits, '_', '.', '-'; no "." or ".."
//     segment; not starting with '/') and contains a '/', and its first segment is a
//     known domain; or
//   - lower-cased, it equals a known domain.
//
// Requiring a known first segment for the path form keeps "TCP/IP tuning" and "and/or"
// from scoping a search to a folder that does not exist. When nothing would remain to
// search, the query is not scoped. Without a scope it returns "" and the query unchanged.
func ParseScope(query string, domains []string) (scope, rest string) {
	trimmed := strings.TrimLeftFunc(query, unicode.IsSpace)
	end := strings.IndexFunc(trimmed, unicode.IsSpace)
	if end < 0 {
		return "", query
	}
	first := trimmed[:end]
	rest = strings.TrimSpace(trimmed[end:])
	if rest == "" {
		return "", query
	}
	if strings.Contains(first, "/") {
		p := strings.TrimRight(first, "/")
		if !looksLikePath(p) {
			return "", query
		}
		head, tail, _ := strings.Cut(p, "/")
		d, ok := findDomain(head, domains)
		if !ok {
			return "", query
		}
		if tail == "" {
			return d, rest
		}
		return d + "/" + tail, rest
	}
	if d, ok := findDomain(first, domains); ok {
		return d, rest
	}
	return "", query
}

// findDomain matches a word to a domain exactly, or lower-cased: users type "Auth" for
// the folder "auth", but a folder spelled "Auth" must still match itself.
func findDomain(word string, domains []string) (string, bool) {
	lower := strings.ToLower(word)
	for _, d := range domains {
		if d == word {
			return d, true
		}
	}
	for _, d := range domains {
		if d == lower {
			return d, true
		}
	}
	return "", false
}

func looksLikePath(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") {
		return false
	}
	for _, seg := range strings.Split(p, "/") {
		// A name longer than a file system allows (CleanPath refuses it) names no folder.
		if seg == "" || seg == "." || seg == ".." || len(seg) > kbpath.MaxSegmentBytes {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
			if !ok {
				return false
			}
		}
	}
	return true
}

// Beneath returns the file-system path p relative to dir, and whether p is dir or
// inside it; both are absolute and clean.
func Beneath(dir, p string) (rel string, in bool) {
	rel, err := filepath.Rel(dir, p)
	return rel, err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}
