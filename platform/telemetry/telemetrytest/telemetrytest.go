// Package telemetrytest records a test binary's spans and metrics through the real
// OpenTelemetry SDK, installed as the global providers.
//
// Tracers and meters taken from the global providers before one is set (the
// package-level otel.Tracer and otel.Meter of the services' packages) follow the first
// provider set in the process and no later one. So a test binary installs one of each,
// once, and its tests share them: reset the exporter, or compare readings before and
// after, rather than installing another.
package telemetrytest

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

var tracing = sync.OnceValues(func() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	otel.SetTracerProvider(tp)
	return tp, exp
})

// Tracing returns the process's global tracer provider, which records every span into
// the exporter as it ends, installing both on first use.
func Tracing() (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) { return tracing() }

var metrics = sync.OnceValue(func() *sdkmetric.ManualReader {
	r := sdkmetric.NewManualReader()
	otel.SetMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(r)))
	return r
})

// Metrics returns the reader of the process's global meter provider (cumulative
// totals), installing both on first use.
func Metrics() *sdkmetric.ManualReader { return metrics() }

// Scrape GETs a Prometheus /metrics page at url, as Prometheus would, and returns its
// text; a status other than 200 is an error.
func Scrape(url string) (string, error) {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("scrape %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("scrape %s: %s\n%.500s", url, resp.Status, body)
	}
	return string(body), nil
}

// FreeAddr is a loopback address with a port nothing listens on, for a server the test
// starts (a metrics endpoint, a service).
func FreeAddr(t testing.TB) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	return lis.Addr().String()
}

// FailedStartReleasesMetrics starts a service with start, given a gRPC listen address
// that is already taken and a free metrics address, and fails t unless the start fails
// on the taken address and the metrics address is free again soon after: a service
// that binds its metrics port first must not keep it when its own port is refused.
func FailedStartReleasesMetrics(t testing.TB, start func(listen, metrics string) error) {
	t.Helper()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	metrics := FreeAddr(t)

	listen := taken.Addr().String()
	err = start(listen, metrics)
	if err == nil || !strings.Contains(err.Error(), listen) {
		t.Fatalf("start with the gRPC address %s taken = %v; want an error naming it", listen, err)
	}
	waitFree(t, metrics, "the failed start")
}

// MetricsServedWhileDraining runs a service with run, given a free metrics address, and
// fails t unless its /metrics still answers after ctx is cancelled (SIGTERM) while the
// service drains: run must pass a -drain-grace of at least a second. The scrapes of a
// stopping replica are the record of how its last calls went. Once run has returned,
// the address must be free again.
func MetricsServedWhileDraining(t testing.TB, run func(ctx context.Context, metrics string) error) {
	t.Helper()
	metrics := FreeAddr(t)
	url := "http://" + metrics + "/metrics"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- run(ctx, metrics) }()
	// Any answer will do: without telemetry set up (daemon.Main does it), the page
	// says so with a 503.
	answers := func() error {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
		if err != nil {
			return err
		}
		return resp.Body.Close()
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if answers() == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the service stopped before it served /metrics: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("the service did not serve %s within 10 s", url)
		}
	}
	cancel()
	time.Sleep(200 * time.Millisecond) // into the drain
	if err := answers(); err != nil {
		t.Errorf("while the service drains, %s: %v", url, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the service's run: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the service did not stop within 15 s of its context's end")
	}
	waitFree(t, metrics, "the service stopped")
}

// waitFree fails t unless addr can be bound again within 3 s of after.
func waitFree(t testing.TB, addr, after string) {
	t.Helper()
	for deadline := time.Now().Add(3 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		l, err := net.Listen("tcp", addr)
		if err == nil {
			l.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("metrics address %s still bound 3 s after %s: %v", addr, after, err)
		}
	}
}
