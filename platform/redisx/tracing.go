package redisx

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/extra/redisotel/v9"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// traceCommands makes every Redis command a query makes a client span in the query's
// trace (redisotel: the command's name, db.system, the server's address), so a slow
// cached answer shows whether Redis was slow. The command text is left out: its keys
// and values are questions and answers. Commands outside a traced call (the breaker's
// health checks, the generation poller) make no spans: on their own they would be root
// spans, a trace per check.
func traceCommands(c redis.UniversalClient) error {
	err := redisotel.InstrumentTracing(c,
		redisotel.WithTracerProvider(withinTraces{tp: otel.GetTracerProvider()}),
		redisotel.WithDBStatement(false),
		// Off: finding the caller walks the stack on every command.
		redisotel.WithCallerEnabled(false))
	if err != nil {
		return fmt.Errorf("redis tracing: %w", err)
	}
	return nil
}

// withinTraces is a tracer provider whose spans only continue a trace: with no
// recording span in the context, Start returns the context's (non-recording) span.
type withinTraces struct {
	embedded.TracerProvider
	tp trace.TracerProvider
}

func (p withinTraces) Tracer(name string, opts ...trace.TracerOption) trace.Tracer {
	return withinTracer{tr: p.tp.Tracer(name, opts...)}
}

type withinTracer struct {
	embedded.Tracer
	tr trace.Tracer
}

func (t withinTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if s := trace.SpanFromContext(ctx); !s.IsRecording() {
		return ctx, s
	}
	return t.tr.Start(ctx, name, opts...)
}
