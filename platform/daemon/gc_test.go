package daemon

import (
	"bytes"
	"io/fs"
	"log/slog"
	"runtime/debug"
	"strings"
	"testing"
)

func TestContainerMemoryLimit(t *testing.T) {
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, tc := range []struct {
		name      string
		gomemlim  string
		files     map[string]string
		want      int64
		wantLimit bool
	}{
		{"cgroup v2 limit of 512 MiB", "", map[string]string{v2: "536870912\n"}, 483183820, true},
		{"cgroup v2 without a limit", "", map[string]string{v2: "max\n"}, 0, false},
		{"cgroup v1 limit", "", map[string]string{v1: "268435456\n"}, 241591910, true},
		{"cgroup v1 without a limit", "", map[string]string{v1: "9223372036854771712\n"}, 0, false},
		{"GOMEMLIMIT wins", "300MiB", map[string]string{v2: "536870912\n"}, 0, false},
		{"not in a cgroup", "", nil, 0, false},
		{"unreadable value", "", map[string]string{v2: "lots\n"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			getenv := func(k string) string {
				if k == "GOMEMLIMIT" {
					return tc.gomemlim
				}
				return ""
			}
			readFile := func(name string) ([]byte, error) {
				if v, ok := tc.files[name]; ok {
					return []byte(v), nil
				}
				return nil, fs.ErrNotExist
			}
			got, ok := containerMemoryLimit(getenv, readFile)
			if got != tc.want || ok != tc.wantLimit {
				t.Errorf("containerMemoryLimit = %d, %v; want %d, %v", got, ok, tc.want, tc.wantLimit)
			}
		})
	}
}

func TestGCPercent(t *testing.T) {
	for _, tc := range []struct {
		gogc    string
		want    int
		wantSet bool
	}{
		{"", defaultGCPercent, true},
		{"100", 0, false},
		{"off", 0, false},
	} {
		got, ok := gcPercent(func(k string) string {
			if k == "GOGC" {
				return tc.gogc
			}
			return ""
		})
		if got != tc.want || ok != tc.wantSet {
			t.Errorf("GOGC=%q: gcPercent = %d, %v; want %d, %v", tc.gogc, got, ok, tc.want, tc.wantSet)
		}
	}
}

// TestTuneGC checks the setting reaches the runtime, and that GOGC, which the runtime
// read at start, is left alone.
func TestTuneGC(t *testing.T) {
	prev, prevLimit := debug.SetGCPercent(123), debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetGCPercent(prev); debug.SetMemoryLimit(prevLimit) })
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	t.Setenv("GOGC", "123")
	TuneGC(log)
	if got := debug.SetGCPercent(123); got != 123 {
		t.Errorf("with GOGC set, TuneGC changed the GC percent to %d", got)
	}

	t.Setenv("GOGC", "")
	TuneGC(log)
	if got := debug.SetGCPercent(123); got != defaultGCPercent {
		t.Errorf("without GOGC, GC percent = %d; want %d", got, defaultGCPercent)
	}
	if !strings.Contains(logs.String(), "gogc=400") {
		t.Errorf("TuneGC logged %q; want the GOGC it set", logs.String())
	}
}
