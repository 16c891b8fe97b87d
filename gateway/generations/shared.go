package generations

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Source is a first-hand view of the generations: the Watcher, fed by the search
// service.
type Source interface {
	Snapshot() map[string]uint64
	Updated() <-chan struct{}
}

// sharedPing is how long the subscription may stay silent before it is pinged; a ping
// unanswered for as long again means the connection is dead and is replaced.
const sharedPing = time.Second

// sharedCallTimeout bounds the Redis calls of the shared view, none on the query path.
const sharedCallTimeout = time.Second

// Shared is the generation view every gateway replica shares through Redis. The search
// service is the source of generations: each replica writes what its own watch stream
// reports into a Redis hash, keeping the greater value (a Lua script), and a raise is
// published on a channel every replica subscribes to. A replica whose watch stream
// lags, or is reconnecting, thus stops serving the old generation's answers as soon as
// any replica has seen the bump. Generations only grow, so the view is a maximum and
// never goes back, not even when Redis loses its data.
type Shared struct {
	client  redis.UniversalClient
	hash    string
	channel string
	log     *slog.Logger

	snap atomic.Pointer[map[string]uint64]
	mu   sync.Mutex // serialises raises
	// changed is closed and replaced on every raise.
	changed chan struct{}
	// synced is closed once the hash has been read the first time.
	synced     chan struct{}
	syncedOnce sync.Once
}

// NewShared returns a view kept under prefix on client (the same prefix as the cache's
// keys). Call Run to follow the other replicas.
func NewShared(client redis.UniversalClient, prefix string, log *slog.Logger) *Shared {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Shared{client: client, hash: prefix + "generations", channel: prefix + "generations", log: log,
		changed: make(chan struct{}), synced: make(chan struct{})}
	s.snap.Store(&map[string]uint64{})
	return s
}

// Generation returns the greatest generation of kb any replica has published, 0 if none.
func (s *Shared) Generation(kb string) uint64 { return (*s.snap.Load())[kb] }

// Snapshot returns a copy of the shared view.
func (s *Shared) Snapshot() map[string]uint64 { return maps.Clone(*s.snap.Load()) }

// Synced returns a channel that is closed once the view has read Redis's state, so a
// starting gateway need not serve a generation the other replicas have left behind.
func (s *Shared) Synced() <-chan struct{} { return s.synced }

// Updated returns a channel that is closed at the next raise of the view.
func (s *Shared) Updated() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

func (s *Shared) raise(kb string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.snap.Load()
	if cur[kb] >= gen {
		return
	}
	next := maps.Clone(cur)
	next[kb] = gen
	s.snap.Store(&next)
	close(s.changed)
	s.changed = make(chan struct{})
}

// bumpScript raises a knowledge base's generation in the hash if the new one is greater
// and then publishes it. Generations are compared as decimal strings (longer is
// greater), which is exact for every uint64, unlike Lua's doubles.
//
// KEYS: hash. ARGV: kb, generation, channel.
var bumpScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local g = ARGV[2]
if cur and (#cur > #g or (#cur == #g and cur >= g)) then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], g)
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. g)
return 1
`)

// Publish raises kb's generation to gen in Redis, telling every replica, unless Redis
// already holds a greater or equal one. The local view is raised either way.
func (s *Shared) Publish(ctx context.Context, kb string, gen uint64) error {
	s.raise(kb, gen)
	ctx, cancel := context.WithTimeout(ctx, sharedCallTimeout)
	defer cancel()
	return bumpScript.Run(ctx, s.client, []string{s.hash}, kb, strconv.FormatUint(gen, 10), s.channel).Err()
}

// Run follows the other replicas' bumps and publishes the ones local reports, until ctx
// ends. It reconnects by itself; after every (re)connection it reads the whole hash,
// for bumps published while it was away, and publishes local's whole view again, for
// a Redis that restarted empty.
func (s *Shared) Run(ctx context.Context, local Source) error {
	resync := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { s.mirror(ctx, local, resync) })
	defer wg.Wait()

	delay, down := 100*time.Millisecond, time.Time{}
	for ctx.Err() == nil {
		err := s.follow(ctx, resync, func() {
			if !down.IsZero() {
				s.log.Info("shared generations reachable again", "outage", time.Since(down).Round(time.Millisecond))
				down = time.Time{}
			}
			delay = 100 * time.Millisecond
		})
		if ctx.Err() != nil {
			break
		}
		if down.IsZero() {
			down = time.Now()
			s.log.Warn("shared generations unavailable; using the search service's view until Redis is back", "err", err)
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		delay = min(delay*2, 2*time.Second)
	}
	return nil
}

// follow reads one subscription until it breaks; connected is called once it is
// subscribed and the hash has been read.
func (s *Shared) follow(ctx context.Context, resync chan<- struct{}, connected func()) error {
	ps := s.client.Subscribe(ctx, s.channel)
	stop := context.AfterFunc(ctx, func() { _ = ps.Close() })
	defer func() {
		stop()
		_ = ps.Close()
	}()
	pinged := false
	for {
		msg, err := ps.ReceiveTimeout(ctx, sharedPing)
		if ctx.Err() != nil {
			return nil
		}
		var ne net.Error
		switch {
		case err != nil && errors.As(err, &ne) && ne.Timeout() && !pinged:
			if err := ps.Ping(ctx); err != nil {
				return err
			}
			pinged = true
			continue
		case err != nil && errors.As(err, &ne) && ne.Timeout():
			return errors.New("subscription silent: no reply to a ping")
		case err != nil:
			return err
		}
		pinged = false
		switch m := msg.(type) {
		case *redis.Subscription:
			if err := s.reload(ctx); err != nil {
				return err
			}
			select {
			case resync <- struct{}{}:
			default:
			}
			connected()
		case *redis.Message:
			kb, g, ok := strings.Cut(m.Payload, " ")
			if gen, err := strconv.ParseUint(g, 10, 64); ok && err == nil {
				s.raise(kb, gen)
			}
		}
	}
}

func (s *Shared) reload(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, sharedCallTimeout)
	defer cancel()
	all, err := s.client.HGetAll(ctx, s.hash).Result()
	if err != nil {
		return err
	}
	for kb, g := range all {
		if gen, err := strconv.ParseUint(g, 10, 64); err == nil {
			s.raise(kb, gen)
		}
	}
	s.syncedOnce.Do(func() { close(s.synced) })
	return nil
}

// mirror publishes every generation local reports that it has not published yet, and
// everything again after each resync.
func (s *Shared) mirror(ctx context.Context, local Source, resync <-chan struct{}) {
	published := map[string]uint64{}
	for {
		updated := local.Updated()
		var retry <-chan time.Time
		for kb, gen := range local.Snapshot() {
			if gen <= published[kb] {
				continue
			}
			if err := s.Publish(ctx, kb, gen); err != nil {
				s.log.Debug("publish generation", "kb", kb, "generation", gen, "err", err)
				retry = time.After(sharedPing)
				continue
			}
			published[kb] = gen
		}
		select {
		case <-ctx.Done():
			return
		case <-updated:
		case <-retry:
		case <-resync:
			clear(published)
		}
	}
}

// Combined is the generation view the router uses: the search service's (which alone
// says which knowledge bases exist), raised to the shared view's when that is newer.
type Combined struct {
	Local  *Watcher
	Shared *Shared
}

// Generation implements route.Generations.
func (c Combined) Generation(kb string) (uint64, bool, error) {
	gen, ok, err := c.Local.Generation(kb)
	if err != nil || !ok {
		return gen, ok, err
	}
	return max(gen, c.Shared.Generation(kb)), true, nil
}
