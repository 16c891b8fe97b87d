package cache

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// The outcomes of a Redis store call, the "outcome" attribute of its metric.
const (
	outcomeHit = iota
	outcomeMiss
	outcomeBadEntry // a foreign or undecodable value: counted as a miss too
	outcomeStored
	outcomeTooLarge
	outcomeError   // Redis did not answer in time or at all, or answered with an error
	outcomeSkipped // the circuit breaker kept the call off Redis
	numOutcomes
)

var outcomeNames = [numOutcomes]string{"hit", "miss", "bad_entry", "stored", "too_large", "error", "skipped"}

// The operations, the "op" attribute.
const (
	opGet = iota
	opSimilar
	opPut
	opLease // taking a lease (TryLease): hit when taken, miss when another replica holds it
	numOps
)

var opNames = [numOps]string{"get", "similar", "put", "lease"}

// redisMetrics counts calls by operation and outcome, in memory for Stats and as the
// OpenTelemetry counter quarry.gateway.cache.redis.calls, exported wherever the process
// sends its metrics (a no-op until telemetry is set up).
type redisMetrics struct {
	n       [numOps][numOutcomes]atomic.Int64
	counter metric.Int64Counter
	attrs   [numOps][numOutcomes]metric.AddOption
}

func newRedisMetrics() *redisMetrics {
	m := &redisMetrics{counter: newCounter("quarry.gateway.cache.redis.calls",
		"Redis cache calls by operation and outcome; error and skipped calls were answered uncached", "{call}")}
	for o := range numOps {
		for r := range numOutcomes {
			m.attrs[o][r] = metric.WithAttributeSet(attribute.NewSet(
				attribute.String("op", opNames[o]), attribute.String("outcome", outcomeNames[r])))
		}
	}
	return m
}

// newCounter returns one of the package's OpenTelemetry counters (a no-op until
// telemetry is set up), or nil when the meter refuses it: the counts kept in memory
// for Stats go on without it.
func newCounter(name, description, unit string) metric.Int64Counter {
	c, err := otel.Meter("github.com/quarry-router/quarry/gateway/cache").Int64Counter(name,
		metric.WithDescription(description), metric.WithUnit(unit))
	if err != nil {
		return nil
	}
	return c
}

func (m *redisMetrics) add(ctx context.Context, op, outcome int) {
	m.n[op][outcome].Add(1)
	if m.counter != nil {
		m.counter.Add(ctx, 1, m.attrs[op][outcome])
	}
}

func (m *redisMetrics) sum(outcome int, ops ...int) int64 {
	var n int64
	for _, o := range ops {
		n += m.n[o][outcome].Load()
	}
	return n
}
