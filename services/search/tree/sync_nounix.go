//go:build !unix

package tree

import "os"

// canBatch is false where no call flushes every file written (Windows has no sync(2)):
// Batch does nothing there, and each file is made durable as it is written.
const canBatch = false

// syncFS is never called: Batch leaves the Dir writing durably.
func syncFS(*os.File) error { return nil }
