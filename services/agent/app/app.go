// Package app runs the agent service: it is what cmd/agent and the all-in-one
// "quarry up" start.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/services/agent/llm"
	"github.com/quarry-router/quarry/services/agent/loop"
	"github.com/quarry-router/quarry/services/agent/server"
	"github.com/quarry-router/quarry/services/agent/tools"
	"github.com/quarry-router/quarry/services/agent/upstream"
	"google.golang.org/grpc"
)

// Config is the agent service's whole configuration.
type Config struct {
	// Listen is the host:port the AgentService listens on (port 0 picks a free one).
	Listen string
	// HealthListen, if set, serves the gRPC health service alone, in plaintext, for probes
	// that cannot speak TLS (Kubernetes' gRPC probes) while Listen requires it.
	HealthListen string
	// SearchAddr is the search service's gRPC target, which serves the tools.
	SearchAddr string
	// SearchKey is the service credential the agent presents to the search service
	// when that one requires API keys (-auth-keys there).
	SearchKey string
	// AuthKeys is a JSON file of the API keys allowed to call (platform/auth.Key): the
	// gateway's service credential. Empty leaves the agent open, for loopback or a
	// network policy that only lets the gateway in.
	AuthKeys string
	// MetricsAddr serves Prometheus /metrics when set: the LLM token and call-duration
	// metrics are the agent's.
	MetricsAddr string
	// TLS is how the AgentService serves; SearchTLS how the tools call the search
	// service (plaintext by default, for loopback).
	TLS       grpcx.ServerTLSConfig
	SearchTLS grpcx.ClientTLSConfig

	LLM   llm.Config
	Loop  loop.Config
	Tools tools.Config
	// Serve is how callers' connections age and how the service drains.
	Serve grpcx.ServeConfig
}

// DefaultDrainTimeout lets an answer in flight at shutdown finish: the gateway waits
// for one up to its -agent-timeout, 60 s by default.
const DefaultDrainTimeout = 60 * time.Second

// RegisterFlags registers every agent flag with its default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7702", "address to serve the AgentService on (host:port)")
	fs.StringVar(&c.HealthListen, "health-listen", "", `address serving only the gRPC health service, in plaintext, for probes that cannot speak TLS ("" = off; -listen serves health too)`)
	fs.StringVar(&c.SearchAddr, "search-addr", "127.0.0.1:7701", "gRPC address of the search service (the agent's read-only tools)")
	fs.StringVar(&c.SearchKey, "search-key", "", "API key to present to the search service (when it requires keys); never logged")
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", `address to serve Prometheus /metrics on ("" = off)`)
	fs.StringVar(&c.AuthKeys, "auth-keys", "", `JSON file of API keys allowed to call (name, sha256, knowledge_bases); "" = no key needed`)
	c.TLS.RegisterFlags(fs)
	c.SearchTLS.RegisterFlags(fs, "search")
	c.LLM.RegisterFlags(fs)
	c.Loop.RegisterFlags(fs)
	c.Tools.RegisterFlags(fs)
	c.Serve.RegisterFlags(fs, DefaultDrainTimeout)
}

// Validate checks every part of the configuration, naming the flag at fault.
func (c *Config) Validate() error {
	var errs []error
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		errs = append(errs, fmt.Errorf("-listen %q: want host:port: %w", c.Listen, err))
	}
	if c.LLM.Enabled() && c.SearchAddr == "" {
		errs = append(errs, errors.New("-search-addr must be set when an LLM is configured"))
	}
	return errors.Join(append(errs, c.TLS.Validate(), c.SearchTLS.Validate(), c.LLM.Validate(), c.Loop.Validate(), c.Tools.Validate(), c.Serve.Validate())...)
}

// Run parses args, serves the agent service until ctx is done, and reports the bound
// address through ready. QUARRY_AGENT_* environment variables override the defaults
// of flags not given (QUARRY_AGENT_LLM_API_KEY keeps the key off the command line).
func Run(ctx context.Context, args []string, log *slog.Logger, ready func(net.Addr)) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := config.Parse(fs, "agent", args, cfg.Validate); err != nil {
		return err
	}

	policy, err := auth.LoadPolicy(cfg.AuthKeys, log)
	if err != nil {
		return err
	}
	cfg.TLS.WarnIfExposed(log, cfg.Listen, !policy.Open())
	tlsOpt, err := cfg.TLS.ServerOption()
	if err != nil {
		return err
	}

	var answerer server.Answerer
	if cfg.LLM.Enabled() {
		conn, err := cfg.SearchTLS.Dial(cfg.SearchAddr, cfg.SearchKey)
		if err != nil {
			return err
		}
		defer conn.Close()
		ts := tools.New(cfg.Tools, upstream.NewSearch(quarryv1.NewSearchServiceClient(conn)))
		answerer = loop.New(cfg.Loop, llm.New(cfg.LLM), ts, log)
	}

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
	if answerer == nil {
		// The agent answers FAILED_PRECONDITION and the gateway serves the extractive
		// fallback, marked degraded.
		log.Info("agent: no LLM provider configured; T3/T4 answers will be degraded", "addr", lis.Addr().String())
	} else {
		log.Info("agent serving", "addr", lis.Addr().String(), "llm", cfg.LLM, "search", cfg.SearchAddr)
	}
	opts := append([]grpc.ServerOption{tlsOpt}, grpcx.WithAuth(policy)...)
	s := cfg.Serve.NewServer(log, opts...)
	defer s.Stop() // a start that fails below leaves nothing running
	if cfg.HealthListen != "" {
		if _, err := s.HealthOn(cfg.HealthListen); err != nil {
			return err
		}
	}
	quarryv1.RegisterAgentServiceServer(s.Server, server.New(answerer))
	s.SetServing(quarryv1.AgentService_ServiceDesc.ServiceName)
	if ready != nil {
		ready(lis.Addr())
	}
	return s.Serve(ctx, lis)
}
