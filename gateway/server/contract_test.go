package server

import (
	"context"
	"strings"
	"testing"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// A request message over gRPC's 4 MiB bound is refused by gRPC before the gateway reads
// it: RESOURCE_EXHAUSTED, as the API documents, and without the RetryInfo detail and
// "retry-after" trailer of a limit, so that a client that retries what carries a delay
// does not send it again. Queries over -max-query-bytes but under 4 MiB stay
// INVALID_ARGUMENT.
func TestAnOversizedRequestMessageIsNotRetryable(t *testing.T) {
	c := start(t)
	tests := []struct {
		name  string
		query string
		want  codes.Code
	}{
		{"a query of 1 MiB", strings.Repeat("rotate ", 1<<20/7), codes.InvalidArgument},
		{"a query of 5 MiB", strings.Repeat("rotate ", 5<<20/7), codes.ResourceExhausted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			var trailer metadata.MD
			// Go's client refuses to send over 4 MiB itself; clients in other languages
			// send it.
			_, err := c.Query(ctx, &quarryv1.QueryRequest{KnowledgeBase: "kb", Query: tt.query},
				grpc.MaxCallSendMsgSize(8<<20), grpc.Trailer(&trailer))
			st := status.Convert(err)
			if st.Code() != tt.want {
				t.Fatalf("status = %v %q, want %v", st.Code(), st.Message(), tt.want)
			}
			for _, d := range st.Details() {
				if _, ok := d.(*errdetails.RetryInfo); ok {
					t.Errorf("status carries RetryInfo %v: a client would send the same request again", d)
				}
			}
			if ra := trailer.Get("retry-after"); len(ra) > 0 {
				t.Errorf("retry-after trailer %q: a client would send the same request again", ra)
			}
		})
	}
}
