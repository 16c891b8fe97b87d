// Command search serves Quarry's SearchService: BM25 search, ranking, the gates and the
// T2 answer over one or more knowledge bases.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/quarry-router/quarry/services/search/app"
)

func main() {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Run(ctx, os.Args[1:], log, nil); err != nil {
		log.Error("search stopped", "err", err)
		os.Exit(1)
	}
}
