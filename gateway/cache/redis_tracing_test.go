package cache_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/platform/redistest"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
)

func TestRedisCommandsAreTracedWithinAQuerysTrace(t *testing.T) {
	tp, exp := telemetrytest.Tracing()
	srv := redistest.Start(t)
	rc := testRedisConfig(srv.Addr, "traced:")
	store := cache.NewRedis(newClient(t, rc), cache.DefaultConfig(), rc, time.Now, nil)
	e := rotateEntry("kb", 1)
	exp.Reset()

	// Outside a trace (a warm-up, the breaker's checks): no spans of their own.
	if err := store.Put(context.Background(), e); err != nil {
		t.Fatal(err)
	}
	if n := len(exp.GetSpans()); n != 0 {
		t.Fatalf("commands outside a trace made %d spans, want none", n)
	}

	ctx, query := tp.Tracer("test").Start(context.Background(), "query")
	if _, err := store.Get(ctx, e.KB, e.Generation, e.Query); err != nil {
		t.Fatal(err)
	}
	query.End()
	var commands int
	for _, s := range exp.GetSpans() {
		if s.Name == "query" {
			continue
		}
		commands++
		if s.Parent.SpanID() != query.SpanContext().SpanID() {
			t.Errorf("command span %q is not a child of the query's span", s.Name)
		}
		system := ""
		for _, a := range s.Attributes {
			switch k := string(a.Key); {
			case k == "db.system" || k == "db.system.name":
				system = a.Value.AsString()
			case strings.Contains(k, "statement") || strings.Contains(k, "query.text"):
				t.Errorf("command span %q carries %s, which holds questions and answers", s.Name, k)
			}
		}
		if system != "redis" {
			t.Errorf("command span %q has db.system %q, want redis", s.Name, system)
		}
	}
	if commands == 0 {
		t.Fatal("a cache lookup inside a trace made no command span")
	}
}
