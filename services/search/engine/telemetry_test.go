package engine_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/enginetest"
)

// named and unnamed stand in for engines: Observe only asks a backend its name.
type unnamed struct{ engine.Backend }

type named struct{ unnamed }

func (named) Name() string { return "bleve" }

func TestObserveRecordsTheOutcomeOfEachCall(t *testing.T) {
	metrics := enginetest.InstallMetrics(t)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancelExpired := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancelExpired()
	// An error that does not unwrap to the context's, as the Meilisearch client returns
	// when the caller's cancellation cuts its request.
	opaque := errors.New("Post \"http://meili/multi-search\": context canceled")
	tests := []struct {
		name string
		ctx  context.Context
		b    engine.Backend
		op   engine.Op
		err  error
		want string
	}{
		{"success", context.Background(), named{}, engine.OpSearch, nil, "bleve/search/ok"},
		{"a failure", context.Background(), named{}, engine.OpSearchMany, errors.New("503"), "bleve/search_many/error"},
		{"the caller cancelled", done, named{}, engine.OpSearch, fmt.Errorf("bleve search: %w", context.Canceled), "bleve/search/canceled"},
		{"the caller's deadline passed", expired, named{}, engine.OpApply, fmt.Errorf("apply: %w", context.DeadlineExceeded), "bleve/apply/canceled"},
		{"an opaque error once the caller is gone", done, named{}, engine.OpSearch, opaque, "bleve/search/canceled"},
		{"the backend's own timeout is an error", context.Background(), named{}, engine.OpApply, fmt.Errorf("task wait: %w", context.DeadlineExceeded), "bleve/apply/error"},
		{"success although the caller is gone", done, named{}, engine.OpSearch, nil, "bleve/search/ok"},
		{"a backend without a name", context.Background(), unnamed{}, engine.OpApply, nil, "other/apply/ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			metrics.Calls(t)
			engine.Observe(tt.ctx, tt.b, tt.op, time.Now(), tt.err)
			if got, want := metrics.Calls(t), map[string]uint64{tt.want: 1}; !maps.Equal(got, want) {
				t.Errorf("recorded %v, want %v", got, want)
			}
		})
	}

	// The query path records every backend call: beyond what the SDK itself allocates,
	// Observe must not.
	ctx := context.Background()
	var b engine.Backend = named{} // boxed once, as a KB holds its engine
	allocs := testing.AllocsPerRun(1000, func() { engine.Observe(ctx, b, engine.OpSearch, time.Now(), nil) })
	t.Logf("Observe allocates %v times per call with the SDK installed", allocs)
	if allocs > 0 {
		t.Errorf("Observe allocates %v times per call, want 0", allocs)
	}
}
