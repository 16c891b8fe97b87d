package otlptest

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/proto"
)

// maxHTTPRequest bounds a request's body, as a collector's receiver does.
const maxHTTPRequest = 64 << 20

// serveHTTP runs the collector's OTLP/HTTP receiver (binary protobuf on /v1/traces
// and /v1/metrics) on a listener of its own.
func (c *Collector) serveHTTP(tb testing.TB, mux *http.ServeMux) {
	tb.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	c.httpAddr = lis.Addr().String()
	mux.HandleFunc("POST /v1/traces", c.exportHTTP)
	srv := &http.Server{Handler: mux}
	go srv.Serve(lis)
	tb.Cleanup(func() { srv.Close() })
}

// HTTPEndpoint is the URL to put in OTEL_EXPORTER_OTLP_ENDPOINT with
// OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf; the exporter adds /v1/traces.
func (c *Collector) HTTPEndpoint() string { return "http://" + c.httpAddr }

// exportHTTP takes one ExportTraceServiceRequest as the OTLP/HTTP specification sends
// it: a POST of its binary protobuf encoding, gzip-compressed when Content-Encoding
// says so. The answer is an empty ExportTraceServiceResponse, or 400 for a body that is
// not one.
func (c *Collector) exportHTTP(w http.ResponseWriter, r *http.Request) {
	data, ok := readOTLPBody(w, r)
	if !ok {
		return
	}
	// The headers reach Export as gRPC metadata would, for Header.
	md := metadata.MD{}
	for k, v := range r.Header {
		md[strings.ToLower(k)] = v
	}
	if err := c.take(metadata.NewIncomingContext(r.Context(), md), data); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(nil) // an empty ExportTraceServiceResponse encodes as no bytes
}

// take receives one request's bytes: decoded and kept, or counted from the wire.
func (c *Collector) take(ctx context.Context, data []byte) error {
	if !c.keep {
		c.mu.Lock()
		defer c.mu.Unlock()
		spans, err := scanSpanNames(data, c.countName)
		if err != nil {
			return fmt.Errorf("otlptest: malformed ExportTraceServiceRequest: %w", err)
		}
		c.exports++
		c.total += spans
		return nil
	}
	req := &coltracepb.ExportTraceServiceRequest{}
	if err := proto.Unmarshal(data, req); err != nil {
		return fmt.Errorf("otlptest: malformed ExportTraceServiceRequest: %w", err)
	}
	_, err := c.Export(ctx, req)
	return err
}

// readOTLPBody reads an OTLP/HTTP request's body, or answers the request with what is
// wrong with it.
func readOTLPBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-protobuf" {
		http.Error(w, fmt.Sprintf("otlptest: content type %q: want application/x-protobuf", r.Header.Get("Content-Type")), http.StatusUnsupportedMediaType)
		return nil, false
	}
	var body io.Reader = http.MaxBytesReader(w, r.Body, maxHTTPRequest)
	switch enc := r.Header.Get("Content-Encoding"); enc {
	case "", "identity":
	case "gzip":
		gz, err := gzip.NewReader(body)
		if err != nil {
			http.Error(w, "otlptest: "+err.Error(), http.StatusBadRequest)
			return nil, false
		}
		body = io.LimitReader(gz, maxHTTPRequest)
	default:
		http.Error(w, fmt.Sprintf("otlptest: content encoding %q", enc), http.StatusUnsupportedMediaType)
		return nil, false
	}
	data, err := io.ReadAll(body)
	if err != nil {
		http.Error(w, "otlptest: "+err.Error(), http.StatusBadRequest)
		return nil, false
	}
	return data, true
}
