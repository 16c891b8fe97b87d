// Package redistest runs a throwaway redis-server for tests and benchmarks: on a free
// loopback port, with persistence off, and killed when the test ends.
package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// InstallHint is the one line printed when redis-server is missing.
const InstallHint = "redis-server not found on PATH: install it with `apt-get install -y redis-server` (make test does this when run as root)"

// startTimeout bounds how long a server may take to report it is ready.
const startTimeout = 10 * time.Second

// Server is a running (or deliberately killed) redis-server.
type Server struct {
	// Addr is the server's loopback host:port; it stays the same across Restart.
	Addr string

	mu   sync.Mutex
	port int
	args []string // beyond the defaults (cluster mode)
	cmd  *exec.Cmd
	done chan struct{}
}

// Start runs a redis-server for the test and kills it when the test ends. The test
// fails, never skips, when redis-server is not installed.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := Launch()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Kill)
	return s
}

// Launch runs a redis-server that lives until Kill, or until this process dies, for
// callers without a testing.TB (a benchmark's shared setup).
func Launch() (*Server, error) { return launch(nil) }

// launch runs a server with args added to the defaults; each %d in them is the port.
func launch(args []string) (*Server, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, errors.New(InstallHint)
	}
	var lastErr error
	// A free port found by listening can be taken by someone else before the server
	// binds it; try a few.
	for range 5 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), port: port}
		for _, a := range args {
			if strings.Contains(a, "%d") {
				a = fmt.Sprintf(a, port)
			}
			s.args = append(s.args, a)
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// start runs the server and returns once it logs that it accepts connections.
func (s *Server) start() error {
	cmd := exec.Command("redis-server", append([]string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", "/tmp",
		"--logfile", "", "--loglevel", "notice"}, s.args...)...)
	cmd.SysProcAttr = sysProcAttr()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	ready := make(chan struct{})
	var log strings.Builder
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		signalled := false
		for sc.Scan() {
			if !signalled {
				log.WriteString(sc.Text() + "\n")
				if strings.Contains(sc.Text(), "Ready to accept connections") {
					signalled = true
					close(ready)
				}
			}
		}
		_, _ = io.Copy(io.Discard, out)
		_ = cmd.Wait()
		close(done)
	}()
	select {
	case <-ready:
	case <-done:
		return fmt.Errorf("redis-server on port %d exited before it was ready:\n%s", s.port, log.String())
	case <-time.After(startTimeout):
		_ = cmd.Process.Kill()
		<-done
		return fmt.Errorf("redis-server on port %d not ready within %s", s.port, startTimeout)
	}
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	return nil
}

// Kill stops the server at once, as a crash would (SIGKILL), and waits for it to exit.
// Everything it held is lost. Killing a stopped server does nothing.
func (s *Server) Kill() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// Freeze stops the server process (SIGSTOP) without closing its connections: Redis
// then neither answers nor refuses, as when it hangs or the network drops packets.
func (s *Server) Freeze() { s.signal(syscall.SIGSTOP) }

// Thaw resumes a frozen server (SIGCONT).
func (s *Server) Thaw() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig os.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// Restart kills the server if it runs and starts an empty one on the same address.
func (s *Server) Restart() error {
	s.Kill()
	return s.start()
}
