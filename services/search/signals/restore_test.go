package signals

import (
	"testing"
	"time"

	"github.com/quarry-router/quarry/services/search/tree"
)

// TestRestoreSettlesRecordsItCannotTrust: records come from signals.json, which a person,
// another release or another machine's clock may have written. A maturity outside the
// three stages was kept as is and never moved again (no threshold matches it), and a last
// access in the future stopped the file's importance from decaying until then.
func TestRestoreSettlesRecordsItCannotTrust(t *testing.T) {
	c := newClock()
	tests := []struct {
		name string
		rec  Record
		// after a 100-day wait
		wantImportance float64
		wantMaturity   tree.Maturity
	}{
		{
			name:           "a maturity beyond core follows the importance",
			rec:            Record{Importance: 90, Maturity: tree.Maturity(7), LastAccess: c.now()},
			wantImportance: 90 * pow(0.995, 100),
			wantMaturity:   tree.Validated, // core at 90, validated once decayed to 54.5
		},
		{
			name:           "a negative maturity follows the importance",
			rec:            Record{Importance: 20, Maturity: tree.Maturity(-1), LastAccess: c.now()},
			wantImportance: 20 * pow(0.995, 100),
			wantMaturity:   tree.Draft,
		},
		{
			// A record without a last access (written by hand, or by a release that
			// named the field otherwise) decayed as if idle since year 1: importance 0
			// and every such file demoted to draft, silently.
			name:           "a record without a last access counts from now",
			rec:            Record{Importance: 90, Maturity: tree.Core},
			wantImportance: 90 * pow(0.995, 100),
			wantMaturity:   tree.Validated,
		},
		{
			name:           "a last access in the future counts from now",
			rec:            Record{Importance: 40, Maturity: tree.Draft, LastAccess: c.now().Add(3650 * day)},
			wantImportance: 40 * pow(0.995, 100),
			wantMaturity:   tree.Draft,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := newClock()
			s := New(DefaultConfig(), clk.now)
			s.Seed("a.md", 50, tree.Draft, time.Time{})
			tt.rec.Path = "a.md"
			s.Restore([]Record{tt.rec})
			clk.advance(100 * day)
			got := s.Get("a.md")
			if !approx(got.Importance, tt.wantImportance) || got.Maturity != tt.wantMaturity {
				t.Errorf("after 100 days: %v %v, want %v %v", got.Importance, got.Maturity, tt.wantImportance, tt.wantMaturity)
			}
			for _, r := range s.Snapshot() {
				if r.Maturity < tree.Draft || r.Maturity > tree.Core {
					t.Errorf("snapshot keeps maturity %d", r.Maturity)
				}
			}
		})
	}
}

func pow(b float64, n int) float64 {
	out := 1.0
	for range n {
		out *= b
	}
	return out
}

func approx(a, b float64) bool { return a > b-1e-6 && a < b+1e-6 }
