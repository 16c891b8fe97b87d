// Command search serves Quarry's SearchService and KnowledgeService: BM25 search,
// ranking, the gates and the T2 answer, and the write side, over one or more knowledge
// bases.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/quarry-router/quarry/platform/daemon"
	"github.com/quarry-router/quarry/services/search/app"
)

func main() {
	os.Exit(daemon.Main("quarry-search", func(ctx context.Context, log *slog.Logger) error {
		return app.Run(ctx, os.Args[1:], log, nil)
	}))
}
