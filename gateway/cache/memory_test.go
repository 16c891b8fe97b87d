package cache_test

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/cache/cachetest"
)

func TestMemoryConformance(t *testing.T) {
	cachetest.Run(t, func(t *testing.T, cfg cache.Config, now func() time.Time) cache.Store {
		return cache.NewMemory(cfg, now)
	})
}

// TestMemoryBoundsItsBytes: the in-process store bounded entries by count only, so
// 10,000 answers near -cache-max-entry-bytes (256 KiB) could hold 2.5 GiB. It now
// evicts the least recently used to stay within -cache-max-bytes as well.
func TestMemoryBoundsItsBytes(t *testing.T) {
	ctx := context.Background()
	cfg := cache.DefaultConfig()
	cfg.MaxEntryBytes = 10 << 10
	cfg.MaxBytes = 100 << 10
	m := cache.NewMemory(cfg, time.Now)
	value := bytes.Repeat([]byte("x"), 9<<10)
	for i := range 50 {
		e := &cache.Entry{KB: "kb", Generation: 1, Query: fmt.Sprintf("question %d", i), Tokens: []string{"question", fmt.Sprint(i)}, Value: value}
		if err := m.Put(ctx, e); err != nil {
			t.Fatal(err)
		}
	}
	size, kept := 0, 0
	for i := 49; i >= 0; i-- {
		e, err := m.Get(ctx, "kb", 1, fmt.Sprintf("question %d", i))
		if err != nil {
			break // everything older is gone too (checked below)
		}
		size += e.Size()
		kept++
	}
	if size > cfg.MaxBytes || size+(9<<10+32) <= cfg.MaxBytes {
		t.Errorf("the %d most recent entries held, %d bytes; want as many as fit in %d bytes", kept, size, cfg.MaxBytes)
	}
	if held := m.Len(); held != kept {
		t.Errorf("%d entries held, want only the %d most recent", held, kept)
	}
}
