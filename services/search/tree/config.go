package tree

import (
	"errors"
	"flag"
	"fmt"
)

// Config bounds what Load accepts, so a hostile or accidental tree (a huge log file named
// .md, a front matter alias bomb, a million files) costs a skipped file, not the service.
type Config struct {
	// MaxFileBytes is the largest markdown file loaded; larger ones are skipped.
	MaxFileBytes int64
	// MaxFrontMatterBytes is the largest front matter block parsed; files with a larger
	// one are skipped.
	MaxFrontMatterBytes int
	// MaxFiles is the most markdown files one tree may hold, archived originals (never
	// read) not counted; Load fails beyond it rather than serving a silently truncated
	// knowledge base, and a write that would take a knowledge base past it is refused.
	MaxFiles int
	// MaxDepth is the deepest folder level walked (a file at a/b/c.md is at depth 2);
	// deeper folders are skipped.
	MaxDepth int
	// DefaultImportance is a document's starting importance when its front matter has
	// none (SPEC "Importance and maturity": 50).
	DefaultImportance float64
}

// DefaultConfig returns the SPEC defaults.
func DefaultConfig() Config {
	return Config{
		MaxFileBytes:        1 << 20,
		MaxFrontMatterBytes: 64 << 10,
		MaxFiles:            100_000,
		MaxDepth:            32,
		DefaultImportance:   50,
	}
}

// RegisterFlags registers the limits with their defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	d := DefaultConfig()
	fs.Int64Var(&c.MaxFileBytes, "kb-max-file-bytes", d.MaxFileBytes, "largest markdown file loaded, in bytes; larger files are skipped")
	fs.IntVar(&c.MaxFrontMatterBytes, "kb-max-front-matter-bytes", d.MaxFrontMatterBytes, "largest front matter block parsed, in bytes; files with a larger one are skipped")
	fs.IntVar(&c.MaxFiles, "kb-max-files", d.MaxFiles, "most markdown files one knowledge base may hold (archived full texts not counted); loading fails and writes are refused beyond it")
	fs.IntVar(&c.MaxDepth, "kb-max-depth", d.MaxDepth, "deepest folder level walked; deeper folders are skipped")
	fs.Float64Var(&c.DefaultImportance, "kb-default-importance", d.DefaultImportance, "starting importance (0-100) of a file whose front matter sets none")
}

// Validate rejects limits that would make every load fail or none bounded.
func (c *Config) Validate() error {
	var errs []error
	if c.MaxFileBytes <= 0 {
		errs = append(errs, fmt.Errorf("-kb-max-file-bytes must be positive, got %d", c.MaxFileBytes))
	}
	if c.MaxFrontMatterBytes <= 0 {
		errs = append(errs, fmt.Errorf("-kb-max-front-matter-bytes must be positive, got %d", c.MaxFrontMatterBytes))
	} else if int64(c.MaxFrontMatterBytes) > c.MaxFileBytes && c.MaxFileBytes > 0 {
		errs = append(errs, fmt.Errorf("-kb-max-front-matter-bytes (%d) must not exceed -kb-max-file-bytes (%d)", c.MaxFrontMatterBytes, c.MaxFileBytes))
	}
	if c.MaxFiles <= 0 {
		errs = append(errs, fmt.Errorf("-kb-max-files must be positive, got %d", c.MaxFiles))
	}
	if c.MaxDepth <= 0 {
		errs = append(errs, fmt.Errorf("-kb-max-depth must be positive, got %d", c.MaxDepth))
	}
	if !(c.DefaultImportance >= 0 && c.DefaultImportance <= 100) {
		errs = append(errs, fmt.Errorf("-kb-default-importance must be in [0,100], got %v", c.DefaultImportance))
	}
	return errors.Join(errs...)
}
