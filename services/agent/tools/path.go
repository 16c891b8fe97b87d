package tools

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors a knowledge base returns to the tools.
var (
	// ErrOutsideKB means a path is absolute, climbs out of the knowledge base with "..",
	// or holds bytes no path in it may hold. Such a path is never sent to the search
	// service.
	ErrOutsideKB = errors.New("path outside the knowledge base")
	// ErrNotFound means a well-formed path names no document or folder.
	ErrNotFound = errors.New("not found")
)

// maxPathBytes matches the search service's own limit; no real path comes near it.
const maxPathBytes = 1024

// CleanPath checks a path the model asked for and returns it relative to the knowledge
// base root: forward slashes, no "./" prefix, no trailing slash, "" for the root. It
// applies the search service's rules before any request leaves the agent, so a model
// probing for "../../etc/passwd" gets a tool error and the search service never sees
// the path: any ".." segment, a leading "/" or drive letter, a backslash, NUL or other
// control characters and invalid UTF-8 are all ErrOutsideKB.
func CleanPath(p string) (string, error) {
	p = strings.TrimSpace(p)
	if len(p) > maxPathBytes {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrOutsideKB, maxPathBytes)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: not valid UTF-8", ErrOutsideKB)
	}
	for _, r := range p {
		if r == '\\' || r == 0 || unicode.IsControl(r) {
			return "", fmt.Errorf("%w: %q holds a backslash or control character", ErrOutsideKB, p)
		}
	}
	if strings.HasPrefix(p, "/") || hasDrive(p) {
		return "", fmt.Errorf("%w: %q is absolute", ErrOutsideKB, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q climbs out with \"..\"", ErrOutsideKB, p)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", nil
	}
	if hasDrive(c) {
		return "", fmt.Errorf("%w: %q is absolute", ErrOutsideKB, p)
	}
	return c, nil
}

// hasDrive reports a Windows volume prefix ("C:").
func hasDrive(p string) bool {
	return len(p) >= 2 && p[1] == ':' && (p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z')
}
