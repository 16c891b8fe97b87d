package signals

import (
	"context"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/quarry-router/quarry/services/search/tree"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// clock is a settable time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

const day = 24 * time.Hour

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestHysteresis(t *testing.T) {
	// Each step either records hits, records curations, or lets days pass, then flushes.
	type step struct {
		hits, curations int
		idle            time.Duration
		want            tree.Maturity
	}
	tests := []struct {
		rule     string
		start    float64
		maturity tree.Maturity
		steps    []step
	}{
		{"draft becomes validated at 65", 62, tree.Draft, []step{{hits: 1, want: tree.Validated}}},
		{"draft stays draft at 64", 61, tree.Draft, []step{{hits: 1, want: tree.Draft}}},
		{"validated becomes core at 85", 82, tree.Validated, []step{{hits: 1, want: tree.Core}}},
		{"validated stays validated at 84", 81, tree.Validated, []step{{hits: 1, want: tree.Validated}}},
		{"a curation counts +5 toward promotion", 60, tree.Draft, []step{{curations: 1, want: tree.Validated}}},
		{"many hits at once promote through both stages", 60, tree.Draft, []step{{hits: 9, want: tree.Core}}},
		{"core becomes validated below 60", 60.5, tree.Core, []step{{idle: 2 * day, want: tree.Validated}}},
		{"core holds at exactly 60", 60, tree.Core, []step{{want: tree.Core}}},
		{"validated becomes draft below 35", 35.1, tree.Validated, []step{{idle: 1 * day, want: tree.Draft}}},
		{"validated holds at exactly 35", 35, tree.Validated, []step{{want: tree.Validated}}},
		{"a long idle spell demotes core through both stages", 70, tree.Core, []step{{idle: 200 * day, want: tree.Draft}}},
		{
			"no oscillation around the validated threshold: falling below 65 keeps validated",
			64, tree.Draft, []step{
				{hits: 1, want: tree.Validated},        // 67
				{idle: 2 * day, want: tree.Validated},  // 66.3
				{idle: 10 * day, want: tree.Validated}, // ~63
				{hits: 1, want: tree.Validated},        // ~66
				{idle: 20 * day, want: tree.Validated}, // ~60
			},
		},
		{
			"no oscillation around the core threshold: falling below 85 keeps core",
			84, tree.Validated, []step{
				{hits: 1, want: tree.Core},        // 87
				{idle: 10 * day, want: tree.Core}, // ~82.8
				{hits: 1, want: tree.Core},        // ~85.8
				{idle: 30 * day, want: tree.Core}, // ~73.8
			},
		},
		{
			"a demoted file needs the full promotion threshold to come back",
			61, tree.Core, []step{
				{idle: 4 * day, want: tree.Validated}, // ~59.8
				{hits: 1, want: tree.Validated},       // ~62.8: above 60 but below 85
				{hits: 8, want: tree.Core},            // ~86.8
			},
		},
		{"a seeded stage outside its band settles at once: core at 50", 50, tree.Core, []step{{want: tree.Validated}}},
		{"a seeded stage outside its band settles at once: draft at 90", 90, tree.Draft, []step{{want: tree.Core}}},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			c := newClock()
			s := New(DefaultConfig(), c.now)
			s.Seed("a.md", tt.start, tt.maturity, time.Time{})
			for i, st := range tt.steps {
				c.advance(st.idle)
				for range st.hits {
					s.RecordHits([]string{"a.md"})
				}
				for range st.curations {
					s.RecordCuration("a.md")
				}
				s.Flush()
				got := s.Get("a.md")
				if got.Maturity != st.want {
					t.Fatalf("step %d: maturity %v at importance %.2f, want %v", i, got.Maturity, got.Importance, st.want)
				}
			}
		})
	}
}

func TestImportance(t *testing.T) {
	tests := []struct {
		rule  string
		start float64
		act   func(s *Store, c *clock)
		want  float64
	}{
		{"a hit adds 3", 50, func(s *Store, c *clock) { s.RecordHits([]string{"a.md"}) }, 53},
		{"a path returned twice in one search counts twice", 50, func(s *Store, c *clock) { s.RecordHits([]string{"a.md", "a.md"}) }, 56},
		{"a curation adds 5", 50, func(s *Store, c *clock) { s.RecordCuration("a.md") }, 55},
		{"hits and curations add up", 50, func(s *Store, c *clock) {
			s.RecordHits([]string{"a.md"})
			s.RecordHits([]string{"a.md"})
			s.RecordCuration("a.md")
		}, 61},
		{"importance is capped at 100 by hits", 99, func(s *Store, c *clock) { s.RecordHits([]string{"a.md"}) }, 100},
		{"importance is capped at 100 by curation", 98, func(s *Store, c *clock) { s.RecordCuration("a.md") }, 100},
		{"many hits stay at the cap", 90, func(s *Store, c *clock) {
			for range 50 {
				s.RecordHits([]string{"a.md"})
			}
		}, 100},
		{"importance decays 0.995 per idle day", 80, func(s *Store, c *clock) { c.advance(50 * day) }, 80 * math.Pow(0.995, 50)},
		{"decay counts fractional days", 80, func(s *Store, c *clock) { c.advance(12 * time.Hour) }, 80 * math.Pow(0.995, 0.5)},
		{"a hit lands on the decayed value and restarts the idle clock", 80, func(s *Store, c *clock) {
			c.advance(10 * day)
			s.RecordHits([]string{"a.md"})
			s.Flush()
			c.advance(10 * day)
		}, (80*math.Pow(0.995, 10) + 3) * math.Pow(0.995, 10)},
		{"a clock going backwards does not raise importance", 80, func(s *Store, c *clock) { c.advance(-5 * day) }, 80},
		{"hits on other paths change nothing", 50, func(s *Store, c *clock) { s.RecordHits([]string{"b.md", "unknown.md"}) }, 50},
	}
	for _, tt := range tests {
		t.Run(tt.rule, func(t *testing.T) {
			c := newClock()
			s := New(DefaultConfig(), c.now)
			s.Seed("a.md", tt.start, tree.Draft, time.Time{})
			s.Seed("b.md", 50, tree.Draft, time.Time{})
			tt.act(s, c)
			s.Flush()
			if got := s.Get("a.md").Importance; !near(got, tt.want) {
				t.Errorf("importance = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestHitsCountOnlyOnceFlushed(t *testing.T) {
	s := New(DefaultConfig(), newClock().now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	s.RecordHits([]string{"a.md"})
	s.RecordCuration("a.md")
	if got := s.Get("a.md").Importance; got != 50 {
		t.Errorf("importance %v before Flush, want 50", got)
	}
	s.Flush()
	if got := s.Get("a.md").Importance; got != 58 {
		t.Errorf("importance %v after Flush, want 58", got)
	}
}

func TestGetAndSeed(t *testing.T) {
	c := newClock()
	s := New(DefaultConfig(), c.now)
	updated := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	if got := s.Get("a.md"); got.Known || got != (Signal{}) {
		t.Errorf("unseeded path = %+v, want the zero Signal", got)
	}
	s.Seed("a.md", 70, tree.Validated, updated)
	want := Signal{Importance: 70, Maturity: tree.Validated, LastAccess: c.now(), Updated: updated, Known: true}
	if got := s.Get("a.md"); got != want {
		t.Errorf("Get = %+v, want %+v", got, want)
	}
	c.advance(day)
	s.RecordHits([]string{"a.md"})
	s.Flush()
	if got := s.Get("a.md").LastAccess; !got.Equal(c.now()) {
		t.Errorf("LastAccess = %v, want the flush time %v", got, c.now())
	}
	for _, v := range []struct{ in, want float64 }{{-5, 0}, {250, 100}, {math.NaN(), 0}} {
		s.Seed("x.md", v.in, tree.Draft, updated)
		if got := s.Get("x.md").Importance; got != v.want {
			t.Errorf("Seed(%v) gives importance %v, want %v", v.in, got, v.want)
		}
	}
}

func TestUnseededPathsAreIgnoredByFlush(t *testing.T) {
	s := New(DefaultConfig(), newClock().now)
	s.RecordHits([]string{"ghost.md"})
	s.RecordCuration("ghost.md")
	s.Flush()
	if got := s.Get("ghost.md"); got.Known {
		t.Errorf("a hit created state for an unseeded path: %+v", got)
	}
	if len(s.Snapshot()) != 0 {
		t.Errorf("Snapshot = %v, want empty", s.Snapshot())
	}
}

// The same hits in any order and any batching give the same state.
func TestFlushIsDeterministic(t *testing.T) {
	paths := []string{"a.md", "b.md", "c.md", "d.md"}
	run := func(batches [][]string, curations []string) []Record {
		c := newClock()
		s := New(DefaultConfig(), c.now)
		for i, p := range paths {
			s.Seed(p, float64(40+10*i), tree.Draft, time.Time{})
		}
		c.advance(3 * day)
		for _, b := range batches {
			s.RecordHits(b)
		}
		for _, p := range curations {
			s.RecordCuration(p)
		}
		s.Flush()
		return s.Snapshot()
	}
	want := run([][]string{{"a.md", "b.md"}, {"a.md"}, {"c.md", "d.md", "d.md"}}, []string{"b.md", "c.md"})
	orders := []struct {
		name      string
		batches   [][]string
		curations []string
	}{
		{"batches reversed", [][]string{{"c.md", "d.md", "d.md"}, {"a.md"}, {"a.md", "b.md"}}, []string{"c.md", "b.md"}},
		{"one batch", [][]string{{"d.md", "c.md", "b.md", "a.md", "a.md", "d.md"}}, []string{"b.md", "c.md"}},
		{"one path per batch", [][]string{{"d.md"}, {"a.md"}, {"d.md"}, {"b.md"}, {"c.md"}, {"a.md"}}, []string{"c.md", "b.md"}},
	}
	for _, o := range orders {
		if got := run(o.batches, o.curations); !slices.Equal(got, want) {
			t.Errorf("%s: state %v, want %v", o.name, got, want)
		}
	}
	// And a second flush with nothing pending changes nothing.
	c := newClock()
	s := New(DefaultConfig(), c.now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	s.RecordHits([]string{"a.md"})
	s.Flush()
	before := s.Snapshot()
	s.Flush()
	if after := s.Snapshot(); !slices.Equal(before, after) {
		t.Errorf("an empty flush changed state: %v -> %v", before, after)
	}
}

func TestRecordHitsNeverWaitsForABusyShard(t *testing.T) {
	s := New(DefaultConfig(), newClock().now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	// Hold every shard, as concurrent callers or a flush might at one instant. A
	// recorder that waited for a lock would hang here until the test times out.
	for i := range s.shards {
		s.shards[i].mu.Lock()
	}
	s.RecordHits([]string{"a.md", "a.md"})
	for i := range s.shards {
		s.shards[i].mu.Unlock()
	}
	if got := s.Dropped(); got != 2 {
		t.Errorf("Dropped() = %d, want 2", got)
	}
	// With one shard free, the hits land there.
	for i := 1; i < len(s.shards); i++ {
		s.shards[i].mu.Lock()
	}
	s.RecordHits([]string{"a.md"})
	for i := 1; i < len(s.shards); i++ {
		s.shards[i].mu.Unlock()
	}
	s.Flush()
	if got := s.Get("a.md").Importance; got != 53 || s.Dropped() != 2 {
		t.Errorf("importance %v, dropped %d; want 53 and 2", got, s.Dropped())
	}
	s.RecordHits(nil)
	s.RecordHits([]string{})
	if s.Dropped() != 2 {
		t.Error("empty hit lists were counted")
	}
}

func TestPendingPathsAreBounded(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HitGain = 1
	cfg.DecayPerDay = 1
	s := New(cfg, newClock().now)
	cfg.MaxPendingPaths = len(s.shards) // one distinct path per shard
	s = New(cfg, newClock().now)
	const n = 100
	var paths []string
	for i := range n {
		p := fmt.Sprintf("d/%d.md", i)
		paths = append(paths, p)
		s.Seed(p, 0, tree.Draft, time.Time{})
		s.RecordHits([]string{p})
	}
	pending := 0
	for i := range s.shards {
		if l := len(s.shards[i].counts); l > 1 {
			t.Errorf("shard %d holds %d paths, over its share of 1", i, l)
		}
		pending += len(s.shards[i].counts)
	}
	if pending+int(s.Dropped()) != n {
		t.Errorf("pending %d + dropped %d != recorded %d", pending, s.Dropped(), n)
	}
	s.Flush()
	applied := 0.0
	for _, p := range paths {
		applied += s.Get(p).Importance
	}
	if int(applied) != pending {
		t.Errorf("flush applied %v hits, want the %d pending", applied, pending)
	}
	for i := range s.shards {
		if len(s.shards[i].counts) != 0 {
			t.Errorf("shard %d still holds %d paths after Flush", i, len(s.shards[i].counts))
		}
	}
}

func TestRecordHitsCopiesItsArgument(t *testing.T) {
	s := New(DefaultConfig(), newClock().now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	s.Seed("b.md", 50, tree.Draft, time.Time{})
	buf := []string{"a.md"}
	s.RecordHits(buf)
	buf[0] = "b.md" // the caller reuses its slice
	s.Flush()
	if a, b := s.Get("a.md").Importance, s.Get("b.md").Importance; a != 53 || b != 50 {
		t.Errorf("importance a=%v b=%v, want 53 and 50", a, b)
	}
}

// Under concurrent recording and flushing, every hit is either applied or counted as
// dropped: none is lost or applied twice.
func TestConcurrentHitsAreAppliedOrCounted(t *testing.T) {
	cfg := DefaultConfig()
	cfg.HitGain = 1
	cfg.MaxImportance = 1e9
	cfg.DecayPerDay = 1
	s := New(cfg, newClock().now)
	s.Seed("a.md", 0, tree.Draft, time.Time{})
	const writers, calls = 8, 2000
	var wg sync.WaitGroup
	done := make(chan struct{})
	flusherDone := make(chan struct{})
	go func() {
		defer close(flusherDone)
		for {
			select {
			case <-done:
				return
			default:
				s.Flush()
			}
		}
	}()
	for range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range calls {
				s.RecordHits([]string{"a.md"})
			}
		}()
	}
	wg.Wait()
	close(done)
	<-flusherDone
	s.Flush()
	applied := uint64(s.Get("a.md").Importance)
	if applied+s.Dropped() != writers*calls {
		t.Errorf("applied %d + dropped %d != recorded %d", applied, s.Dropped(), writers*calls)
	}
}

func TestRunFlushesUntilTheContextEnds(t *testing.T) {
	s := New(DefaultConfig(), newClock().now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	flushed := make(chan struct{}, 1)
	s.onFlush = func() {
		select {
		case flushed <- struct{}{}:
		default:
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		s.Run(ctx, time.Millisecond)
	}()
	s.RecordHits([]string{"a.md"})
	for s.Get("a.md").Importance != 53 {
		<-flushed // wait for a periodic flush, not a fixed time
	}
	s.RecordHits([]string{"a.md"})
	cancel()
	<-stopped
	if got := s.Get("a.md").Importance; got != 56 {
		t.Errorf("importance %v after Run returned, want 56: the final flush must apply pending hits", got)
	}
}

func TestSnapshotAndRestoreCarryLearnedState(t *testing.T) {
	c := newClock()
	old := New(DefaultConfig(), c.now)
	old.Seed("kept.md", 60, tree.Draft, time.Time{})
	old.Seed("removed.md", 50, tree.Draft, time.Time{})
	for range 5 {
		old.RecordHits([]string{"kept.md"})
	}
	old.Flush() // kept.md: 75, validated
	c.advance(day)

	reloaded := New(DefaultConfig(), c.now)
	reloaded.Seed("kept.md", 60, tree.Draft, time.Time{})
	reloaded.Seed("new.md", 50, tree.Draft, time.Time{})
	reloaded.Restore(old.Snapshot())

	if got, want := reloaded.Get("kept.md"), old.Get("kept.md"); got.Importance != want.Importance || got.Maturity != tree.Validated {
		t.Errorf("kept.md after restore = %+v, want importance %v validated", got, want.Importance)
	}
	if got := reloaded.Get("removed.md"); got.Known {
		t.Errorf("a removed file came back: %+v", got)
	}
	if got := reloaded.Get("new.md").Importance; got != 50 {
		t.Errorf("new.md = %v, want its seed 50", got)
	}
}

func TestConfig(t *testing.T) {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	if c != DefaultConfig() {
		t.Errorf("flag defaults %+v differ from DefaultConfig %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	tests := []struct {
		rule   string
		mutate func(*Config)
		flag   string
	}{
		{"a negative hit gain is refused", func(c *Config) { c.HitGain = -1 }, "signals-hit-gain"},
		{"a NaN curation gain is refused", func(c *Config) { c.CurationGain = math.NaN() }, "signals-curation-gain"},
		{"a zero cap is refused", func(c *Config) { c.MaxImportance = 0 }, "signals-max-importance"},
		{"decay above 1 is refused", func(c *Config) { c.DecayPerDay = 1.01 }, "signals-decay-per-day"},
		{"zero decay is refused", func(c *Config) { c.DecayPerDay = 0 }, "signals-decay-per-day"},
		{"a threshold above the cap is refused", func(c *Config) { c.PromoteCore = 101 }, "signals-promote-core"},
		{"demotion at or above promotion to validated is refused", func(c *Config) { c.DemoteValidated = 65 }, "signals-demote-validated"},
		{"demotion at or above promotion to core is refused", func(c *Config) { c.DemoteCore = 85 }, "signals-demote-core"},
		{"promotion to validated at or above core is refused", func(c *Config) { c.PromoteValidated = 90; c.DemoteValidated = 10 }, "signals-promote-validated"},
		{"a zero flush interval is refused", func(c *Config) { c.FlushInterval = 0 }, "signals-flush-interval"},
		{"a zero pending-path limit is refused", func(c *Config) { c.MaxPendingPaths = 0 }, "signals-max-pending-paths"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%s: err = %v, want one naming -%s", tt.rule, err, tt.flag)
		}
	}
}

// BenchmarkRecordHits measures the query-path cost of recording hits, beside a baseline
// of the simplest alternative (a mutex-guarded map updated in place) in the same run.
func BenchmarkRecordHits(b *testing.B) {
	paths := []string{"auth/jwt/rotation.md", "auth/oauth/flow.md", "ops/deploy.md", "ops/rollback.md", "auth/_index.md"}
	b.Run("store", func(b *testing.B) {
		s := New(DefaultConfig(), time.Now)
		for _, p := range paths {
			s.Seed(p, 50, tree.Draft, time.Time{})
		}
		// A flusher runs as in production; its share of the CPU is part of the cost.
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() { defer close(stopped); s.Run(ctx, 10*time.Millisecond) }()
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				s.RecordHits(paths)
			}
		})
		b.StopTimer()
		cancel()
		<-stopped
		b.ReportMetric(float64(s.Dropped())/float64(b.N), "dropped/op")
	})
	b.Run("baseline-mutex-map", func(b *testing.B) {
		var mu sync.Mutex
		counts := map[string]int{}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				mu.Lock()
				for _, p := range paths {
					counts[p]++
				}
				mu.Unlock()
			}
		})
	})
}

func BenchmarkGet(b *testing.B) {
	s := New(DefaultConfig(), time.Now)
	keys := make([]string, 5000)
	for i := range keys {
		keys[i] = fmt.Sprintf("d/%d.md", i)
		s.Seed(keys[i], 50, tree.Draft, time.Time{})
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			s.Get(keys[i%len(keys)])
			i++
		}
	})
}

func TestZeroConfigMeansDefaults(t *testing.T) {
	s := New(Config{}, newClock().now)
	s.Seed("a.md", 50, tree.Draft, time.Time{})
	s.RecordHits([]string{"a.md"})
	s.Flush()
	if got := s.Get("a.md").Importance; got != 53 {
		t.Errorf("importance %v with the zero Config, want the default +3 = 53", got)
	}
}
