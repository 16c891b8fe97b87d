// Command agent serves Quarry's AgentService (tiers 3 and 4).
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/quarry-router/quarry/platform/daemon"
	"github.com/quarry-router/quarry/services/agent/app"
)

func main() {
	os.Exit(daemon.Main("quarry-agent", func(ctx context.Context, log *slog.Logger) error {
		return app.Run(ctx, os.Args[1:], log, nil)
	}))
}
