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
