package grpcx

import (
	"context"
	"strings"

	"github.com/quarry-router/quarry/platform/auth"
	"google.golang.org/grpc"
)

// WithAuth checks every call against policy; health checks and reflection stay open
// so probes and grpcurl's service listing work without a key.
func WithAuth(policy *auth.Policy) []grpc.ServerOption {
	skip := func(method string) bool {
		return strings.HasPrefix(method, "/grpc.health.v1.Health/") || strings.HasPrefix(method, "/grpc.reflection.")
	}
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(policy.UnaryInterceptor(skip)),
		grpc.ChainStreamInterceptor(policy.StreamInterceptor(skip)),
	}
}

// WithBearer sends key as "authorization: Bearer <key>" on every call of a connection:
// the service credential one Quarry service presents to another. An empty key sends
// nothing, so callers pass their configured key as it is.
func WithBearer(key string) grpc.DialOption {
	if key == "" {
		return grpc.EmptyDialOption{}
	}
	return grpc.WithPerRPCCredentials(bearerCreds(key))
}

type bearerCreds string

func (b bearerCreds) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}

// RequireTransportSecurity is false: inside a cluster the network policy and mTLS at
// the mesh protect the hop; over TLS the key is encrypted anyway.
func (bearerCreds) RequireTransportSecurity() bool { return false }
