package lexicon

import (
	"testing"

	"github.com/quarry-router/quarry/platform/text"
)

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
		{"title case capitalises every word", "How Do I Rotate The Kafka Credentials?", nil},
		{"title case keeps the other signs of a name", "How Do I Deploy GraphQL To K8s Clusters?", []string{"graphql", "k8s"}},
		{"title case with lower-case stop words", "How to Rotate the Kafka Signing Keys", nil},
		{"names in a sentence are not title case", "How do I connect Kafka Connect to Postgres?", []string{"kafka", "connect", "postgres"}},
		{"two capitalised words are too few to call it title case", "Kafka or Pulsar?", []string{"pulsar"}},
		{"a new sentence starts with a capital", "Hi everyone! Quick one: does Kafka retry?", []string{"kafka"}},
		{"after a full stop too", "Thanks in advance. Rotate the key how?", nil},
		{"an abbreviation's full stop ends no sentence", "Streams, e.g. Kafka, or queues?", []string{"kafka"}},
		{"a dot inside a name ends no sentence", "Is torch.Tensor supported?", []string{"tensor"}},
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

func TestNamesWith(t *testing.T) {
	both := Writing{Label: true, Qualified: true}
	tests := []struct {
		name, query string
		w           Writing
		want        []string
	}{
		{"a leading label names the topic, English word or not", "Rails: how to encode a string to hex", both, []string{"rails"}},
		{"a label of two words", "Spring Boot: how to read a CSV file", both, []string{"spring", "boot"}},
		{"a lower-case label", "pandas: how to format a number", both, []string{"pandas"}},
		{"a label of a qualified name", "Express.js: how to log to a file", both, []string{"express", "js"}},
		{"labels off", "Rails: how to encode a string to hex", Writing{Qualified: true}, nil},
		{"a colon later in the question is no label", "How does gzip.NewReader work: it reads the header?", Writing{Label: true}, []string{"newreader"}},
		{"a label longer than three words is a sentence", "Backups of the orders database nightly: when?", both, nil},
		{"a discourse opener is no label", "Quick question: how do I revoke a key?", both, nil},
		{"a colon with nothing after it is no label", "Rails:", both, nil},
		{"a double colon is no label", "std::vector reserve", Writing{Label: true}, nil},
		{"the parts of a qualified identifier", "What does torch.nn.Module.forward do?", both, []string{"torch", "nn", "module", "forward"}},
		{"a C++ qualified identifier", "When does std::vector::reserve reallocate?", both, []string{"std", "vector", "reserve"}},
		{"a Ruby method reference", "How does Enumerable#each_slice work?", both, []string{"enumerable", "each", "slice"}},
		{"versions and numbers are not identifiers", "Is release 1.2 faster than 3.14 seconds?", both, nil},
		{"qualified off", "What does torch.nn.Module.forward do?", Writing{Label: true}, []string{"module"}},
		{"a sentence's full stop is no qualifier", "Rotate the key. Then restart.", both, nil}, // nor is "Then" a name: a sentence starts
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := NamesWith(tt.query, tt.w)
			if len(got) != len(tt.want) {
				t.Fatalf("NamesWith(%q) = %v, want %v", tt.query, got, tt.want)
			}
			for _, w := range tt.want {
				if !got[w] {
					t.Errorf("NamesWith(%q) lacks %q", tt.query, w)
				}
			}
		})
	}
}

func TestTypo(t *testing.T) {
	// df is a KB that uses these words, the ones in more documents first.
	kb := map[string]int{}
	for i, w := range []string{"buffer", "transaction", "context", "password", "email", "nginxe", "buffed", "reset"} {
		kb[text.Stem(w)] = 10 - i
	}
	df := func(stem string) int { return kb[stem] }
	tests := []struct {
		name, word, want string
	}{
		{"a letter left out", "transacton", "transaction"},
		{"a letter left out of a short word", "contxt", "context"},
		{"a letter doubled", "resett", "reset"},
		{"the fix the most documents use wins", "bufferd", "buffer"},
		{"a letter replaced", "pasword", "password"},
		{"the first letter is never edited: gmail is not email", "gmail", ""},
		{"the fix must be a dictionary word: a name one letter from a KB term stays a name", "nginx", ""},
		{"a word under 5 letters is not corrected", "pgsq", ""},
		{"a dictionary word is no typo", "bluffed", ""},
		{"digits are not letters", "buffer2", ""},
		{"capitals are the caller's names", "Bufferd", ""},
		{"nothing close in the KB", "kafka", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Typo(tt.word, df)
			if got != tt.want || ok != (tt.want != "") {
				t.Fatalf("Typo(%q) = %q, %v; want %q", tt.word, got, ok, tt.want)
			}
		})
	}
}

func TestLiterals(t *testing.T) {
	tests := []struct {
		name, query string
		want        []string
	}{
		{"double quotes", `strconv.Atoi fails on "12abc", why?`, []string{"12abc"}},
		{"backticks", "why does `go vet` complain", []string{"go", "vet"}},
		{"curly quotes", "what does \u201ctoo many clients\u201d mean", []string{"too", "many", "clients"}},
		{"an apostrophe quotes nothing", "the partner's key isn't valid", nil},
		{"an unclosed quote quotes nothing", `what is "12abc`, nil},
		{"two quoted values", `"a1" or "b2"?`, []string{"a1", "b2"}},
		{"numbers are values", "port 8080 refused in 2024 (ticket 4711)", []string{"8080", "2024", "4711"}},
		{"a version is a number", "what changed in v2 and v10?", []string{"v2", "v10"}},
		{"a word with digits is no number", "is k8s or 3des or ec2 affected?", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Literals(tt.query)
			if len(got) != len(tt.want) {
				t.Fatalf("Literals(%q) = %v, want %v", tt.query, got, tt.want)
			}
			for _, w := range tt.want {
				if !got[w] {
					t.Errorf("Literals(%q) lacks %q", tt.query, w)
				}
			}
		})
	}
}

func TestOpener(t *testing.T) {
	tests := []struct {
		query string
		want  int
	}{
		{"Quick question: how do I revoke a key?", 2},
		{"Update: the deploy failed again", 1},
		{"Hi: anyone around?", 1},
		{"Rails: how to encode a string?", 0},           // a topic label
		{"Postgres backups: how often?", 0},             // a topic label of KB words
		{"Quick question about backups", 0},             // no colon
		{"the: what", 0},                                // stop words only name no discourse
		{"a quick question about keys: why?", 0},        // more words than a label holds
		{"Quick question:", 0},                          // nothing after the colon
		{"Question for the team: how do I?", 0},         // "team" is neither
		{"Can someone tell me how to revoke a key?", 3}, // "me" is a stop word
		{"Could you tell us where backups live?", 4},
		{"Does anyone know which port Redis uses?", 3},
		{"I was wondering whether deploys freeze on Fridays", 3},
		{"I'd like to know how the canary works", 4}, // text.Words: "id", "like", "to", "know"
		{"I need to know the on-call rotation", 4},
		{"Help me understand key rotation", 3},
		{"Explain the deploy freeze", 1},
		{"Quick question: can anyone tell me the backup schedule?", 2 + 3},
		{"What do I need to know before a deploy?", 6},
		{"How do I tell which version is live?", 4},
		{"Deploy freeze: explain", 0},                  // a topic label, then only the request
		{"Does anyone know?", 0},                       // nothing but the request
		{"EXPLAIN ANALYZE shows a sequential scan", 0}, // a name in capitals
		{"Help desk hours", 0},                         // no verb of asking
		{"Key rotation: can someone tell me?", 0},      // the request follows the topic
		{"Hey team, how do I revoke a key?", 2},
		{"Hi everyone! Quick one: how do I revoke a key?", 4},
		{"Folks, how do I revoke a key?", 1},
		{"Hi everyone! Kafka consumers: how do I tune them?", 2}, // a greeting, then a topic label
		{"Hi all! Does anyone know the backup schedule?", 2 + 3},
		{"Hey", 1}, // a greeting alone (Courtesy drops it anyway)
		{"Sorry if this is a dumb question, but how do I revoke a key?", 11}, // the stop words after "but" too
		{"Sorry to bother you, how do I revoke a key?", 7},
		{"Sorry if this was already asked, but can someone tell me the port?", 7 + 3},
		{"Sorry, the deploy failed, but why?", 2}, // up to the topic: "sorry", "the"
		{"Dumb question but", 0},                  // nothing after the "but"
		{"Team leads: who approves deploys?", 0},  // "team" is an addressee only after a greeting
	}
	for _, tt := range tests {
		if got := Opener(tt.query); got != tt.want {
			t.Errorf("Opener(%q) = %d, want %d", tt.query, got, tt.want)
		}
	}
}

func TestCloser(t *testing.T) {
	tests := []struct {
		query string
		want  int
	}{
		{"how do I revoke a key in detail", 2},
		{"how do I revoke a key step by step", 3},
		{"how do I revoke a key right now", 2},
		{"how do I revoke a key TIA", 1},
		{"how do I revoke a key in advance", 2}, // Courtesy has dropped "thanks" before
		{"how do I revoke a key any ideas", 2},
		{"how do I revoke a key quickly in detail", 3},
		{"how do I revoke a key, I'm new here", 2},
		{"how do I revoke a key pls help", 2},
		{"how do I revoke a key (asking for a friend)", 4},
		{"how do I revoke a key, any help appreciated", 3},
		{"how do I revoke a key lmk", 1},
		{"how do I revoke a key", 0},
		{"what is the next step", 0},            // "step" alone is a topic
		{"in detail", 0},                        // never the whole question
		{"what changed right now or before", 0}, // not at the end
	}
	for _, tt := range tests {
		if got := Closer(text.Words(tt.query)); got != tt.want {
			t.Errorf("Closer(%q) = %d, want %d", tt.query, got, tt.want)
		}
	}
}
