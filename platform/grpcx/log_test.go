package grpcx

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
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
			conn, stop := serveAndDial(t, s)
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
		method string
		code   codes.Code
		want   slog.Level
	}{
		{"Query", codes.OK, slog.LevelDebug},
		{"Query", codes.InvalidArgument, slog.LevelInfo},
		{"Query", codes.NotFound, slog.LevelInfo},
		{"Query", codes.PermissionDenied, slog.LevelWarn},
		{"Query", codes.Unauthenticated, slog.LevelInfo},
		{"Query", codes.ResourceExhausted, slog.LevelInfo},
		{"Answer", codes.FailedPrecondition, slog.LevelInfo},
		{"Query", codes.Canceled, slog.LevelInfo},
		{"Resolve", codes.Unavailable, slog.LevelWarn},
		{"Resolve", codes.DeadlineExceeded, slog.LevelWarn},
		{"Query", codes.Internal, slog.LevelError},
		{"Query", codes.Unknown, slog.LevelError},
		{"WatchGenerations", codes.Unavailable, slog.LevelDebug},
		{"Watch", codes.Canceled, slog.LevelDebug},
		{"WatchGenerations", codes.Internal, slog.LevelError},
	} {
		if got := callLevel(tc.method, tc.code); got != tc.want {
			t.Errorf("%s ending %v: level %v, want %v", tc.method, tc.code, got, tc.want)
		}
	}
}

// statusDesc's Fail method ends with the code its request names ("OK" answers).
var statusDesc = grpc.ServiceDesc{
	ServiceName: "quarry.test.Status",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Fail",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			fail := func(_ context.Context, req any) (any, error) {
				for c := range codes.Code(17) {
					if c.String() == in.GetValue() && c != codes.OK {
						return nil, status.Error(c, "asked to fail")
					}
				}
				return req, nil
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/quarry.test.Status/Fail"}, fail)
		},
	}},
}

// TestCallLog makes calls over a socket to servers logging at each level and checks
// which calls get a "finished call" line, at what level and with what fields.
func TestCallLog(t *testing.T) {
	for _, tc := range []struct {
		level slog.Level
		code  codes.Code
		want  *slog.Level // nil: no line
	}{
		{slog.LevelInfo, codes.OK, nil},
		{slog.LevelInfo, codes.InvalidArgument, ptr(slog.LevelInfo)},
		{slog.LevelInfo, codes.Internal, ptr(slog.LevelError)},
		{slog.LevelInfo, codes.Unavailable, ptr(slog.LevelWarn)},
		{slog.LevelDebug, codes.OK, ptr(slog.LevelDebug)},
		{slog.LevelWarn, codes.InvalidArgument, nil},
		{slog.LevelWarn, codes.Internal, ptr(slog.LevelError)},
	} {
		t.Run(tc.level.String()+" "+tc.code.String(), func(t *testing.T) {
			var out bytes.Buffer
			s := NewServer(slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: tc.level})))
			s.RegisterService(&statusDesc, struct{}{})
			s.SetServing()
			conn, stop := serveAndDial(t, s)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := conn.Invoke(ctx, "/quarry.test.Status/Fail", wrapperspb.String(tc.code.String()), new(wrapperspb.StringValue))
			if got := status.Code(err); got != tc.code {
				t.Fatalf("call ended %v, want %v", got, tc.code)
			}
			conn.Close()
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			var line map[string]any
			for l := range strings.Lines(out.String()) {
				var m map[string]any
				if err := json.Unmarshal([]byte(l), &m); err != nil {
					t.Fatalf("log line %q: %v", l, err)
				}
				if m["msg"] == "finished call" && m["grpc.service"] == "quarry.test.Status" {
					line = m
				}
			}
			if tc.want == nil {
				if line != nil {
					t.Fatalf("logged %v, want no line", line)
				}
				return
			}
			if line == nil {
				t.Fatalf("no finished-call line at %v in:\n%s", *tc.want, out.String())
			}
			for k, want := range map[string]any{
				"level": tc.want.String(), "protocol": "grpc", "grpc.component": "server", "grpc.service": "quarry.test.Status",
				"grpc.method": "Fail", "grpc.method_type": "unary", "grpc.code": tc.code.String(),
			} {
				if line[k] != want {
					t.Errorf("%s = %v, want %v", k, line[k], want)
				}
			}
			if a, _ := line["peer.address"].(string); !strings.HasPrefix(a, "127.0.0.1:") {
				t.Errorf("peer.address = %v, want the client's loopback address", line["peer.address"])
			}
			for _, k := range []string{"grpc.start_time", "grpc.request.deadline"} {
				if ts, _ := line[k].(string); ts == "" {
					t.Errorf("%s missing", k)
				} else if _, err := time.Parse(time.RFC3339, ts); err != nil {
					t.Errorf("%s: %v", k, err)
				}
			}
			if ms, ok := line["grpc.time_ms"].(float64); !ok || ms < 0 || ms > 10_000 {
				t.Errorf("grpc.time_ms = %v, want the call's duration in milliseconds", line["grpc.time_ms"])
			}
			if e, _ := line["grpc.error"].(string); (tc.code != codes.OK) != strings.Contains(e, "asked to fail") {
				t.Errorf("grpc.error = %q for a call ending %v", e, tc.code)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// BenchmarkCallLog compares what go-grpc-middleware's logging interceptor and ours
// cost a successful call when, as in production, debug lines are not written.
func BenchmarkCallLog(b *testing.B) {
	log := slog.New(slog.NewJSONHandler(io.Discard, nil)) // info and above
	middleware := logging.UnaryServerInterceptor(logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		log.Log(ctx, slog.Level(lvl), msg, fields...)
	}), logging.WithLogOnEvents(logging.FinishCall), logging.WithLevels(func(c codes.Code) logging.Level { return logging.Level(callLevel("Echo", c)) }))
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000}})
	info := &grpc.UnaryServerInfo{FullMethod: "/quarry.test.Echo/Echo"}
	echo := func(_ context.Context, req any) (any, error) { return req, nil }
	for _, bc := range []struct {
		name string
		icpt grpc.UnaryServerInterceptor
	}{{"go-grpc-middleware", middleware}, {"ours", unaryCallLog(log)}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := bc.icpt(ctx, "hi", info, echo); err != nil {
					b.Fatal(err)
				}
			}
		})
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
