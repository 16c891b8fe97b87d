package text

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unicode"
	"unicode/utf8"
	"unsafe"

	"golang.org/x/text/unicode/norm"
)

func TestNormalise(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"lower-cases", "How Do I Rotate", "how do i rotate"},
		{"trims", "  rotate keys \n", "rotate keys"},
		{"collapses runs of white space", "rotate\t\t keys\n\nnow", "rotate keys now"},
		{"keeps punctuation", "what's JWT?", "what's jwt?"},
		{"empty stays empty", " \t ", ""},
		{"unicode lower case", "ÉTÉ Straße", "été straße"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Normalise(tt.in); got != tt.want {
				t.Errorf("Normalise(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

// Blank holds exactly the queries Normalise reduces to nothing.
func TestBlank(t *testing.T) {
	for _, q := range []string{"", " ", "\t\n", "\u00ad", "\u200b", "\ufeff\u00ad", "\u200b\u200b", " \u200d ", "\u3000", "?", "a", "\u00ada", "-", "\u0301", "\u2060x"} {
		if got, want := Blank(q), Normalise(q) == ""; got != want {
			t.Errorf("Blank(%+q) = %v, want %v (Normalise gives %+q)", q, got, want, Normalise(q))
		}
	}
}

func TestTokens(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"drops stop words", "How do I rotate the JWT signing key?", []string{"rotate", "jwt", "signing", "key"}},
		{"splits on punctuation", "auth/jwt: refresh-token rotation", []string{"auth", "jwt", "refresh", "token", "rotation"}},
		{"drops tokens shorter than two characters", "a b c k8s x", []string{"k8s"}},
		{"de-duplicates", "keys keys KEYS", []string{"keys"}},
		{"contractions are one word and stop words", "what's the key? don't rotate", []string{"key", "rotate"}},
		{"nothing left", "how is it?", []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Tokens(tt.in)
			if len(got) == 0 && len(tt.want) == 0 {
				return
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Tokens(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestStems(t *testing.T) {
	a := Stems(Tokens("How do I rotate signing keys?"))
	b := Stems(Tokens("rotating the signing key"))
	if !reflect.DeepEqual(a, b) {
		t.Errorf("inflections should share stems: %q vs %q", a, b)
	}
	if Stem("rotate") == Stem("revoke") {
		t.Error("different words must not share a stem")
	}
}

func TestJaccard(t *testing.T) {
	tests := []struct {
		name string
		a, b []string
		want float64
	}{
		{"identical sets", []string{"a", "b"}, []string{"b", "a"}, 1},
		{"disjoint sets", []string{"a"}, []string{"b"}, 0},
		{"three of five", []string{"rotate", "jwt", "signing", "key"}, []string{"revoke", "jwt", "signing", "key"}, 0.6},
		{"subset", []string{"a", "b", "c"}, []string{"a", "b"}, 2.0 / 3},
		{"empty is zero", nil, []string{"a"}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Jaccard(tt.a, tt.b); got != tt.want {
				t.Errorf("Jaccard = %v, want %v", got, tt.want)
			}
			if got := Jaccard(tt.b, tt.a); got != tt.want {
				t.Errorf("Jaccard is not symmetric: %v", got)
			}
		})
	}
}

func FuzzTokens(f *testing.F) {
	for _, s := range []string{"How do I rotate the JWT key?", "", "\x00\xff", "a/b c-d", "don't", "cafe\u0301 ｑｕｏｔａ", "ob\u00adserve a\u200bb \ufb01le", "Y\u030a J\u030c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n := Normalise(s)
		if Normalise(n) != n {
			t.Errorf("Normalise is not idempotent on %q", s)
		}
		if utf8.ValidString(s) && Blank(s) != (n == "") {
			t.Errorf("Blank(%+q) = %v, but Normalise gives %+q", s, Blank(s), n)
		}
		// The exact cache answers a question with the answer to any other of the same
		// form, so the form must not change what is searched for.
		if got, want := Words(n), Words(s); !slices.Equal(got, want) {
			t.Errorf("Words(Normalise(%q)) = %q, want Words of the question, %q", s, got, want)
		}
		for _, tok := range Tokens(s) {
			if len(tok) < 2 || IsStopWord(tok) {
				t.Errorf("bad token %q from %q", tok, s)
			}
		}
	})
}

// wordsReference is the plain rune-by-rune definition of Words that the optimised one
// must match.
func wordsReference(s string) []string {
	var words []string
	var b []rune
	flush := func() {
		if len(b) > 0 {
			words = append(words, string(b))
			b = b[:0]
		}
	}
	// Composed again after lower-casing, as Normalise does: lower-casing turns an
	// invalid byte into U+FFFD, after which a mark NFKC had left alone ("\xf1\u0340")
	// is normalised too.
	for _, r := range norm.NFKC.String(strings.ToLower(norm.NFKC.String(s))) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
			b = append(b, r)
		case r == '\'' || r == '\u2019' || r != '\u200b' && unicode.Is(unicode.Cf, r):
		default:
			flush()
		}
	}
	flush()
	return words
}

func FuzzWordsMatchesReference(f *testing.F) {
	for _, s := range []string{"Don't ROTATE the team's key", "auth/jwt: x-y_z", "’quoted’ it’s", "İstanbul ÉTÉ", "a''b", "\xff\xfe", "re\u0301sume\u0301 ＧＰＵ", "\ufb01x side\u200dcar a\u200bb \u00adx", "\xf1\u0340"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, want := Words(s), wordsReference(s)
		if len(got) != len(want) {
			t.Fatalf("Words(%q) = %q, want %q", s, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("Words(%q) = %q, want %q", s, got, want)
			}
		}
	})
}

// Words drops apostrophes, so every contraction must be a stop word as Words spells it,
// except the spellings that are words of their own.
func TestContractionsAreStopWordsAsWordsSpellsThem(t *testing.T) {
	for _, tc := range []struct {
		question string
		want     []string
	}{
		{"Isn't the token rotated?", []string{"token", "rotated"}},
		{"who's on call and what's the pager", []string{"call", "pager"}},
		{"why doesn't the deploy roll back", []string{"deploy", "roll", "back"}},
		{"we'll see the shell", []string{"well", "see", "shell"}},
		{"it\u2019s the id", []string{"id"}},
	} {
		var got []string
		for _, w := range Words(tc.question) {
			if !IsStopWord(w) {
				got = append(got, w)
			}
		}
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("content words of %q = %q, want %q", tc.question, got, tc.want)
		}
	}
}

func TestUnicodeEquivalentSpellingsAreOneWord(t *testing.T) {
	tests := []struct{ name, a, b string }{
		{"composed and decomposed", "café résumé", "cafe\u0301 re\u0301sume\u0301"},
		{"fullwidth", "ｑｕｏｔａ ＧＰＵ", "quota gpu"},
		{"ligature", "\ufb01rewall", "firewall"},
		{"soft hyphen", "observ\u00adability", "observability"},
		{"zero-width joiner and byte-order mark", "side\u200dcar \ufeffkey", "sidecar key"},
		{"zero-width space separates", "rotate\u200bkey", "rotate key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if a, b := Words(tt.a), Words(tt.b); !slices.Equal(a, b) {
				t.Errorf("Words(%q) = %q, Words(%q) = %q: want equal", tt.a, a, tt.b, b)
			}
			if a, b := Normalise(tt.a), Normalise(tt.b); a != b {
				t.Errorf("Normalise(%q) = %q, Normalise(%q) = %q: want equal", tt.a, a, tt.b, b)
			}
			for _, w := range Words(tt.a) {
				if got := FoldWord(w); got != w {
					t.Errorf("FoldWord(%q) = %q: a word of Words is folded already", w, got)
				}
			}
		})
	}
}

// BenchmarkWords splits a 9 KB document in plain ASCII and the same with one em dash,
// which makes Words read it in NFKC: the difference is what the composition costs a
// document at load.
func BenchmarkWords(b *testing.B) {
	para := "Rotate the JWT signing key every 90 days: create the new key, publish it to the JWKS endpoint, wait for caches to expire, then switch signing. "
	ascii := strings.Repeat(para, 64)
	for _, bm := range []struct{ name, s string }{
		{"ascii", ascii},
		{"em-dash", ascii[:len(ascii)/2] + " — " + ascii[len(ascii)/2:]},
		{"decomposed", strings.ReplaceAll(ascii, "create", "cre\u0301ate")},
	} {
		b.Run(bm.name, func(b *testing.B) {
			b.SetBytes(int64(len(bm.s)))
			for b.Loop() {
				Words(bm.s)
			}
		})
	}
}

func TestCount(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{0, "0 entries"}, {1, "1 entry"}, {2, "2 entries"}, {-1, "-1 entries"}, {1000, "1000 entries"}} {
		if got := Count(tt.n, "entry", "entries"); got != tt.want {
			t.Errorf("Count(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// versionDigests records, for each Version, a digest of what Words, IsStopWord and Stem
// return for testdata/version.txt.
var versionDigests = map[string]string{
	"1": "f1f99438939b46e64f41860936779fc8236b37329783e53cadf3fbeac302fc05",
}

// TestVersionNamesTheOutput fails when Words, IsStopWord or Stem return something else
// for the same text while Version stays: persisted term statistics would then disagree
// with what a service computes.
func TestVersionNamesTheOutput(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "version.txt"))
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	for _, w := range Words(string(data)) {
		fmt.Fprintf(h, "%s %t %s\n", w, IsStopWord(w), Stem(w))
	}
	got := hex.EncodeToString(h.Sum(nil))
	if want := versionDigests[Version]; got != want {
		t.Errorf("Words, IsStopWord or Stem changed what they return (digest %s, want %q for Version %q): "+
			"bump Version and record the new digest in versionDigests", got, want, Version)
	}
}

// Stem's cache returns what Snowball does, for words stemmed once, again, concurrently,
// past the cache's bounds, and for words cut out of a longer text.
func TestStemCacheReturnsSnowballsStems(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("testdata", "version.txt"))
	if err != nil {
		t.Fatal(err)
	}
	words := Words(strings.Repeat(string(data), 3))
	words = append(words, strings.Repeat("connection", 6))
	for i := range maxStemCache + 100 { // past the bound: the cache stays full, stems stay right
		words = append(words, fmt.Sprintf("w%dings", i))
	}
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for _, w := range words {
				if got, want := Stem(w), snowball(w); got != want {
					t.Errorf("Stem(%q) = %q, want %q", w, got, want)
				}
			}
		})
	}
	wg.Wait()
	stemCache.RLock()
	n := len(stemCache.m)
	_, long := stemCache.m[strings.Repeat("connection", 6)]
	stemCache.RUnlock()
	if n != maxStemCache || long {
		t.Errorf("cache holds %d words (the long one: %v), want %d and not the long one", n, long, maxStemCache)
	}
}

// A word cut out of a document is cached as a copy, its stem too: the cache must not
// keep whole documents alive.
func TestStemCacheKeepsNoDocumentAlive(t *testing.T) {
	doc := strings.Repeat("x", 1<<16) + " uniquewordxyz connectionsqq "
	inside := func(s string) bool {
		p, base := uintptr(unsafe.Pointer(unsafe.StringData(s))), uintptr(unsafe.Pointer(unsafe.StringData(doc)))
		return p >= base && p < base+uintptr(len(doc))
	}
	for _, w := range Words(doc)[1:] {
		if !inside(w) {
			t.Fatalf("Words(%q) is no slice of the document: the test no longer tests", w)
		}
		Stem(w)
		stemCache.RLock()
		st, ok := stemCache.m[w]
		var key string
		for k := range stemCache.m {
			if k == w {
				key = k
			}
		}
		stemCache.RUnlock()
		if !ok {
			continue // the cache is full (another test filled it)
		}
		if inside(key) || inside(st) {
			t.Errorf("the cache holds %q → %q inside the document", key, st)
		}
	}
}
