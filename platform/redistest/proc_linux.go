package redistest

import "syscall"

// sysProcAttr makes the kernel kill the server when the test process dies, so an
// interrupted test run leaves no redis-server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
