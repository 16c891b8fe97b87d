package route

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/kbid"
	"github.com/quarry-router/quarry/platform/text"
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

func (r *Router) validate(req *quarryv1.QueryRequest) error {
	kb := req.GetKnowledgeBase()
	if !kbid.Valid(kb) {
		shown := fmt.Sprintf("%q", kb)
		if len(kb) > kbid.MaxLen {
			shown = fmt.Sprintf("of %d bytes", len(kb))
		}
		return fmt.Errorf("%w %s: want %s", ErrInvalidKB, shown, kbid.Rule)
	}
	q := req.GetQuery()
	if len(q) > r.cfg.MaxQueryBytes {
		return fmt.Errorf("%w: query is %d bytes, the limit is %d", ErrInvalidQuery, len(q), r.cfg.MaxQueryBytes)
	}
	if !utf8.ValidString(q) {
		return fmt.Errorf("%w: query is not valid UTF-8", ErrInvalidQuery)
	}
	for _, c := range q {
		if unicode.IsControl(c) && c != '\t' && c != '\n' && c != '\r' {
			return fmt.Errorf("%w: query contains the control character U+%04X", ErrInvalidQuery, c)
		}
	}
	if text.Blank(q) {
		return fmt.Errorf("%w: query is empty", ErrInvalidQuery)
	}
	return nil
}
