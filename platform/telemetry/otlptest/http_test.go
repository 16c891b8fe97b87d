package otlptest

import (
	"bytes"
	"compress/gzip"
	"net/http"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// TestHTTPReceiver posts requests to /v1/traces as the OTLP/HTTP specification sends
// them, to a keeping and a counting collector: well-formed ones, plain or gzipped, are
// taken; the rest get the status a collector answers with and change nothing.
func TestHTTPReceiver(t *testing.T) {
	good, err := proto.Marshal(&coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: []*tracepb.Span{{Name: "a"}, {Name: "b"}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(good)
	zw.Close()
	tests := []struct {
		name        string
		contentType string
		encoding    string
		body        []byte
		status      int
		spans       int
	}{
		{"protobuf", "application/x-protobuf", "", good, http.StatusOK, 2},
		{"gzipped", "application/x-protobuf", "gzip", zipped.Bytes(), http.StatusOK, 2},
		{"JSON is not taken", "application/json", "", []byte(`{"resourceSpans":[]}`), http.StatusUnsupportedMediaType, 0},
		{"an unknown encoding", "application/x-protobuf", "br", good, http.StatusUnsupportedMediaType, 0},
		{"truncated", "application/x-protobuf", "", good[:len(good)-1], http.StatusBadRequest, 0},
		{"not gzip", "application/x-protobuf", "gzip", good, http.StatusBadRequest, 0},
	}
	for _, keep := range []bool{true, false} {
		for _, tt := range tests {
			t.Run(tt.name+map[bool]string{true: "/keeping", false: "/counting"}[keep], func(t *testing.T) {
				col := start(t, keep)
				req, err := http.NewRequest(http.MethodPost, col.HTTPEndpoint()+"/v1/traces", bytes.NewReader(tt.body))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set("Content-Type", tt.contentType)
				if tt.encoding != "" {
					req.Header.Set("Content-Encoding", tt.encoding)
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.status {
					t.Errorf("status %d, want %d", resp.StatusCode, tt.status)
				}
				total, named := col.Count("a")
				if total != tt.spans || named != min(tt.spans, 1) {
					t.Errorf("counted %d spans (%d named a), want %d", total, named, tt.spans)
				}
				if keep && len(col.Spans()) != tt.spans {
					t.Errorf("kept %d spans, want %d", len(col.Spans()), tt.spans)
				}
			})
		}
	}
}
