// Command gateway serves Quarry's public QueryService.
package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/quarry-router/quarry/gateway/app"
)

func main() {
	os.Exit(run())
}

func run() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	err := app.Run(ctx, os.Args[1:], log, nil)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 2
	case err != nil:
		log.Error("gateway stopped", "err", err)
		return 1
	}
	return 0
}
