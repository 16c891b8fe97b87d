package kbpath_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/quarry-router/quarry/platform/kbpath"
)

func TestClean(t *testing.T) {
	long := strings.Repeat("a", kbpath.MaxSegmentBytes)
	tests := []struct {
		in      string
		want    string
		wantErr error
	}{
		{"", "", nil},
		{".", "", nil},
		{"ops/oncall.md", "ops/oncall.md", nil},
		{"./ops//oncall.md/", "ops/oncall.md", nil},
		{"ops/" + long, "ops/" + long, nil},          // a name of exactly the limit
		{"ops/" + long + "x", "", kbpath.ErrInvalid}, // one byte over: the file system would refuse it
		{strings.Repeat("a/", kbpath.MaxBytes/2+1), "", kbpath.ErrInvalid},
		{"../etc/passwd", "", kbpath.ErrOutside},
		{"ops/../oncall.md", "", kbpath.ErrOutside}, // even though it cleans to inside
		{"/etc/passwd", "", kbpath.ErrOutside},
		{"C:/Windows", "", kbpath.ErrOutside},
		{"./C:", "", kbpath.ErrOutside},
		{`ops\oncall.md`, "", kbpath.ErrInvalid},
		{"ops/on\x00call.md", "", kbpath.ErrInvalid},
		{"ops/on\ncall.md", "", kbpath.ErrInvalid},
		{"ops/\xff.md", "", kbpath.ErrInvalid},
		// Invisible format characters make a name pass for another.
		{"ops/\ufeffoncall.md", "", kbpath.ErrInvalid},     // byte-order mark
		{"ops/on\u200bcall.md", "", kbpath.ErrInvalid},     // zero-width space
		{"ops/cod\u202egnp.md", "", kbpath.ErrInvalid},     // right-to-left override
		{"ops/\u2066x\u2069.md", "", kbpath.ErrInvalid},    // isolates
		{"ops/x\U000e0041.md", "", kbpath.ErrInvalid},      // a tag
		{"ops/soft\u00adhyphen.md", "", kbpath.ErrInvalid}, // a soft hyphen
		// The joiners write words and emoji.
		{"fa/\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.md", "fa/\u0645\u06cc\u200c\u062e\u0648\u0627\u0647\u0645.md", nil},
		{"team/\U0001f469\u200d\U0001f4bb.md", "team/\U0001f469\u200d\U0001f4bb.md", nil},
	}
	for _, tt := range tests {
		got, err := kbpath.Clean(tt.in)
		if tt.wantErr != nil {
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Clean(%.40q) = %q, %v; want %v", tt.in, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("Clean(%.40q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
}
