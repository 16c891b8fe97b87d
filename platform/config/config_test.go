package config

import (
	"errors"
	"flag"
	"testing"
	"time"
)

func TestApplyEnv(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		want    time.Duration
		wantErr bool
	}{
		{"default when nothing is set", nil, nil, time.Minute, false},
		{"environment overrides the default", nil, map[string]string{"QUARRY_GATEWAY_CACHE_TTL": "5s"}, 5 * time.Second, false},
		{"command line wins over environment", []string{"-cache-ttl=7s"}, map[string]string{"QUARRY_GATEWAY_CACHE_TTL": "5s"}, 7 * time.Second, false},
		{"bad value names the flag", nil, map[string]string{"QUARRY_GATEWAY_CACHE_TTL": "soon"}, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			ttl := fs.Duration("cache-ttl", time.Minute, "")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			err := ApplyEnv(fs, "gateway")
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if !tt.wantErr && *ttl != tt.want {
				t.Errorf("cache-ttl = %v, want %v", *ttl, tt.want)
			}
		})
	}
}

func TestParseValidatesAfterTheEnvironment(t *testing.T) {
	t.Setenv("QUARRY_GATEWAY_CACHE_TTL", "-1s")
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	ttl := fs.Duration("cache-ttl", time.Minute, "")
	err := Parse(fs, "gateway", nil, func() error {
		if *ttl <= 0 {
			return errors.New("-cache-ttl must be positive")
		}
		return nil
	})
	if err == nil || *ttl != -time.Second {
		t.Fatalf("Parse = %v with ttl %v: validation must see the environment's value and fail", err, *ttl)
	}
}
