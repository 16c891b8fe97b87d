// Package app runs the agent service: it is what cmd/agent and the all-in-one
// "quarry up" start.
package app

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/services/agent/server"
)

// Run parses args, serves the agent service until ctx is done, and reports the bound
// address through ready.
func Run(ctx context.Context, args []string, log *slog.Logger, ready func(net.Addr)) error {
	fs := flag.NewFlagSet("agent", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.0.1:7702", "address to serve the AgentService on (host:port)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := config.ApplyEnv(fs, "agent"); err != nil {
		return err
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", *listen, err)
	}
	// No LLM provider yet: the agent answers FAILED_PRECONDITION and the gateway serves
	// the extractive fallback, marked degraded.
	log.Info("agent: no LLM provider configured; T3/T4 answers will be degraded", "addr", lis.Addr().String())
	s := grpcx.NewServer(log)
	quarryv1.RegisterAgentServiceServer(s.Server, server.New(nil))
	s.SetServing(quarryv1.AgentService_ServiceDesc.ServiceName)
	if ready != nil {
		ready(lis.Addr())
	}
	return s.Serve(ctx, lis)
}
