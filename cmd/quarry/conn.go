package main

import (
	"flag"
	"os"

	"github.com/quarry-router/quarry/platform/grpcx"
	"google.golang.org/grpc"
)

// serverFlags are how a command reaches a Quarry service: its address, an API key and
// TLS (-tls, -tls-ca, -tls-cert/-tls-key for mutual TLS, -tls-server-name).
type serverFlags struct {
	addr string
	key  string
	tls  grpcx.ClientTLSConfig
}

func (s *serverFlags) register(fs *flag.FlagSet, defaultAddr, addrHelp string) {
	fs.StringVar(&s.addr, "addr", defaultAddr, addrHelp)
	fs.StringVar(&s.key, "api-key", "", "API key to present (default $QUARRY_API_KEY)")
	s.tls.RegisterFlags(fs, "")
}

// dial connects to the service. The key goes only over TLS or to a loopback address.
func (s *serverFlags) dial() (*grpc.ClientConn, error) {
	if err := s.tls.Validate(); err != nil {
		return nil, err
	}
	key := s.key
	if key == "" {
		key = os.Getenv("QUARRY_API_KEY")
	}
	return s.tls.Dial(s.addr, key)
}
