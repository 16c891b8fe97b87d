package grpcx

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// connectProxy is an HTTP CONNECT proxy on loopback, as a developer's or a cluster
// node's local forwarding proxy (HTTPS_PROXY=http://127.0.0.1:3128) is. It sends every
// tunnel to upstream, whatever the CONNECT names: it stands for the network beyond.
func connectProxy(t *testing.T, upstream string) string {
	t.Helper()
	lis := loopback(t)
	t.Cleanup(func() { lis.Close() })
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				req, err := http.ReadRequest(br)
				if err != nil || req.Method != http.MethodConnect {
					return
				}
				up, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer up.Close()
				if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
					return
				}
				go func() { _, _ = io.Copy(up, br); up.Close() }()
				_, _ = io.Copy(c, up)
			}()
		}
	}()
	return lis.Addr().String()
}

// An API key over plaintext may go only to this machine. Whether a connection stays on
// it was judged by the socket's far end alone; through an HTTP proxy on loopback
// (HTTPS_PROXY, which gRPC follows) that end is the proxy, so a key for another host
// went out in plaintext across the network. The call's authority names where it goes.
// gRPC reads HTTPS_PROXY once per process, so the client runs in a child process.
func TestAKeyIsNotSentInPlaintextThroughALoopbackProxy(t *testing.T) {
	const target = "192.0.2.7:7701" // TEST-NET-1: another host, reached through the proxy
	if os.Getenv("GRPCX_PROXY_CHILD") == "1" {
		conn, err := Dial(target, WithBearer("secret"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		if err := check(t, conn); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "insecure") {
			t.Fatalf("call through the proxy = %v, want UNAVAILABLE refusing the insecure connection", err)
		}
		// Without a key, plaintext through the proxy is the caller's business.
		plain, err := Dial(target)
		if err != nil {
			t.Fatal(err)
		}
		defer plain.Close()
		if err := check(t, plain); err != nil {
			t.Fatalf("keyless call through the proxy: %v", err)
		}
		return
	}

	var mu sync.Mutex
	var seen []string
	record := grpc.ChainUnaryInterceptor(func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		md, _ := metadata.FromIncomingContext(ctx)
		mu.Lock()
		seen = append(seen, md.Get("authorization")...)
		mu.Unlock()
		return h(ctx, req)
	})
	addr, _ := serve(t, record)
	proxy := connectProxy(t, addr)

	cmd := exec.Command(os.Args[0], "-test.run=^TestAKeyIsNotSentInPlaintextThroughALoopbackProxy$", "-test.count=1")
	cmd.Env = append(os.Environ(), "GRPCX_PROXY_CHILD=1", "HTTPS_PROXY=http://"+proxy, "https_proxy=http://"+proxy, "NO_PROXY=", "no_proxy=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Errorf("client through the proxy: %v\n%s", err, out)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, v := range seen {
		if strings.Contains(v, "secret") {
			t.Errorf("the key crossed the proxy in plaintext: the server got authorization %q", v)
		}
	}
}

// The authority check leaves keys to this machine as they were: a loopback address by
// name or number, and a Unix socket (whose authority gRPC makes "localhost").
func TestAKeyStillGoesToThisMachineInPlaintext(t *testing.T) {
	addr, _ := serve(t)
	_, port, _ := net.SplitHostPort(addr)
	sock := t.TempDir() + "/s.sock"
	ulis, err := net.Listen("unix", sock)
	if err != nil {
		t.Skipf("no Unix socket: %v", err)
	}
	serveOn(t, ulis)
	for _, target := range []string{addr, "localhost:" + port, "dns:///localhost:" + port, "unix://" + sock} {
		conn, err := Dial(target, WithBearer("secret"))
		if err != nil {
			t.Fatal(err)
		}
		if err := check(t, conn); err != nil {
			t.Errorf("%s with a key: %v", target, err)
		}
		conn.Close()
	}
}
