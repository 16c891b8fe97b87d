package daemon

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// SignalContext returns a context cancelled by the first SIGTERM or interrupt, which
// starts a service's drain. From then on the signals have their default effect again,
// so a second one (an operator's second Ctrl-C) ends at once a drain that waits for
// long answers in flight.
func SignalContext() (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop)
	return ctx, stop
}
