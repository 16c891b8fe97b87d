// Package grpcx bootstraps Quarry's gRPC servers and clients the same way in every
// service: health and reflection, panic recovery, request logging, message limits and a
// graceful drain on shutdown.
package grpcx

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
)

// MaxMessageBytes bounds every request and response message. Answers carry at most a
// few documents of 5,000 characters, so 4 MiB leaves room without letting one caller
// make a server allocate without limit.
const MaxMessageBytes = 4 << 20

// MaxConcurrentStreams bounds the calls in flight on one connection (gRPC-Go's default
// is no bound). Callers without a key are refused by an interceptor, which runs only
// once a call's headers and whole request are in memory; and gRPC-Go bounds the
// handlers an HTTP/2 rapid reset (CVE-2023-44487) starts by this number only. Clients
// queue calls past it rather than fail; per-caller limits (-limit-concurrency) stay
// far below it.
const MaxConcurrentStreams = 1000

// MaxHeaderListBytes bounds the headers (metadata) of one call: gRPC-Go accepts 16 MiB
// by default, gRPC's C-core and Java clients send at most 8-16 KiB.
const MaxHeaderListBytes = 64 << 10

// DrainConfig says how a server shuts down.
type DrainConfig struct {
	// Grace is how long the server reports NOT_SERVING before it stops accepting calls,
	// so that load balancers stop sending new ones.
	Grace time.Duration
	// Timeout bounds how long in-flight calls may take to finish before they are cut.
	Timeout time.Duration
}

// DefaultDrain suits the embedded run and Kubernetes' default 30 s termination grace.
var DefaultDrain = DrainConfig{Grace: 0, Timeout: 10 * time.Second}

// DefaultMaxConnectionAge is how long a caller keeps one connection by default: an
// autoscaled replica starts to get calls within about this long.
const DefaultMaxConnectionAge = time.Minute

// ServeConfig is how a server keeps its callers' connections and how it shuts down.
type ServeConfig struct {
	Drain DrainConfig
	// MaxConnectionAge ends each caller's connection after about this long (gRPC adds
	// ±10 % jitter): the server sends GOAWAY, calls and streams in flight finish on the
	// old connection, and new calls go over a new one. A client balancing over a
	// headless Service's DNS answer resolves the name again only when a connection
	// ends, so without an age it never calls a replica that started after it
	// connected (one the autoscaler added). 0 keeps connections for ever.
	MaxConnectionAge time.Duration
}

// RegisterFlags registers -drain-grace, -drain-timeout and -max-connection-age;
// drainTimeout is the service's default, long enough for its slowest calls.
func (c *ServeConfig) RegisterFlags(fs *flag.FlagSet, drainTimeout time.Duration) {
	fs.DurationVar(&c.Drain.Grace, "drain-grace", DefaultDrain.Grace, "on SIGTERM, how long to report NOT_SERVING while still serving, for load balancers to stop sending calls")
	fs.DurationVar(&c.Drain.Timeout, "drain-timeout", drainTimeout, "on SIGTERM, after -drain-grace, how long calls in flight may take to finish before they are cut")
	fs.DurationVar(&c.MaxConnectionAge, "max-connection-age", DefaultMaxConnectionAge, "close each caller's connection after about this long (GOAWAY; calls in flight finish), so clients resolve the service again and reach new replicas (0 = never)")
}

// Validate names the flag that is out of range.
func (c ServeConfig) Validate() error {
	var errs []error
	if c.Drain.Grace < 0 {
		errs = append(errs, fmt.Errorf("-drain-grace must not be negative, got %s", c.Drain.Grace))
	}
	if c.Drain.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-drain-timeout must be positive, got %s", c.Drain.Timeout))
	}
	// Shorter ages reconnect every caller several times a second for no gain.
	if c.MaxConnectionAge != 0 && c.MaxConnectionAge < time.Second {
		errs = append(errs, fmt.Errorf("-max-connection-age must be 0 (never) or at least 1s, got %s", c.MaxConnectionAge))
	}
	return errors.Join(errs...)
}

// NewServer is NewServer with the connection age and drain c says.
func (c ServeConfig) NewServer(log *slog.Logger, opts ...grpc.ServerOption) *Server {
	s := NewServer(log, append(opts, c.serverOptions()...)...)
	s.SetDrain(c.Drain)
	return s
}

// serverOptions are the grpc.Server options c needs (SetDrain takes c.Drain).
func (c ServeConfig) serverOptions() []grpc.ServerOption {
	if c.MaxConnectionAge <= 0 {
		return nil
	}
	// The grace after GOAWAY stays unbounded: a connection's last streams (a
	// gateway's generation watch) end when their callers end them or the server drains.
	return []grpc.ServerOption{grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionAge: c.MaxConnectionAge})}
}

// Server is a gRPC server with health and reflection registered.
type Server struct {
	*grpc.Server
	// Health reports SERVING for "" and for every service name set with SetServing.
	Health *health.Server
	log    *slog.Logger
	drain  DrainConfig
	// draining is closed when Serve starts to drain, so never-ending streams (watches)
	// can end instead of holding GracefulStop until the drain timeout.
	draining chan struct{}
	// stopping is closed after the drain's grace, as GracefulStop begins: health
	// watches end then, once their watchers have had the grace to see NOT_SERVING.
	stopping chan struct{}
	// health serves the health service alone on its own listener (HealthOn).
	health    *grpc.Server
	healthLis net.Listener
}

// HealthOn also serves the health service, alone and in plaintext, on addr: for probes
// that cannot speak TLS or present a client certificate (Kubernetes' gRPC probes) while
// the main port requires both. It reports the same status, NOT_SERVING while draining.
// Call it before Serve, which stops it once the drain is over.
func (s *Server) HealthOn(addr string) (net.Addr, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("health listen %s: %w", addr, err)
	}
	s.health = grpc.NewServer(grpc.MaxConcurrentStreams(MaxConcurrentStreams), grpc.MaxHeaderListSize(MaxHeaderListBytes))
	healthpb.RegisterHealthServer(s.health, endingHealth{s.Health, s.stopping})
	s.healthLis = lis
	return lis.Addr(), nil
}

// Stop stops the server at once, with the health listener HealthOn opened, for a
// start that fails before Serve: deferred right after NewServer, it releases the
// stream workers and the health port. After Serve has drained, it does nothing more.
func (s *Server) Stop() {
	s.Server.Stop()
	if s.health != nil {
		s.health.Stop()
		s.healthLis.Close() // not served yet: Stop does not know it
	}
}

// Draining is closed when the server starts to shut down.
func (s *Server) Draining() <-chan struct{} { return s.draining }

// NewServer returns a server with recovery and logging interceptors, message limits,
// INVALID_ARGUMENT for text that is not UTF-8, health and reflection. Register services
// on it, then call Serve.
func NewServer(log *slog.Logger, opts ...grpc.ServerOption) *Server {
	rec := recovery.WithRecoveryHandlerContext(func(ctx context.Context, p any) error {
		// The panic value alone ("assignment to entry in nil map") does not say where,
		// and the call log writes no line for a call that panicked: the stack (this
		// runs in the deferred recover, still on the panicking goroutine) and the
		// method are all an operator gets.
		method, _ := grpc.Method(ctx)
		log.ErrorContext(ctx, "panic in handler", "panic", p, "grpc.method", method, "stack", string(debug.Stack()))
		return status.Error(codes.Internal, "internal error")
	})
	base := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxMessageBytes),
		grpc.MaxSendMsgSize(MaxMessageBytes),
		grpc.MaxConcurrentStreams(MaxConcurrentStreams),
		grpc.MaxHeaderListSize(MaxHeaderListBytes),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.NumStreamWorkers(streamWorkers()),
		// Text that is not UTF-8 is the caller's mistake, INVALID_ARGUMENT (utf8.go); a
		// service with a codec of its own passes it in opts, which come later and win.
		grpc.ForceServerCodecV2(newUTF8Codec()),
		grpc.ChainUnaryInterceptor(recovery.UnaryServerInterceptor(rec), unaryCallLog(log), unaryUTF8),
		grpc.ChainStreamInterceptor(recovery.StreamServerInterceptor(rec), streamCallLog(log), streamUTF8),
		// Spans and RPC metrics for every call, continuing the caller's trace. With
		// telemetry off the global providers are no-ops and this costs next to nothing.
		grpc.StatsHandler(otelgrpc.NewServerHandler(otelgrpc.WithFilter(traced))),
	}
	s := &Server{
		Server:   grpc.NewServer(append(base, opts...)...),
		Health:   health.NewServer(),
		log:      log,
		drain:    DefaultDrain,
		draining: make(chan struct{}),
		stopping: make(chan struct{}),
	}
	healthpb.RegisterHealthServer(s.Server, endingHealth{s.Health, s.stopping})
	reflection.Register(s.Server)
	return s
}

// endingHealth is the health service whose Watch streams end when the server stops.
// A watcher is told NOT_SERVING as the drain begins, but its stream stays open for as
// long as the watcher keeps it, and GracefulStop waits for every stream: one watcher
// (grpc-health-probe -watch, a proxy) held each shutdown until -drain-timeout.
type endingHealth struct {
	*health.Server
	stopping <-chan struct{}
}

func (h endingHealth) Watch(req *healthpb.HealthCheckRequest, stream healthpb.Health_WatchServer) error {
	ctx, cancel := context.WithCancel(stream.Context())
	defer cancel()
	go func() {
		select {
		case <-h.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	err := h.Server.Watch(req, watchStream{stream, ctx})
	if stream.Context().Err() == nil && ctx.Err() != nil {
		return status.Error(codes.Unavailable, "the server is shutting down")
	}
	return err
}

// watchStream is a Watch stream with the context endingHealth ends.
type watchStream struct {
	healthpb.Health_WatchServer
	ctx context.Context
}

func (s watchStream) Context() context.Context { return s.ctx }

// streamWorkers is how many goroutines serve calls, reused from call to call. A call
// served on a new goroutine starts on a small stack that grows, copied each time, as
// the call goes down through interceptors, stats handlers and the handler, a few
// percent of the services' CPU in profiles. A worker keeps its grown stack. When every worker is
// busy, a call gets a goroutine of its own, as without workers; so the count bounds
// nothing, and a few per core cover the calls that are running rather than waiting.
func streamWorkers() uint32 { return uint32(4 * runtime.GOMAXPROCS(0)) }

// traced keeps out of traces the calls that are not requests: health checks (probes
// every few seconds) and Watch streams (Health.Watch, SearchService.WatchGenerations),
// which live as long as the connection and would be one trace per process lifetime.
func traced(info *stats.RPCTagInfo) bool {
	if info.FullMethodName == healthpb.Health_Check_FullMethodName {
		return false
	}
	_, method := splitMethod(info.FullMethodName)
	return !strings.HasPrefix(method, "Watch")
}

// splitMethod splits a full gRPC method name, "/package.Service/Method".
func splitMethod(full string) (service, method string) {
	service, method, _ = strings.Cut(strings.TrimPrefix(full, "/"), "/")
	return service, method
}

// SetDrain changes how Serve shuts down.
func (s *Server) SetDrain(d DrainConfig) { s.drain = d }

// SetServing marks the named services (and the server as a whole) as SERVING.
func (s *Server) SetServing(services ...string) {
	s.Health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for _, name := range services {
		s.Health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
}

// Serve serves on lis until ctx is done, then drains: health goes NOT_SERVING, the
// server waits Grace for load balancers to notice, lets in-flight calls finish within
// Timeout, and finally stops hard.
func (s *Server) Serve(ctx context.Context, lis net.Listener) error {
	if s.health != nil {
		go s.health.Serve(s.healthLis) //nolint:errcheck // ends with Stop below
		defer s.health.Stop()
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Server.Serve(lis) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve %s: %w", lis.Addr(), err)
	case <-ctx.Done():
	}
	s.log.Info("draining", "addr", lis.Addr().String(), "grace", s.drain.Grace, "timeout", s.drain.Timeout)
	s.Health.Shutdown()
	close(s.draining)
	if s.drain.Grace > 0 {
		time.Sleep(s.drain.Grace)
	}
	close(s.stopping)
	stopped := make(chan struct{})
	go func() { s.Server.GracefulStop(); close(stopped) }()
	t := time.NewTimer(s.drain.Timeout)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		s.log.Warn("drain timed out; stopping hard", "addr", lis.Addr().String())
		s.Server.Stop()
		<-stopped
	}
	if err := <-errc; err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve %s: %w", lis.Addr(), err)
	}
	return nil
}
