package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	gatewayapp "github.com/quarry-router/quarry/gateway/app"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/daemon"
	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/platform/telemetry/otlptest"
	agentapp "github.com/quarry-router/quarry/services/agent/app"
	searchapp "github.com/quarry-router/quarry/services/search/app"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

var (
	// A p99 ratio is a noisy figure on a shared 2-core machine: over 20 rounds of 300
	// calls its 95 % interval spans ±12 points, over 100 about ±6 (and 100 rounds take
	// some 90 s).
	traceRounds   = flag.Int("trace-rounds", 100, "BenchmarkTracingOverhead: rounds, each measuring tracing off and on (b.N iterations each)")
	traceRatio    = flag.Float64("trace-sample-ratio", 1, "BenchmarkTracingOverhead: sample this share of new traces (parentbased_traceidratio) instead of all of them; the bar is on 1")
	traceProtocol = flag.String("trace-protocol", "grpc", "BenchmarkTracingOverhead: the OTLP protocol spans are exported with, grpc or http/protobuf")
	traceProfile  = flag.String("trace-cpuprofile", "", "BenchmarkTracingOverhead: write a CPU profile of each measured round to PREFIX-on-R.pprof / PREFIX-off-R.pprof")
)

// BenchmarkTracingOverhead measures T0 and T2 with tracing off and on (every span
// sampled, exported in batches over OTLP/gRPC to a collector on loopback) in the same
// process, against the same running system: SPEC's bar is under 10 % added at p99.
//
//	go test -run '^$' -bench TracingOverhead -benchtime 300x ./cmd/quarry
//
// Off is what a service runs with no exporter configured (the API's no-op tracer);
// on is the SDK with the batch span processor and the OTLP exporter. Metrics are on in
// both modes, as in a deployment: only tracing differs. The collector runs in a
// process of its own (this test binary again), as a real one would, but it shares the
// machine's cores, which a real collector does not: so it counts spans by their names
// on the wire and decodes nothing else (otlptest.StartCounting), and runs on one P, and
// its CPU per iteration is printed. At a lower priority it falls behind and the batch
// processor drops spans, which would flatter tracing, so it runs at normal priority and
// the benchmark fails if a round's spans do not all arrive.
//
// Each round runs b.N iterations per mode, alternating which mode goes first, so that
// drift (caches filling, other load on the machine) falls on both. Each round gives
// p50 and p99 of each kind of call and the process's CPU time and allocations per
// iteration. A latency's "added" compares the percentile of all rounds' calls in each
// mode (pooled), with a 95 % interval from resampling rounds; the median of the rounds'
// own p99 ratios is printed beside it. CPU and allocations "added" is the median of the
// rounds' on/off ratios, each between two runs measured next to each other.
// Every iteration asks a new question (T2: with the fuzzy cache off, a new question
// always reaches the search), the same question again (T0), once more ("T0 again") and
// a health check, which is not traced: its added figure is the noise of the run,
// contention included. The bar is on T0, the repeat that follows a T2 at once, while
// what T2 leaves running (its server spans end after its response is written) shares
// the cores; T0 again is a cached answer after a cached answer, to tell the two apart
// (over seven runs they did not differ beyond the noise). The
// client is not instrumented: callers of the gateway are other processes, and its
// server span is the root of the trace.
//
// Where the added time goes: add -trace-cpuprofile /tmp/tr, merge each mode's rounds
// (go tool pprof -proto /tmp/tr-on-*.pprof > on.pb.gz, the same for off) and compare:
// go tool pprof -top -cum -diff_base off.pb.gz on.pb.gz.
func BenchmarkTracingOverhead(b *testing.B) {
	if b.N == 1 {
		// The testing package's probe round; the real one follows.
		return
	}
	col := startCollectorProcess(b)
	switch *traceProtocol {
	case "grpc":
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.endpoint)
	case "http/protobuf":
		b.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.httpEndpoint)
	default:
		b.Fatalf("-trace-protocol %q: want grpc or http/protobuf", *traceProtocol)
	}
	b.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", *traceProtocol)
	b.Setenv("OTEL_METRICS_EXPORTER", "none")                // Prometheus metrics stay on in both modes
	b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on") // the default, whatever the shell says
	if *traceRatio < 0 || *traceRatio > 1 {
		b.Fatalf("-trace-sample-ratio %v: want a ratio from 0 to 1", *traceRatio)
	}
	if *traceRatio < 1 {
		b.Setenv("OTEL_TRACES_SAMPLER", "parentbased_traceidratio")
		b.Setenv("OTEL_TRACES_SAMPLER_ARG", strconv.FormatFloat(*traceRatio, 'g', -1, 64))
	}

	// The switch must be the first global tracer provider: package-level tracers
	// (gateway/route, search/resolve) delegate to the first one set in the process.
	modes := &modeProvider{}
	otel.SetTracerProvider(modes)
	tel, err := telemetry.Setup(context.Background(), telemetry.Config{Service: "quarry-bench"})
	if err != nil {
		b.Fatal(err)
	}
	if !tel.Tracing {
		b.Fatal("telemetry did not turn tracing on for the OTLP endpoint")
	}
	modes.tps = []trace.TracerProvider{noop.NewTracerProvider(), tel.TracerProvider()}
	otel.SetTracerProvider(modes) // Setup installed its own; the switch stays in front of it
	b.Cleanup(func() {
		tel.Shutdown(context.Background())
		otel.SetTracerProvider(noop.NewTracerProvider())
	})

	ctx, cancel := context.WithCancel(context.Background())
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sys, err := start(ctx, upConfig{
		Gateway: "127.0.0.1:0", Search: "127.0.0.1:0", Agent: "127.0.0.1:0", KBRoot: "../../examples/kb",
		GatewayArgs: []string{"-fuzzy-min-tokens", "1000"},
	}, log)
	if err != nil {
		cancel()
		b.Fatal(err)
	}
	b.Cleanup(func() { cancel(); <-sys.done })
	c, h := dialGateway(b, sys.Gateway.String())
	measureTracingOverhead(b, col, tracedSystem{
		clients:   func(bool) (quarryv1.QueryServiceClient, healthpb.HealthClient) { return c, h },
		set:       modes.set,
		flush:     func() error { return tel.ForceFlush(context.Background()) },
		cpu:       func(bool) time.Duration { return cpuTime() },
		inProcess: true,
	})
}

// BenchmarkTracingOverheadProcesses measures the same as BenchmarkTracingOverhead in
// the deployment's topology: search, agent and gateway each in a process of their own,
// started as their commands start them (daemon.Main around each app.Run), the client in
// this one and the collector in another. Tracing is set when a process starts, so two
// systems run side by side, one with an OTLP endpoint and one without, and each round
// asks one and then the other, alternating which goes first. The CPU figure is the
// client's and the three services' of the mode; allocations and GC are other
// processes' and not reported.
//
//	go test -run '^$' -bench TracingOverheadProcesses -benchtime 300x ./cmd/quarry
func BenchmarkTracingOverheadProcesses(b *testing.B) {
	if b.N == 1 {
		return
	}
	if *traceRatio != 1 {
		b.Fatal("-trace-sample-ratio: BenchmarkTracingOverhead only")
	}
	col := startCollectorProcess(b)
	const delay = 100 * time.Millisecond
	common := []string{"OTEL_METRICS_EXPORTER=none", "OTEL_TRACES_SAMPLER=parentbased_always_on", "OTEL_TRACES_EXPORTER=", "OTEL_EXPORTER_OTLP_ENDPOINT="}
	systems := map[bool]*processSystem{
		false: startProcessSystem(b, common),
		// A round's spans must reach the collector before the next round starts, and
		// the processes cannot be asked to flush: they export at least every 100 ms
		// (the default is 1 s; batches of 512 fill about as often at this load).
		true: startProcessSystem(b, append(common, "OTEL_EXPORTER_OTLP_ENDPOINT="+col.endpoint,
			fmt.Sprintf("OTEL_BSP_SCHEDULE_DELAY=%d", delay.Milliseconds()))),
	}
	measureTracingOverhead(b, col, tracedSystem{
		clients: func(on bool) (quarryv1.QueryServiceClient, healthpb.HealthClient) {
			return systems[on].query, systems[on].health
		},
		// The gateway's spans are counted when they arrive; the search's and agent's
		// follow within a schedule delay.
		settle: 2 * delay,
		cpu: func(on bool) time.Duration {
			total := cpuTime()
			for _, pid := range systems[on].pids {
				total += processCPU(pid)
			}
			return total
		},
	})
}

// tracedSystem is a running Quarry that BenchmarkTracingOverhead* ask with tracing off
// and on.
type tracedSystem struct {
	// clients reach the system that serves a mode.
	clients func(on bool) (quarryv1.QueryServiceClient, healthpb.HealthClient)
	// set turns tracing on or off, where one system serves both modes.
	set func(on bool)
	// flush sends the spans buffered in this process; settle is how long the spans
	// buffered elsewhere take to follow.
	flush  func() error
	settle time.Duration
	// cpu is the CPU time used so far by the client and what serves a mode.
	cpu func(on bool) time.Duration
	// inProcess: the services run in this process, whose allocations and GC are
	// theirs, and whose CPU can be profiled.
	inProcess bool
}

// dialGateway connects the benchmark's client. Not grpcx.Dial, which the other tests
// use: that one traces its calls, and the client here stands for a caller in another
// process, whose call the gateway's server span starts the trace of.
func dialGateway(b testing.TB, addr string) (quarryv1.QueryServiceClient, healthpb.HealthClient) {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return quarryv1.NewQueryServiceClient(conn), healthpb.NewHealthClient(conn)
}

// measureTracingOverhead runs the rounds and prints what tracing adds; see
// BenchmarkTracingOverhead.
func measureTracingOverhead(b *testing.B, col *collectorProcess, sys tracedSystem) {
	qs, err := readQuestions("../../examples/questions.jsonl")
	if err != nil {
		b.Fatal(err)
	}
	ask := func(c quarryv1.QueryServiceClient, q string) quarryv1.Tier {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		r, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "platform", Query: q})
		if err != nil {
			b.Fatal(err)
		}
		return r.GetTier()
	}
	// T2 questions are the example questions the search answers directly, each asked
	// with its own punctuation mark tail: a new question to the cache, the same words to
	// the search. Every iteration then does the same work in either mode.
	asked := 0
	variant := func(q string) string {
		asked++
		return q + " " + punctuation(asked)
	}
	var direct []string
	off, _ := sys.clients(false)
	for _, q := range qs {
		if ask(off, variant(q)) == quarryv1.Tier_TIER_DIRECT {
			direct = append(direct, q)
		}
	}
	if len(direct) < 10 {
		b.Fatalf("only %d of %d example questions route DIRECT", len(direct), len(qs))
	}
	// run measures n iterations in one mode and checks that the collector received
	// the gateway's spans for them, or none at all with tracing off.
	run := func(on bool, n int, profile string) sample {
		if sys.set != nil {
			sys.set(on)
		}
		c, h := sys.clients(on)
		if profile != "" && sys.inProcess {
			f, err := os.Create(profile)
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			defer func() { pprof.StopCPUProfile(); f.Close() }()
		}
		_, before, _ := col.count(querySpanName)
		var s sample
		var mem runtime.MemStats
		runtime.ReadMemStats(&mem)
		mallocs, bytes := mem.Mallocs, mem.TotalAlloc
		cpu := sys.cpu(on)
		gc := readGC()
		for range n {
			q := variant(direct[asked%len(direct)])
			t := time.Now()
			if ask(c, q) == quarryv1.Tier_TIER_DIRECT {
				s.t2 = append(s.t2, time.Since(t))
			} else {
				s.otherTier++
			}
			t = time.Now()
			if ask(c, q) == quarryv1.Tier_TIER_EXACT_CACHE {
				s.t0 = append(s.t0, time.Since(t))
			} else {
				s.otherTier++
			}
			t = time.Now()
			if ask(c, q) == quarryv1.Tier_TIER_EXACT_CACHE {
				s.t0Again = append(s.t0Again, time.Since(t))
			} else {
				s.otherTier++
			}
			t = time.Now()
			if _, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil {
				b.Fatal(err)
			}
			s.echo = append(s.echo, time.Since(t))
		}
		// The round's spans are exported before the next round starts, so their
		// export counts here and not against the other mode. A server span ends just
		// after its response is sent, so the last one may still be on its way.
		lo, hi := 0, 0 // how many query spans the round may have exported
		if on {
			lo, hi = sampledBounds(3*n, *traceRatio)
		}
		got := 0
		for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if sys.flush != nil {
				if err := sys.flush(); err != nil {
					b.Fatal(err)
				}
			}
			_, after, _ := col.count(querySpanName)
			if got = after - before; got >= hi || time.Now().After(deadline) {
				break
			}
			if got >= lo && lo < hi {
				// Sampled: no count to wait for. The last span ends just after its
				// response: give it the time that takes.
				time.Sleep(20 * time.Millisecond)
				if err := sys.flush(); err != nil {
					b.Fatal(err)
				}
				_, after, _ = col.count(querySpanName)
				got = after - before
				break
			}
		}
		if got < lo || got > hi {
			b.Fatalf("tracing on=%v: the collector received %d "+querySpanName+" spans for %d queries, want %d to %d"+
				" (run the benchmark alone: -run '^$')", on, got, 3*n, lo, hi)
		}
		if on {
			time.Sleep(sys.settle)
		}
		s.cpuPerIter = (sys.cpu(on) - cpu) / time.Duration(n)
		s.gc = readGC().since(gc, n)
		runtime.ReadMemStats(&mem)
		s.allocsPerIter = float64(mem.Mallocs-mallocs) / float64(n)
		s.bytesPerIter = float64(mem.TotalAlloc-bytes) / float64(n)
		return s
	}

	collectorCPU := col.cpu()
	run(false, min(b.N, 200), "") // warm-up: index, caches, connections
	run(true, min(b.N, 200), "")
	profile := func(mode string, r int) string {
		if *traceProfile == "" {
			return ""
		}
		return fmt.Sprintf("%s-%s-%d.pprof", *traceProfile, mode, r)
	}
	var offs, ons []sample
	b.ResetTimer()
	for r := range *traceRounds {
		if r%2 == 0 {
			offs = append(offs, run(false, b.N, profile("off", r)))
			ons = append(ons, run(true, b.N, profile("on", r)))
		} else {
			ons = append(ons, run(true, b.N, profile("on", r)))
			offs = append(offs, run(false, b.N, profile("off", r)))
		}
	}
	b.StopTimer()
	for _, m := range []struct {
		name   string
		rounds []sample
	}{{"off", offs}, {"on", ons}} {
		other := 0
		for _, r := range m.rounds {
			other += r.otherTier
		}
		if calls := 3 * b.N * len(m.rounds); other*100 > calls {
			b.Fatalf("tracing %s: %d of %d T2 and T0 calls were answered by another tier: the figures would not be T2's and T0's", m.name, other, calls)
		} else if other > 0 {
			fmt.Printf("tracing %s: %d of %d T2 and T0 calls answered by another tier, left out of the latencies\n", m.name, other, calls)
		}
	}
	printTracingOverhead(b, col, sys.inProcess, offs, ons, collectorCPU)
}

func printTracingOverhead(b *testing.B, col *collectorProcess, inProcess bool, off, on []sample, collectorCPU time.Duration) {
	total, _, exports := col.count("")
	onIterations := *traceRounds*b.N + min(b.N, 200)
	topology := "services in separate processes"
	if inProcess {
		topology = "services in this process"
	}
	if *traceRatio < 1 {
		topology += fmt.Sprintf(", %g of new traces sampled (parentbased_traceidratio)", *traceRatio)
	}
	// The services' processes choose as this one does (daemon.TuneGC, same environment).
	gogc := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(gogc)
	topology += fmt.Sprintf(", GOGC %d", gogc[0].Value.Uint64())
	protocol := "grpc"
	if inProcess {
		protocol = *traceProtocol // the processes' benchmark exports over gRPC
	}
	fmt.Printf("tracing overhead, %s: %d rounds × %d iterations per mode; %d spans exported in %d OTLP requests over %s (%.1f spans per iteration on);"+
		" the collector process counting them used %.1f µs of CPU per iteration on\n",
		topology, *traceRounds, b.N, total, exports, protocol, float64(total)/float64(onIterations), us(col.cpu()-collectorCPU)/float64(onIterations))
	for _, m := range []struct {
		name string
		get  func(sample) []time.Duration
	}{
		{"echo", func(s sample) []time.Duration { return s.echo }},
		{"T0", func(s sample) []time.Duration { return s.t0 }},
		{"T2", func(s sample) []time.Duration { return s.t2 }},
		{"T0 again", func(s sample) []time.Duration { return s.t0Again }},
	} {
		for r := range off {
			if len(m.get(off[r])) == 0 || len(m.get(on[r])) == 0 {
				b.Fatalf("%s: no samples in round %d", m.name, r)
			}
		}
		off50, on50, added50, _, _ := pooledAdded(off, on, m.get, 0.5)
		off99, on99, added99, lo99, hi99 := pooledAdded(off, on, m.get, 0.99)
		p99 := func(s sample) float64 { return us(percentile(m.get(s), 0.99)) }
		fmt.Printf("%-8s off p50 %7.1f p99 %7.1f µs | on p50 %7.1f p99 %7.1f µs | added p50 %+5.1f %% p99 %+5.1f %% (95 %% interval %+.1f … %+.1f %%; median of rounds' p99 ratios %+.1f %%)\n",
			m.name, off50, off99, on50, on99, added50, added99, lo99, hi99, addedPercent(off, on, p99))
		b.ReportMetric(added99, strings.ReplaceAll(m.name, " ", "-")+"-p99-added-%")
		if (m.name == "T0" || m.name == "T2") && *traceRatio == 1 { // the bar is on sampling every query
			reportRatioBar(b, "tracing (100 % sampled) added to "+m.name+" p99, "+topology, b.N*len(on), added99/100, 0.10)
		}
	}
	cpu := func(s sample) float64 { return us(s.cpuPerIter) }
	addedCPU := addedPercent(off, on, cpu)
	fmt.Printf("CPU per iteration (T2, T0 twice, echo; services and client, not the collector): off %.1f µs, on %.1f µs, added %+.1f %%\n",
		medianOf(off, cpu), medianOf(on, cpu), addedCPU)
	b.ReportMetric(addedCPU, "cpu-added-%")
	if !inProcess {
		fmt.Println("(latencies: percentiles of all rounds' calls in each mode; CPU: median over rounds of each round's on/off ratio." +
			" The interval resamples rounds. echo is not traced: its added figure is what tracing's background work, export and collector, costs a call that makes no spans)")
		return
	}
	// A round of 300 iterations runs three or four collections, so per-round figures
	// jump by a third: means over rounds.
	meanGC := func(rounds []sample, get func(gcUse) float64) float64 {
		sum := 0.0
		for _, r := range rounds {
			sum += get(r.gc)
		}
		return sum / float64(len(rounds))
	}
	cycles := func(g gcUse) float64 { return g.cyclesPer1000 }
	gcCPU := func(g gcUse) float64 { return g.cpuPerIter }
	fmt.Printf("garbage collection: %.1f cycles per 1000 iterations off, %.1f on; its CPU per iteration off %.1f µs, on %.1f µs (%+.1f %%)\n",
		meanGC(off, cycles), meanGC(on, cycles), meanGC(off, gcCPU), meanGC(on, gcCPU), 100*(meanGC(on, gcCPU)/meanGC(off, gcCPU)-1))
	allocs := func(s sample) float64 { return s.allocsPerIter }
	kb := func(s sample) float64 { return s.bytesPerIter / 1024 }
	fmt.Printf("allocations per iteration: off %.0f (%.0f KiB), on %.0f (%.0f KiB), added %+.1f %% (%+.1f %% bytes)\n",
		medianOf(off, allocs), medianOf(off, kb), medianOf(on, allocs), medianOf(on, kb),
		addedPercent(off, on, allocs), addedPercent(off, on, kb))
	fmt.Println("(latencies: percentiles of all rounds' calls in each mode; CPU and allocations: median over rounds of each round's on/off ratio." +
		" The interval resamples rounds. echo is not traced: its added figure is what tracing's background work, export and collector, costs a call that makes no spans)")
}

// punctuation spells n in punctuation marks, which make a question new to the exact
// cache and leave its words as they are.
func punctuation(n int) string {
	const marks = "!#$%&()*+,"
	var b []byte
	for {
		b = append(b, marks[n%10])
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

// collectorProcess is an OTLP collector in a child process, asked for its span counts
// over the child's stdin and stdout.
type collectorProcess struct {
	endpoint     string // OTLP/gRPC
	httpEndpoint string // OTLP/HTTP
	pid          int
	in           io.Writer
	out          *bufio.Scanner
}

// cpu is the CPU time the collector process has used.
func (c *collectorProcess) cpu() time.Duration { return processCPU(c.pid) }

// processCPU is the CPU time a process has used, from /proc (Linux; 0 elsewhere).
func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command name, which is in parentheses: utime and stime are the
	// 12th and 13th, in clock ticks of 1/100 s.
	f := strings.Fields(string(raw[bytes.LastIndexByte(raw, ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.Atoi(f[11])
	stime, _ := strconv.Atoi(f[12])
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

const collectorProcessEnv = "QUARRY_OTLP_COLLECTOR_PROCESS"

// querySpanName is the gateway's server span, one per query.
const querySpanName = "quarry.v1.QueryService/Query"

func startCollectorProcess(b *testing.B) *collectorProcess {
	cmd := exec.Command(os.Args[0], "-test.run=^TestOTLPCollectorProcess$")
	// One P: the collector's work is one request at a time, and with more the Go
	// scheduler spins threads looking for work on the cores the services run on.
	cmd.Env = append(os.Environ(), collectorProcessEnv+"=1", "GOMAXPROCS=1")
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { in.Close(); cmd.Wait() })
	c := &collectorProcess{pid: cmd.Process.Pid, in: in, out: bufio.NewScanner(out)}
	for c.out.Scan() {
		if e, ok := strings.CutPrefix(c.out.Text(), "endpoint "); ok {
			c.endpoint, c.httpEndpoint, _ = strings.Cut(e, " ")
			return c
		}
	}
	b.Fatalf("the collector process did not start: %v", c.out.Err())
	return nil
}

// count returns how many spans the collector has received, how many of them were
// named name, and in how many export requests.
func (c *collectorProcess) count(name string) (total, named, exports int) {
	fmt.Fprintln(c.in, name)
	if !c.out.Scan() {
		panic(fmt.Sprintf("collector process: %v", c.out.Err()))
	}
	if _, err := fmt.Sscan(c.out.Text(), &total, &named, &exports); err != nil {
		panic(fmt.Sprintf("collector process said %q: %v", c.out.Text(), err))
	}
	return total, named, exports
}

// TestOTLPCollectorProcess is the collector BenchmarkTracingOverhead starts in a child
// process; each line on stdin names a span to count.
func TestOTLPCollectorProcess(t *testing.T) {
	if os.Getenv(collectorProcessEnv) != "1" {
		t.Skip("the benchmark's child process")
	}
	col := otlptest.StartCounting(t)
	fmt.Println("endpoint", col.Endpoint(), col.HTTPEndpoint())
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		total, named := col.Count(sc.Text())
		fmt.Println(total, named, col.Exports())
	}
}

// sample is one mode's measurements in one round.
type sample struct {
	t0, t2, echo, t0Again []time.Duration
	// otherTier counts the T2 and T0 calls another tier answered, left out of their
	// latencies: a share of them would make the figures about something else.
	otherTier  int
	cpuPerIter time.Duration
	gc         gcUse
	// Allocations do not depend on what else runs on the machine: the steadiest
	// measure of what tracing adds.
	allocsPerIter, bytesPerIter float64
}

// medianOf is the median over rounds of one figure of each round.
func medianOf(rounds []sample, get func(sample) float64) float64 {
	var v []float64
	for _, r := range rounds {
		v = append(v, get(r))
	}
	return median(v)
}

// pooledAdded compares the q-quantile of all calls of one kind with tracing on against
// the same with tracing off, each over every round. A p99 over one round's few hundred
// calls is set by its three slowest, and one scheduler hiccup moves it by half; over
// all rounds it is set by dozens. The rounds alternate modes, so load that comes and
// goes falls on both sides. lo and hi are a 95 % bootstrap interval of the added
// percentage, resampling whole rounds (each with its two modes) to keep what one round
// shares.
func pooledAdded(off, on []sample, get func(sample) []time.Duration, q float64) (offQ, onQ, added, lo, hi float64) {
	pool := func(rounds []sample, pick []int) []time.Duration {
		var all []time.Duration
		for _, r := range pick {
			all = append(all, get(rounds[r])...)
		}
		slices.Sort(all)
		return all
	}
	every := make([]int, len(off))
	for r := range every {
		every[r] = r
	}
	ratio := func(pick []int) float64 {
		return us(quantile(pool(on, pick), q)) / us(quantile(pool(off, pick), q))
	}
	offQ, onQ = us(quantile(pool(off, every), q)), us(quantile(pool(on, every), q))
	// A fixed seed: the same samples give the same interval.
	rnd := rand.New(rand.NewPCG(1, 2))
	const resamples = 400
	ratios := make([]float64, resamples)
	pick := make([]int, len(off))
	for i := range ratios {
		for j := range pick {
			pick[j] = rnd.IntN(len(off))
		}
		ratios[i] = ratio(pick)
	}
	slices.Sort(ratios)
	return offQ, onQ, 100 * (onQ/offQ - 1), 100 * (ratios[resamples*25/1000] - 1), 100 * (ratios[resamples*975/1000-1] - 1)
}

// addedPercent compares each round's on figure with the off figure of the same round,
// measured next to it, so that load which comes and goes on the machine falls on both
// sides of each ratio; it returns the median ratio as a percentage added.
func addedPercent(off, on []sample, get func(sample) float64) float64 {
	var ratios []float64
	for r := range off {
		ratios = append(ratios, get(on[r])/get(off[r]))
	}
	return 100 * (median(ratios) - 1)
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// cpuTime is the CPU time this process has used, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// modeProvider switches tracing between rounds in one process: each mode is a tracer
// provider, and every span starts in the one of the current mode. Package-level tracers
// take theirs from the first global provider set in a process, so it must be that one.
type modeProvider struct {
	embedded.TracerProvider
	mode atomic.Int32
	tps  []trace.TracerProvider // set before the first span starts
}

func (p *modeProvider) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return &modeTracer{p: p, name: name, opts: opts}
}

// set selects tracing off (mode 0) or on (mode 1).
func (p *modeProvider) set(on bool) {
	if on {
		p.mode.Store(1)
	} else {
		p.mode.Store(0)
	}
}

type modeTracer struct {
	embedded.Tracer
	p    *modeProvider
	name string
	opts []trace.TracerOption
	ts   [8]atomic.Pointer[trace.Tracer] // each mode's, made at its first span
}

func (t *modeTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	m := t.p.mode.Load()
	tr := t.ts[m].Load()
	if tr == nil {
		made := t.p.tps[m].Tracer(t.name, t.opts...)
		tr = &made
		t.ts[m].Store(tr)
	}
	return (*tr).Start(ctx, name, opts...)
}

// gcUse is what the garbage collector did over some iterations.
type gcUse struct {
	cyclesPer1000 float64
	cpuPerIter    float64 // µs, every kind of GC work (mark assists, workers, pauses)
}

// gcCounters are the runtime's cumulative GC counters.
type gcCounters struct {
	cycles uint64
	cpu    float64 // seconds
}

var gcSamples = []metrics.Sample{{Name: "/gc/cycles/total:gc-cycles"}, {Name: "/cpu/classes/gc/total:cpu-seconds"}}

func readGC() gcCounters {
	s := slices.Clone(gcSamples)
	metrics.Read(s)
	return gcCounters{cycles: s[0].Value.Uint64(), cpu: s[1].Value.Float64()}
}

func (c gcCounters) since(before gcCounters, n int) gcUse {
	return gcUse{
		cyclesPer1000: 1000 * float64(c.cycles-before.cycles) / float64(n),
		cpuPerIter:    1e6 * (c.cpu - before.cpu) / float64(n),
	}
}

// processSystem is search, agent and gateway, each in a process of its own.
type processSystem struct {
	query  quarryv1.QueryServiceClient
	health healthpb.HealthClient
	pids   []int
}

const serviceProcessEnv = "QUARRY_BENCH_SERVICE"

// startProcessSystem starts the three services as child processes (this test binary
// again, see TestServiceProcess) with env added to this process's environment.
func startProcessSystem(b *testing.B, env []string) *processSystem {
	sys := &processSystem{}
	search := startServiceProcess(b, sys, env, "search", "-listen", "127.0.0.1:0", "-kb-root", "../../examples/kb")
	agent := startServiceProcess(b, sys, env, "agent", "-listen", "127.0.0.1:0", "-search-addr", search)
	gateway := startServiceProcess(b, sys, env, "gateway", "-listen", "127.0.0.1:0", "-search-addr", search, "-agent-addr", agent,
		"-fuzzy-min-tokens", "1000")
	sys.query, sys.health = dialGateway(b, gateway)
	return sys
}

// startServiceProcess starts one service and returns the address it listens on. Its
// logs go to a file in the benchmark's temporary folder, named on failure.
func startServiceProcess(b *testing.B, sys *processSystem, env []string, service string, args ...string) string {
	logs, err := os.CreateTemp(b.TempDir(), service+"-*.log")
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestServiceProcess$", "--"}, args...)...)
	cmd.Env = append(append(os.Environ(), env...), serviceProcessEnv+"="+service)
	cmd.Stderr = logs
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logs.Close()
	})
	sys.pids = append(sys.pids, cmd.Process.Pid)
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "listening "); ok {
			go io.Copy(io.Discard, out)
			return addr
		}
	}
	b.Fatalf("%s did not start; its log: %s", service, logs.Name())
	return ""
}

// TestServiceProcess is a service BenchmarkTracingOverheadProcesses starts in a child
// process: what the service's command runs, with the address it listens on written
// to stdout.
func TestServiceProcess(t *testing.T) {
	service := os.Getenv(serviceProcessEnv)
	if service == "" {
		t.Skip("the benchmark's child process")
	}
	args := flag.Args()
	ready := func(a net.Addr) { fmt.Println("listening", a) }
	run := map[string]func(context.Context, *slog.Logger) error{
		"search":  func(ctx context.Context, log *slog.Logger) error { return searchapp.Run(ctx, args, log, ready) },
		"agent":   func(ctx context.Context, log *slog.Logger) error { return agentapp.Run(ctx, args, log, ready) },
		"gateway": func(ctx context.Context, log *slog.Logger) error { return gatewayapp.Run(ctx, args, log, ready) },
	}[service]
	if run == nil {
		t.Fatalf("%s=%q: want search, agent or gateway", serviceProcessEnv, service)
	}
	os.Exit(daemon.Main("quarry-"+service, run))
}

// sampledBounds is the range the number of n traces sampled at ratio falls in, but for
// one time in about a billion: ±6 standard deviations of the binomial count.
func sampledBounds(n int, ratio float64) (lo, hi int) {
	if ratio >= 1 {
		return n, n
	}
	mean, sd := float64(n)*ratio, math.Sqrt(float64(n)*ratio*(1-ratio))
	return max(0, int(math.Floor(mean-6*sd))), min(n, int(math.Ceil(mean+6*sd)))
}
