//go:build unix

package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// lockDataDir takes -data-dir for this process until release. Two processes must not
// share one: the second waited forever for the lock Bleve holds on an index the first
// has open, or deleted the first one's indexes as stale, and both wrote the same
// signals files. The lock is the kernel's (flock), so a process that dies drops it.
func lockDataDir(dir string) (release func(), err error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, dataDirLock), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("-data-dir: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("-data-dir %s is in use by another search process: give each process its own", dir)
		}
		return nil, fmt.Errorf("-data-dir %s: lock: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil // closing the file drops the lock
}
