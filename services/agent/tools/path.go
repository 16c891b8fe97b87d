package tools

import (
	"errors"
	"fmt"
	"github.com/quarry-router/quarry/platform/kbpath"
	"strings"
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

// CleanPath checks a path the model asked for with the search service's own rule
// (kbpath.Clean) before any request leaves the agent, so a model probing for
// "../../etc/passwd" gets a tool error and the search service never sees the path.
// Every refusal is ErrOutsideKB.
func CleanPath(p string) (string, error) {
	c, err := kbpath.Clean(strings.TrimSpace(p))
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrOutsideKB, err)
	}
	return c, nil
}
