// Package config lets every flag of a Quarry binary be set from the environment, so the
// same binary is configured by flags on a laptop and by a ConfigMap in Kubernetes.
package config

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
)

// EnvName returns the environment variable that overrides flag name for a binary with
// the given prefix: QUARRY_<PREFIX>_<NAME>, upper case, dashes and dots as underscores.
func EnvName(prefix, name string) string {
	r := strings.NewReplacer("-", "_", ".", "_")
	p := "QUARRY_"
	if prefix != "" {
		p += strings.ToUpper(r.Replace(prefix)) + "_"
	}
	return p + strings.ToUpper(r.Replace(name))
}

// ApplyEnv sets each flag of fs that was not given on the command line from its
// environment variable, if that is set. Call it after fs.Parse. Command-line flags win
// over the environment, and the environment wins over defaults.
func ApplyEnv(fs *flag.FlagSet, prefix string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if err != nil || set[f.Name] {
			return
		}
		env := EnvName(prefix, f.Name)
		v, ok := os.LookupEnv(env)
		if !ok {
			return
		}
		if e := fs.Set(f.Name, v); e != nil {
			err = fmt.Errorf("%s=%q (flag -%s): %w", env, v, f.Name, e)
		}
	})
	return err
}

// Parse parses args into fs, lets the environment override the flags not given, and
// then runs validate: the start of every Quarry binary. A QUARRY_<PREFIX>_ variable
// that no flag reads is logged as a warning (slog's default logger): see Unknown.
func Parse(fs *flag.FlagSet, prefix string, args []string, validate func() error) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := ApplyEnv(fs, prefix); err != nil {
		return err
	}
	for _, name := range Unknown(fs, prefix, os.Environ()) {
		slog.Warn("environment variable set but no flag reads it: ignored (a misspelt name?)", "variable", name)
	}
	return validate()
}

// serviceLink matches what the kubelet adds to every pod's environment for each
// Service with a cluster IP in its namespace (<NAME>_SERVICE_HOST, <NAME>_PORT_7700_TCP…):
// a Service named quarry-gateway makes QUARRY_GATEWAY_* variables no flag reads.
var serviceLink = regexp.MustCompile(`_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_[0-9]+_(TCP|UDP|SCTP)(_(PROTO|PORT|ADDR))?)?)$`)

// Unknown returns the variables of environ (os.Environ's form) that look like the
// settings of fs's binary, QUARRY_<PREFIX>_*, but that no flag of fs reads, sorted. A
// misspelt name would otherwise be ignored without a word, and the service run with
// the default its operator meant to change. Kubernetes' service links are left out.
// A warning, not a refusal to start: the environment is not the binary's alone (the
// kubelet's links, a ConfigMap shared with other versions of it), and a variable an
// older or newer binary reads must not stop this one.
func Unknown(fs *flag.FlagSet, prefix string, environ []string) []string {
	if prefix == "" {
		return nil // QUARRY_ alone is every binary's, and the command line's
	}
	p := EnvName(prefix, "")
	known := map[string]bool{}
	fs.VisitAll(func(f *flag.Flag) { known[EnvName(prefix, f.Name)] = true })
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, p) && !known[name] && !serviceLink.MatchString(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
