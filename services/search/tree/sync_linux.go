package tree

import (
	"os"

	"golang.org/x/sys/unix"
)

// syncFS flushes the file system holding f.
func syncFS(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
