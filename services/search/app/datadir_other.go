//go:build !unix

package app

import (
	"fmt"
	"os"
)

// lockDataDir creates -data-dir; without flock(2) it cannot keep a second process out.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	return func() {}, nil
}
