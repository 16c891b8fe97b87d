package lexicon

import "testing"

func TestCommon(t *testing.T) {
	tests := []struct {
		word string
		want bool
	}{
		{"often", true}, {"happens", true}, {"tolerate", true}, {"permission", true},
		{"rotating", true}, {"backups", true},
		{"kafka", false}, {"terraform", false}, {"graphql", false}, {"elasticsearch", false},
		{"kubernetes", false}, {"vremenux", false},
	}
	for _, tt := range tests {
		if got := Common(tt.word); got != tt.want {
			t.Errorf("Common(%q) = %v, want %v", tt.word, got, tt.want)
		}
	}
}

func TestNames(t *testing.T) {
	tests := []struct {
		name, query string
		want        []string
	}{
		{"a capitalised word inside the question", "How do I load data into Snowflake?", []string{"snowflake"}},
		{"the first word is not a name for being capitalised", "Rotate the signing key", nil},
		{"a capital inside the word", "is GraphQL supported", []string{"graphql"}},
		{"letters and digits", "deploy to k8s and s3", []string{"k8s", "s3"}},
		{"acronyms are not names", "How do I rotate the JWT key for PKCE?", nil},
		{"plain lower case has no names", "how do i rotate kafka credentials", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Names(tt.query)
			if len(got) != len(tt.want) {
				t.Fatalf("Names(%q) = %v, want %v", tt.query, got, tt.want)
			}
			for _, w := range tt.want {
				if !got[w] {
					t.Errorf("Names(%q) lacks %q", tt.query, w)
				}
			}
		})
	}
}

func TestNameLike(t *testing.T) {
	names := Names("How do I load data into Snowflake?")
	if !NameLike("snowflake", names) {
		t.Error("a capitalised English word in the question is a name")
	}
	if NameLike("snowflake", nil) {
		t.Error("a lower-case English word is not a name")
	}
	if !NameLike("kafka", nil) {
		t.Error("a word no dictionary has is a name")
	}
}
