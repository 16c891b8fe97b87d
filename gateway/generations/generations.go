// Package generations keeps the gateway's view of each knowledge base's generation,
// streamed from the search service.
package generations

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
)

// ErrNotReady is returned by State until the first state has arrived.
var ErrNotReady = errors.New("generations: not synced with the search service yet")

// State is what the gateway knows of a knowledge base: its newest generation, which
// orders changes, and the version of the content that generation holds (0 when it is
// not known: a search service or gateway replica that predates versions).
type State struct {
	Generation, Version uint64
}

// CacheKey is what answers of this state are cached under: the content version, so
// that search replicas holding the same tree share answers although each numbers
// generations from its own clock, or the generation when the version is not known.
// Versions have their top bit set and generations count milliseconds, so the two never
// meet.
func (s State) CacheKey() uint64 {
	if s.Version != 0 {
		return s.Version
	}
	return s.Generation
}

// Config holds the reconnect backoff of the watch stream.
type Config struct {
	// BackoffMin is the first delay before reconnecting a broken watch.
	BackoffMin time.Duration
	// BackoffMax caps the delay, which doubles after each failed attempt.
	BackoffMax time.Duration
}

// RegisterFlags registers the watcher flags with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.BackoffMin, "generations-backoff-min", 100*time.Millisecond, "first delay before re-opening the generation watch")
	fs.DurationVar(&c.BackoffMax, "generations-backoff-max", 5*time.Second, "longest delay before re-opening the generation watch")
}

// Validate rejects delays the watcher cannot use, naming the flag.
func (c *Config) Validate() error {
	switch {
	case c.BackoffMin <= 0:
		return fmt.Errorf("-generations-backoff-min must be positive, got %s", c.BackoffMin)
	case c.BackoffMax < c.BackoffMin:
		return fmt.Errorf("-generations-backoff-max (%s) must be at least -generations-backoff-min (%s)", c.BackoffMax, c.BackoffMin)
	}
	return nil
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("generations", flag.ContinueOnError))
	return c
}

// Watcher follows SearchService.WatchGenerations and answers generation lookups from
// an in-memory snapshot. While the stream is down it keeps the last state it saw, so
// answers cached under those generations stay servable.
type Watcher struct {
	client quarryv1.SearchServiceClient
	cfg    Config
	log    *slog.Logger

	snap      atomic.Pointer[map[string]State]
	ready     chan struct{}
	readyOnce sync.Once

	mu      sync.Mutex
	changed chan struct{} // closed and replaced on every update
}

// New returns a Watcher; call Run to start following the search service.
func New(client quarryv1.SearchServiceClient, cfg Config, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Watcher{client: client, cfg: cfg, log: log, ready: make(chan struct{}), changed: make(chan struct{})}
}

// State reports kb's current generation and content version; ok is false for an
// unknown knowledge base. It returns ErrNotReady until the first state has arrived.
func (w *Watcher) State(kb string) (st State, ok bool, err error) {
	m := w.snap.Load()
	if m == nil {
		return State{}, false, ErrNotReady
	}
	st, ok = (*m)[kb]
	return st, ok, nil
}

// States returns a copy of the known states (nil before the first state).
func (w *Watcher) States() map[string]State {
	m := w.snap.Load()
	if m == nil {
		return nil
	}
	return maps.Clone(*m)
}

// Updated returns a channel that is closed at the next update of the snapshot.
func (w *Watcher) Updated() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Names lists the knowledge bases of the current state, sorted (none before the first).
func (w *Watcher) Names() []string {
	m := w.snap.Load()
	if m == nil {
		return nil
	}
	return slices.Sorted(maps.Keys(*m))
}

// WaitReady blocks until the first state has arrived or ctx ends.
func (w *Watcher) WaitReady(ctx context.Context) error {
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for knowledge base generations: %w", ctx.Err())
	}
}

// Run follows the watch stream until ctx ends, reconnecting with capped, jittered
// exponential backoff. It returns nil once ctx is done.
func (w *Watcher) Run(ctx context.Context) error {
	delay := w.cfg.BackoffMin
	for {
		received, err := w.watch(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if received {
			delay = w.cfg.BackoffMin
		}
		// Jitter spreads the reconnects of many gateway replicas after a search restart.
		wait := delay/2 + rand.N(delay/2+1)
		w.log.WarnContext(ctx, "generation watch ended; reconnecting", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		delay = min(delay*2, w.cfg.BackoffMax)
	}
}

// watch reads one stream until it breaks, reporting whether any state arrived.
func (w *Watcher) watch(ctx context.Context) (received bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := w.client.WatchGenerations(ctx, &quarryv1.WatchGenerationsRequest{})
	if err != nil {
		return false, fmt.Errorf("open generation watch: %w", err)
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return received, fmt.Errorf("receive generations: %w", err)
		}
		w.apply(msg, !received)
		received = true
	}
}

// apply installs a stream message. The first message of a stream is the whole state
// and replaces the snapshot, so knowledge bases removed while disconnected disappear;
// later ones are changes.
func (w *Watcher) apply(msg *quarryv1.WatchGenerationsResponse, full bool) {
	next := make(map[string]State)
	if old := w.snap.Load(); old != nil && !full {
		maps.Copy(next, *old)
	}
	for _, kb := range msg.GetKnowledgeBases() {
		next[kb.GetId()] = State{Generation: kb.GetGeneration(), Version: kb.GetContentVersion()}
	}
	for _, id := range msg.GetRemoved() {
		delete(next, id)
	}
	w.snap.Store(&next)
	w.readyOnce.Do(func() { close(w.ready) })

	w.mu.Lock()
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.log.Debug("knowledge base generations updated", "full", full, "count", len(next))
}
