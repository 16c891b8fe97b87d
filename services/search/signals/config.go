package signals

import (
	"errors"
	"flag"
	"fmt"
	"time"
)

// Config holds the runtime-signal rules (SPEC "Importance and maturity").
type Config struct {
	// HitGain is the importance a file gains each time a search returns it.
	HitGain float64
	// CurationGain is the importance a file gains at each curation update.
	CurationGain float64
	// MaxImportance caps importance.
	MaxImportance float64
	// DecayPerDay multiplies importance for each day without a hit or curation.
	DecayPerDay float64
	// PromoteValidated: draft becomes validated at importance >= this.
	PromoteValidated float64
	// PromoteCore: validated becomes core at importance >= this.
	PromoteCore float64
	// DemoteCore: core becomes validated at importance below this.
	DemoteCore float64
	// DemoteValidated: validated becomes draft at importance below this.
	DemoteValidated float64
	// FlushInterval is how often Run applies pending hits.
	FlushInterval time.Duration
	// MaxPendingPaths bounds the distinct paths holding unflushed hits (split evenly
	// over the store's shards); once a shard holds its share, hits for paths it does not
	// hold are dropped and counted until the next flush, rather than growing memory
	// without bound.
	MaxPendingPaths int
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{
		HitGain:          3,
		CurationGain:     5,
		MaxImportance:    100,
		DecayPerDay:      0.995,
		PromoteValidated: 65,
		PromoteCore:      85,
		DemoteCore:       60,
		DemoteValidated:  35,
		FlushInterval:    time.Second,
		MaxPendingPaths:  65536,
	}
}

// RegisterFlags registers the rules with their SPEC defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.Float64Var(&c.HitGain, "signals-hit-gain", d.HitGain, "importance a file gains each time a search returns it")
	fs.Float64Var(&c.CurationGain, "signals-curation-gain", d.CurationGain, "importance a file gains at each curation update")
	fs.Float64Var(&c.MaxImportance, "signals-max-importance", d.MaxImportance, "importance cap")
	fs.Float64Var(&c.DecayPerDay, "signals-decay-per-day", d.DecayPerDay, "factor importance is multiplied by per idle day (0-1]")
	fs.Float64Var(&c.PromoteValidated, "signals-promote-validated", d.PromoteValidated, "importance at or above which a draft becomes validated")
	fs.Float64Var(&c.PromoteCore, "signals-promote-core", d.PromoteCore, "importance at or above which a validated file becomes core")
	fs.Float64Var(&c.DemoteCore, "signals-demote-core", d.DemoteCore, "importance below which a core file becomes validated")
	fs.Float64Var(&c.DemoteValidated, "signals-demote-validated", d.DemoteValidated, "importance below which a validated file becomes draft")
	fs.DurationVar(&c.FlushInterval, "signals-flush-interval", d.FlushInterval, "how often pending search hits are applied")
	fs.IntVar(&c.MaxPendingPaths, "signals-max-pending-paths", d.MaxPendingPaths, "distinct paths holding unflushed hits; hits for more are dropped and counted")
}

// Validate rejects rules that could not hold: every demotion threshold must sit below
// its promotion threshold, or a file could flip between stages on every update.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !(c.HitGain >= 0) {
		bad("-signals-hit-gain must be >= 0, got %v", c.HitGain)
	}
	if !(c.CurationGain >= 0) {
		bad("-signals-curation-gain must be >= 0, got %v", c.CurationGain)
	}
	if !(c.MaxImportance > 0) {
		bad("-signals-max-importance must be > 0, got %v", c.MaxImportance)
	}
	if !(c.DecayPerDay > 0 && c.DecayPerDay <= 1) {
		bad("-signals-decay-per-day must be in (0,1], got %v", c.DecayPerDay)
	}
	for _, t := range []struct {
		name string
		v    float64
	}{
		{"signals-promote-validated", c.PromoteValidated},
		{"signals-promote-core", c.PromoteCore},
		{"signals-demote-core", c.DemoteCore},
		{"signals-demote-validated", c.DemoteValidated},
	} {
		if !(t.v >= 0 && t.v <= c.MaxImportance) {
			bad("-%s must be in [0, -signals-max-importance], got %v", t.name, t.v)
		}
	}
	if !(c.DemoteValidated < c.PromoteValidated) {
		bad("-signals-demote-validated (%v) must be below -signals-promote-validated (%v)", c.DemoteValidated, c.PromoteValidated)
	}
	if !(c.DemoteCore < c.PromoteCore) {
		bad("-signals-demote-core (%v) must be below -signals-promote-core (%v)", c.DemoteCore, c.PromoteCore)
	}
	if !(c.PromoteValidated < c.PromoteCore) {
		bad("-signals-promote-validated (%v) must be below -signals-promote-core (%v)", c.PromoteValidated, c.PromoteCore)
	}
	if !(c.DemoteValidated < c.DemoteCore) {
		bad("-signals-demote-validated (%v) must be below -signals-demote-core (%v)", c.DemoteValidated, c.DemoteCore)
	}
	if c.FlushInterval <= 0 {
		bad("-signals-flush-interval must be positive, got %v", c.FlushInterval)
	}
	if c.MaxPendingPaths <= 0 {
		bad("-signals-max-pending-paths must be positive, got %d", c.MaxPendingPaths)
	}
	return errors.Join(errs...)
}
