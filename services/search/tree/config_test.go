package tree

import (
	"flag"
	"strings"
	"testing"
)

func TestConfig(t *testing.T) {
	var c Config
	c.RegisterFlags(flag.NewFlagSet("t", flag.ContinueOnError))
	if c != DefaultConfig() {
		t.Errorf("flag defaults %+v differ from DefaultConfig %+v", c, DefaultConfig())
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults do not validate: %v", err)
	}
	tests := []struct {
		rule   string
		mutate func(*Config)
		flag   string
	}{
		{"a zero file cap is refused", func(c *Config) { c.MaxFileBytes = 0 }, "kb-max-file-bytes"},
		{"a zero front matter cap is refused", func(c *Config) { c.MaxFrontMatterBytes = 0 }, "kb-max-front-matter-bytes"},
		{"a front matter cap above the file cap is refused", func(c *Config) { c.MaxFrontMatterBytes = int(c.MaxFileBytes) + 1 }, "kb-max-front-matter-bytes"},
		{"a zero file count is refused", func(c *Config) { c.MaxFiles = 0 }, "kb-max-files"},
		{"a zero depth is refused", func(c *Config) { c.MaxDepth = 0 }, "kb-max-depth"},
		{"a default importance above 100 is refused", func(c *Config) { c.DefaultImportance = 101 }, "kb-default-importance"},
	}
	for _, tt := range tests {
		c := DefaultConfig()
		tt.mutate(&c)
		err := c.Validate()
		if err == nil || !strings.Contains(err.Error(), tt.flag) {
			t.Errorf("%s: err = %v, want one naming -%s", tt.rule, err, tt.flag)
		}
	}
}
