package telemetry

import (
	"context"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"
)

// otlpExporter is otlptrace's OTLP span exporter with one part replaced: the step that
// turns spans into OTLP protobuf messages. otlptrace builds every message afresh (three
// allocations per attribute) and then marshals them; in BenchmarkTracingOverhead that
// made more than half of the allocations tracing adds to a query, and the export's
// bursts of work ran on the services' own cores. This one writes the wire format
// straight from the spans into a buffer kept between exports (spanEncoder); what the
// collector receives is the same (TestOTLPExporterSendsWhatOtlptraceSends). The
// transport, with its OTEL_EXPORTER_OTLP_* configuration, retries and TLS, is
// otlptrace's own client, gRPC's or HTTP's. One thing it cannot see: the client's experimental
// self-observability metrics (OTEL_GO_X_OBSERVABILITY) count the spans it is handed as
// typed messages, and count none here.
type otlpExporter struct {
	client otlptrace.Client
	codec  *requestCodec // the gRPC connection's; nil over HTTP

	uploadMu sync.Mutex // one request at a time: they share the codec's buffer

	encMu sync.Mutex // ExportSpans' encoder
	enc   spanEncoder
}

// newOTLPExporter starts an exporter on otlptrace's client for protocol (protocolGRPC
// or protocolHTTP), configured by the OTEL_EXPORTER_OTLP_* environment; grpcOpts go to
// the gRPC client.
func newOTLPExporter(ctx context.Context, protocol string, grpcOpts ...otlptracegrpc.Option) (*otlpExporter, error) {
	e := &otlpExporter{}
	switch protocol {
	case protocolGRPC:
		e.codec = &requestCodec{}
		grpcOpts = append(grpcOpts, otlptracegrpc.WithDialOption(grpc.WithDefaultCallOptions(grpc.ForceCodecV2(e.codec))))
		e.client = otlptracegrpc.NewClient(grpcOpts...)
	case protocolHTTP:
		// It marshals each request into a buffer of its own before sending it, so the
		// encoder's memory is free again when UploadTraces returns, as with the codec.
		e.client = otlptracehttp.NewClient()
	default:
		return nil, fmt.Errorf("otlp traces: unknown protocol %q", protocol)
	}
	if err := e.client.Start(ctx); err != nil {
		return nil, fmt.Errorf("otlp traces (%s): %w", protocol, err)
	}
	return e, nil
}

// ExportSpans sends spans in one request. (The batcher does not call it: it encodes
// spans as they end, into an encodedQueue.)
func (e *otlpExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.encMu.Lock()
	defer e.encMu.Unlock()
	return e.upload(ctx, e.enc.encode(spans))
}

// upload sends one request. The client has marshalled the messages when it returns,
// retries included, so the encoder that wrote them may reuse its buffer.
func (e *otlpExporter) upload(ctx context.Context, rs []*tracepb.ResourceSpans) error {
	if len(rs) == 0 {
		return nil
	}
	e.uploadMu.Lock()
	defer e.uploadMu.Unlock()
	if err := e.client.UploadTraces(ctx, rs); err != nil {
		return fmt.Errorf("traces export: %w", err)
	}
	if e.codec != nil {
		e.codec.reuse()
	}
	return nil
}

// Shutdown stops the client; spans exported after it are refused by the client.
func (e *otlpExporter) Shutdown(ctx context.Context) error { return e.client.Stop(ctx) }

// requestCodec is the exporter connection's gRPC codec. It marshals each request into
// a buffer kept for the next one, where gRPC's own codec takes a buffer from its pool,
// and for a batch of a few hundred spans that is a 1 MiB buffer, zeroed afresh whenever
// a garbage collection has emptied the pool since the last export.
type requestCodec struct {
	mu sync.Mutex
	// spare may be marshalled into. A buffer handed to gRPC is in use until the export
	// succeeds: a failed attempt's bytes may still be queued for a connection, and a
	// retry marshals into a new buffer.
	spare, sent []byte
}

func (c *requestCodec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("otlp codec: %T is not a protobuf message", v)
	}
	c.mu.Lock()
	buf := c.spare
	c.spare = nil
	c.mu.Unlock()
	size := proto.Size(m)
	if cap(buf) < size {
		buf = make([]byte, 0, size+size/4)
	}
	// UseCachedSize: Size has just computed and cached every message's size.
	out, err := proto.MarshalOptions{UseCachedSize: true}.MarshalAppend(buf[:0], m)
	if err != nil {
		return nil, fmt.Errorf("otlp codec: %w", err)
	}
	c.mu.Lock()
	c.sent = out
	c.mu.Unlock()
	return mem.BufferSlice{mem.SliceBuffer(out)}, nil
}

func (c *requestCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return fmt.Errorf("otlp codec: %T is not a protobuf message", v)
	}
	return proto.Unmarshal(data.Materialize(), m)
}

func (c *requestCodec) Name() string { return "proto" }

// reuse takes back the buffer of the request just answered: the server has read all
// of it, so gRPC holds none of it.
func (c *requestCodec) reuse() {
	c.mu.Lock()
	if cap(c.sent) <= maxKeptBuffer {
		c.spare = c.sent
	}
	c.sent = nil
	c.mu.Unlock()
}
