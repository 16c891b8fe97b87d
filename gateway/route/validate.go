package route

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// Errors the router returns; callers test them with errors.Is. The wrapped messages of
// ErrInvalidQuery, ErrInvalidKB and ErrUnknownKB are written for the caller and safe to
// show; ErrUnavailable wraps internal causes that are not.
var (
	ErrInvalidQuery = errors.New("invalid query")
	ErrInvalidKB    = errors.New("invalid knowledge base id")
	ErrUnknownKB    = errors.New("unknown knowledge base")
	ErrUnavailable  = errors.New("search is unavailable")
)

// ErrNoProvider is what an Agent returns (wrapped) when it has no LLM provider to ask;
// the router then serves the extractive fallback.
var ErrNoProvider = errors.New("no LLM provider configured")

const maxKBLen = 64

// validKB reports whether id matches ^[a-z0-9][a-z0-9_-]{0,63}$.
func validKB(id string) bool {
	if len(id) == 0 || len(id) > maxKBLen {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '_' || c == '-') && i > 0:
		default:
			return false
		}
	}
	return true
}

func (r *Router) validate(req *quarryv1.QueryRequest) error {
	kb := req.GetKnowledgeBase()
	if !validKB(kb) {
		shown := fmt.Sprintf("%q", kb)
		if len(kb) > maxKBLen {
			shown = fmt.Sprintf("of %d bytes", len(kb))
		}
		return fmt.Errorf("%w %s: want 1-%d characters of a-z, 0-9, '_' and '-', starting with a letter or digit",
			ErrInvalidKB, shown, maxKBLen)
	}
	q := req.GetQuery()
	if len(q) > r.cfg.MaxQueryBytes {
		return fmt.Errorf("%w: query is %d bytes, the limit is %d", ErrInvalidQuery, len(q), r.cfg.MaxQueryBytes)
	}
	if !utf8.ValidString(q) {
		return fmt.Errorf("%w: query is not valid UTF-8", ErrInvalidQuery)
	}
	blank := true
	for _, c := range q {
		if unicode.IsControl(c) && c != '\t' && c != '\n' && c != '\r' {
			return fmt.Errorf("%w: query contains the control character U+%04X", ErrInvalidQuery, c)
		}
		if blank && !unicode.IsSpace(c) {
			blank = false
		}
	}
	if blank {
		return fmt.Errorf("%w: query is empty", ErrInvalidQuery)
	}
	return nil
}
