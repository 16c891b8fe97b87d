package cache_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/redis/go-redis/v9"
)

// A lease is one replica's at a time; its holder keeps it past its time to live until
// it lets go, and then another replica can take it. Two stores on one server stand for
// two replicas.
func TestLeasesAreOneReplicasAtATime(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "lease:")
	a := cache.NewRedis(newClient(t, rc), cache.DefaultConfig(), rc, time.Now, nil)
	b := cache.NewRedis(newClient(t, rc), cache.DefaultConfig(), rc, time.Now, nil)
	ctx := context.Background()
	const ttl = 300 * time.Millisecond
	leased := func(s *cache.Redis, name string) (bool, error) {
		_, held, err := s.Awaited(ctx, name, "kb", 1, "design review")
		return held, err
	}

	held, release, err := a.TryLease(ctx, "kb:1:design review", ttl)
	if err != nil || !held {
		t.Fatalf("first TryLease: held %v, err %v; want it taken", held, err)
	}
	if held, _, err := b.TryLease(ctx, "kb:1:design review", ttl); err != nil || held {
		t.Fatalf("TryLease while another holds it: held %v, err %v; want refused", held, err)
	}
	if held, releaseOther, err := b.TryLease(ctx, "kb:1:another question", ttl); err != nil || !held {
		t.Fatalf("TryLease of another name: held %v, err %v; want taken", held, err)
	} else {
		defer releaseOther()
	}
	time.Sleep(4 * ttl) // renewed meanwhile
	if held, err := leased(b, "kb:1:design review"); err != nil || !held {
		t.Fatalf("the lease after 4 × ttl while held: %v, %v; want held (renewed)", held, err)
	}
	release()
	release() // twice is harmless
	if held, err := leased(b, "kb:1:design review"); err != nil || held {
		t.Fatalf("the lease after release: %v, %v; want free", held, err)
	}
	held, releaseB, err := b.TryLease(ctx, "kb:1:design review", ttl)
	if err != nil || !held {
		t.Fatalf("TryLease after release: held %v, err %v; want taken", held, err)
	}
	defer releaseB()
	// The first holder's late release must not free the second's lease.
	release()
	if held, _ := leased(a, "kb:1:design review"); !held {
		t.Fatal("an earlier holder's release freed the current holder's lease")
	}

	// A waiter reads the holder's answer and the lease in one look.
	if err := b.Put(ctx, &cache.Entry{KB: "kb", Generation: 1, Query: "design review", Value: []byte("weekly")}); err != nil {
		t.Fatal(err)
	}
	e, held, err := a.Awaited(ctx, "kb:1:design review", "kb", 1, "design review")
	if err != nil || e == nil || string(e.Value) != "weekly" || !held {
		t.Fatalf("Awaited = %v, %v, %v; want the cached entry and the lease held", e, held, err)
	}
	if e, _, err := a.Awaited(ctx, "kb:1:design review", "kb", 2, "design review"); err != nil || e != nil {
		t.Fatalf("Awaited of another generation = %v, %v; want no entry", e, err)
	}
}

// slowReplies forwards to addr, delaying every reply by d (a slow network, or a gateway
// whose goroutine gets the CPU late): commands run on Redis at once.
func slowReplies(t *testing.T, addr string, d time.Duration) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", addr)
			if err != nil {
				c.Close()
				return
			}
			go func() { io.Copy(s, c); s.Close() }()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						time.Sleep(d)
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// A lease that Redis took but whose reply came after the call's deadline is dropped: the
// caller reports an error and answers itself, and nobody else may wait out the lease's
// time to live for an answer that holder never gives.
func TestALeaseWhoseReplyIsLateIsDropped(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(slowReplies(t, srv.Addr, 20*time.Millisecond), "late:")
	rc.Timeout = 10 * time.Millisecond
	cl := newClient(t, rc)
	if err := cl.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	a := cache.NewRedis(cl, cache.DefaultConfig(), rc, time.Now, nil)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx := context.Background()
	if held, _, err := a.TryLease(ctx, "kb|1|-|q", 10*time.Second); err == nil || held {
		t.Fatalf("TryLease through 20 ms replies with a 10 ms deadline: held %v, err %v; want an error", held, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		n, err := admin.Exists(ctx, "late:lease:kb|1|-|q").Result()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			ttl, _ := admin.PTTL(ctx, "late:lease:kb|1|-|q").Result()
			t.Fatalf("the lease is still there (time to live %v), under a token nobody holds", ttl)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// evalCounter counts the scripts and the SETs a client sends, or tries to.
type evalCounter struct{ n, sets atomic.Int64 }

func (c *evalCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *evalCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "eval", "evalsha":
			c.n.Add(1)
		case "set":
			c.sets.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *evalCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// While the breaker keeps calls off a Redis that stopped answering, a lease that was
// never asked for is not released either: each question routed to the LLM sent a
// script to the Redis known to be down.
func TestNoLeaseIsReleasedThatWasNotAskedFor(t *testing.T) {
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "q:")
	rc.Timeout = 20 * time.Millisecond
	rc.BreakerFailures = 3
	rc.BreakerCooldown = time.Minute
	cl := newClient(t, rc)
	evals := &evalCounter{}
	cl.AddHook(evals)
	s := cache.NewRedis(cl, cache.DefaultConfig(), rc, time.Now, nil)
	ctx := context.Background()
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	srv.Freeze()
	defer srv.Thaw()
	const calls = 50
	for i := range calls {
		if held, _, err := s.TryLease(ctx, fmt.Sprintf("kb|1|-|q%d", i), 10*time.Second); err == nil || held {
			t.Fatalf("TryLease with Redis frozen: held %v, err %v; want an error", held, err)
		}
	}
	time.Sleep(100 * time.Millisecond) // releases run in the background
	asked := evals.sets.Load()
	if asked >= calls {
		t.Fatalf("all %d leases were asked for: the breaker never opened", calls)
	}
	if n := evals.n.Load(); n > asked {
		t.Errorf("%d release scripts for %d leases asked for (of %d tried), want one per lease asked for", n, asked, calls)
	}
}
