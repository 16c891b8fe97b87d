package grpcx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"

	"github.com/quarry-router/quarry/platform/reload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

// ServerTLSConfig is how a server speaks TLS: its certificate and, for mutual TLS, the
// CA its callers' certificates must chain to. The zero value serves plaintext, the
// embedded default on loopback.
type ServerTLSConfig struct {
	// CertFile and KeyFile are the PEM certificate chain and private key. Both are read
	// again when they change on disk (cert-manager and kubelet rotate them in place), so
	// a renewed certificate needs no restart.
	CertFile, KeyFile string
	// ClientCAFile, when set, makes the server require a client certificate signed by
	// one of the PEM CAs in it (mutual TLS). Read again when it changes, like the
	// certificate: cert-manager rotates ca.crt in the same Secret.
	ClientCAFile string
}

// RegisterFlags registers -tls-cert, -tls-key and -tls-client-ca.
func (c *ServerTLSConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.CertFile, "tls-cert", "", `PEM certificate chain to serve TLS with ("" = plaintext); reloaded when the file changes`)
	fs.StringVar(&c.KeyFile, "tls-key", "", "PEM private key of -tls-cert")
	fs.StringVar(&c.ClientCAFile, "tls-client-ca", "", `PEM CA bundle: require and verify client certificates signed by it (mutual TLS; needs -tls-cert); reloaded when the file changes`)
}

// Enabled reports whether the server speaks TLS.
func (c ServerTLSConfig) Enabled() bool { return c.CertFile != "" }

// Validate checks that the flags make sense together; ServerOption checks the files.
func (c ServerTLSConfig) Validate() error {
	switch {
	case (c.CertFile == "") != (c.KeyFile == ""):
		return errors.New("-tls-cert and -tls-key go together: set both or neither")
	case c.ClientCAFile != "" && c.CertFile == "":
		return errors.New("-tls-client-ca needs -tls-cert and -tls-key: mutual TLS is TLS first")
	}
	return nil
}

// ServerOption reads the certificate files and returns the server's transport
// credentials; with TLS off it returns an option that changes nothing.
func (c ServerTLSConfig) ServerOption() (grpc.ServerOption, error) {
	if !c.Enabled() {
		return grpc.EmptyServerOption{}, nil
	}
	pair, err := newKeyPair("-tls-cert", c.CertFile, "-tls-key", c.KeyFile)
	if err != nil {
		return nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return pair.Get(), nil },
	}
	if c.ClientCAFile != "" {
		cas, err := newCAPool("-tls-client-ca", c.ClientCAFile)
		if err != nil {
			return nil, err
		}
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		// Each handshake verifies against the CAs as the file holds them then: after a
		// CA renewal the callers' reloaded certificates come from the new CA, and a
		// pool read once at start refused them all until a restart. The per-handshake
		// config replaces the one gRPC completes, so it offers h2 itself.
		cfg.NextProtos = []string{"h2"}
		base := cfg.Clone()
		cfg.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) {
			hc := base.Clone()
			hc.ClientCAs = cas.Get()
			return hc, nil
		}
	}
	return grpc.Creds(credentials.NewTLS(cfg)), nil
}

// WarnIfExposed logs, once at start, when a server with API keys listens beyond
// loopback without TLS: the keys and the answers then cross the network in plaintext
// unless a service mesh or a TLS-terminating proxy protects the hop, which the server
// cannot see. It warns rather than refuses because that is how most clusters run.
func (c ServerTLSConfig) WarnIfExposed(log *slog.Logger, listen string, keysConfigured bool) {
	if c.Enabled() || !keysConfigured || IsLoopback(listen) {
		return
	}
	log.Warn("API keys are configured but TLS is off on a non-loopback address: keys and answers travel in plaintext unless a mesh or proxy encrypts the hop; set -tls-cert and -tls-key",
		"listen", listen)
}

// ClientTLSConfig is how a client reaches one peer service (search, agent): whether
// over TLS, which CA to trust, which client certificate to present for mutual TLS, and
// whether its API key may travel without TLS. The zero value dials plaintext.
type ClientTLSConfig struct {
	// Enabled turns TLS on; any of the file or server-name fields imply it. Without
	// CAFile the system's roots are trusted.
	Enabled bool
	// CAFile is a PEM bundle of the CAs the peer's certificate must chain to, read
	// again when it changes.
	CAFile string
	// CertFile and KeyFile are the client certificate for mutual TLS, reloaded when
	// they change on disk.
	CertFile, KeyFile string
	// ServerName overrides the name checked against the peer's certificate (default:
	// the host of the target address).
	ServerName string
	// KeyOverPlaintext lets the peer's API key travel without TLS to a non-loopback
	// address, for clusters where a service mesh encrypts every hop.
	KeyOverPlaintext bool

	// flag is the flag prefix, "-search-" or "-", for messages that name the flags.
	flag string
}

// RegisterFlags registers the flags for the peer named peer ("search" gives
// -search-tls, -search-tls-ca, -search-tls-cert, -search-tls-key,
// -search-tls-server-name and -search-key-over-plaintext); "" registers them without a
// prefix, for a command-line client of the gateway.
func (c *ClientTLSConfig) RegisterFlags(fs *flag.FlagSet, peer string) {
	c.flag = "-"
	what := "the server"
	if peer != "" {
		c.flag = "-" + peer + "-"
		what = "the " + peer + " service"
	}
	p := c.flag[1:]
	fs.BoolVar(&c.Enabled, p+"tls", false, "call "+what+" over TLS (implied by the other -"+p+"tls-* flags); trusts the system's CAs unless -"+p+"tls-ca")
	fs.StringVar(&c.CAFile, p+"tls-ca", "", "PEM CA bundle that "+what+"'s certificate must chain to; reloaded when the file changes")
	fs.StringVar(&c.CertFile, p+"tls-cert", "", "PEM client certificate to present to "+what+" (mutual TLS); reloaded when the file changes")
	fs.StringVar(&c.KeyFile, p+"tls-key", "", "PEM private key of -"+p+"tls-cert")
	fs.StringVar(&c.ServerName, p+"tls-server-name", "", "name to verify "+what+"'s certificate against (default: the host of the address)")
	fs.BoolVar(&c.KeyOverPlaintext, p+"key-over-plaintext", false, "send the API key for "+what+" without TLS to a non-loopback address (only where a service mesh encrypts the hop)")
}

func (c ClientTLSConfig) flagPrefix() string {
	if c.flag == "" {
		return "-"
	}
	return c.flag
}

// On reports whether calls go over TLS.
func (c ClientTLSConfig) On() bool {
	return c.Enabled || c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" || c.ServerName != ""
}

// Validate checks that the flags make sense together; Dial checks the files.
func (c ClientTLSConfig) Validate() error {
	if (c.CertFile == "") != (c.KeyFile == "") {
		p := c.flagPrefix()
		return fmt.Errorf("%stls-cert and %stls-key go together: set both or neither", p, p)
	}
	return nil
}

// Dial connects to target as Dial does, over TLS when configured, presenting key as a
// bearer credential when not empty. It refuses a key that would leave the host in
// plaintext: without TLS the target must be a loopback address, or KeyOverPlaintext set.
func (c ClientTLSConfig) Dial(target, key string, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	creds, err := c.DialOption()
	if err != nil {
		return nil, err
	}
	p := c.flagPrefix()
	bearer := WithBearer(key)
	if key != "" && !c.On() {
		switch {
		case c.KeyOverPlaintext:
			bearer = grpc.WithPerRPCCredentials(bearerCreds{key: key, plaintextOK: true})
		case !localTarget(target):
			// A command-line client's key flag is -api-key; a service's, -<peer>-key.
			keyFlag := p + "key"
			if p == "-" {
				keyFlag = "-api-key"
			}
			return nil, fmt.Errorf("%s is set but TLS to %s is off: the key would cross the network in plaintext; set %stls-ca (or %stls), or %skey-over-plaintext where a service mesh encrypts the hop",
				keyFlag, target, p, p, p)
		}
	}
	return Dial(target, append([]grpc.DialOption{creds, bearer}, opts...)...)
}

// DialOption returns the transport credentials: TLS when configured, otherwise
// Dial's loopback-aware plaintext.
func (c ClientTLSConfig) DialOption() (grpc.DialOption, error) {
	if !c.On() {
		return grpc.WithTransportCredentials(plaintext{}), nil
	}
	p := c.flagPrefix()
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	var roots *reload.Value[*x509.CertPool]
	if c.CAFile != "" {
		var err error
		if roots, err = newCAPool(p+"tls-ca", c.CAFile); err != nil {
			return nil, err
		}
		cfg.RootCAs = roots.Get()
	}
	if c.CertFile != "" || c.KeyFile != "" {
		pair, err := newKeyPair(p+"tls-cert", c.CertFile, p+"tls-key", c.KeyFile)
		if err != nil {
			return nil, err
		}
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return pair.Get(), nil }
	}
	if roots == nil {
		return grpc.WithTransportCredentials(credentials.NewTLS(cfg)), nil
	}
	return grpc.WithTransportCredentials(&rootsTLS{TransportCredentials: credentials.NewTLS(cfg), cfg: cfg, roots: roots}), nil
}

// rootsTLS is gRPC's TLS for a client whose trusted CAs are read again when their file
// changes: a connection is made (and remade) for the life of the process, and once
// the peer's reloaded certificate came from a renewed CA, roots read at start refused
// every new connection until a restart. crypto/tls has no per-handshake hook for a
// client's roots, so each handshake uses TLS credentials made with the CAs of the
// moment.
type rootsTLS struct {
	credentials.TransportCredentials
	cfg   *tls.Config
	roots *reload.Value[*x509.CertPool]
}

func (r *rootsTLS) ClientHandshake(ctx context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	cfg := r.cfg.Clone()
	cfg.RootCAs = r.roots.Get()
	return credentials.NewTLS(cfg).ClientHandshake(ctx, authority, conn)
}

func (r *rootsTLS) Clone() credentials.TransportCredentials {
	return &rootsTLS{TransportCredentials: r.TransportCredentials.Clone(), cfg: r.cfg.Clone(), roots: r.roots}
}

// OverrideServerName is unused by gRPC (grpc.WithAuthority replaced it); it keeps the
// name for the handshakes to come and for Info.
func (r *rootsTLS) OverrideServerName(name string) error {
	r.cfg.ServerName = name
	r.TransportCredentials = credentials.NewTLS(r.cfg)
	return nil
}

// newKeyPair reads a certificate and its key, again when either file changes.
func newKeyPair(certFlag, certFile, keyFlag, keyFile string) (*reload.Value[*tls.Certificate], error) {
	return reload.New(func() (*tls.Certificate, error) {
		certPEM, err := os.ReadFile(certFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", certFlag, err)
		}
		keyPEM, err := os.ReadFile(keyFile)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", keyFlag, err)
		}
		cert, err := tls.X509KeyPair(certPEM, keyPEM)
		if err != nil {
			return nil, fmt.Errorf("%s %s with %s %s: %w", certFlag, certFile, keyFlag, keyFile, err)
		}
		return &cert, nil
	}, certFile, keyFile)
}

// newCAPool reads a PEM CA bundle, again when the file changes.
func newCAPool(flagName, file string) (*reload.Value[*x509.CertPool], error) {
	return reload.New(func() (*x509.CertPool, error) { return loadPool(flagName, file) }, file)
}

func loadPool(flagName, path string) (*x509.CertPool, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flagName, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(raw) {
		return nil, fmt.Errorf("%s %s: no PEM certificate in the file", flagName, path)
	}
	return pool, nil
}

// IsLoopback reports whether addr ("host:port", or a bare host) names this machine
// only: localhost or a loopback IP. A wildcard or a resolvable name is not loopback.
func IsLoopback(addr string) bool {
	host := addr
	if h, _, err := net.SplitHostPort(addr); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// localTarget reports whether a gRPC target ("127.0.0.1:7701", "dns:///search:7701",
// "unix:///run/quarry.sock") stays on this machine.
func localTarget(target string) bool {
	if scheme, _, ok := strings.Cut(target, ":"); ok && (scheme == "unix" || scheme == "unix-abstract") {
		return true
	}
	if _, rest, ok := strings.Cut(target, "://"); ok {
		// dns://resolver/host:port names a resolver before the address.
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			rest = rest[i+1:]
		}
		return IsLoopback(rest)
	}
	return IsLoopback(target)
}

// plaintext is gRPC's insecure transport, aware of where it connects: a connection to
// a loopback address or a Unix socket never leaves the host, so it may carry an API
// key (bearer credentials require privacy and integrity); one to another host may not.
type plaintext struct{}

type plaintextInfo struct {
	credentials.CommonAuthInfo
}

func (plaintextInfo) AuthType() string { return "plaintext" }

func level(a net.Addr) credentials.SecurityLevel {
	if a.Network() == "unix" || IsLoopback(a.String()) {
		return credentials.PrivacyAndIntegrity
	}
	return credentials.NoSecurity
}

func (plaintext) ClientHandshake(_ context.Context, authority string, conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	lvl := level(conn.RemoteAddr())
	// The socket's far end is not always where the call goes: through an HTTP CONNECT
	// proxy on loopback (HTTPS_PROXY, which gRPC follows for any host but this one) it
	// is the proxy, and a key judged by it alone crossed the network in plaintext. The
	// authority names the host the call is for: it must be this machine too. A Unix
	// socket's authority is "localhost".
	if conn.RemoteAddr().Network() != "unix" && !IsLoopback(authority) {
		lvl = credentials.NoSecurity
	}
	return conn, plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: lvl}}, nil
}

func (plaintext) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return conn, plaintextInfo{credentials.CommonAuthInfo{SecurityLevel: level(conn.RemoteAddr())}}, nil
}

// Info does not say "insecure": gRPC would then refuse bearer credentials outright,
// even to loopback; the handshake decides per connection instead.
func (plaintext) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "plaintext"}
}

func (plaintext) Clone() credentials.TransportCredentials { return plaintext{} }

func (plaintext) OverrideServerName(string) error { return nil }
