//go:build unix && !linux

package tree

import (
	"os"
	"syscall"
)

// canBatch: Sync can make many files durable at once (sync(2)).
const canBatch = true

// syncFS flushes every file system: syncfs(2) is Linux only.
func syncFS(*os.File) error {
	syscall.Sync()
	return nil
}
