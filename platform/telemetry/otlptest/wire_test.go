package otlptest

import (
	"context"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The counting collector reads names off the wire; it must count what the decoding
// one counts, for requests with several resources and scopes, spans with no name,
// and fields it skips.
func TestCountingCollectorCountsWhatDecodingCounts(t *testing.T) {
	span := func(name string) *tracepb.Span {
		return &tracepb.Span{Name: name, TraceId: make([]byte, 16), SpanId: make([]byte, 8), Kind: tracepb.Span_SPAN_KIND_SERVER, StartTimeUnixNano: 1, EndTimeUnixNano: 2}
	}
	reqs := []*coltracepb.ExportTraceServiceRequest{
		{},
		{ResourceSpans: []*tracepb.ResourceSpans{{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span("a"), span("b"), span("a")}}}}}},
		{ResourceSpans: []*tracepb.ResourceSpans{
			{SchemaUrl: "x", ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span("")}}, {SchemaUrl: "y", Spans: []*tracepb.Span{span("b")}}}},
			{ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{span("quarry.v1.QueryService/Query")}}}},
		}},
	}
	decoding, counting := Start(t), StartCounting(t)
	for _, col := range []*Collector{decoding, counting} {
		c := coltracepb.NewTraceServiceClient(dial(t, col))
		for _, r := range reqs {
			if _, err := c.Export(context.Background(), r); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, name := range []string{"", "a", "b", "quarry.v1.QueryService/Query", "none"} {
		wt, wn := decoding.Count(name)
		gt, gn := counting.Count(name)
		if gt != wt || gn != wn {
			t.Errorf("Count(%q) = %d, %d; the decoding collector says %d, %d", name, gt, gn, wt, wn)
		}
	}
	if total, _ := counting.Count(""); total != 6 {
		t.Errorf("total = %d, want 6", total)
	}
	if g, w := counting.Exports(), decoding.Exports(); g != w || g != len(reqs) {
		t.Errorf("exports: counting %d, decoding %d, want %d", g, w, len(reqs))
	}
}

func TestCountingCollectorRejectsMalformedRequests(t *testing.T) {
	good, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "a"}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		req  wireMessage
	}{
		{"truncated", wireMessage(good[:len(good)-1])},
		{"bad tag", wireMessage{0xff}},
		{"resource_spans not a message", wireMessage{0x08, 0x01}}, // field 1 as a varint
	} {
		t.Run(tc.name, func(t *testing.T) {
			col := StartCounting(t)
			err := dial(t, col).Invoke(context.Background(), exportMethod, &tc.req, new(wireMessage), grpc.ForceCodecV2(wireCodec{}))
			if status.Code(err) != codes.InvalidArgument {
				t.Fatalf("err = %v, want InvalidArgument", err)
			}
			if total, _ := col.Count(""); total != 0 || col.Exports() != 0 {
				t.Errorf("a rejected request counted: %d spans, %d exports", total, col.Exports())
			}
		})
	}
}

func dial(t *testing.T, col *Collector) *grpc.ClientConn {
	conn, err := grpc.NewClient(col.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}
