package telemetry

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"go.opentelemetry.io/otel"
)

// TestStartMetrics serves /metrics on a port, reads a counter from it as Prometheus
// would, and checks the port is released when the context ends.
func TestStartMetrics(t *testing.T) {
	tel, err := Setup(context.Background(), Config{Service: "test", Getenv: func(string) string { return "" }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := otel.GetMeterProvider().Meter("metrics-test").Int64Counter("quarry.test.scraped")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)

	addr := telemetrytest.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := StartMetrics(ctx, addr, slog.New(slog.NewTextHandler(io.Discard, nil))); err != nil {
		t.Fatal(err)
	}
	body, err := telemetrytest.Scrape("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(body, "quarry_test_scraped_total") {
		t.Fatalf("GET /metrics has no quarry_test_scraped_total:\n%.500s", body)
	}

	// A second server on the same port fails at start, naming the address.
	if _, err := StartMetrics(ctx, addr, slog.New(slog.NewTextHandler(io.Discard, nil))); err == nil || !strings.Contains(err.Error(), "metrics listen "+addr) {
		t.Errorf("second StartMetrics on %s: %v, want a listen error naming it", addr, err)
	}
	if stop, err := StartMetrics(ctx, "", nil); err != nil {
		t.Errorf(`StartMetrics with "": %v, want nothing served`, err)
	} else {
		stop()
	}

	cancel()
	waitReleased(t, addr, "its context ended")

	// stop releases the port while the context lives on.
	stop, err := StartMetrics(context.Background(), addr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	stop()
	waitReleased(t, addr, "stop")
}

// waitReleased waits for nothing to serve addr any more.
func waitReleased(t *testing.T, addr, after string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatalf("/metrics still served 5 s after %s", after)
		}
	}
}
