// Package kbpath is the one rule for paths inside a knowledge base, shared by the search
// service (which reads and writes the tree) and the agent (which checks the paths a model
// asks for before any request leaves it), so the two can never disagree.
package kbpath

import (
	"errors"
	"fmt"
	"path"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Errors of Clean.
var (
	// ErrOutside means a path is absolute or climbs out of the tree with "..".
	ErrOutside = errors.New("path outside the knowledge base")
	// ErrInvalid means a path holds bytes no tree path may hold (backslash, NUL,
	// control or invisible format characters, invalid UTF-8) or is too long.
	ErrInvalid = errors.New("invalid path")
)

// MaxBytes bounds user-supplied paths; no real tree path comes near it, and it keeps
// error messages and map lookups small.
const MaxBytes = 1024

// MaxSegmentBytes bounds each name in a path: the common file systems' NAME_MAX, past
// which the file system itself refuses the name (ENAMETOOLONG) and the caller would get
// an internal error for what is bad input.
const MaxSegmentBytes = 255

// Clean validates a user-supplied path relative to the tree root and returns it in
// canonical form: forward slashes, no "./" prefix, no trailing slash, "" for the root.
// Any ".." segment is rejected with ErrOutside, even one that would clean to a path
// inside the tree: a caller that writes ".." is probing, and accepting it would make the
// rule depend on path arithmetic that is easy to get wrong. Absolute paths (including
// Windows drive paths) also get ErrOutside; backslashes, NUL, control characters,
// invisible format characters (invisible) and invalid UTF-8 get ErrInvalid.
func Clean(p string) (string, error) {
	if len(p) > MaxBytes {
		return "", fmt.Errorf("%w: longer than %d bytes", ErrInvalid, MaxBytes)
	}
	if !utf8.ValidString(p) {
		return "", fmt.Errorf("%w: not valid UTF-8", ErrInvalid)
	}
	for _, r := range p {
		switch {
		case r == '\\':
			return "", fmt.Errorf("%w: %q has a backslash", ErrInvalid, p)
		case r == 0 || unicode.IsControl(r):
			return "", fmt.Errorf("%w: %q has a control character", ErrInvalid, p)
		case invisible(r):
			return "", fmt.Errorf("%w: %+q has an invisible format character (%U)", ErrInvalid, p, r)
		}
	}
	if strings.HasPrefix(p, "/") || hasDrive(p) {
		return "", fmt.Errorf("%w: %q is absolute", ErrOutside, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return "", fmt.Errorf("%w: %q", ErrOutside, p)
		}
		if len(seg) > MaxSegmentBytes {
			return "", fmt.Errorf("%w: a name of %d bytes, over %d", ErrInvalid, len(seg), MaxSegmentBytes)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", nil
	}
	if hasDrive(c) {
		// "./C:" cleans to a drive path.
		return "", fmt.Errorf("%w: %q is absolute", ErrOutside, p)
	}
	return c, nil
}

// invisible reports a format character (Unicode category Cf) that a path may not hold:
// a byte-order mark, a zero-width space, a bidirectional override or isolate, a tag. A
// name holding one looks like another name, or shows its letters in another order
// ("cod\u202Egnp.md" shows as "codpng.md"), so a file could pass for one it is not,
// in listings and in the sources of answers; the query path drops such characters, so
// a question could never name it either. The zero-width joiner and non-joiner stay:
// Persian and Indic words and emoji are written with them.
func invisible(r rune) bool {
	return r != '\u200c' && r != '\u200d' && unicode.Is(unicode.Cf, r)
}

// hasDrive reports a Windows volume prefix ("C:"), which would be absolute on Windows.
func hasDrive(p string) bool {
	return len(p) >= 2 && p[1] == ':' && (p[0] >= 'a' && p[0] <= 'z' || p[0] >= 'A' && p[0] <= 'Z')
}
