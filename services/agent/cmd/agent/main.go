// Command agent serves Quarry's AgentService (tiers 3 and 4).
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/quarry-router/quarry/services/agent/app"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Args[1:], log, nil); err != nil {
		log.Error("agent stopped", "err", err)
		os.Exit(1)
	}
}
