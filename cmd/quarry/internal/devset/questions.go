package devset

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"strings"

	"github.com/quarry-router/quarry/platform/text"
)

// Question is one line of the labelled JSONL that "quarry eval" reads.
type Question struct {
	Kind   string   `json:"kind"`
	Query  string   `json:"query,omitempty"`
	Expect []string `json:"expect,omitempty"`
	A      string   `json:"a,omitempty"`
	B      string   `json:"b,omitempty"`
	Same   *bool    `json:"same,omitempty"`
}

// filler words carry no meaning of their own for the question generator.
var filler = map[string]bool{"the": true, "a": true, "an": true, "of": true, "to": true, "is": true, "and": true, "or": true, "in": true, "it": true, "its": true, "for": true, "that": true, "this": true, "with": true, "by": true, "be": true, "as": true, "if": true, "on": true, "are": true, "from": true, "at": true, "which": true, "when": true, "not": true, "can": true, "any": true, "all": true}

// rewordings replace a doc comment's word with the word a person asking tends to use.
var rewordings = map[string]string{"returns": "gives back", "reports": "tells", "creates": "makes", "specified": "given", "contains": "holds", "whether": "if", "allocates": "makes", "implements": "provides", "retrieves": "gets", "sets": "changes", "writes": "outputs"}

// questions builds the labelled set: known items from doc sentences, out-of-domain
// questions about things the KB never names, and pairs for the fuzzy cache.
func questions(pkgs []*pkgDoc, rng *rand.Rand, perPkg int, df map[string]int) []Question {
	var out []Question
	var known []Question
	for _, p := range pkgs {
		cands := slices.Clone(p.Sentences)
		rng.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		n := 0
		for _, s := range cands {
			if n == perPkg {
				break
			}
			q, ok := knownItem(p, s, rng, df)
			if !ok {
				continue
			}
			n++
			expect := []string{p.File}
			if s.Symbol == "" && s.Text == firstSentence(p.Doc) {
				// The domain's _index.md repeats the package's first sentence: it answers too.
				expect = append(expect, p.Domain+"/_index.md")
			}
			known = append(known, Question{Kind: "known_item", Query: q, Expect: expect})
		}
	}
	out = append(out, mergeKnownItems(known)...)
	out = append(out, outOfDomain(rng, df)...)
	// The pairs draw from the list as generated, so that merging changes no pair.
	out = append(out, samePairs(known, rng)...)
	out = append(out, differentPairs(pkgs, rng)...)
	return out
}

// knownItem rewords one doc sentence into a question: the documented symbol's name is
// dropped (people rarely know it), a word or two is dropped or replaced, and the question
// says which package it is about unless the sentence is the package comment's. Only
// sentences with at least two words rare in the corpus are used: a sentence every
// package could have written has no one right answer.
func knownItem(p *pkgDoc, s sentence, rng *rand.Rand, df map[string]int) (string, bool) {
	ws := strings.Fields(s.Text)
	if len(ws) > 0 && (strings.EqualFold(strings.Trim(ws[0], ",()"), s.Symbol) || ws[0] == "Package") {
		ws = ws[1:]
		if s.Symbol == "" && len(ws) > 0 && strings.EqualFold(ws[0], p.Short) {
			ws = ws[1:]
		}
	}
	if len(ws) < 5 || len(ws) > 28 {
		return "", false
	}
	rare := 0
	for _, w := range words(strings.Join(ws, " ")) {
		if len(w) >= 4 && df[w] <= 3 {
			rare++
		}
	}
	if rare < 2 {
		return "", false
	}
	// Partial phrase: a long sentence is cut to a window of it.
	if len(ws) > 14 {
		start := rng.IntN(len(ws) - 10)
		ws = ws[start : start+10+rng.IntN(min(4, len(ws)-start-10)+1)]
	}
	var kept []string
	dropped := 0
	for i, w := range ws {
		lw := strings.ToLower(strings.Trim(w, ",;()"))
		if i > 0 && dropped < 2 && !filler[lw] && df[lw] > 20 && rng.IntN(4) == 0 {
			dropped++
			continue
		}
		if r, ok := rewordings[lw]; ok && rng.IntN(2) == 0 {
			w = r
		}
		kept = append(kept, strings.Trim(w, ",;"))
	}
	phrase := strings.Join(kept, " ")
	if s.Symbol == "" {
		return fmt.Sprintf([]string{"Which Go package %s?", "Is there a package that %s?", "%s"}[rng.IntN(3)], phrase), true
	}
	switch rng.IntN(4) {
	case 0:
		return fmt.Sprintf("Which %s function %s?", p.Short, phrase), true
	case 1:
		return fmt.Sprintf("In %s, what %s?", p.Short, phrase), true
	case 2:
		return fmt.Sprintf("%s %s", p.Short, phrase), true
	default:
		return fmt.Sprintf("How does %s.%s work: %s?", p.Short, s.Symbol, phrase), true
	}
}

// Out-of-domain questions ask about other languages' libraries and other products,
// phrased with words the Go documentation uses all the time.
var (
	oodProducts = []string{"Kafka", "pandas", "NumPy", "Django", "React", "Kubernetes", "Terraform", "Spring Boot", "Jackson", "Express.js",
		"Rails", "Laravel", "Tokio", "Serde", "Hibernate", "Webpack", "Ansible", "Jenkins", "Elasticsearch", "Spark", "Airflow",
		"TensorFlow", "PyTorch", "Flask", "Gradle", "Maven", "Kotlin coroutines", "Swift", "SwiftUI", "Angular", "Vue", "Svelte",
		"Snowflake", "Salesforce", "Excel", "Photoshop", "WordPress", "Shopify", "Tailwind", "Redux", "Lodash", "Boost", "Qt",
		"Unity", "Unreal", "Blender", "Hadoop", "Cassandra", "MongoDB", "DynamoDB", "RabbitMQ", "Celery", "Sidekiq", "Nginx", "Istio"}
	oodActions = []string{"configure consumer groups", "read a CSV file", "set a timeout on requests", "encode a string to base64",
		"parse a date string", "sort a list of records", "compress files with gzip", "handle errors", "write unit tests",
		"open a database connection", "hash a password", "format a number with commas", "send an HTTP request", "read environment variables",
		"create a template", "log to a file", "generate random numbers", "split a string", "watch a directory for changes", "encrypt data with AES"}
	oodTemplates = []string{"How do I %[2]s in %[1]s?", "What is the best way to %[2]s with %[1]s?", "Can %[1]s %[2]s?", "%[1]s: how to %[2]s"}
	oodIdents    = []string{"What does pandas.DataFrame.merge do?", "How does numpy.linalg.svd work?", "What does java.util.HashMap.put return?",
		"When does std::vector::reserve reallocate?", "What does Array.prototype.reduce return on an empty array?", "How does serde_json::from_str handle errors?",
		"What does Python's itertools.groupby do?", "How does Ruby's Enumerable#each_slice work?", "What does torch.nn.Module.forward do?",
		"What does Kotlin's let function return?", "What is the capital of Australia?", "Who won the football world cup in 2014?",
		"How do I bake sourdough bread?", "What is the boiling point of water at altitude?", "How do I renew my passport?"}
)

func outOfDomain(rng *rand.Rand, df map[string]int) []Question {
	var out []Question
	for _, prod := range oodProducts {
		// A product the documentation mentions is not out of its domain.
		if slices.ContainsFunc(words(prod), func(w string) bool { return df[w] > 0 && len(w) > 3 }) {
			continue
		}
		for _, i := range rng.Perm(len(oodActions))[:3] {
			t := oodTemplates[rng.IntN(len(oodTemplates))]
			out = append(out, Question{Kind: "out_of_domain", Query: fmt.Sprintf(t, prod, oodActions[i])})
		}
	}
	for _, q := range oodIdents {
		out = append(out, Question{Kind: "out_of_domain", Query: q})
	}
	return out
}

// samePairs rewords known-item questions the way people repeat themselves: the same
// words in another order, or one word fewer.
func samePairs(known []Question, rng *rand.Rand) []Question {
	yes := true
	var out []Question
	for _, i := range rng.Perm(len(known)) {
		if len(out) == 200 {
			break
		}
		a := strings.TrimSuffix(known[i].Query, "?")
		ws := strings.Fields(a)
		if len(ws) < 6 {
			continue
		}
		var b string
		if rng.IntN(2) == 0 {
			cut := 2 + rng.IntN(len(ws)-3)
			b = strings.Join(ws[cut:], " ") + ", " + strings.Join(ws[:cut], " ") + "?"
		} else {
			// Drop one filler word, or the last word.
			j := slices.IndexFunc(ws[1:], func(w string) bool { return filler[strings.ToLower(w)] })
			if j < 0 {
				j = len(ws) - 2
			}
			b = strings.Join(slices.Delete(slices.Clone(ws), j+1, j+2), " ") + "?"
		}
		out = append(out, Question{Kind: "pair", A: known[i].Query, B: b, Same: &yes})
	}
	return out
}

// differentPairs ask the same thing of two sibling packages that export a function of
// the same name (gzip.NewReader vs zlib.NewReader): one word apart, different answers.
func differentPairs(pkgs []*pkgDoc, rng *rand.Rand) []Question {
	no := false
	var out []Question
	for i, p := range pkgs {
		for _, q := range pkgs[i+1:] {
			if p.Short == q.Short || p.Domain != q.Domain {
				continue
			}
			names := make([]string, 0, len(p.Funcs))
			for n := range p.Funcs {
				if _, ok := q.Funcs[n]; ok && p.Funcs[n] != "" {
					names = append(names, n)
				}
			}
			sort.Strings(names)
			if len(names) == 0 {
				continue
			}
			n := names[rng.IntN(len(names))]
			ws := strings.Fields(p.Funcs[n])
			if len(ws) > 1 && ws[0] == n {
				ws = ws[1:]
			}
			phrase := strings.Join(ws[:min(8, len(ws))], " ")
			tmpl := "How does %s %s %s?"
			// b asks about its own package throughout, not about a's.
			other := strings.ReplaceAll(phrase, p.Short, q.Short)
			out = append(out, Question{Kind: "pair", A: fmt.Sprintf(tmpl, p.Short, n, phrase), B: fmt.Sprintf(tmpl, q.Short, n, other), Same: &no})
		}
	}
	rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out[:min(200, len(out))]
}

// mergeKnownItems makes questions asked in the same words (once normalised, as the
// exact cache keys them) one question that expects every document any of them did: two
// packages can document a symbol in the same words (math/rand and math/rand/v2), and
// quarry eval asking such a question twice would answer the second from the exact
// cache and score it against the other document.
func mergeKnownItems(known []Question) []Question {
	var out []Question
	at := map[string]int{}
	for _, q := range known {
		n := text.Normalise(q.Query)
		i, ok := at[n]
		if !ok {
			at[n] = len(out)
			q.Expect = slices.Clone(q.Expect)
			out = append(out, q)
			continue
		}
		for _, e := range q.Expect {
			if !slices.Contains(out[i].Expect, e) {
				out[i].Expect = append(out[i].Expect, e)
			}
		}
	}
	return out
}
