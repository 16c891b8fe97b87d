package main

import (
	"os"
	"testing"

	"github.com/quarry-router/quarry/platform/daemon"
)

// TestMain sets the garbage collector up as every Quarry process does (daemon.TuneGC:
// GOGC 400 unless the environment sets GOGC), so that the benchmarks measure what
// ships; GOGC=100 in the environment measures Go's default instead.
func TestMain(m *testing.M) {
	daemon.TuneGC(nil)
	os.Exit(m.Run())
}
