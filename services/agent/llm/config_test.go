package llm

import (
	"strings"
	"testing"
)

// A -llm-base-url that does not parse is reported at startup, where logs and
// terminals keep it: what is wrong with it is said, its user:password@ is not.
// url.Parse's own error quotes the URL whole.
func TestAMalformedBaseURLKeepsItsCredentialsOutOfTheError(t *testing.T) {
	tests := []struct {
		name    string
		url     string
		secrets []string
		want    []string // what the error still says
	}{
		{"a bad port", "https://user:sk-SECRET@api.example.com:44x/v1", []string{"SECRET", "sk-"},
			[]string{"-llm-base-url", `invalid port ":44x" after host`, "REDACTED@api.example.com:44x/v1"}},
		{"a bad escape in the password", "https://user:sk%zzSECRET@api.example.com/v1", []string{"SECRET", "sk-", "sk%", "%zz"},
			[]string{"-llm-base-url", "invalid URL escape", "REDACTED@api.example.com/v1"}},
		// The '/' ends the host early, so url.Parse takes the password's head for a
		// port and quotes it.
		{"a password with a slash", "https://user:sk-SE/CRET@api.example.com/v1", []string{"sk-", "SE/CRET", "CRET"},
			[]string{"-llm-base-url", "invalid port", "REDACTED@api.example.com/v1"}},
		{"no credentials", "https://api.example.com/%zz", nil,
			[]string{"-llm-base-url", `"https://api.example.com/%zz"`, `invalid URL escape "%zz"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.BaseURL, c.Model = tt.url, "m"
			err := c.Validate()
			if err == nil {
				t.Fatalf("%s accepted", tt.url)
			}
			for _, s := range tt.secrets {
				if strings.Contains(err.Error(), s) {
					t.Errorf("error %q holds %q", err, s)
				}
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if d := c.Describe(); strings.Contains(d, "user") || len(tt.secrets) > 0 && strings.Contains(d, tt.secrets[0]) {
				t.Errorf("Describe() = %q", d)
			}
		})
	}
}
