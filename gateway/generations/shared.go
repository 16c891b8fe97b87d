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
	States() map[string]State
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

	snap atomic.Pointer[map[string]State]
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
	s.snap.Store(&map[string]State{})
	return s
}

// State returns the state of kb with the greatest generation any replica has published
// (zero if none), and its content version when the replica that published it knew it.
func (s *Shared) State(kb string) State { return (*s.snap.Load())[kb] }

// Synced returns a channel that is closed once the view has read Redis's state, so a
// starting gateway need not serve a generation the other replicas have left behind.
func (s *Shared) Synced() <-chan struct{} { return s.synced }

// Updated returns a channel that is closed at the next raise of the view.
func (s *Shared) Updated() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// raise installs st as kb's state if its generation is greater, or the same with the
// content version that was missing.
func (s *Shared) raise(kb string, st State) {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := *s.snap.Load()
	if !newer(st, cur[kb]) {
		return
	}
	next := maps.Clone(cur)
	next[kb] = st
	s.snap.Store(&next)
	close(s.changed)
	s.changed = make(chan struct{})
}

// newer reports whether st should replace cur: a greater generation, or the same one
// with the content version cur lacks.
func newer(st, cur State) bool {
	return st.Generation > cur.Generation ||
		st.Generation == cur.Generation && cur.Version == 0 && st.Version != 0
}

// bumpScript raises a knowledge base's state in the hash if its generation is greater
// (or the same, with the content version the hash lacks) and then publishes it. A value
// is "generation version", or "generation" alone from a replica that knew no version.
// Generations are compared as decimal strings (longer is greater), which is exact for
// every uint64, unlike Lua's doubles.
//
// KEYS: hash. ARGV: kb, generation, channel, version ("" when unknown).
var bumpScript = redis.NewScript(`
local cur = redis.call('HGET', KEYS[1], ARGV[1])
local g, v = ARGV[2], ARGV[4]
if cur then
  local cg, cv = string.match(cur, '^(%d+) ?(%d*)$')
  if cg then
    if #cg > #g or (#cg == #g and cg > g) then return 0 end
    if cg == g and (cv ~= '' or v == '') then return 0 end
  end
end
local val = g
if v ~= '' then val = g .. ' ' .. v end
redis.call('HSET', KEYS[1], ARGV[1], val)
redis.call('PUBLISH', ARGV[3], ARGV[1] .. ' ' .. val)
return 1
`)

// Publish raises kb's state to st in Redis, telling every replica, unless Redis
// already holds a greater generation (or the same one, with its version). The local
// view is raised either way.
func (s *Shared) Publish(ctx context.Context, kb string, st State) error {
	s.raise(kb, st)
	ctx, cancel := context.WithTimeout(ctx, sharedCallTimeout)
	defer cancel()
	v := ""
	if st.Version != 0 {
		v = strconv.FormatUint(st.Version, 10)
	}
	return bumpScript.Run(ctx, s.client, []string{s.hash}, kb, strconv.FormatUint(st.Generation, 10), s.channel, v).Err()
}

// parseState reads a hash value or the part of a message after the knowledge base:
// "generation version", or "generation" alone.
func parseState(s string) (State, bool) {
	g, v, hasV := strings.Cut(s, " ")
	gen, err := strconv.ParseUint(g, 10, 64)
	if err != nil {
		return State{}, false
	}
	st := State{Generation: gen}
	if hasV {
		if st.Version, err = strconv.ParseUint(v, 10, 64); err != nil {
			return State{}, false
		}
	}
	return st, true
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
			kb, rest, ok := strings.Cut(m.Payload, " ")
			if st, valid := parseState(rest); ok && valid {
				s.raise(kb, st)
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
	for kb, v := range all {
		if st, ok := parseState(v); ok {
			s.raise(kb, st)
		}
	}
	s.syncedOnce.Do(func() { close(s.synced) })
	return nil
}

// mirror publishes every generation local reports that it has not published yet, and
// everything again after each resync.
func (s *Shared) mirror(ctx context.Context, local Source, resync <-chan struct{}) {
	published := map[string]State{}
	for {
		updated := local.Updated()
		var retry <-chan time.Time
		for kb, st := range local.States() {
			if !newer(st, published[kb]) {
				continue
			}
			if err := s.Publish(ctx, kb, st); err != nil {
				s.log.Debug("publish generation", "kb", kb, "generation", st.Generation, "err", err)
				retry = time.After(sharedPing)
				continue
			}
			published[kb] = st
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

// WaitReady implements route.Generations: the search service's view alone says which
// knowledge bases exist.
func (c Combined) WaitReady(ctx context.Context) error { return c.Local.WaitReady(ctx) }

// Names implements route.Generations, from the search service's view.
func (c Combined) Names() []string { return c.Local.Names() }

// State implements route.Generations: the search service's state, or the shared
// view's when its generation is greater. The shared view may hold another search
// replica's generation of the very content this gateway's own search holds (replicas
// number generations from their own clocks); its version is then the same, and so is
// where answers are cached.
func (c Combined) State(kb string) (State, bool, error) {
	local, ok, err := c.Local.State(kb)
	if err != nil || !ok {
		return local, ok, err
	}
	if sh := c.Shared.State(kb); sh.Generation > local.Generation {
		return sh, true, nil
	}
	return local, true, nil
}
