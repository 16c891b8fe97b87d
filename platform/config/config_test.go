package config

import (
	"encoding/json"
	"errors"
	"flag"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/syncbuf"
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

// A misspelt variable (QUARRY_GATEWAY_CACHE_TLL) set no flag and said nothing: the
// service ran with the default while its operator read the setting in the ConfigMap.
// Parse now names every QUARRY_<SERVICE>_ variable no flag reads. Kubernetes' service
// links (QUARRY_GATEWAY_SERVICE_HOST and the like, for a Service named quarry-gateway)
// are not the operator's settings and are left out.
func TestParseWarnsOfVariablesNoFlagReads(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want []string // variables named in warnings
	}{
		{"a known variable", map[string]string{"QUARRY_GATEWAY_CACHE_TTL": "5s"}, nil},
		{"a misspelt one", map[string]string{"QUARRY_GATEWAY_CACHE_TLL": "5s"}, []string{"QUARRY_GATEWAY_CACHE_TLL"}},
		{"another service's", map[string]string{"QUARRY_SEARCH_CACHE_TLL": "5s", "QUARRY_API_KEY": "k"}, nil},
		{"kubernetes service links", map[string]string{
			"QUARRY_GATEWAY_SERVICE_HOST":        "10.0.0.1",
			"QUARRY_GATEWAY_SERVICE_PORT":        "7700",
			"QUARRY_GATEWAY_SERVICE_PORT_GRPC":   "7700",
			"QUARRY_GATEWAY_PORT":                "tcp://10.0.0.1:7700",
			"QUARRY_GATEWAY_PORT_7700_TCP":       "tcp://10.0.0.1:7700",
			"QUARRY_GATEWAY_PORT_7700_TCP_PROTO": "tcp",
			"QUARRY_GATEWAY_PORT_7700_TCP_PORT":  "7700",
			"QUARRY_GATEWAY_PORT_7700_TCP_ADDR":  "10.0.0.1",
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var logs syncbuf.Buffer
			old := slog.Default()
			slog.SetDefault(slog.New(slog.NewJSONHandler(&logs, nil)))
			t.Cleanup(func() { slog.SetDefault(old) })
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.Duration("cache-ttl", time.Minute, "")
			if err := Parse(fs, "GATEWAY", nil, func() error { return nil }); err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
				var m map[string]any
				if line != "" && json.Unmarshal([]byte(line), &m) == nil && m["level"] == "WARN" {
					v, _ := m["variable"].(string)
					got = append(got, v)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("warnings name %q, want %q\n%s", got, tt.want, logs.String())
			}
		})
	}
}
