package daemon

import (
	"io/fs"
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
