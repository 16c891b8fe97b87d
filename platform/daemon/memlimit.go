package daemon

import (
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// The Go runtime sizes its heap from GOGC alone unless GOMEMLIMIT is set, and does not
// read a container's memory limit: a service whose heap grows towards the limit (a
// burst of large answers, a big knowledge base loading) is killed by the kernel before
// the collector has worked any harder. With a soft limit a little below the
// container's, the collector runs more often as the heap nears it instead.

// memoryLimitShare is the part of the container's memory the Go heap may aim for; the
// rest is for goroutine stacks, the runtime's own memory and the index files the
// search service maps.
const memoryLimitShare = 0.9

// cgroupMemoryFiles are where cgroup v2 and v1 give the container's memory limit.
var cgroupMemoryFiles = []string{"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}

// containerMemoryLimit is the soft memory limit to set from the container's, or false
// when GOMEMLIMIT is set (the operator's choice wins) or there is no limit to read.
func containerMemoryLimit(getenv func(string) string, readFile func(string) ([]byte, error)) (int64, bool) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, false
	}
	for _, f := range cgroupMemoryFiles {
		raw, err := readFile(f)
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(raw))
		n, err := strconv.ParseInt(s, 10, 64)
		// "max" (v2) or a page-rounded MaxInt64 (v1) mean no limit.
		if err != nil || n <= 0 || n >= 1<<62 {
			return 0, false
		}
		return int64(float64(n) * memoryLimitShare), true
	}
	return 0, false
}

// setMemoryLimit applies containerMemoryLimit and returns the limit set, or 0.
func setMemoryLimit() int64 {
	limit, ok := containerMemoryLimit(os.Getenv, os.ReadFile)
	if !ok {
		return 0
	}
	debug.SetMemoryLimit(limit)
	return limit
}
