// Command search serves Quarry's SearchService: BM25 search, ranking, the gates and the
// T2 answer over one or more knowledge bases.
package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/services/search/app"
)

func main() {
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, nil)))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: "quarry-search"})
	if err != nil {
		log.Error("telemetry", "err", err)
		os.Exit(1)
	}
	err = app.Run(ctx, os.Args[1:], log, nil)
	// Flush telemetry last, after the server has drained.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if terr := tel.Shutdown(sctx); terr != nil {
		log.Warn("telemetry shutdown", "err", terr)
	}
	if err != nil {
		log.Error("search stopped", "err", err)
		os.Exit(1)
	}
}
