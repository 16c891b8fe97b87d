package main

import (
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/quarry-router/quarry/cmd/quarry/internal/devset"
)

// devsetCmd is "quarry devset": the labelled Go standard library dev set.
func devsetCmd(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("devset", flag.ContinueOnError)
	out := fs.String("out", "", "folder to write into: the KB goes to OUT/gostd, the questions to OUT/questions.jsonl")
	goroot := fs.String("goroot", "", `Go installation whose src/ documentation is read ("" = the one "go env GOROOT" names)`)
	seed := fs.Uint64("seed", 1, "random seed; the same seed and Go release write the same set")
	perPkg := fs.Int("known-per-package", 3, "most known-item questions drawn from one package")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *out == "" {
		return usagef("-out is required: quarry devset -out DIR")
	}
	if *goroot == "" {
		// The Go on the PATH, not this binary's build-time root, which another machine
		// may not have.
		env, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return fmt.Errorf("go env GOROOT (or set -goroot): %w", err)
		}
		*goroot = strings.TrimSpace(string(env))
	}
	began := time.Now()
	// A fixed date keeps the set deterministic; recency is relative to it.
	st, err := devset.Generate(*out, devset.Options{GOROOT: *goroot, Seed: *seed, Now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), KnownPerPackage: *perPkg})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "wrote %d packages (%d files) to %s/gostd and %d known-item, %d out-of-domain, %d same-answer and %d different-answer questions to %s/questions.jsonl in %v\n",
		st.Packages, st.Files, *out, st.Known, st.OutOfDomain, st.Same, st.Other, *out, time.Since(began).Round(time.Millisecond))
	return nil
}
