package main

import (
	"flag"
	"net"
	"os"
	"strconv"
	"strings"

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
// Flags that cannot work together, an address that is not one and a key that cannot be
// sent are usage errors (exit 2), reported before anything is sent.
func (s *serverFlags) dial() (*grpc.ClientConn, error) {
	if err := s.tls.Validate(); err != nil {
		return nil, usageError{err}
	}
	if !validTarget(s.addr) {
		// "-addr gateway" dialled port 443, "-addr host:77OO" failed as UNAVAILABLE.
		return nil, usagef("-addr %q is not HOST:PORT (or a gRPC target such as dns:///HOST:PORT)", s.addr)
	}
	key := apiKey(s.key)
	for i := 0; i < len(key); i++ {
		if key[i] < '!' || key[i] > '~' {
			return nil, usagef("the API key (-api-key or QUARRY_API_KEY) has characters a bearer token cannot have (white space, control or non-ASCII); the key is not shown")
		}
	}
	conn, err := s.tls.Dial(s.addr, key)
	if err != nil && !s.tls.On() {
		// Without TLS no file is read: the error is the command line's (a key that
		// would cross the network in plaintext, a target gRPC cannot parse).
		return nil, usageError{err}
	}
	return conn, err
}

// validTarget reports whether addr is HOST:PORT with a port number, or a gRPC target
// with a scheme ("dns:///search:7701", "unix:///run/quarry.sock"), which gRPC checks.
func validTarget(addr string) bool {
	if strings.Contains(addr, "://") || strings.HasPrefix(addr, "unix:") || strings.HasPrefix(addr, "unix-abstract:") {
		return true
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	n, err := strconv.Atoi(port)
	return err == nil && n > 0 && n < 65536
}

// apiKey is the key a command presents: flag, else $QUARRY_API_KEY. A key read from a
// file (an env file, a mounted Secret) may end in a line break, which gRPC refused to
// send as "Internal: header key "authorization" contains value with non-printable ASCII
// characters", as if the server had failed: surrounding white space is trimmed.
func apiKey(flag string) string {
	if flag == "" {
		flag = os.Getenv("QUARRY_API_KEY")
	}
	return strings.Trim(flag, " \t\r\n")
}
