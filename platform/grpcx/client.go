package grpcx

import (
	"fmt"
	"time"

	"go.opentelemetry.io/contrib/instrumentation/google.golang.org/grpc/otelgrpc"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/keepalive"
)

// serviceConfig balances over every address a name resolves to (a headless Kubernetes
// Service gives one per pod) and retries calls that never reached a server.
const serviceConfig = `{
  "loadBalancingConfig": [{"round_robin": {}}],
  "methodConfig": [{
    "name": [{"service": "quarry.v1.SearchService"}],
    "retryPolicy": {
      "maxAttempts": 3,
      "initialBackoff": "0.01s",
      "maxBackoff": "0.1s",
      "backoffMultiplier": 2,
      "retryableStatusCodes": ["UNAVAILABLE"]
    }
  }]
}`

// Dial returns a client connection to target ("host:port" or any gRPC target such as
// "dns:///search:7701"). The connection is lazy: it connects on first use and
// reconnects by itself. Credentials default to plaintext, which carries an API key
// (WithBearer) to loopback addresses only; ClientTLSConfig.Dial adds TLS.
func Dial(target string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	base := []grpc.DialOption{
		grpc.WithTransportCredentials(plaintext{}),
		grpc.WithDefaultServiceConfig(serviceConfig),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(MaxMessageBytes), grpc.MaxCallSendMsgSize(MaxMessageBytes)),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 30 * time.Second, Timeout: 10 * time.Second, PermitWithoutStream: true}),
		// Reconnect within a couple of seconds once a restarted service is back; gRPC's
		// default backoff grows to two minutes, far too long between our own services.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: 5 * time.Second,
		}),
		// Carries the trace context to the next service, so one trace spans the chain.
		// Health checks and Watch streams stay out of traces and metrics (see traced).
		grpc.WithStatsHandler(otelgrpc.NewClientHandler(otelgrpc.WithFilter(traced))),
	}
	conn, err := grpc.NewClient(target, append(base, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", target, err)
	}
	return conn, nil
}
