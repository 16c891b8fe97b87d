// Command gen writes lexicon's embedded list of common English word stems from a SCOWL
// word list (Debian's wamerican package: /usr/share/dict/american-english). Words with
// capitals (names) and apostrophes are left out.
//
//	go run ./lexicon/gen -in /usr/share/dict/american-english -out lexicon/english.txt.gz
package main

import (
	"bufio"
	"compress/gzip"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"unicode"

	"github.com/quarry-router/quarry/platform/text"
)

func main() {
	in := flag.String("in", "/usr/share/dict/american-english", "word list, one word per line")
	out := flag.String("out", "english.txt.gz", "gzipped stem list to write")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	f, err := os.Open(in)
	if err != nil {
		return err
	}
	defer f.Close()
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.TrimSpace(sc.Text())
		if w == "" || strings.IndexFunc(w, func(r rune) bool { return !unicode.IsLower(r) }) >= 0 {
			continue
		}
		seen[text.Stem(w)] = true
	}
	if err := sc.Err(); err != nil {
		return err
	}
	stems := make([]string, 0, len(seen))
	for s := range seen {
		stems = append(stems, s)
	}
	slices.Sort(stems)
	o, err := os.Create(out)
	if err != nil {
		return err
	}
	zw, _ := gzip.NewWriterLevel(o, gzip.BestCompression)
	for _, s := range stems {
		fmt.Fprintln(zw, s)
	}
	if err := zw.Close(); err != nil {
		return err
	}
	return o.Close()
}
