package engine

import "testing"

func TestPathText(t *testing.T) {
	tests := []struct{ name, path, want string }{
		{"folders and file name without the extension", "auth/jwt/key-rotation.md", "auth jwt key-rotation"},
		{"a summary is named by its folders", "auth/_index.md", "auth"},
		{"an archived stub drops _archived and .stub", "ops/_archived/pager_duty.stub.md", "ops pager_duty"},
		{"a root file", "readme.md", "readme"},
		{"a root summary has no words", "_index.md", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := PathText(tc.path); got != tc.want {
				t.Errorf("PathText(%q) = %q, want %q", tc.path, got, tc.want)
			}
		})
	}
}
