// Package kbid is the one rule for knowledge base ids, shared by the gateway (which
// refuses a malformed id before any lookup), the search service (whose ids name folders
// and index names) and the command line, so they can never disagree.
package kbid

// MaxLen is the longest id.
const MaxLen = 64

// Rule says in words what Valid accepts, for messages.
const Rule = "1-64 of a-z, 0-9, - and _, starting with a letter or digit"

// Valid reports whether id is a well-formed knowledge base id:
// ^[a-z0-9][a-z0-9_-]{0,63}$. It is on every query's path, so it is a loop, not a
// regular expression.
func Valid(id string) bool {
	if len(id) == 0 || len(id) > MaxLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		switch c := id[i]; {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}
