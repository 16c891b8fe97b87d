package llm

import (
	"math"
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	// forever is what a wait too long for a time.Duration reads as: over any cap.
	const forever = time.Duration(math.MaxInt64)
	tests := []struct {
		name    string
		header  string // Retry-After or Retry-After-Ms
		value   string
		want    time.Duration
		wantSet bool
	}{
		{"seconds", "Retry-After", "2", 2 * time.Second, true},
		{"a fraction of a second", "Retry-After", "0.5", 500 * time.Millisecond, true},
		{"no wait", "Retry-After", "0", 0, true},
		{"infinity", "Retry-After", "inf", forever, true},
		{"infinity, spelled out", "Retry-After", "+Infinity", forever, true},
		{"beyond float64", "Retry-After", "1e400", forever, true},
		{"beyond time.Duration", "Retry-After", "1e300", forever, true},
		{"just beyond time.Duration", "Retry-After", "99999999999", forever, true},
		{"a date in the far future", "Retry-After", "Fri, 31 Dec 9999 23:59:59 GMT", forever, true},
		{"a date in the past", "Retry-After", "Mon, 01 Jan 2001 00:00:00 GMT", 0, true},
		{"NaN", "Retry-After", "NaN", 0, false},
		{"negative", "Retry-After", "-5", 0, false},
		{"negative infinity", "Retry-After", "-inf", 0, false},
		{"garbage", "Retry-After", "soon", 0, false},
		{"milliseconds", "Retry-After-Ms", "2000", 2 * time.Second, true},
		{"half a millisecond", "Retry-After-Ms", "0.5", 500 * time.Microsecond, true},
		{"infinity in milliseconds", "Retry-After-Ms", "inf", forever, true},
		{"beyond time.Duration in milliseconds", "Retry-After-Ms", "1e300", forever, true},
		{"beyond float64 in milliseconds", "Retry-After-Ms", "1e400", forever, true},
		// About three years: still a time.Duration, and over any cap as it is.
		{"many milliseconds", "Retry-After-Ms", "99999999999", 99999999999 * time.Millisecond, true},
		{"NaN milliseconds", "Retry-After-Ms", "NaN", 0, false},
		{"negative milliseconds", "Retry-After-Ms", "-5", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := http.Header{}
			h.Set(tt.header, tt.value)
			got, set := retryAfter(h)
			if set != tt.wantSet || got != tt.want {
				t.Errorf("%s: %s = %v, %v; want %v, %v", tt.header, tt.value, got, set, tt.want, tt.wantSet)
			}
			if set && got < 0 {
				t.Errorf("%s: %s is a negative wait, which a timer ends at once", tt.header, tt.value)
			}
		})
	}
}

// Retry-After-Ms is read first; one that cannot be read leaves Retry-After to decide.
func TestRetryAfterMsComesFirst(t *testing.T) {
	h := http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}
	if d, ok := retryAfter(h); !ok || d != 250*time.Millisecond {
		t.Errorf("both headers: %v, %v; want 250ms", d, ok)
	}
	h.Set("Retry-After-Ms", "NaN")
	if d, ok := retryAfter(h); !ok || d != 9*time.Second {
		t.Errorf("Retry-After-Ms NaN: %v, %v; want Retry-After's 9s", d, ok)
	}
}
