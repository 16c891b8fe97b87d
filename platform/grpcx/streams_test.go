package grpcx

import (
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

// TestTheServerBoundsStreamsAndHeadersPerConnection: gRPC-Go's defaults are no limit on
// concurrent streams per connection and 16 MiB of headers per stream, and the
// interceptors that refuse a caller without a key run only once the stream's headers
// and its whole request (up to 4 MiB) are in memory. One connection without a key could
// so open any number of streams, each holding what it sent, and HTTP/2 rapid reset
// (CVE-2023-44487) is bounded in gRPC-Go only by the stream limit. Every Quarry server
// advertises both limits in its SETTINGS.
func TestTheServerBoundsStreamsAndHeadersPerConnection(t *testing.T) {
	s := NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))
	lis := loopback(t)
	run(t, s, lis)

	c, err := net.DialTimeout("tcp", lis.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(c, c)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			t.Fatalf("no SETTINGS from the server: %v", err)
		}
		sf, ok := f.(*http2.SettingsFrame)
		if !ok || sf.IsAck() {
			continue
		}
		streams, ok := sf.Value(http2.SettingMaxConcurrentStreams)
		if !ok || streams > MaxConcurrentStreams {
			t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d (sent: %v), want at most %d", streams, ok, MaxConcurrentStreams)
		}
		headers, ok := sf.Value(http2.SettingMaxHeaderListSize)
		if !ok || headers > MaxHeaderListBytes {
			t.Errorf("SETTINGS_MAX_HEADER_LIST_SIZE = %d (sent: %v), want at most %d", headers, ok, MaxHeaderListBytes)
		}
		return
	}
}
