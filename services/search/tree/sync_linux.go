package tree

import (
	"os"

	"golang.org/x/sys/unix"
)

// canBatch: Sync can make many files durable at once (syncfs(2)).
const canBatch = true

// syncFS flushes the file system holding f.
func syncFS(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
