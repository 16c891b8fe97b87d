package cache_test

import (
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
