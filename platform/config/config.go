// Package config lets every flag of a Quarry binary be set from the environment, so the
// same binary is configured by flags on a laptop and by a ConfigMap in Kubernetes.
package config

import (
	"flag"
	"fmt"
	"os"
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
// then runs validate: the start of every Quarry binary.
func Parse(fs *flag.FlagSet, prefix string, args []string, validate func() error) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := ApplyEnv(fs, prefix); err != nil {
		return err
	}
	return validate()
}
