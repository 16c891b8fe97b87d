// Command quarry is Quarry's command-line client and its all-in-one runner:
//
//	quarry up                          start search, agent and gateway in one process
//	quarry query [-kb K] "question"    ask a running gateway
//	quarry genkb -out DIR -files N     write a synthetic knowledge base for benchmarks
//	quarry bench [-c 64 -d 30s]        load generator with a report per tier
//	quarry eval -kb DIR questions.jsonl routing quality on labelled questions
//	quarry devset -out DIR             write the Go standard library dev set
//	quarry key -name N -kb K           generate an API key and its -auth-keys entry
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/quarry-router/quarry/platform/daemon"
)

const usage = `usage: quarry <command> [flags]

commands:
  up       start the whole system in one process with embedded defaults and show it answering
  query    ask a running gateway a question
  sync     upload a folder so a knowledge base equals it (search service's KnowledgeService)
  archive  list (and archive) files whose importance fell below 35
  genkb    write a synthetic knowledge base (for benchmarks)
  bench    load a gateway (or an embedded Quarry) and report qps and p50/p95/p99 per tier
  eval     route labelled questions and report precision, coverage, recall and cache hits
  devset   write a labelled dev set from the Go standard library's documentation
  key      generate an API key and the -auth-keys file entry that grants it

Run "quarry <command> -h" for the flags of a command.
`

func main() {
	ctx, stop := daemon.SignalContext()
	defer stop()
	// up and bench serve the three services in this process: they run as the
	// services' own commands do.
	daemon.TuneGC(nil)
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case "up":
		err = up(ctx, args[1:], stdout, stderr)
	case "query":
		err = query(ctx, args[1:], stdout)
	case "genkb":
		err = genkb(args[1:], stdout)
	case "bench":
		err = benchCmd(ctx, args[1:], stdout, stderr)
	case "sync":
		err = syncCmd(ctx, args[1:], stdout, stderr)
	case "archive":
		err = archiveCmd(ctx, args[1:], stdout)
	case "eval":
		err = evalCmd(ctx, args[1:], stdout, stderr)
	case "devset":
		err = devsetCmd(args[1:], stdout)
	case "key":
		err = keyCmd(args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "quarry: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "quarry %s: %v\n", args[0], err)
		return 1
	}
	return 0
}
