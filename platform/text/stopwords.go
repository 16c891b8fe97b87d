package text

import "strings"

// stopWords is the English stop-word list of the Snowball project (the one the embedded
// search engine's "en" analyzer uses), plus the question words and auxiliaries that
// questions to a knowledge base are made of ("how do i ...", "what is the ...").
var stopWords = func() map[string]struct{} {
	words := []string{
		// Snowball English.
		"i", "me", "my", "myself", "we", "our", "ours", "ourselves", "you", "your", "yours",
		"yourself", "yourselves", "he", "him", "his", "himself", "she", "her", "hers",
		"herself", "it", "its", "itself", "they", "them", "their", "theirs", "themselves",
		"what", "which", "who", "whom", "this", "that", "these", "those", "am", "is", "are",
		"was", "were", "be", "been", "being", "have", "has", "had", "having", "do", "does",
		"did", "doing", "would", "should", "could", "ought", "i'm", "you're", "he's",
		"she's", "it's", "we're", "they're", "i've", "you've", "we've", "they've", "i'd",
		"you'd", "he'd", "she'd", "we'd", "they'd", "i'll", "you'll", "he'll", "she'll",
		"we'll", "they'll", "isn't", "aren't", "wasn't", "weren't", "hasn't", "haven't",
		"hadn't", "doesn't", "don't", "didn't", "won't", "wouldn't", "shan't", "shouldn't",
		"can't", "cannot", "couldn't", "mustn't", "let's", "that's", "who's", "what's",
		"here's", "there's", "when's", "where's", "why's", "how's", "a", "an", "the", "and",
		"but", "if", "or", "because", "as", "until", "while", "of", "at", "by", "for",
		"with", "about", "against", "between", "into", "through", "during", "before",
		"after", "above", "below", "to", "from", "up", "down", "in", "out", "on", "off",
		"over", "under", "again", "further", "then", "once", "here", "there", "when",
		"where", "why", "how", "all", "any", "both", "each", "few", "more", "most", "other",
		"some", "such", "no", "nor", "not", "only", "own", "same", "so", "than", "too",
		"very",
		// Question scaffolding.
		"can", "will", "shall", "may", "might", "must", "s", "t", "d", "ll", "m", "re", "ve",
		"whats", "hows", "dont", "doesnt", "im",
	}
	m := make(map[string]struct{}, len(words))
	for _, w := range words {
		m[w] = struct{}{}
		// Words drops apostrophes ("isn't" → "isnt"), so a contraction is a stop word
		// in that spelling too — unless the spelling is a word of its own.
		if bare := strings.ReplaceAll(w, "'", ""); bare != w && !contractionHomographs[bare] {
			m[bare] = struct{}{}
		}
	}
	return m
}()

// contractionHomographs are contractions without their apostrophe that are words in
// their own right ("we'll" → "well", "she'll" → "shell"): not stop words.
var contractionHomographs = map[string]bool{
	"well": true, "shell": true, "ill": true, "id": true, "lets": true, "wed": true, "hell": true,
}

// IsStopWord reports whether a lower-case word is a stop word.
func IsStopWord(w string) bool {
	_, ok := stopWords[w]
	return ok
}

// StopWords returns the stop-word list, for engines that take it as configuration.
func StopWords() []string {
	out := make([]string, 0, len(stopWords))
	for w := range stopWords {
		out = append(out, w)
	}
	return out
}
