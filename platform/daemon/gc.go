package daemon

import (
	"log/slog"
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

// defaultGCPercent is the heap growth (GOGC) that starts a collection, unless GOGC is
// set. The services keep small heaps and allocate a few hundred KiB per query, so at
// Go's 100 they collect dozens of times a second under load and the slowest calls are
// the ones that overlap a collection: at 400, T2's p99 fell from 3.5–4.6 to 2.4–2.6 ms
// and an embedded load run answered 40 % more queries per second (README, "Garbage
// collection"). The heap may grow to five times the live data instead of twice; in a
// container the memory limit set below bounds it.
const defaultGCPercent = 400

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

// gcPercent is the GOGC to set, or false when GOGC is set (the runtime has read it).
func gcPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return defaultGCPercent, true
}

// TuneGC sets the garbage collector up as every Quarry process runs: a collection
// each time the heap grows by defaultGCPercent unless GOGC says otherwise, and a soft
// memory limit at 90 % of the container's unless GOMEMLIMIT is set. Main calls it;
// so do the all-in-one runner and the benchmarks, which measure what ships. It logs
// what it set at info level (log may be nil).
func TuneGC(log *slog.Logger) {
	var attrs []any
	if p, ok := gcPercent(os.Getenv); ok {
		debug.SetGCPercent(p)
		attrs = append(attrs, "gogc", p)
	}
	if limit, ok := containerMemoryLimit(os.Getenv, os.ReadFile); ok {
		debug.SetMemoryLimit(limit)
		attrs = append(attrs, "memory_limit_bytes", limit, "container_share", memoryLimitShare)
	}
	if log != nil && len(attrs) > 0 {
		log.Info("garbage collector set (GOGC and GOMEMLIMIT override)", attrs...)
	}
}
