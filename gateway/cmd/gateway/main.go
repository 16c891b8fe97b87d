// Command gateway serves Quarry's public QueryService.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/quarry-router/quarry/gateway/app"
	"github.com/quarry-router/quarry/platform/daemon"
)

func main() {
	os.Exit(daemon.Main("quarry-gateway", func(ctx context.Context, log *slog.Logger) error {
		return app.Run(ctx, os.Args[1:], log, nil)
	}))
}
