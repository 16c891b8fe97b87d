package otlptest

import (
	"context"
	"fmt"
	"maps"
	"net/http"

	colmetricpb "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
)

// metricsService is the collector's OTLP metrics service, over gRPC and HTTP: it keeps
// the names of the metrics it receives.
type metricsService struct {
	colmetricpb.UnimplementedMetricsServiceServer
	c *Collector
}

func (m metricsService) register(srv *grpc.Server, mux *http.ServeMux) {
	colmetricpb.RegisterMetricsServiceServer(srv, m)
	mux.HandleFunc("POST /v1/metrics", func(w http.ResponseWriter, r *http.Request) {
		data, ok := readOTLPBody(w, r)
		if !ok {
			return
		}
		req := &colmetricpb.ExportMetricsServiceRequest{}
		if err := proto.Unmarshal(data, req); err != nil {
			http.Error(w, fmt.Sprintf("otlptest: malformed ExportMetricsServiceRequest: %v", err), http.StatusBadRequest)
			return
		}
		m.Export(r.Context(), req)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Write(nil) // an empty ExportMetricsServiceResponse
	})
}

func (m metricsService) Export(_ context.Context, req *colmetricpb.ExportMetricsServiceRequest) (*colmetricpb.ExportMetricsServiceResponse, error) {
	m.c.mu.Lock()
	defer m.c.mu.Unlock()
	for _, rm := range req.GetResourceMetrics() {
		for _, sm := range rm.GetScopeMetrics() {
			for _, metric := range sm.GetMetrics() {
				m.c.metrics[metric.GetName()]++
			}
		}
	}
	return &colmetricpb.ExportMetricsServiceResponse{}, nil
}

// Metrics returns how many times each metric arrived, by name.
func (c *Collector) Metrics() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.metrics)
}
