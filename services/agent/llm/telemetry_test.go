package llm

import (
	"context"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/telemetry/telemetrytest"
	"github.com/quarry-router/quarry/services/agent/llm/llmtest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// TestChatIsTracedAndMeasuredAsGenAIConventionsSay: every Chat call is one client span
// named for the model with the request, response and token counts, failed calls marked
// with their error.type, and the duration and token histograms carry the same model.
func TestChatIsTracedAndMeasuredAsGenAIConventionsSay(t *testing.T) {
	tests := []struct {
		name      string
		turns     []llmtest.Turn
		want      map[string]string
		errorType string
	}{
		{"an answer", []llmtest.Turn{{Content: "ok", PromptTokens: 120, CompletionTokens: 9, Model: "served-model"}},
			map[string]string{"gen_ai.response.model": "served-model", "gen_ai.usage.input_tokens": "120",
				"gen_ai.usage.output_tokens": "9", "gen_ai.response.finish_reasons": `["stop"]`, "quarry.llm.attempts": "1"}, ""},
		{"an answer after a retry", []llmtest.Turn{{Status: 503}, {Content: "ok", PromptTokens: 7, CompletionTokens: 1}},
			map[string]string{"gen_ai.response.model": "scripted-model", "quarry.llm.attempts": "2"}, ""},
		{"a client error", []llmtest.Turn{{Status: 400}}, map[string]string{}, "400"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, spans := telemetrytest.Tracing()
			spans.Reset()
			reader := telemetrytest.Metrics()
			srv := llmtest.New(t, tt.turns...)
			onDelta, _ := collect(t)
			_, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), onDelta)
			if (err != nil) != (tt.errorType != "") {
				t.Fatalf("Chat error %v, want error.type %q", err, tt.errorType)
			}
			got := spans.GetSpans()
			if len(got) != 1+len(tt.turns) && tt.errorType == "" || len(got) == 0 {
				t.Fatalf("%d spans, want the chat span and one HTTP span per attempt", len(got))
			}
			chat := got[len(got)-1] // ends last: it holds the attempts
			attrs := map[string]string{}
			for _, a := range chat.Attributes {
				attrs[string(a.Key)] = a.Value.String()
			}
			want := map[string]string{"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
				"gen_ai.request.model": "scripted-model", "gen_ai.request.max_tokens": "1024", "gen_ai.request.temperature": "0.3",
				"server.address": "127.0.0.1"}
			for k, v := range tt.want {
				want[k] = v
			}
			if tt.errorType != "" {
				want["error.type"] = tt.errorType
			}
			for k, v := range want {
				if attrs[k] != v {
					t.Errorf("chat span has %s=%q, want %q", k, attrs[k], v)
				}
			}
			if chat.Name != "chat scripted-model" {
				t.Errorf("span name %q", chat.Name)
			}
			for _, s := range got[:len(got)-1] {
				if s.Parent.SpanID() != chat.SpanContext.SpanID() || !strings.HasPrefix(s.Name, "HTTP ") {
					t.Errorf("span %q is not an HTTP attempt under the chat span", s.Name)
				}
			}
			if wantCode := map[bool]codes.Code{true: codes.Error, false: codes.Unset}[tt.errorType != ""]; chat.Status.Code != wantCode {
				t.Errorf("chat span status %v, want %v", chat.Status, wantCode)
			}

			var rm metricdata.ResourceMetrics
			if err := reader.Collect(context.Background(), &rm); err != nil {
				t.Fatal(err)
			}
			if n := histogramCount(rm, "gen_ai.client.operation.duration", tt.errorType); n == 0 {
				t.Errorf("no gen_ai.client.operation.duration point with error.type %q", tt.errorType)
			}
			if tt.errorType == "" && histogramCount(rm, "gen_ai.client.token.usage", "") < 2 {
				t.Error("no input and output token usage points")
			}
		})
	}
}

// histogramCount is how many measurements a GenAI histogram holds for the scripted
// model with the given error.type ("" for none).
func histogramCount(rm metricdata.ResourceMetrics, name, errorType string) uint64 {
	var n uint64
	match := func(set attribute.Set) bool {
		model, _ := set.Value("gen_ai.request.model")
		et, _ := set.Value("error.type")
		return model.AsString() == "scripted-model" && et.AsString() == errorType
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			switch d := m.Data.(type) {
			case metricdata.Histogram[float64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						n += p.Count
					}
				}
			case metricdata.Histogram[int64]:
				for _, p := range d.DataPoints {
					if match(p.Attributes) {
						n += p.Count
					}
				}
			}
		}
	}
	return n
}

// TestChatWithoutUsageRecordsNoTokenCounts: a server that streams without usage (one
// that refuses or ignores stream_options) says nothing of the tokens. The call recorded
// 0 input and 0 output tokens, on its span and as two gen_ai.client.token.usage
// measurements, which pulled every token percentile and average towards zero.
func TestChatWithoutUsageRecordsNoTokenCounts(t *testing.T) {
	_, spans := telemetrytest.Tracing()
	spans.Reset()
	reader := telemetrytest.Metrics()
	tokens := func() uint64 {
		var rm metricdata.ResourceMetrics
		if err := reader.Collect(context.Background(), &rm); err != nil {
			t.Fatal(err)
		}
		return histogramCount(rm, "gen_ai.client.token.usage", "")
	}
	before := tokens()
	const id = `"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"scripted-model"`
	srv := llmtest.New(t, llmtest.Turn{SSE: sse(
		`{`+id+`,"choices":[{"index":0,"delta":{"role":"assistant","content":"Rotate."},"finish_reason":null}]}`,
		`{`+id+`,"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}`,
		`[DONE]`)})
	onDelta, _ := collect(t)
	resp, err := New(testConfig(srv.BaseURL())).Chat(context.Background(), chatRequest(), onDelta)
	if err != nil {
		t.Fatal(err)
	}
	if resp.PromptTokens != 0 || resp.CompletionTokens != 0 {
		t.Fatalf("the server reported no usage, yet the response has %d+%d tokens", resp.PromptTokens, resp.CompletionTokens)
	}
	got := spans.GetSpans()
	if len(got) == 0 {
		t.Fatal("no spans")
	}
	chat := got[len(got)-1]
	for _, a := range chat.Attributes {
		if strings.HasPrefix(string(a.Key), "gen_ai.usage.") {
			t.Errorf("chat span has %s=%s for a call whose tokens were not reported", a.Key, a.Value.String())
		}
	}
	if n := tokens() - before; n != 0 {
		t.Errorf("%d gen_ai.client.token.usage measurements for a call whose tokens were not reported, want none", n)
	}
}
