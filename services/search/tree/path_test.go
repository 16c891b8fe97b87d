package tree

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"
)

func TestCleanPath(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    string
		wantErr error
	}{
		{"a clean relative path is kept", "auth/jwt/rotation.md", "auth/jwt/rotation.md", nil},
		{"empty means the root", "", "", nil},
		{"a dot means the root", ".", "", nil},
		{"./ alone means the root", "./", "", nil},
		{"a leading ./ is trimmed", "./auth/jwt", "auth/jwt", nil},
		{"repeated ./ are trimmed", "././auth", "auth", nil},
		{"a trailing slash is trimmed", "auth/jwt/", "auth/jwt", nil},
		{"inner . segments and double slashes collapse", "auth/./jwt//rotation.md", "auth/jwt/rotation.md", nil},
		{"dots inside a name are fine", "ops/v1.2/notes..md", "ops/v1.2/notes..md", nil},
		{"a name starting with .. is not a parent reference", "..auth/x.md", "..auth/x.md", nil},
		{"unicode names are fine", "équipe/café.md", "équipe/café.md", nil},
		{"a parent reference escapes", "../etc/passwd", "", ErrOutsideTree},
		{"a bare parent reference escapes", "..", "", ErrOutsideTree},
		{"a parent reference that would clean inside is still refused", "auth/../auth/x.md", "", ErrOutsideTree},
		{"a trailing parent reference is refused", "auth/..", "", ErrOutsideTree},
		{"an absolute path escapes", "/etc/passwd", "", ErrOutsideTree},
		{"a double-slash absolute path escapes", "//server/share", "", ErrOutsideTree},
		{"a Windows drive path escapes", "C:/Windows/win.ini", "", ErrOutsideTree},
		{"a Windows drive-relative path escapes", "c:secret.md", "", ErrOutsideTree},
		{"a drive path behind ./ escapes", "./A:", "", ErrOutsideTree},
		{"a backslash is invalid", `auth\..\..\etc`, "", ErrInvalidPath},
		{"a NUL byte is invalid", "auth\x00.md", "", ErrInvalidPath},
		{"a newline is invalid", "auth\n.md", "", ErrInvalidPath},
		{"a C1 control character is invalid", "auth\u0085.md", "", ErrInvalidPath},
		{"invalid UTF-8 is invalid", "auth/\xff.md", "", ErrInvalidPath},
		{"an over-long path is invalid", strings.Repeat("a/", 600), "", ErrInvalidPath},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CleanPath(tt.in)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("CleanPath(%q) err = %v, want %v", tt.in, err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("CleanPath(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCleanRelated(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  error
	}{
		{"auth/jwt/rotation.md", "auth/jwt/rotation.md", nil},
		{" ./auth/x.md ", "auth/x.md", nil},
		{"auth/jwt/../oauth/flow.md", "auth/oauth/flow.md", nil},
		{"../x.md", "", ErrOutsideTree},
		{"auth/../../x.md", "", ErrOutsideTree},
		{"/etc/passwd", "", ErrOutsideTree},
		{"auth/..", "", ErrInvalidPath},
		{`auth\x.md`, "", ErrInvalidPath},
		{"", "", ErrInvalidPath},
	}
	for _, tt := range tests {
		got, err := cleanRelated(tt.in)
		if !errors.Is(err, tt.wantErr) || got != tt.want {
			t.Errorf("cleanRelated(%q) = %q, %v; want %q, %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestParseScope(t *testing.T) {
	domains := []string{"auth", "ops", "Billing"}
	tests := []struct {
		name      string
		query     string
		wantScope string
		wantRest  string
	}{
		{"a path first word scopes the rest", "auth/jwt refresh token rotation", "auth/jwt", "refresh token rotation"},
		{"a trailing slash is trimmed from the scope", "auth/jwt/ refresh token", "auth/jwt", "refresh token"},
		{"a domain with a slash scopes to the domain", "auth/ refresh token", "auth", "refresh token"},
		{"a known domain name as first word scopes", "auth refresh token rotation", "auth", "refresh token rotation"},
		{"the domain word is matched lower-cased", "AUTH refresh token", "auth", "refresh token"},
		{"a domain spelled with capitals matches itself", "Billing invoices", "Billing", "invoices"},
		{"leading and inner space is tidied", "  ops   deploy   rollback ", "ops", "deploy   rollback"},
		{"a path may name a file", "auth/jwt/rotation.md how often", "auth/jwt/rotation.md", "how often"},
		{"an unknown first word does not scope", "how do I rotate keys", "", "how do I rotate keys"},
		{"a slash word under an unknown domain does not scope", "TCP/IP tuning guide", "", "TCP/IP tuning guide"},
		{"and/or does not scope", "and/or semantics", "", "and/or semantics"},
		{"a parent reference does not scope", "auth/../ops deploy", "", "auth/../ops deploy"},
		{"a dot segment does not scope", "auth/./jwt refresh", "", "auth/./jwt refresh"},
		{"an absolute path does not scope", "/auth/jwt refresh", "", "/auth/jwt refresh"},
		{"an empty segment does not scope", "auth//jwt refresh", "", "auth//jwt refresh"},
		{"punctuation in a segment does not scope", "auth/jwt? refresh", "", "auth/jwt? refresh"},
		{"a domain alone is a search, not a scope", "auth", "", "auth"},
		{"a path alone is a search, not a scope", "auth/jwt", "", "auth/jwt"},
		{"a path with only space after it is not a scope", "auth/jwt   ", "", "auth/jwt   "},
		{"a domain word later in the query does not scope", "refresh auth tokens", "", "refresh auth tokens"},
		{"an empty query", "", "", ""},
		{"a segment longer than a file name can be does not scope", "auth/" + strings.Repeat("0", 256) + " x", "", "auth/" + strings.Repeat("0", 256) + " x"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			scope, rest := ParseScope(tt.query, domains)
			if scope != tt.wantScope || rest != tt.wantRest {
				t.Errorf("ParseScope(%q) = %q, %q; want %q, %q", tt.query, scope, rest, tt.wantScope, tt.wantRest)
			}
		})
	}
}

func TestParseScopeWithoutDomains(t *testing.T) {
	scope, rest := ParseScope("auth/jwt refresh", nil)
	if scope != "" || rest != "auth/jwt refresh" {
		t.Errorf("ParseScope with no domains = %q, %q; want no scope", scope, rest)
	}
}

func FuzzCleanPath(f *testing.F) {
	for _, s := range []string{"", ".", "auth/jwt/rotation.md", "../x", "a/../b", "/etc", `a\b`, "a\x00b", "./a/", "C:x", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		c, err := CleanPath(p)
		if err != nil {
			if !errors.Is(err, ErrOutsideTree) && !errors.Is(err, ErrInvalidPath) {
				t.Fatalf("CleanPath(%q): unexpected error kind %v", p, err)
			}
			if c != "" {
				t.Fatalf("CleanPath(%q) returned %q with an error", p, c)
			}
			return
		}
		if !utf8.ValidString(c) || strings.ContainsAny(c, `\`) || strings.HasPrefix(c, "/") ||
			strings.HasSuffix(c, "/") || strings.HasPrefix(c, "./") || c == "." {
			t.Fatalf("CleanPath(%q) = %q is not canonical", p, c)
		}
		for _, seg := range strings.Split(c, "/") {
			if c != "" && (seg == "" || seg == "." || seg == "..") {
				t.Fatalf("CleanPath(%q) = %q has segment %q", p, c, seg)
			}
		}
		for _, r := range c {
			if unicode.IsControl(r) {
				t.Fatalf("CleanPath(%q) = %q has a control character", p, c)
			}
		}
		if again, err := CleanPath(c); err != nil || again != c {
			t.Fatalf("CleanPath is not idempotent: %q -> %q -> %q, %v", p, c, again, err)
		}
	})
}

// FuzzParseScope checks that whatever a question looks like, a scope it yields is a
// clean path inside the tree under a known domain, and the rest of the question is not
// lost.
func FuzzParseScope(f *testing.F) {
	for _, s := range []string{"auth/jwt refresh token rotation", "deploy rollback", "../etc passwd", "/abs path", "auth/../.. x", "a/b", "auth/jwt"} {
		f.Add(s)
	}
	domains := []string{"auth", "deploy", "data"}
	f.Fuzz(func(t *testing.T, q string) {
		scope, rest := ParseScope(q, domains)
		if scope == "" {
			if rest != q {
				t.Fatalf("no scope but the question changed: %q -> %q", q, rest)
			}
			return
		}
		clean, err := CleanPath(scope)
		if err != nil || clean != scope {
			t.Fatalf("scope %q of %q is not a clean path (%q, %v)", scope, q, clean, err)
		}
		top, _, _ := strings.Cut(scope, "/")
		if !slices.Contains(domains, top) {
			t.Fatalf("scope %q of %q is not under a known domain", scope, q)
		}
		if strings.TrimSpace(rest) == "" {
			t.Fatalf("scope %q of %q left no question", scope, q)
		}
	})
}
