package app

import (
	"context"
	"flag"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/syncbuf"
	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// run starts the agent with args and returns a client, or Run's error.
func run(t *testing.T, log *slog.Logger, args ...string) (quarryv1.AgentServiceClient, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, append([]string{"-listen", "127.0.0.1:0"}, args...), log, func(a net.Addr) { ready <- a })
	}()
	select {
	case err := <-done:
		cancel()
		return nil, err
	case addr := <-ready:
		conn, err := grpcx.Dial(addr.String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(); cancel(); <-done })
		return quarryv1.NewAgentServiceClient(conn), nil
	}
}

func answer(t *testing.T, c quarryv1.AgentServiceClient) (*quarryv1.AgentAnswer, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := c.Answer(ctx, &quarryv1.AnswerRequest{KnowledgeBase: "platform", Query: "How do rate limits work?", Tier: quarryv1.Tier_TIER_SINGLE_LLM,
		Prefetched: []*quarryv1.Document{{Path: "auth/limits.md", Title: "Limits", Content: "100 requests a minute per key."}}})
	if err != nil {
		return nil, err
	}
	for {
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if f := msg.GetFinal(); f != nil {
			return f, nil
		}
	}
}

func TestWithoutAnLLMTheAgentSaysSo(t *testing.T) {
	c, err := run(t, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := answer(t, c); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("err %v, want FAILED_PRECONDITION", err)
	}
}

func TestAnLLMConfiguredFromTheEnvironmentAnswers(t *testing.T) {
	srv := llmtest.New(t, llmtest.Turn{Content: "100 requests a minute per key."})
	t.Setenv("QUARRY_AGENT_LLM_BASE_URL", srv.BaseURL())
	t.Setenv("QUARRY_AGENT_LLM_MODEL", "env-model")
	t.Setenv("QUARRY_AGENT_LLM_API_KEY", "sk-from-env")
	var logs syncbuf.Buffer
	// No search service: the manifest is left out of the prompt and the answer still comes.
	c, err := run(t, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})), "-search-addr", "127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	ans, err := answer(t, c)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Degraded || !strings.HasPrefix(ans.Answer, "100 requests a minute per key.") || ans.Llm.GetModel() != "env-model" {
		t.Errorf("answer %q degraded %v trace %v", ans.Answer, ans.Degraded, ans.Llm)
	}
	req := srv.Requests()[0]
	if req.Model != "env-model" || req.Authorization != "Bearer sk-from-env" {
		t.Errorf("model %q authorization %q", req.Model, req.Authorization)
	}
	if strings.Contains(logs.String(), "sk-from-env") {
		t.Error("the API key reached the log")
	}
	if !strings.Contains(logs.String(), "api_key_set=true") {
		t.Errorf("the start-up log does not describe the LLM:\n%s", logs.String())
	}
}

func TestBadSettingsStopTheStartNamingTheFlag(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"a base URL needs a model", []string{"-llm-base-url", "http://localhost:11434/v1"}, "-llm-model"},
		{"the loop needs a deadline", []string{"-loop-deadline", "0s"}, "-loop-deadline"},
		{"tools need room for a document", []string{"-tool-max-document-chars", "10"}, "-tool-max-document-chars"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := run(t, slog.New(slog.NewTextHandler(io.Discard, nil)), tt.args...)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %s", err, tt.want)
			}
		})
	}
}

// The per-turn tool-call limit is a loop flag like the others: 8 by default,
// QUARRY_AGENT_LOOP_MAX_TOOL_CALLS_PER_TURN overrides the default, the command line
// wins over both, and a value that would run no call stops the start naming the flag.
func TestTheToolCallsPerTurnLimitComesFromFlagOrEnvironment(t *testing.T) {
	const env = "QUARRY_AGENT_LOOP_MAX_TOOL_CALLS_PER_TURN"
	tests := []struct {
		name    string
		env     string
		args    []string
		want    int
		wantErr bool
	}{
		{"the default", "", nil, 8, false},
		{"the environment overrides the default", "12", nil, 12, false},
		{"the command line wins over the environment", "12", []string{"-loop-max-tool-calls-per-turn", "4"}, 4, false},
		{"zero from the environment is refused", "0", nil, 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.env != "" {
				t.Setenv(env, tt.env)
			}
			fs := flag.NewFlagSet("agent", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			var cfg Config
			cfg.RegisterFlags(fs)
			err := config.Parse(fs, "agent", tt.args, cfg.Validate)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "-loop-max-tool-calls-per-turn") {
					t.Fatalf("err %v, want one naming -loop-max-tool-calls-per-turn", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Loop.MaxToolCallsPerTurn != tt.want {
				t.Errorf("limit %d, want %d", cfg.Loop.MaxToolCallsPerTurn, tt.want)
			}
		})
	}
}

func TestFailedStartReleasesMetricsPort(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	telemetrytest.FailedStartReleasesMetrics(t, func(listen, metrics string) error {
		return Run(context.Background(), []string{"-listen", listen, "-metrics-addr", metrics}, log, nil)
	})
}

func TestMetricsAreServedWhileDraining(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	telemetrytest.MetricsServedWhileDraining(t, func(ctx context.Context, metrics string) error {
		return Run(ctx, []string{"-listen", "127.0.0.1:0", "-metrics-addr", metrics, "-drain-grace", "1s"}, log, nil)
	})
}
