package cache

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// TryLease takes the lease called name for ttl, unless another holder has it: with
// several gateway replicas, one asks the LLM for a question while the others wait for
// its answer to reach the cache, instead of each paying for the same answer (a new
// generation empties the cache of every replica at once). A taken lease is renewed
// every ttl/3 until release is called, so an answer that takes longer than ttl keeps
// it, and a replica that dies loses it within ttl. release may be called more than
// once. A Redis failure is an error wrapping ErrUnavailable; the caller then answers
// itself, as without the lease.
func (r *Redis) TryLease(ctx context.Context, name string, ttl time.Duration) (held bool, release func(), err error) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	key := r.leaseKey(name)
	sent := false
	err = r.call(ctx, opLease, func(ctx context.Context) error {
		sent = true
		var err error
		held, err = r.c.SetNX(ctx, key, token, ttl).Result()
		return err
	})
	if err != nil {
		if sent {
			// Redis may have taken the lease and the reply missed the deadline: drop it
			// if it is this token's, on a longer one, or the others would wait out its
			// ttl. (Not when the breaker kept the call from Redis: nothing was taken,
			// and each LLM question would knock on a Redis known to be down.)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				_ = releaseScript.Run(ctx, r.c, []string{key}, token).Err()
			}()
		}
		return false, nil, err
	}
	if !held {
		r.metrics.add(ctx, opLease, outcomeMiss)
		return false, nil, nil
	}
	r.metrics.add(ctx, opLease, outcomeHit)
	done := make(chan struct{})
	var once sync.Once
	go func() {
		t := time.NewTicker(max(ttl/3, time.Millisecond))
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				// Only while it is still this holder's: a lease lost to an outage and taken
				// by another replica is not taken back.
				_ = r.call(context.Background(), opLease, func(ctx context.Context) error {
					return renewScript.Run(ctx, r.c, []string{key}, token, ttl.Milliseconds()).Err()
				})
			}
		}
	}()
	release = func() {
		once.Do(func() {
			close(done)
			// Should this fail, the lease ends at its time to live, and the replicas
			// waiting for it then answer themselves.
			_ = r.call(context.Background(), opLease, func(ctx context.Context) error {
				return releaseScript.Run(ctx, r.c, []string{key}, token).Err()
			})
		})
	}
	return true, release, nil
}

// Awaited is one look of a replica waiting for the answer whose lease another holds:
// the entry cached for kb, gen and query, if there is one, and whether the lease called
// name is still held, read together (the holder caches its answer before it lets go,
// so a free lease and no entry mean it cached none). It is counted as op=lease, not as
// a lookup: waiting must not read as cache misses.
func (r *Redis) Awaited(ctx context.Context, name, kb string, gen uint64, query string) (*Entry, bool, error) {
	var res []any
	err := r.call(ctx, opLease, func(ctx context.Context) error {
		var err error
		res, err = awaitScript.Run(ctx, r.c, []string{r.EntryKey(kb, gen, query), r.leaseKey(name)}).Slice()
		return err
	})
	if err != nil {
		return nil, false, err
	}
	held := len(res) > 1 && res[1] == int64(1)
	raw, ok := res[0].(string)
	if !ok {
		return nil, held, nil
	}
	if e, outcome := r.validFor(raw, kb, gen, query); outcome == outcomeHit {
		return e, held, nil
	}
	return nil, held, nil
}

func (r *Redis) leaseKey(name string) string { return r.prefix + "lease:" + keyPart(name) }

// awaitScript reads an entry (false when absent or not a string) and whether a lease
// key exists. KEYS: entry, lease.
var awaitScript = redis.NewScript(`
local v = redis.pcall('GET', KEYS[1])
if type(v) ~= 'string' then v = false end
return {v, redis.call('EXISTS', KEYS[2])}`)

// renewScript extends a lease's time to live if the caller still holds it; releaseScript
// deletes it if so. ARGV[1] is the holder's token.
var (
	renewScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)
