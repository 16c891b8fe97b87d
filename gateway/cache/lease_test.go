package cache_test

import (
	"context"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/cache/redistest"
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

	held, release, err := a.TryLease(ctx, "kb:1:design review", ttl)
	if err != nil || !held {
		t.Fatalf("first TryLease: held %v, err %v; want it taken", held, err)
	}
	if held, _, err := b.TryLease(ctx, "kb:1:design review", ttl); err != nil || held {
		t.Fatalf("TryLease while another holds it: held %v, err %v; want refused", held, err)
	}
	if held, _, err := b.TryLease(ctx, "kb:1:another question", ttl); err != nil || !held {
		t.Fatalf("TryLease of another name: held %v, err %v; want taken", held, err)
	}
	time.Sleep(4 * ttl) // renewed meanwhile
	if leased, err := b.Leased(ctx, "kb:1:design review"); err != nil || !leased {
		t.Fatalf("Leased after 4 × ttl while held: %v, %v; want held (renewed)", leased, err)
	}
	release()
	release() // twice is harmless
	if leased, err := b.Leased(ctx, "kb:1:design review"); err != nil || leased {
		t.Fatalf("Leased after release: %v, %v; want free", leased, err)
	}
	held, releaseB, err := b.TryLease(ctx, "kb:1:design review", ttl)
	if err != nil || !held {
		t.Fatalf("TryLease after release: held %v, err %v; want taken", held, err)
	}
	defer releaseB()
	// The first holder's late release must not free the second's lease.
	release()
	if leased, _ := a.Leased(ctx, "kb:1:design review"); !leased {
		t.Fatal("an earlier holder's release freed the current holder's lease")
	}
}
