package grpcx

import (
	"context"
	"strings"

	"github.com/quarry-router/quarry/platform/auth"
	"google.golang.org/grpc"
)

// WithAuth checks every call against policy: its key when its headers arrive, its
// rights once its request is read. Health checks and reflection stay open so probes
// and grpcurl's service listing work without a key.
func WithAuth(policy *auth.Policy) []grpc.ServerOption {
	skip := func(method string) bool {
		return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
	}
	return []grpc.ServerOption{
		// A server has one tap: this is it.
		grpc.InTapHandle(policy.Tap(skip)),
		grpc.ChainUnaryInterceptor(policy.UnaryInterceptor(skip)),
		grpc.ChainStreamInterceptor(policy.StreamInterceptor(skip)),
	}
}

// WithBearer sends key as "authorization: Bearer <key>" on every call of a connection:
// the service credential one Quarry service presents to another. An empty key sends
// nothing, so callers pass their configured key as it is. The key travels only over
// TLS or to a loopback address (see Dial); ClientTLSConfig.Dial also checks this at
// start-up with a message naming the flags.
func WithBearer(key string) grpc.DialOption {
	if key == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(bearerCreds{key: key})
}

type bearerCreds struct {
	key string
	// plaintextOK lets the key travel unencrypted to another host, where a service
	// mesh encrypts the hop (-<peer>-key-over-plaintext).
	plaintextOK bool
}

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + b.key}, nil
}

// RequireTransportSecurity makes gRPC refuse to send the key over a connection below
// privacy and integrity: TLS qualifies, and so does Dial's plaintext to loopback.
func (b bearerCreds) RequireTransportSecurity() bool { return !b.plaintextOK }
