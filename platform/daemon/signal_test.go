package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"
)

// drainingChild is what the re-executed test binary does: what a service does with
// SignalContext, with a drain that waits for a long call in flight.
func drainingChild() {
	ctx, stop := SignalContext()
	defer stop()
	fmt.Println("serving")
	<-ctx.Done()
	fmt.Println("draining")
	time.Sleep(time.Minute)
	os.Exit(0)
}

func TestMain(m *testing.M) {
	switch os.Getenv("QUARRY_DAEMON_TEST_CHILD") {
	case "drain":
		drainingChild()
	case "traced":
		tracedChild()
	}
	os.Exit(m.Run())
}

// The first SIGTERM starts the drain and does not end the process; a second one ends
// it at once, where the drain would wait out its timeout.
func TestASecondSignalEndsTheDrain(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "QUARRY_DAEMON_TEST_CHILD=drain")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	await := func(want string) {
		t.Helper()
		select {
		case l := <-lines:
			if l != want {
				t.Fatalf("child printed %q, want %q", l, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("child did not print %q within 10 s", want)
		}
	}
	await("serving")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	await("draining")
	time.Sleep(100 * time.Millisecond) // the drain is under way, the child still runs
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the first SIGTERM ended the process: %v", err)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			t.Fatalf("child ended with %v, want killed by SIGTERM", err)
		}
		if ws, ok := exit.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
			t.Fatalf("child ended with %v, want killed by SIGTERM", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second SIGTERM did not end the process within 5 s")
	}
}
