package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/quarry-router/quarry/services/search/kbgen"
)

func genkb(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("genkb", flag.ContinueOnError)
	out := fs.String("out", "", "folder to write the knowledge base into (created)")
	files := fs.Int("files", 5000, "number of knowledge files")
	seed := fs.Int64("seed", 1, "random seed; the same seed writes the same files")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-out is required: quarry genkb -out DIR [-files N]")
	}
	start := time.Now()
	m, err := kbgen.Generate(*out, kbgen.Options{Files: *files, Seed: *seed, Now: time.Now()})
	if err != nil {
		return genkbError(err)
	}
	fmt.Fprintf(stdout, "wrote %d files to %s in %v\n", len(m.Files), *out, time.Since(start).Round(time.Millisecond))
	return nil
}

// genkbError makes a -files the generator cannot honour ("Files 3 too few for 8
// domains") a usage error, exit 2: it exited 1, as a failed write does.
func genkbError(err error) error {
	if errors.Is(err, kbgen.ErrOptions) {
		return usageError{fmt.Errorf("-files: %w", err)}
	}
	return err
}
