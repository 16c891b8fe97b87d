package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"runtime/metrics"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// loadConfig is one load run.
type loadConfig struct {
	Concurrency int
	Duration    time.Duration
	Count       int // total calls; 0 = run for Duration
	Warmup      time.Duration
	KB          string
	// Mix weighs the kinds of call: repeat an asked question (T0), reword one (T1), ask a
	// new one (T2 / out of domain / LLM routes), or a bare gRPC echo (the baseline).
	Mix       map[string]float64
	Questions []string
	Timeout   time.Duration
	// OnMeasuring, if set, is called once when the warm-up ends, before measured calls.
	OnMeasuring func()
}

// loadReport is what a run measured.
type loadReport struct {
	Calls    int64                      `json:"calls"`
	Errors   int64                      `json:"errors"`
	Elapsed  time.Duration              `json:"elapsed_ns"`
	QPS      float64                    `json:"qps"`
	ByTier   map[string]latencySummary  `json:"by_tier"`
	ByKind   map[string]latencySummary  `json:"by_kind"`
	ErrorsBy map[string]int64           `json:"errors_by_code,omitempty"`
	Memory   *memoryReport              `json:"memory,omitempty"`
	raw      map[string][]time.Duration // by tier
}

type latencySummary struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P95 float64 `json:"p95_ms"`
	P99 float64 `json:"p99_ms"`
}

func summarize(d []time.Duration) latencySummary {
	if len(d) == 0 {
		return latencySummary{}
	}
	s := slices.Clone(d)
	slices.Sort(s)
	ms := func(p float64) float64 { return float64(quantile(s, p).Microseconds()) / 1000 }
	return latencySummary{N: len(s), P50: ms(0.5), P95: ms(0.95), P99: ms(0.99)}
}

// percentile returns the nearest-rank p-quantile of d (not sorted; d is left as it is).
func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return quantile(s, p)
}

// parseMix reads "repeat=0.5,reword=0.2,new=0.25,echo=0.05".
func parseMix(s string) (map[string]float64, error) {
	mix := map[string]float64{}
	for _, part := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return nil, fmt.Errorf("mix %q: want kind=weight", part)
		}
		w, err := strconv.ParseFloat(v, 64)
		if err != nil || w < 0 {
			return nil, fmt.Errorf("mix %q: weight must be a number >= 0", part)
		}
		switch k {
		case "repeat", "reword", "new", "echo":
			mix[k] = w
		default:
			return nil, fmt.Errorf("mix kind %q: want repeat, reword, new or echo", k)
		}
	}
	return mix, nil
}

// runLoad drives the gateway with cfg.Concurrency callers and returns what it measured.
// progress, if not nil, gets a status line every second.
func runLoad(ctx context.Context, c quarryv1.QueryServiceClient, h healthpb.HealthClient, cfg loadConfig, progress io.Writer) (*loadReport, error) {
	if len(cfg.Questions) == 0 {
		return nil, errors.New("no questions to ask")
	}
	kinds := []string{"repeat", "reword", "new", "echo"}
	total := 0.0
	for _, k := range kinds {
		total += cfg.Mix[k]
	}
	if total <= 0 {
		return nil, errors.New("the mix weighs nothing")
	}

	// Questions are handed out once as "new"; asked ones are repeated or reworded.
	var nextNew atomic.Int64
	var askedMu sync.RWMutex
	asked := make([]string, 0, len(cfg.Questions))
	pick := func(r *rand.Rand) (kind, q string) {
		x := r.Float64() * total
		for _, k := range kinds {
			if x < cfg.Mix[k] {
				kind = k
				break
			}
			x -= cfg.Mix[k]
		}
		if kind == "" {
			kind = "new"
		}
		askedMu.RLock()
		n := len(asked)
		if n > 0 {
			q = asked[r.IntN(n)]
		}
		askedMu.RUnlock()
		switch {
		case kind == "echo":
			return kind, ""
		case kind == "new" || n == 0:
			i := nextNew.Add(1) - 1
			q = cfg.Questions[int(i)%len(cfg.Questions)]
			if round := int(i) / len(cfg.Questions); round > 0 {
				q = fmt.Sprintf("%s (variant %d)", q, round)
			}
			askedMu.Lock()
			asked = append(asked, q)
			askedMu.Unlock()
			return "new", q
		case kind == "reword":
			return kind, rewordQuestion(q)
		default:
			return kind, q
		}
	}

	rep := &loadReport{ByTier: map[string]latencySummary{}, ByKind: map[string]latencySummary{}, ErrorsBy: map[string]int64{}, raw: map[string][]time.Duration{}}
	var mu sync.Mutex
	byKind := map[string][]time.Duration{}
	var calls, errs atomic.Int64
	measuring := atomic.Bool{}
	if cfg.Warmup <= 0 {
		if cfg.OnMeasuring != nil {
			cfg.OnMeasuring()
		}
		measuring.Store(true)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	var measuredFrom atomic.Int64
	// The warm-up's end is waited for before returning: a timer left behind by a run
	// stopped during its warm-up (Ctrl-C) called OnMeasuring after the run, racing the
	// caller's reading of what it records.
	warmDone := make(chan struct{})
	if cfg.Warmup > 0 {
		go func() {
			defer close(warmDone)
			t := time.NewTimer(cfg.Warmup)
			defer t.Stop()
			select {
			case <-t.C:
			case <-runCtx.Done():
				return
			}
			if cfg.OnMeasuring != nil {
				cfg.OnMeasuring()
			}
			measuredFrom.Store(time.Now().UnixNano())
			measuring.Store(true)
		}()
	} else {
		close(warmDone)
		measuredFrom.Store(start.UnixNano())
	}
	if cfg.Count == 0 {
		defer time.AfterFunc(cfg.Warmup+cfg.Duration, cancel).Stop()
	}
	var budget atomic.Int64
	budget.Store(int64(cfg.Count))

	var wg sync.WaitGroup
	for w := range cfg.Concurrency {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w)+1, 99))
			for runCtx.Err() == nil {
				// Whether this call counts is decided as it starts, when it takes its
				// share of the budget: decided as it ended, a call begun in the warm-up
				// counted too, with no share taken, and "-n" measured more calls than asked.
				measured := measuring.Load()
				if cfg.Count > 0 && measured && budget.Add(-1) < 0 {
					// Only this caller stops: cancelling the run here cut the other
					// callers' calls in flight, each of which had taken its share of
					// the budget, and "-n 1000" reported fewer calls, its slowest left out.
					return
				}
				kind, q := pick(r)
				cctx, ccancel := context.WithTimeout(runCtx, cfg.Timeout)
				t := time.Now()
				tier := "ECHO"
				var err error
				if kind == "echo" {
					_, err = h.Check(cctx, &healthpb.HealthCheckRequest{})
				} else {
					var resp *quarryv1.QueryResponse
					resp, err = c.Query(cctx, &quarryv1.QueryRequest{KnowledgeBase: cfg.KB, Query: q})
					if err == nil {
						tier = tierName(resp.GetTier())
					}
				}
				d := time.Since(t)
				ccancel()
				if runCtx.Err() != nil && err != nil {
					return // the run ended under this call
				}
				if !measured {
					continue
				}
				calls.Add(1)
				mu.Lock()
				if err != nil {
					errs.Add(1)
					rep.ErrorsBy[statusName(err)]++
				} else {
					rep.raw[tier] = append(rep.raw[tier], d)
					byKind[kind] = append(byKind[kind], d)
				}
				mu.Unlock()
			}
		})
	}
	// The status line's writer is waited for: returned before it had ended its line, it
	// raced the caller's own writes to the same stream (the report, the error).
	progressDone := make(chan struct{})
	if progress == nil {
		close(progressDone)
	} else {
		go func() {
			defer close(progressDone)
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			for {
				select {
				case <-runCtx.Done():
					fmt.Fprintln(progress)
					return
				case <-tk.C:
					phase := "measuring"
					if !measuring.Load() {
						phase = "warming up"
					}
					fmt.Fprintf(progress, "\r%-10s %6.0fs  %8d calls  %5d errors", phase, time.Since(start).Seconds(), calls.Load(), errs.Load())
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	<-progressDone
	<-warmDone
	// A run stopped before its warm-up ended measured nothing: its elapsed time was
	// counted from 1970.
	if from := measuredFrom.Load(); from != 0 {
		rep.Elapsed = time.Since(time.Unix(0, from))
	}
	rep.Calls, rep.Errors = calls.Load(), errs.Load()
	if rep.Elapsed > 0 {
		rep.QPS = float64(rep.Calls) / rep.Elapsed.Seconds()
	}
	for t, d := range rep.raw {
		rep.ByTier[t] = summarize(d)
	}
	for k, d := range byKind {
		rep.ByKind[k] = summarize(d)
	}
	return rep, nil
}

func statusName(err error) string {
	s := err.Error()
	if i := strings.Index(s, "code = "); i >= 0 {
		s = s[i+7:]
		if j := strings.IndexByte(s, ' '); j >= 0 {
			s = s[:j]
		}
	}
	return s
}

func (r *loadReport) print(w io.Writer) {
	fmt.Fprintf(w, "%d calls in %v: %.0f qps, %d errors", r.Calls, r.Elapsed.Round(time.Millisecond), r.QPS, r.Errors)
	if len(r.ErrorsBy) > 0 {
		fmt.Fprintf(w, " %v", r.ErrorsBy)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "%-16s %8s %9s %9s %9s\n", "tier", "n", "p50 ms", "p95 ms", "p99 ms")
	tiers := make([]string, 0, len(r.ByTier))
	for t := range r.ByTier {
		tiers = append(tiers, t)
	}
	sort.Strings(tiers)
	for _, t := range tiers {
		s := r.ByTier[t]
		fmt.Fprintf(w, "%-16s %8d %9.3f %9.3f %9.3f\n", t, s.N, s.P50, s.P95, s.P99)
	}
	if m := r.Memory; m != nil {
		fmt.Fprintf(w, "memory (whole process): RSS %d MiB after warm-up, %d MiB at the end (peak %d MiB); live heap %d -> %d MiB\n",
			m.RSSStartKiB>>10, m.RSSEndKiB>>10, m.RSSPeakKiB>>10, m.HeapStartKiB>>10, m.HeapEndKiB>>10)
	}
}

// memoryReport shows whether a load run leaks: the process's resident set and live heap
// when measuring began and at its end. Growth within the caches' bounds is expected.
type memoryReport struct {
	RSSStartKiB  int64 `json:"rss_start_kib"`
	RSSEndKiB    int64 `json:"rss_end_kib"`
	RSSPeakKiB   int64 `json:"rss_peak_kib"`
	HeapStartKiB int64 `json:"live_heap_start_kib"`
	HeapEndKiB   int64 `json:"live_heap_end_kib"`
}

// liveHeapKiB is the heap that survived the last garbage collection: unlike HeapAlloc
// it does not swing with garbage not yet collected, and reading it forces no collection
// (which would pause the callers being measured).
func liveHeapKiB() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64() >> 10)
}

// peakRSSKiB is this process's peak resident set size (VmHWM) from /proc.
func peakRSSKiB() int64 { return procStatusKiB("VmHWM:") }

// rssKiB returns this process's resident set size from /proc (0 where unavailable).
func rssKiB() int64 { return procStatusKiB("VmRSS:") }

func procStatusKiB(field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// rewordQuestion asks the same question with its words in another order and case: it
// misses the exact cache and has the same tokens, so it is a fuzzy-cache hit.
func rewordQuestion(q string) string {
	w := strings.Fields(q)
	if len(w) == 0 {
		return q
	}
	slices.Reverse(w)
	return strings.Join(w, " ")
}
