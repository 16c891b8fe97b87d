// Package app runs the gateway from its command-line arguments, for cmd/gateway and for
// the all-in-one binary that starts every service in one process.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/quarry-router/quarry/gateway/cache"
	"github.com/quarry-router/quarry/gateway/generations"
	"github.com/quarry-router/quarry/gateway/route"
	"github.com/quarry-router/quarry/gateway/server"
	"github.com/quarry-router/quarry/gateway/upstream"
	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/limit"
	"github.com/quarry-router/quarry/platform/telemetry"
	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Config is the gateway's whole configuration.
type Config struct {
	// Listen is the host:port the QueryService listens on (port 0 picks a free one).
	Listen string
	// HealthListen, if set, serves the gRPC health service alone, in plaintext, for probes
	// that cannot speak TLS (Kubernetes' gRPC probes) while Listen requires it.
	HealthListen string
	// SearchAddr is the search service's gRPC target.
	SearchAddr string
	// AgentAddr is the agent service's gRPC target; "" runs without one, so questions
	// routed to an LLM get degraded extractive answers.
	AgentAddr string
	// CacheBackend is where T0/T1 answers live: "memory" (in this process) or "redis"
	// (shared by every replica that uses the same Redis and key prefix).
	CacheBackend string
	// AuthKeys is a JSON file of callers' API keys (platform/auth.Key). Without keys the
	// gateway is open, which it allows on a loopback address only unless AuthOpenNetwork.
	AuthKeys        string
	AuthOpenNetwork bool
	// SearchKey and AgentKey are the service credentials presented upstream, for
	// services started with -auth-keys.
	SearchKey, AgentKey string
	// MetricsAddr serves Prometheus /metrics when set.
	MetricsAddr string
	// TLS is how the QueryService serves; SearchTLS and AgentTLS how the gateway calls
	// its upstreams (plaintext by default, for loopback).
	TLS                 grpcx.ServerTLSConfig
	SearchTLS, AgentTLS grpcx.ClientTLSConfig
	// Limits hold each caller of the QueryService (API key, or address when open) to a
	// request rate and a number of calls in flight.
	Limits limit.Config
	// Serve is how callers' connections age and how the gateway drains.
	Serve grpcx.ServeConfig

	Cache       cache.Config
	Redis       cache.RedisConfig
	Route       route.Config
	Generations generations.Config
}

// DefaultDrainTimeout lets a query in flight at shutdown finish: an LLM answer takes up
// to -agent-timeout (60 s by default).
const DefaultDrainTimeout = 65 * time.Second

// RegisterFlags registers every gateway flag with its default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7700", "host:port to serve the QueryService on")
	fs.StringVar(&c.HealthListen, "health-listen", "", `address serving only the gRPC health service, in plaintext, for probes that cannot speak TLS ("" = off; -listen serves health too)`)
	fs.StringVar(&c.SearchAddr, "search-addr", "127.0.0.1:7701", "gRPC address of the search service")
	fs.StringVar(&c.AgentAddr, "agent-addr", "", `gRPC address of the agent service ("" = none: LLM routes get degraded extractive answers)`)
	fs.StringVar(&c.CacheBackend, "cache-backend", "memory", `where cached answers live: "memory" (this process) or "redis" (shared by every replica, see -redis-*)`)
	fs.StringVar(&c.AuthKeys, "auth-keys", "", `JSON file of API keys (name, sha256, knowledge_bases, write); "" = open, on loopback only`)
	fs.BoolVar(&c.AuthOpenNetwork, "auth-open-network", false, "serve without API keys on a non-loopback address (a trusted network only)")
	fs.StringVar(&c.SearchKey, "search-key", "", "API key presented to the search service (never logged)")
	fs.StringVar(&c.AgentKey, "agent-key", "", "API key presented to the agent service (never logged)")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", `address to serve Prometheus /metrics on ("" = off)`)
	c.TLS.RegisterFlags(fs)
	c.SearchTLS.RegisterFlags(fs, "search")
	c.AgentTLS.RegisterFlags(fs, "agent")
	c.Limits.RegisterFlags(fs)
	c.Serve.RegisterFlags(fs, DefaultDrainTimeout)
	c.Cache.RegisterFlags(fs)
	c.Redis.RegisterFlags(fs)
	c.Route.RegisterFlags(fs)
	c.Generations.RegisterFlags(fs)
}

// Validate checks every part of the configuration, naming the flag at fault.
func (c *Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("-listen %q: want host:port: %w", c.Listen, err)
	}
	if c.SearchAddr == "" {
		return errors.New("-search-addr must be set")
	}
	var backend error
	switch c.CacheBackend {
	case "memory":
	case "redis":
		backend = c.Redis.Validate()
	default:
		backend = fmt.Errorf(`-cache-backend %q: want "memory" or "redis"`, c.CacheBackend)
	}
	return errors.Join(backend, c.TLS.Validate(), c.SearchTLS.Validate(), c.AgentTLS.Validate(), c.Limits.Validate(),
		c.Serve.Validate(), c.Cache.Validate(), c.Route.Validate(), c.Generations.Validate())
}

// Option changes what Run builds.
type Option func(*options)

type options struct {
	store cache.Store
}

// WithStore makes the gateway use store for T0/T1 instead of a new in-process cache:
// benchmarks hand in a pre-filled one.
func WithStore(store cache.Store) Option { return func(o *options) { o.store = store } }

// Run serves the gateway until ctx ends, then drains in-flight queries. args are the
// command-line flags (without the program name); QUARRY_GATEWAY_* environment variables
// override defaults of flags not given. ready, if not nil, is called with the bound
// address once the gateway is listening and knows the knowledge bases' generations,
// i.e. once it can answer.
func Run(ctx context.Context, args []string, log *slog.Logger, ready func(addr net.Addr), opts ...Option) error {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := config.Parse(fs, "GATEWAY", args, cfg.Validate); err != nil {
		return err
	}

	policy, err := auth.LoadPolicy(cfg.AuthKeys, log)
	if err != nil {
		return err
	}
	if !cfg.AuthOpenNetwork {
		if err := policy.CheckListen(cfg.Listen); err != nil {
			return fmt.Errorf("%w (or pass -auth-open-network on a trusted network)", err)
		}
	}
	if policy.Open() {
		log.Warn("no API keys configured: every caller may query every knowledge base", "listen", cfg.Listen)
	}
	cfg.TLS.WarnIfExposed(log, cfg.Listen, !policy.Open())
	tlsOpt, err := cfg.TLS.ServerOption()
	if err != nil {
		return err
	}

	searchConn, err := cfg.SearchTLS.Dial(cfg.SearchAddr, cfg.SearchKey)
	if err != nil {
		return err
	}
	defer searchConn.Close()
	searchClient := quarryv1.NewSearchServiceClient(searchConn)
	var agent route.Agent
	if cfg.AgentAddr != "" {
		agentConn, err := cfg.AgentTLS.Dial(cfg.AgentAddr, cfg.AgentKey)
		if err != nil {
			return err
		}
		defer agentConn.Close()
		agent = upstream.NewAgent(quarryv1.NewAgentServiceClient(agentConn))
	}

	watcher := generations.New(searchClient, cfg.Generations, log)
	var gens route.Generations = watcher
	var shared *generations.Shared
	store := o.store
	var leases route.Leaser // the Redis cache's, for replicas to take turns at the LLM
	if cfg.CacheBackend == "redis" {
		client, err := cfg.Redis.NewClient()
		if err != nil {
			return err
		}
		defer client.Close()
		pctx, cancel := context.WithTimeout(ctx, cfg.Redis.DialTimeout)
		if err := client.Ping(pctx).Err(); err != nil {
			// Fail open: serve uncached until Redis is reachable.
			log.Warn("redis not reachable at start; answering uncached until it is", "addr", cfg.Redis.Addr, "err", err)
		}
		cancel()
		if store == nil {
			redisStore := cache.NewRedis(client, cfg.Cache, cfg.Redis, time.Now, log.With("component", "cache"))
			store, leases = redisStore, redisStore
			if cfg.Redis.NearBytes > 0 {
				store = cache.NewNear(store, cfg.Cache, cfg.Redis.NearBytes, time.Now)
			}
		}
		shared = generations.NewShared(client, cfg.Redis.Prefix(), log.With("component", "generations"))
		gens = generations.Combined{Local: watcher, Shared: shared}
	}
	if store == nil {
		store = cache.NewMemory(cfg.Cache, time.Now)
	}
	router := route.New(cfg.Route, store, upstream.NewSearch(searchClient), agent, gens, log)
	if leases != nil {
		router.ShareAnswersVia(leases)
	}

	service := quarryv1.QueryService_ServiceDesc.ServiceName
	limiter := limit.New(cfg.Limits, time.Now)
	// Auth runs before the limits: a refused key takes no token and no slot.
	srvOpts := []grpc.ServerOption{tlsOpt}
	srvOpts = append(srvOpts, grpcx.WithAuth(policy)...)
	srvOpts = append(srvOpts, grpcx.WithLimits(limiter, grpcx.Methods("/"+service+"/"))...)
	srv := cfg.Serve.NewServer(log, srvOpts...)
	defer srv.Stop() // a start that fails below leaves nothing running
	if cfg.Serve.Drain.Timeout < cfg.Route.AgentTimeout {
		log.Warn("-drain-timeout is shorter than -agent-timeout: a shutdown cuts LLM answers in flight",
			"drain_timeout", cfg.Serve.Drain.Timeout, "agent_timeout", cfg.Route.AgentTimeout)
	}
	if cfg.HealthListen != "" {
		if _, err := srv.HealthOn(cfg.HealthListen); err != nil {
			return err
		}
	}
	quarryv1.RegisterQueryServiceServer(srv, server.New(router, log))
	srv.Health.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	srv.Health.SetServingStatus(service, healthpb.HealthCheckResponse_NOT_SERVING)

	// Served until Run returns, through the drain after SIGTERM: a stopping replica's
	// last scrapes record how its last calls went.
	stopMetrics, err := telemetry.StartMetrics(context.WithoutCancel(ctx), cfg.MetricsAddr, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	defer lis.Close() // Serve closes it too; this covers a start that fails first
	log.Info("gateway starting", "addr", lis.Addr().String(), "search", cfg.SearchAddr, "agent", cfg.AgentAddr, "cache", cfg.CacheBackend)

	g, gctx := errgroup.WithContext(ctx)
	// The generations are followed until the server has stopped, not only until the
	// signal: Serve answers on through -drain-grace and drains the calls in flight, and a
	// view frozen at the signal would serve an old generation's cached answers meanwhile.
	wctx, stopWatching := context.WithCancel(context.WithoutCancel(gctx))
	defer stopWatching()
	g.Go(func() error { return watcher.Run(wctx) })
	if shared != nil {
		g.Go(func() error { return shared.Run(wctx, watcher) })
	}
	g.Go(func() error {
		defer stopWatching()
		return srv.Serve(gctx, lis)
	})
	g.Go(func() error {
		if watcher.WaitReady(gctx) != nil {
			return nil // shutting down before the first state arrived
		}
		if shared != nil {
			// Learn the generations the other replicas use before answering; with Redis
			// down, start anyway (fail open) on the search service's view.
			t := time.NewTimer(cfg.Redis.DialTimeout)
			select {
			case <-shared.Synced():
			case <-t.C:
			case <-gctx.Done():
			}
			t.Stop()
		}
		srv.SetServing(service)
		log.Info("gateway ready", "addr", lis.Addr().String())
		if ready != nil {
			ready(lis.Addr())
		}
		return nil
	})
	return g.Wait()
}
