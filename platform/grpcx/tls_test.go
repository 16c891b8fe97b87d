package grpcx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quarry-router/quarry/platform/grpcx/tlstest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// serve runs a Server with opts on a loopback port until the test ends.
func serve(t testing.TB, opts ...grpc.ServerOption) (addr string, s *Server) {
	t.Helper()
	return serveOn(t, loopback(t), opts...)
}

// serveEcho is serve with the echo test service registered.
func serveEcho(t testing.TB, opts ...grpc.ServerOption) string {
	t.Helper()
	addr, _ := serveWith(t, loopback(t), func(s *Server) { s.RegisterService(&echoDesc, struct{}{}) }, opts...)
	return addr
}

// loopback listens on a free loopback port.
func loopback(t testing.TB) net.Listener {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return lis
}

func serveOn(t testing.TB, lis net.Listener, opts ...grpc.ServerOption) (addr string, s *Server) {
	return serveWith(t, lis, func(*Server) {}, opts...)
}

func serveWith(t testing.TB, lis net.Listener, register func(*Server), opts ...grpc.ServerOption) (addr string, s *Server) {
	t.Helper()
	s = NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)), opts...)
	register(s)
	s.SetServing()
	run(t, s, lis)
	return lis.Addr().String(), s
}

// serveAndDial serves s on a loopback port and dials it; stop is run's.
func serveAndDial(t testing.TB, s *Server) (conn *grpc.ClientConn, stop func() error) {
	t.Helper()
	lis := loopback(t)
	stop = run(t, s, lis)
	conn, err := Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn, stop
}

// run serves s on lis until the test ends or stop is called. stop cancels Serve's
// context and returns what Serve returned, failing the test if it does not return
// within 10 s.
func run(t testing.TB, s *Server, lis net.Listener) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, lis) }()
	var once sync.Once
	var err error
	stop = func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				err = errors.New("Serve did not return within 10 s of its context's end")
			}
		})
		return err
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	return stop
}

// check calls the health service through conn and returns the status code.
func check(t *testing.T, conn *grpc.ClientConn) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

func serverOption(t *testing.T, c ServerTLSConfig) grpc.ServerOption {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	opt, err := c.ServerOption()
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

func dialTLS(t *testing.T, addr string, c ClientTLSConfig) *grpc.ClientConn {
	t.Helper()
	conn, err := c.Dial(addr, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

func TestTLS(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry")
	other := tlstest.NewCA(t, "other")
	srvCert, srvKey := ca.Issue(t, "server", "127.0.0.1", "search.quarry.svc")
	cliCert, cliKey := ca.Issue(t, "client")
	strangerCert, strangerKey := other.Issue(t, "stranger")

	tlsAddr, _ := serve(t, serverOption(t, ServerTLSConfig{CertFile: srvCert, KeyFile: srvKey}))
	mtlsAddr, _ := serve(t, serverOption(t, ServerTLSConfig{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: ca.CertFile}))

	tests := []struct {
		name   string
		addr   string
		client ClientTLSConfig
		want   codes.Code
	}{
		{"a TLS client trusting the CA is answered", tlsAddr, ClientTLSConfig{CAFile: ca.CertFile}, codes.OK},
		{"the certificate is checked against a configured server name", tlsAddr, ClientTLSConfig{CAFile: ca.CertFile, ServerName: "search.quarry.svc"}, codes.OK},
		{"a server name the certificate does not hold is refused", tlsAddr, ClientTLSConfig{CAFile: ca.CertFile, ServerName: "gateway.quarry.svc"}, codes.Unavailable},
		{"a plaintext client gets UNAVAILABLE", tlsAddr, ClientTLSConfig{}, codes.Unavailable},
		{"a client trusting another CA refuses the server", tlsAddr, ClientTLSConfig{CAFile: other.CertFile}, codes.Unavailable},
		{"a client trusting only the system's CAs refuses a private CA", tlsAddr, ClientTLSConfig{Enabled: true}, codes.Unavailable},
		{"mTLS answers a client with a certificate from the CA", mtlsAddr, ClientTLSConfig{CAFile: ca.CertFile, CertFile: cliCert, KeyFile: cliKey}, codes.OK},
		{"mTLS refuses a client without a certificate", mtlsAddr, ClientTLSConfig{CAFile: ca.CertFile}, codes.Unavailable},
		{"mTLS refuses a certificate from another CA", mtlsAddr, ClientTLSConfig{CAFile: ca.CertFile, CertFile: strangerCert, KeyFile: strangerKey}, codes.Unavailable},
		{"mTLS refuses a plaintext client", mtlsAddr, ClientTLSConfig{}, codes.Unavailable},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := check(t, dialTLS(t, tt.addr, tt.client))
			if status.Code(err) != tt.want {
				t.Fatalf("code %v (%v), want %v", status.Code(err), err, tt.want)
			}
		})
	}
}

// A certificate rotated in place (cert-manager renewing a Secret) is served on the
// next connection without a restart.
func TestServerCertificateIsReloadedWhenRotated(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	ca.IssueTo(t, certFile, keyFile, "first", "127.0.0.1")
	addr, _ := serve(t, serverOption(t, ServerTLSConfig{CertFile: certFile, KeyFile: keyFile}))

	pool := x509.NewCertPool()
	raw, err := os.ReadFile(ca.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	pool.AppendCertsFromPEM(raw)
	served := func() string {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, NextProtos: []string{"h2"}})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Subject.CommonName
	}
	if got := served(); got != "first" {
		t.Fatalf("served %q, want first", got)
	}
	ca.IssueTo(t, certFile, keyFile, "second", "127.0.0.1")
	// File times can be coarse: make the change visible whatever the clock's grain.
	later := time.Now().Add(time.Minute)
	for _, f := range []string{certFile, keyFile} {
		if err := os.Chtimes(f, later, later); err != nil {
			t.Fatal(err)
		}
	}
	if got := served(); got != "second" {
		t.Errorf("after rotation served %q, want second", got)
	}
	// A half-written rotation keeps the previous pair instead of failing handshakes.
	if err := os.WriteFile(keyFile, []byte("not a key"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := served(); got != "second" {
		t.Errorf("with a broken key file served %q, want the previous certificate", got)
	}
}

// A CA rotated in place is trusted on the next connection, as the certificates it
// signs are: cert-manager writes ca.crt into the same Secret as tls.crt and tls.key, and
// after a CA renewal (new key) each side reloaded a certificate from the new CA while
// still trusting only the old one, refusing every new connection until a restart.
func TestCAsAreReloadedWhenRotated(t *testing.T) {
	for _, tc := range []struct {
		name string
		// rotateServer re-issues the server's certificate (the client's CA must follow);
		// otherwise the client's certificate is re-issued (the server's client CA must).
		rotateServer bool
	}{
		{"the client's -<peer>-tls-ca", true},
		{"the server's -tls-client-ca", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, renewed := tlstest.NewCA(t, "quarry"), tlstest.NewCA(t, "quarry-renewed")
			srvDir, cliDir := t.TempDir(), t.TempDir()
			at := func(dir, name string) string { return filepath.Join(dir, name) }
			copyCA := func(ca *tlstest.CA, to string) {
				raw, err := os.ReadFile(ca.CertFile)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(to, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			touch := func(files ...string) {
				// File times can be coarse: make the change visible whatever the clock's grain.
				later := time.Now().Add(time.Minute)
				for _, f := range files {
					if err := os.Chtimes(f, later, later); err != nil {
						t.Fatal(err)
					}
				}
			}
			old.IssueTo(t, at(srvDir, "tls.crt"), at(srvDir, "tls.key"), "server", "127.0.0.1")
			copyCA(old, at(srvDir, "ca.crt"))
			old.IssueTo(t, at(cliDir, "tls.crt"), at(cliDir, "tls.key"), "client")
			copyCA(old, at(cliDir, "ca.crt"))

			addr, _ := serve(t, serverOption(t, ServerTLSConfig{CertFile: at(srvDir, "tls.crt"), KeyFile: at(srvDir, "tls.key"), ClientCAFile: at(srvDir, "ca.crt")}))
			// The client's credentials are made once, at start, as a service's are; each
			// check is a new connection with them.
			creds, err := ClientTLSConfig{CAFile: at(cliDir, "ca.crt"), CertFile: at(cliDir, "tls.crt"), KeyFile: at(cliDir, "tls.key")}.DialOption()
			if err != nil {
				t.Fatal(err)
			}
			connect := func() *grpc.ClientConn {
				conn, err := Dial(addr, creds)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close() })
				return conn
			}
			if err := check(t, connect()); err != nil {
				t.Fatalf("before the rotation: %v", err)
			}

			if tc.rotateServer {
				renewed.IssueTo(t, at(srvDir, "tls.crt"), at(srvDir, "tls.key"), "server", "127.0.0.1")
				copyCA(renewed, at(cliDir, "ca.crt"))
				touch(at(srvDir, "tls.crt"), at(srvDir, "tls.key"), at(cliDir, "ca.crt"))
			} else {
				renewed.IssueTo(t, at(cliDir, "tls.crt"), at(cliDir, "tls.key"), "client")
				copyCA(renewed, at(srvDir, "ca.crt"))
				touch(at(cliDir, "tls.crt"), at(cliDir, "tls.key"), at(srvDir, "ca.crt"))
			}
			if err := check(t, connect()); err != nil {
				t.Fatalf("after the CA's rotation: %v", err)
			}

			// A CA file caught half-written keeps the previous CAs in use.
			caFile := at(srvDir, "ca.crt")
			if tc.rotateServer {
				caFile = at(cliDir, "ca.crt")
			}
			if err := os.WriteFile(caFile, []byte("-----BEGIN CERT"), 0o600); err != nil {
				t.Fatal(err)
			}
			touch(caFile)
			if err := check(t, connect()); err != nil {
				t.Errorf("with a broken CA file: %v, want the previous CAs still trusted", err)
			}
		})
	}
}

func TestTLSConfigErrorsNameTheFlagAndFile(t *testing.T) {
	ca := tlstest.NewCA(t, "quarry")
	cert, key := ca.Issue(t, "server", "127.0.0.1")
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	garbage := filepath.Join(dir, "garbage.pem")
	if err := os.WriteFile(garbage, []byte("-----BEGIN NOTHING-----\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, otherKey := ca.Issue(t, "other", "127.0.0.1")

	serverErr := func(c ServerTLSConfig) error {
		if err := c.Validate(); err != nil {
			return err
		}
		_, err := c.ServerOption()
		return err
	}
	clientErr := func(args ...string) error {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var c ClientTLSConfig
		c.RegisterFlags(fs, "search")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := c.Validate(); err != nil {
			return err
		}
		_, err := c.DialOption()
		return err
	}
	tests := []struct {
		name  string
		err   error
		wants []string
	}{
		{"a missing certificate", serverErr(ServerTLSConfig{CertFile: missing, KeyFile: key}), []string{"-tls-cert", missing}},
		{"a missing key", serverErr(ServerTLSConfig{CertFile: cert, KeyFile: missing}), []string{"-tls-key", missing}},
		{"a certificate file without PEM", serverErr(ServerTLSConfig{CertFile: garbage, KeyFile: key}), []string{"-tls-cert", garbage, "-tls-key", key}},
		{"a key that does not match the certificate", serverErr(ServerTLSConfig{CertFile: cert, KeyFile: otherKey}), []string{"-tls-cert", cert, otherKey}},
		{"a certificate without a key", serverErr(ServerTLSConfig{CertFile: cert}), []string{"-tls-cert", "-tls-key"}},
		{"a client CA without a certificate", serverErr(ServerTLSConfig{ClientCAFile: ca.CertFile}), []string{"-tls-client-ca", "-tls-cert"}},
		{"a missing client CA", serverErr(ServerTLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: missing}), []string{"-tls-client-ca", missing}},
		{"a client CA file without certificates", serverErr(ServerTLSConfig{CertFile: cert, KeyFile: key, ClientCAFile: garbage}), []string{"-tls-client-ca", garbage}},
		{"a peer CA file without certificates", clientErr("-search-tls-ca", garbage), []string{"-search-tls-ca", garbage}},
		{"a missing client certificate", clientErr("-search-tls-cert", missing, "-search-tls-key", key), []string{"-search-tls-cert", missing}},
		{"a client certificate without a key", clientErr("-search-tls-cert", cert), []string{"-search-tls-cert", "-search-tls-key"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.err == nil {
				t.Fatal("no error")
			}
			for _, w := range tt.wants {
				if !strings.Contains(tt.err.Error(), w) {
					t.Errorf("error %q does not name %q", tt.err, w)
				}
			}
		})
	}
}

// TestAPIKeyNeedsTLSOffLoopback checks where a bearer key may travel: over plaintext
// to loopback, over TLS anywhere, and never in plaintext to another host unless a mesh
// is said to encrypt the hop.
func TestAPIKeyNeedsTLSOffLoopback(t *testing.T) {
	flagged := func(args ...string) ClientTLSConfig {
		fs := flag.NewFlagSet("x", flag.ContinueOnError)
		var c ClientTLSConfig
		c.RegisterFlags(fs, "search")
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return c
	}
	startup := []struct {
		name, target string
		c            ClientTLSConfig
		ok           bool
	}{
		{"plaintext to loopback", "127.0.0.1:7701", flagged(), true},
		{"plaintext to localhost", "localhost:7701", flagged(), true},
		{"plaintext to a Unix socket", "unix:///run/quarry/search.sock", flagged(), true},
		{"plaintext to another host", "10.0.0.7:7701", flagged(), false},
		{"plaintext to a cluster name", "dns:///search.quarry.svc:7701", flagged(), false},
		{"plaintext through a mesh", "dns:///search.quarry.svc:7701", flagged("-search-key-over-plaintext"), true},
		{"TLS to another host", "dns:///search.quarry.svc:7701", flagged("-search-tls"), true},
	}
	for _, tt := range startup {
		t.Run("at start-up: "+tt.name, func(t *testing.T) {
			conn, err := tt.c.Dial(tt.target, "secret")
			if err == nil {
				conn.Close()
			}
			if (err == nil) != tt.ok {
				t.Fatalf("Dial = %v, want ok %v", err, tt.ok)
			}
			if err != nil && (!strings.Contains(err.Error(), "-search-key") || !strings.Contains(err.Error(), "-search-tls-ca") || strings.Contains(err.Error(), "secret")) {
				t.Errorf("error %q should name -search-key and -search-tls-ca, never the key", err)
			}
		})
	}

	// On the wire: gRPC itself refuses to send the key over plaintext to an address
	// that is not loopback, whatever the start-up check knew about the target.
	ip := nonLoopbackIP(t)
	lis, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Skipf("cannot listen on %s: %v", ip, err)
	}
	addr, _ := serveOn(t, lis)
	t.Run("on the wire: a key in plaintext to another address is not sent", func(t *testing.T) {
		conn, err := Dial(addr, WithBearer("secret"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := check(t, conn); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "insecure") {
			t.Fatalf("call = %v, want UNAVAILABLE refusing the insecure connection", err)
		}
	})
	t.Run("on the wire: without a key plaintext to another address works", func(t *testing.T) {
		conn, err := Dial(addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := check(t, conn); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("on the wire: a key through a mesh is sent", func(t *testing.T) {
		conn, err := flagged("-search-key-over-plaintext").Dial(addr, "secret")
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := check(t, conn); err != nil {
			t.Fatal(err)
		}
	})
}

// nonLoopbackIP returns an address of this machine that is not loopback, or skips.
func nonLoopbackIP(t *testing.T) string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Skip(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address on this machine")
	return ""
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7700": true, "[::1]:7700": true, "localhost:7700": true, "127.1.2.3:1": true,
		"0.0.0.0:7700": false, ":7700": false, "10.0.0.1:7700": false, "search:7701": false, "[::]:7700": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestWarnIfExposed(t *testing.T) {
	tests := []struct {
		name   string
		tls    ServerTLSConfig
		listen string
		keys   bool
		warns  bool
	}{
		{"keys in plaintext on every interface", ServerTLSConfig{}, "0.0.0.0:7700", true, true},
		{"keys in plaintext on loopback", ServerTLSConfig{}, "127.0.0.1:7700", true, false},
		{"keys over TLS on every interface", ServerTLSConfig{CertFile: "c", KeyFile: "k"}, "0.0.0.0:7700", true, false},
		{"no keys: CheckListen's business", ServerTLSConfig{}, "0.0.0.0:7700", false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf strings.Builder
			tt.tls.WarnIfExposed(slog.New(slog.NewTextHandler(&buf, nil)), tt.listen, tt.keys)
			if got := strings.Contains(buf.String(), "level=WARN"); got != tt.warns {
				t.Errorf("warned %v (%q), want %v", got, buf.String(), tt.warns)
			}
		})
	}
}

// MaxMessageBytes holds on the server whatever the client allows itself.
func TestServerRefusesMessagesOverTheLimit(t *testing.T) {
	addr, _ := serve(t)
	conn, err := Dial(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	big := strings.Repeat("x", MaxMessageBytes+1)
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: big}, grpc.MaxCallSendMsgSize(2*MaxMessageBytes))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "larger than max") {
		t.Fatalf("a %d-byte message: %v, want RESOURCE_EXHAUSTED from the server", len(big), err)
	}
	// The same client's own limit refuses it before sending when not raised.
	_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: big})
	if status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("client-side limit: %v, want RESOURCE_EXHAUSTED", err)
	}
	if err := check(t, conn); err != nil {
		t.Errorf("the connection is unusable after a refused message: %v", err)
	}
}

// BenchmarkTLSCall measures a unary call on an open connection over plaintext, TLS
// and mutual TLS, in one run: what encryption adds per call once connected.
func BenchmarkTLSCall(b *testing.B) {
	ca := tlstest.NewCA(b, "quarry")
	srvCert, srvKey := ca.Issue(b, "server", "127.0.0.1")
	cliCert, cliKey := ca.Issue(b, "client")
	for _, bc := range []struct {
		name   string
		server ServerTLSConfig
		client ClientTLSConfig
	}{
		{"plaintext", ServerTLSConfig{}, ClientTLSConfig{}},
		{"TLS", ServerTLSConfig{CertFile: srvCert, KeyFile: srvKey}, ClientTLSConfig{CAFile: ca.CertFile}},
		{"mTLS", ServerTLSConfig{CertFile: srvCert, KeyFile: srvKey, ClientCAFile: ca.CertFile}, ClientTLSConfig{CAFile: ca.CertFile, CertFile: cliCert, KeyFile: cliKey}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			opt, err := bc.server.ServerOption()
			if err != nil {
				b.Fatal(err)
			}
			conn, err := bc.client.Dial(serveEcho(b, opt), "")
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			in, out := wrapperspb.String(strings.Repeat("x", 2048)), new(wrapperspb.StringValue)
			b.ResetTimer()
			for range b.N {
				if err := conn.Invoke(context.Background(), "/quarry.test.Echo/Echo", in, out); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
