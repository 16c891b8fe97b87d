// Command quarry is Quarry's command-line client and its all-in-one runner:
//
//	quarry up                          start search, agent and gateway in one process
//	quarry query [-kb K] "question"    ask a running gateway
//	quarry sync DIR -kb K              make a knowledge base equal a local folder
//	quarry archive -kb K -suggest      list (and -apply: archive) little-used files
//	quarry genkb -out DIR -files N     write a synthetic knowledge base for benchmarks
//	quarry bench [-c 64 -d 30s]        load generator with a report per tier
//	quarry eval -kb DIR questions.jsonl routing quality on labelled questions
//	quarry devset -out DIR             write the Go standard library dev set
//	quarry key -name N -kb K           generate an API key and its -auth-keys entry
package main

import (
	"context"
	"errors"
	"flag"
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
	var ue usageError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		// "quarry query -h": the flag package printed the flags; asking is no failure.
		return 0
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "quarry %s: %v\n", args[0], err)
		return 2
	case errors.Is(ctx.Err(), context.Canceled):
		// Ctrl-C (or SIGTERM) stopped the work: "quarry query: Canceled: context
		// canceled", exit 1, read as a failure of the call. 130 is a shell's status for
		// an interrupted command, and what the example clients exit with.
		fmt.Fprintf(stderr, "quarry %s: interrupted\n", args[0])
		return 130
	default:
		fmt.Fprintf(stderr, "quarry %s: %v\n", args[0], err)
		return 1
	}
}

// usageError is a command line the command cannot run: an unknown flag, a bad flag
// value, a missing or unexpected argument. The command exits 2, as the flag package's
// own commands do, and not 1, which says the work itself failed.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

// parseFlags parses a command's flags; a command that takes no arguments is given
// none. Without the check, "quarry genkb -out DIR 10 -files 3" stopped parsing at
// "10", ignored "-files 3" and wrote 5,000 files.
func parseFlags(fs *flag.FlagSet, args []string, takesArgs bool) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usageError{err}
	}
	if !takesArgs && fs.NArg() > 0 {
		return usageError{fmt.Errorf("unexpected argument %q (this command takes only flags; -h lists them)", fs.Arg(0))}
	}
	return nil
}

// usagef is a usage error with a message.
func usagef(format string, a ...any) error { return usageError{fmt.Errorf(format, a...)} }
