package grpcx

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// A Watch stream's expected ends, the server draining or the client leaving, are not
// warnings; the line is still there at DEBUG.
func TestWatchStreamsEndWithoutWarnings(t *testing.T) {
	for _, tc := range []struct {
		name     string
		serverGo bool // the server drains, rather than the client cancelling
	}{
		{"server drains", true},
		{"client leaves", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logs := &records{}
			s := NewServer(slog.New(logs))
			s.drain = DrainConfig{Timeout: 100 * time.Millisecond} // the Watch stream holds GracefulStop until cut
			lis := loopback(t)
			stop := run(t, s, lis)
			conn, err := Dial(lis.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			wctx, wcancel := context.WithCancel(context.Background())
			defer wcancel()
			w, err := healthpb.NewHealthClient(conn).Watch(wctx, &healthpb.HealthCheckRequest{})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Recv(); err != nil { // the stream is up
				t.Fatal(err)
			}
			if tc.serverGo {
				go stop()
			} else {
				wcancel()
			}
			for deadline := time.Now().Add(10 * time.Second); logs.find("Watch") == nil; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("no finished-call line for the Watch stream")
				}
			}
			if r := logs.find("Watch"); r.Level != slog.LevelDebug {
				t.Errorf("Watch stream's end logged at %v, want DEBUG: %v", r.Level, r.Message)
			}
		})
	}
}

func TestCallLevel(t *testing.T) {
	for _, tc := range []struct {
		method, code string
		in, want     logging.Level
	}{
		{"WatchGenerations", "Unavailable", logging.LevelWarn, logging.LevelDebug},
		{"Watch", "Canceled", logging.LevelInfo, logging.LevelDebug},
		{"WatchGenerations", "Internal", logging.LevelError, logging.LevelError},
		{"Resolve", "Unavailable", logging.LevelWarn, logging.LevelWarn},
		{"Query", "Canceled", logging.LevelInfo, logging.LevelInfo},
	} {
		if got := callLevel(tc.in, []any{"grpc.method", tc.method, "grpc.code", tc.code}); got != tc.want {
			t.Errorf("%s ending %s at %v: level %v, want %v", tc.method, tc.code, tc.in, got, tc.want)
		}
	}
}

// records is a slog handler that keeps the finished-call records.
type records struct {
	mu   sync.Mutex
	recs []slog.Record
	// method of each record, from its grpc.method attribute
	methods []string
}

func (h *records) Enabled(context.Context, slog.Level) bool { return true }
func (h *records) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *records) WithGroup(string) slog.Handler            { return h }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	method := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "grpc.method" {
			method = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, r.Clone())
	h.methods = append(h.methods, method)
	return nil
}

// find returns the finished-call record of method, or nil.
func (h *records) find(method string) *slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, r := range h.recs {
		if h.methods[i] == method && r.Message == "finished call" {
			return &h.recs[i]
		}
	}
	return nil
}
