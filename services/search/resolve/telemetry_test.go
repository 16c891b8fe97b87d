package resolve_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/resolve"
)

// Every backend call of the query path is timed once, under its backend, its operation
// and how it ended: a caller that gives up counts as canceled, not as a backend error.
// The provider is set after the histogram was created (at the engine package's init), as
// in production, so this also proves the global provider forwards it.
func TestBackendDurationIsRecordedPerCall(t *testing.T) {
	metrics := enginetest.InstallMetrics(t)
	srv := meilitest.New(t, "key")
	meiliConfig := func(c *kb.Config) {
		c.Engine = kb.EngineMeilisearch
		c.Meili.URL, c.Meili.Key = srv.URL, "key"
	}
	bleveRes := resolverWith(t, func(*kb.Config) {})
	meiliRes := resolverWith(t, meiliConfig)
	canceled := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}
	expired := func() context.Context {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		t.Cleanup(cancel)
		return ctx
	}
	tests := []struct {
		name  string
		res   *resolve.Resolver
		ctx   func() context.Context // nil: context.Background
		down  bool                   // the Meilisearch server answers 503 meanwhile
		query string
		want  map[string]uint64
	}{
		{name: "bleve: one search when all terms find enough", res: bleveRes, query: "postgres",
			want: map[string]uint64{"bleve/search/ok": 1}},
		{name: "bleve: one search per entity term, on its own", res: bleveRes, query: "pgbouncer pool mode",
			want: map[string]uint64{"bleve/search/ok": 4}},
		{name: "meilisearch: entity terms in one multi-search", res: meiliRes, query: "pgbouncer pool mode",
			want: map[string]uint64{"meilisearch/search/ok": 1, "meilisearch/search_many/ok": 1}},
		{name: "meilisearch: a failing server is an error", res: meiliRes, down: true, query: "postgres",
			want: map[string]uint64{"meilisearch/search/error": 1}},
		{name: "bleve: a cancelled caller is canceled", res: bleveRes, ctx: canceled, query: "postgres",
			want: map[string]uint64{"bleve/search/canceled": 1}},
		{name: "bleve: a passed deadline is canceled", res: bleveRes, ctx: expired, query: "postgres",
			want: map[string]uint64{"bleve/search/canceled": 1}},
		{name: "meilisearch: a cancelled caller is canceled", res: meiliRes, ctx: canceled, query: "postgres",
			want: map[string]uint64{"meilisearch/search/canceled": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			if tt.ctx != nil {
				ctx = tt.ctx()
			}
			if tt.down {
				srv.Down(meilitest.Unavailable)
				defer srv.Up()
			}
			metrics.Calls(t) // whatever loading the knowledge bases or an earlier case left
			_, err := tt.res.Resolve(ctx, platform, tt.query)
			if failed := tt.ctx != nil || tt.down; (err != nil) != failed {
				t.Fatalf("Resolve(%q) error = %v, want an error: %v", tt.query, err, failed)
			}
			if got := metrics.Calls(t); !maps.Equal(got, tt.want) {
				t.Errorf("backend calls = %v, want %v", got, tt.want)
			}
		})
	}
}
