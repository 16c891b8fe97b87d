package main

import (
	"fmt"
	"testing"
	"time"
)

// barMinSamples keeps verdicts off the framework's probe runs (b.N = 1), whose single
// sample says nothing about a p99.
const barMinSamples = 100

// reportBar prints one SPEC §5 bar's verdict as a "BAR" line, which `make bench`
// gathers into its closing summary: got must be under limit.
func reportBar(b *testing.B, name string, n int, got, limit time.Duration) {
	b.Helper()
	if n < barMinSamples {
		return
	}
	printBar(name, fmt.Sprintf("%.3f ms", ms(got)), fmt.Sprintf("< %v", limit), got < limit)
}

// reportRatioBar is reportBar for a relative bar such as "adds less than 10 %".
func reportRatioBar(b *testing.B, name string, n int, got, limit float64) {
	b.Helper()
	if n < barMinSamples {
		return
	}
	printBar(name, fmt.Sprintf("%+.1f %%", got*100), fmt.Sprintf("< %+.0f %%", limit*100), got < limit)
}

func printBar(name, got, limit string, ok bool) {
	verdict := "PASS"
	if !ok {
		verdict = "FAIL"
	}
	fmt.Printf("BAR %s  %-52s %12s  %s\n", verdict, name, got, limit)
}
