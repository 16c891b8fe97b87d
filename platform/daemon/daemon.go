// Package daemon is what every Quarry service's main does around its work: JSON logs
// with trace ids, the garbage collector tuned (TuneGC), OpenTelemetry from the
// OTEL_* environment, a context cancelled on SIGTERM or Ctrl-C (a second one ends the
// process at once), and telemetry flushed
// last, after the servers have drained.
package daemon

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"time"

	"github.com/quarry-router/quarry/platform/telemetry"
)

// Main runs run until it returns or a signal cancels its context, and returns the
// process exit code: 0, 1 on failure, 2 for -h.
func Main(service string, run func(ctx context.Context, log *slog.Logger) error) int {
	log := slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stderr, nil))).With("service", service)
	// Packages that log through slog's default logger (the LLM provider) or the log
	// package (libraries) write the service's JSON lines too, with the trace ids of
	// their context: the default logger wrote plain text without either.
	slog.SetDefault(log)
	TuneGC(log)
	ctx, stop := SignalContext()
	defer stop()
	tel, err := telemetry.Setup(ctx, telemetry.Config{Service: service})
	if err != nil {
		log.Error("telemetry", "err", err)
		return 1
	}
	err = run(ctx, log)
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if terr := tel.Shutdown(sctx); terr != nil {
		log.Warn("telemetry shutdown", "err", terr)
	}
	switch {
	case errors.Is(err, flag.ErrHelp):
		return 2
	case err != nil:
		log.Error("stopped", "err", err)
		return 1
	}
	return 0
}
