package engine

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Named is a Backend that says which engine it is, for the backend metrics. It is
// optional so that test doubles need not implement it; they are measured as "other".
type Named interface {
	// Name is the engine's kind ("bleve", "meilisearch"), one fixed value per type: it is
	// a metric attribute, so it must never carry a knowledge base or an address.
	Name() string
}

// Op is a kind of backend call the backend metrics tell apart.
type Op uint8

// Backend calls.
const (
	OpSearch Op = iota
	OpSearchMany
	OpApply
	numOps
)

var opNames = [numOps]string{OpSearch: "search", OpSearchMany: "search_many", OpApply: "apply"}

// outcome is how a backend call ended.
type outcome uint8

const (
	outcomeOK outcome = iota
	outcomeError
	outcomeCanceled
	numOutcomes
)

var outcomeNames = [numOutcomes]string{outcomeOK: "ok", outcomeError: "error", outcomeCanceled: "canceled"}

// The instrument lives here rather than beside each call because the query path
// (resolve) and the write path (kb) both call backends, and one metric name must have one
// instrument. Created at init from the global provider, it is a no-op until telemetry
// sets a provider up, which it then forwards to.
var backendDuration, _ = otel.Meter("github.com/quarry-router/quarry/services/search/engine").Float64Histogram(
	"quarry.search.backend.duration",
	metric.WithDescription("Time the search backend took per call, by backend, operation and outcome"),
	metric.WithUnit("ms"),
	// From a warm Bleve term lookup (tens of µs) to a Meilisearch write waiting on its task.
	metric.WithExplicitBucketBoundaries(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 5000))

// backendOptions are the record options of one backend kind, by op and outcome, built
// once: building an attribute set sorts and hashes it, and a one-option slice passed
// to Record would otherwise be allocated on every call.
type backendOptions [numOps][numOutcomes][]metric.RecordOption

// backendSets maps a backend kind to its *backendOptions. Kinds come from Name methods,
// a handful of constants, so the map stays tiny.
var backendSets sync.Map

func optionsFor(kind string) *backendOptions {
	if o, ok := backendSets.Load(kind); ok {
		return o.(*backendOptions)
	}
	o := new(backendOptions)
	backend := attribute.String("quarry.backend", kind)
	for op := range numOps {
		for oc := range numOutcomes {
			set := attribute.NewSet(backend, attribute.String("quarry.op", opNames[op]), attribute.String("quarry.outcome", outcomeNames[oc]))
			o[op][oc] = []metric.RecordOption{metric.WithAttributeSet(set)}
		}
	}
	v, _ := backendSets.LoadOrStore(kind, o)
	return v.(*backendOptions)
}

// backendName is b's kind for the backend metrics: its Name, or "other" for a backend
// without one.
func backendName(b Backend) string {
	if n, ok := b.(Named); ok {
		return n.Name()
	}
	return "other"
}

// Observe records a call of kind op to backend b that started at start and returned err.
// ctx is the call's context. An error returned once it is done counts as canceled: a
// caller giving up says nothing about the backend's health. The error itself cannot
// tell: the Meilisearch client's errors do not unwrap to the context's, and a backend's
// own timeout (Meilisearch's task wait) wraps context.DeadlineExceeded while the caller
// still waits, which is the backend failing.
func Observe(ctx context.Context, b Backend, op Op, start time.Time, err error) {
	elapsed := time.Since(start)
	oc := outcomeOK
	switch {
	case err == nil:
	case ctx.Err() != nil:
		oc = outcomeCanceled
	default:
		oc = outcomeError
	}
	backendDuration.Record(ctx, float64(elapsed)/float64(time.Millisecond), optionsFor(backendName(b))[op][oc]...)
}

// Search runs q on b, timed in the backend metrics.
func Search(ctx context.Context, b Backend, q Query) ([]Hit, error) {
	start := time.Now()
	hits, err := b.Search(ctx, q)
	Observe(ctx, b, OpSearch, start, err)
	return hits, err
}

// SearchMany runs qs on ms in one call, timed in the backend metrics.
func SearchMany(ctx context.Context, ms MultiSearcher, qs []Query) ([][]Hit, error) {
	start := time.Now()
	hits, err := ms.SearchMany(ctx, qs)
	Observe(ctx, ms, OpSearchMany, start, err)
	return hits, err
}

// Apply makes changes in w, timed in the backend metrics.
func Apply(ctx context.Context, w Writer, changes []Change) error {
	start := time.Now()
	err := w.Apply(ctx, changes)
	Observe(ctx, w, OpApply, start, err)
	return err
}
