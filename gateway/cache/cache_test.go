package cache_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
)

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		edit    func(*cache.Config)
		wantErr string // "" for valid
	}{
		{"defaults", func(c *cache.Config) {}, ""},
		{"the longest TTL", func(c *cache.Config) { c.TTL = cache.MaxTTL }, ""},
		// Past it, now+TTL in Unix nanoseconds would overflow and every entry would
		// look expired the moment it was stored.
		{"a TTL past 2262", func(c *cache.Config) { c.TTL = 250 * 365 * 24 * time.Hour }, "-cache-ttl"},
		{"no TTL", func(c *cache.Config) { c.TTL = 0 }, "-cache-ttl"},
		{"no entries", func(c *cache.Config) { c.MaxEntries = 0 }, "-cache-max-entries"},
		{"no bytes", func(c *cache.Config) { c.MaxEntryBytes = 0 }, "-cache-max-entry-bytes"},
		{"similarity above 1", func(c *cache.Config) { c.FuzzyMin = 1.5 }, "-fuzzy-min"},
		{"no tokens", func(c *cache.Config) { c.FuzzyMinTokens = 0 }, "-fuzzy-min-tokens"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := cache.DefaultConfig()
			tt.edit(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tt.wantErr)
			}
		})
	}
}

// TestLongestTTLServes: an entry stored with MaxTTL is served at once and until its
// TTL is nearly up.
func TestLongestTTLServes(t *testing.T) {
	cfg := cache.DefaultConfig()
	cfg.TTL = cache.MaxTTL
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	m := cache.NewMemory(cfg, func() time.Time { return now })
	ctx := context.Background()
	e := rotateEntry("kb", 1)
	if err := m.Put(ctx, e); err != nil {
		t.Fatal(err)
	}
	for _, later := range []time.Duration{0, cache.MaxTTL - time.Hour} {
		now = now.Add(later)
		if _, err := m.Get(ctx, "kb", 1, e.Query); err != nil {
			t.Fatalf("Get %v after Put with TTL %v: %v, want a hit", later, cfg.TTL, err)
		}
	}
}
