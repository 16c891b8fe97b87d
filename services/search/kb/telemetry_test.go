package kb_test

import (
	"context"
	"errors"
	"maps"
	"testing"

	"github.com/quarry-router/quarry/services/search/engine/enginetest"
	"github.com/quarry-router/quarry/services/search/engine/meili/meilitest"
	"github.com/quarry-router/quarry/services/search/kb"
)

// A write changed in place is timed as an apply call, and so is the undo of a failed one.
func TestBackendDurationTimesInPlaceWrites(t *testing.T) {
	metrics := enginetest.InstallMetrics(t)
	srv := meilitest.New(t, "key")
	tests := []struct {
		name    string
		engine  string
		failing int // write tasks the Meilisearch server fails
		want    map[string]uint64
	}{
		{"bleve: one apply", kb.EngineBleve, 0,
			map[string]uint64{"bleve/apply/ok": 1}},
		{"meilisearch: one apply", kb.EngineMeilisearch, 0,
			map[string]uint64{"meilisearch/apply/ok": 1}},
		{"meilisearch: a failed apply, then its undo", kb.EngineMeilisearch, 1,
			map[string]uint64{"meilisearch/apply/error": 1, "meilisearch/apply/ok": 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := defaultConfig(t)
			cfg.Engine = tt.engine
			cfg.Meili.URL, cfg.Meili.Key, cfg.Meili.IndexPrefix = srv.URL, "key", "telemetry_"
			reg := newRegistry(t, cfg)
			load(t, reg, "team", writeTree(t, smallTree))
			srv.FailNextTasks(tt.failing, "scripted failure")
			metrics.Calls(t) // loading builds the index, which is not a timed call
			_, err := reg.UpsertFile(context.Background(), "team", "ops/kafka.md", []byte("# Kafka\n\nConsumer lag.\n"))
			if failed := tt.failing > 0; failed != errors.Is(err, kb.ErrEngine) {
				t.Fatalf("UpsertFile error = %v, want ErrEngine: %v", err, failed)
			}
			if got := metrics.Calls(t); !maps.Equal(got, tt.want) {
				t.Errorf("backend calls = %v, want %v", got, tt.want)
			}
		})
	}
}
