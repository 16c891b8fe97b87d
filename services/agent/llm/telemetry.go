package llm

import (
	"context"
	"errors"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/semconv/v1.41.0/genaiconv"
	"go.opentelemetry.io/otel/trace"

	"github.com/quarry-router/quarry/services/agent/loop"
)

// A chat call is traced and measured as OpenTelemetry's GenAI semantic conventions
// describe a model client (semconv v1.41, the last Go release to carry them): a
// "chat {model}" client span holding the request, the response model, finish reason and
// token counts, with the HTTP spans of its attempts as children, and the
// gen_ai.client.operation.duration and gen_ai.client.token.usage histograms. So any
// backend that knows the conventions shows model, latency and tokens without knowing
// Quarry.
const scope = "github.com/quarry-router/quarry/services/agent/llm"

var tracer = otel.Tracer(scope)

// The provider name says which API the calls speak: an OpenAI-compatible server (vLLM,
// Ollama, a gateway) is told apart by server.address.
var providerName = genaiconv.ProviderNameOpenAI

type instruments struct {
	duration genaiconv.ClientOperationDuration
	tokens   genaiconv.ClientTokenUsage
}

// newInstruments uses the bucket boundaries the conventions recommend.
func newInstruments() instruments {
	m := otel.Meter(scope)
	d, _ := genaiconv.NewClientOperationDuration(m, metric.WithExplicitBucketBoundaries(
		0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92))
	t, _ := genaiconv.NewClientTokenUsage(m, metric.WithExplicitBucketBoundaries(
		1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864))
	return instruments{duration: d, tokens: t}
}

// server is the endpoint's host and port, as server.address and server.port.
func server(baseURL string) []attribute.KeyValue {
	u, err := url.Parse(baseURL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	attrs := []attribute.KeyValue{semconv.ServerAddress(u.Hostname())}
	if n, err := strconv.Atoi(port); err == nil {
		attrs = append(attrs, semconv.ServerPort(n))
	}
	return attrs
}

// startChat starts the span of one Chat call.
func (p *OpenAI) startChat(ctx context.Context, req loop.ChatRequest) (context.Context, trace.Span) {
	attrs := append([]attribute.KeyValue{
		semconv.GenAIOperationNameChat,
		semconv.GenAIProviderNameOpenAI,
		semconv.GenAIRequestModel(p.cfg.Model),
		semconv.GenAIRequestMaxTokens(req.MaxTokens),
		semconv.GenAIRequestTemperature(req.Temperature),
	}, p.server...)
	return tracer.Start(ctx, "chat "+p.cfg.Model, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
}

// endChat records a Chat call's outcome on its span and in the metrics.
func (p *OpenAI) endChat(ctx context.Context, span trace.Span, began time.Time, resp *loop.ChatResponse, err error) {
	defer span.End()
	attrs := append([]attribute.KeyValue{semconv.GenAIRequestModel(p.cfg.Model)}, p.server...)
	if resp != nil {
		attrs = append(attrs, semconv.GenAIResponseModel(resp.Model))
		span.SetAttributes(
			semconv.GenAIResponseModel(resp.Model),
			semconv.GenAIResponseFinishReasons(resp.FinishReason),
			attribute.Int("quarry.llm.attempts", resp.Attempts),
		)
		// A server that streams without usage (it refuses or ignores stream_options)
		// reports no counts, which read as 0 and 0: a count it did not give is left
		// out rather than recorded as none. A reported prompt is never 0 tokens.
		if resp.PromptTokens != 0 || resp.CompletionTokens != 0 {
			span.SetAttributes(
				semconv.GenAIUsageInputTokens(int(resp.PromptTokens)),
				semconv.GenAIUsageOutputTokens(int(resp.CompletionTokens)),
			)
			p.metrics.tokens.Record(ctx, resp.PromptTokens, genaiconv.OperationNameChat, providerName, genaiconv.TokenTypeInput, attrs...)
			p.metrics.tokens.Record(ctx, resp.CompletionTokens, genaiconv.OperationNameChat, providerName, genaiconv.TokenTypeOutput, attrs...)
		}
	}
	if err != nil {
		kind := p.errorType(err)
		attrs = append(attrs, semconv.ErrorTypeKey.String(kind))
		span.SetAttributes(semconv.ErrorTypeKey.String(kind))
		msg := "the caller stopped the call"
		if pe := (*loop.ProviderError)(nil); errors.As(err, &pe) {
			msg = pe.Summary
		}
		span.SetStatus(codes.Error, msg)
	}
	p.metrics.duration.Record(ctx, time.Since(began).Seconds(), genaiconv.OperationNameChat, providerName, attrs...)
}

// errorType is a failed call's error.type: classify's kind of its cause, or "canceled"
// for a call the caller stopped (its context ended, or it refused the text).
func (p *OpenAI) errorType(err error) string {
	if !errors.Is(err, loop.ErrProvider) {
		return "canceled"
	}
	_, _, kind := classify(err, p.cfg)
	return kind
}
