// Package kbgen writes deterministic synthetic knowledge bases for benchmarks and routing
// evaluation at sizes no hand-written example reaches.
package kbgen

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrOptions reports options Generate cannot honour.
var ErrOptions = errors.New("kbgen: invalid options")

// defaultNow fixes "today" when Options.Now is zero, so the bytes depend on the seed alone.
var defaultNow = time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)

// Options controls the shape of a generated tree.
type Options struct {
	// Files is the total number of markdown files written: knowledge files, every _index.md
	// and the archived stubs.
	Files int
	// Seed selects the tree; equal options give identical bytes.
	Seed int64
	// Domains is the number of top-level folders (default 8, at most MaxDomains()).
	Domains int
	// Now anchors the "updated" dates (spread over the year before it); zero means 2026-11-01.
	Now time.Time
}

// MaxDomains is the largest Options.Domains Generate accepts.
func MaxDomains() int { return len(domains) }

// Manifest lists what was generated, for benchmarks and evaluation.
type Manifest struct {
	// Files is sorted by Path and holds every file written.
	Files []FileInfo
}

// FileInfo describes one generated file.
type FileInfo struct {
	// Path is relative to the tree root, with forward slashes.
	Path  string
	Title string
	// Distinctive holds the invented words that occur in this file's title and body and in no
	// other file's (other files may name this one in their "related" paths); empty for
	// _index.md summaries and archived stubs.
	Distinctive []string
}

// Per-topic sizing: about this many knowledge files share a topic folder, which is where
// BM25 has to separate documents that use the same words.
const (
	filesPerTopic = 60
	minTopics     = 2
	maxTopics     = 30
	filesPerStub  = 400
	maxStubs      = 25
)

type topic struct {
	domain int
	name   string
	pool   []string
	files  []int // indexes into plan.docs
}

type doc struct {
	path        string
	title       string
	topic       int
	distinctive []string
	related     []string
	stub        bool
}

type plan struct {
	opt    Options
	topics []topic
	docs   []doc
}

// Generate writes a synthetic context tree to dir (created if missing):
// <domain>/<topic>/<file>.md with front matter, an _index.md per domain and topic, and a few
// <domain>/<topic>/_archived/*.stub.md ghost cues. Documents in one topic share its word pool;
// each knowledge file also carries 2–3 invented words of its own.
func Generate(dir string, opt Options) (*Manifest, error) {
	if opt.Domains == 0 {
		opt.Domains = 8
	}
	if opt.Now.IsZero() {
		opt.Now = defaultNow
	}
	if opt.Domains < 1 || opt.Domains > len(domains) {
		return nil, fmt.Errorf("%w: Domains %d not in [1,%d]", ErrOptions, opt.Domains, len(domains))
	}
	p, err := newPlan(opt)
	if err != nil {
		return nil, err
	}
	if err := p.write(dir); err != nil {
		return nil, err
	}
	return p.manifest(), nil
}

func newPlan(opt Options) (*plan, error) {
	d := opt.Domains
	perDomain := int(math.Round(float64(opt.Files) / float64(d*filesPerTopic)))
	perDomain = min(max(perDomain, minTopics), maxTopics)
	stubs := min(max(opt.Files/filesPerStub, 1), maxStubs)
	indexes := d * (1 + perDomain)
	knowledge := opt.Files - indexes - stubs
	if knowledge < d*perDomain {
		return nil, fmt.Errorf("%w: Files %d too few for %d domains (need at least %d)",
			ErrOptions, opt.Files, d, indexes+stubs+d*perDomain)
	}
	p := &plan{opt: opt}
	r := newRNG(opt.Seed, 0)
	in := newInventor(shared, topicWords, verbs, nouns)
	for i := 0; i < d; i++ {
		for _, w := range domains[i].words {
			in.taken[w] = true
		}
		p.addTopics(r, i, perDomain)
	}
	p.sizeTopics(r, knowledge)
	for ti := range p.topics {
		p.planDocs(r, ti, in)
	}
	p.planStubs(r, stubs)
	return p, nil
}

func (p *plan) addTopics(r *rng, dom, n int) {
	names := map[string]bool{}
	for len(names) < n {
		pool := slices.Concat(r.sample(domains[dom].words, 6), r.sample(topicWords, 6))
		name := pool[0] + "-" + pool[6]
		if names[name] {
			continue
		}
		names[name] = true
		p.topics = append(p.topics, topic{domain: dom, name: name, pool: pool})
	}
}

// sizeTopics spreads the knowledge files over topics with uneven weights (largest
// remainder), at least one per topic: real trees have crowded and sparse folders.
func (p *plan) sizeTopics(r *rng, knowledge int) {
	weights := make([]float64, len(p.topics))
	var sum float64
	for i := range weights {
		weights[i] = 0.5 + r.float()
		sum += weights[i]
	}
	spare := knowledge - len(p.topics)
	counts := make([]int, len(p.topics))
	rem := make([]float64, len(p.topics))
	given := 0
	for i, w := range weights {
		exact := float64(spare) * w / sum
		counts[i] = int(exact)
		rem[i] = exact - float64(counts[i])
		given += counts[i]
	}
	order := make([]int, len(p.topics))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rem[a] > rem[b]:
			return -1
		case rem[a] < rem[b]:
			return 1
		}
		return 0
	})
	for i := 0; given < spare; i++ {
		counts[order[i]]++
		given++
	}
	for i := range p.topics {
		p.topics[i].files = make([]int, 0, counts[i]+1)
		for range counts[i] + 1 {
			p.topics[i].files = append(p.topics[i].files, -1)
		}
	}
}

func (p *plan) planDocs(r *rng, ti int, in *inventor) {
	t := &p.topics[ti]
	dom := domains[t.domain]
	slugs := map[string]bool{}
	for k := range t.files {
		n := r.between(2, 3)
		dist := make([]string, n)
		for i := range dist {
			dist[i] = in.word(r)
		}
		title := makeTitle(r, dom, t.pool, dist[0])
		slug := uniqueSlug(slugify(title), slugs)
		t.files[k] = len(p.docs)
		p.docs = append(p.docs, doc{
			path:        dom.name + "/" + t.name + "/" + slug + ".md",
			title:       title,
			topic:       ti,
			distinctive: dist,
		})
	}
	for _, di := range t.files {
		n := min(r.intn(4), len(t.files)-1)
		seen := map[int]bool{di: true}
		for len(p.docs[di].related) < n {
			o := t.files[r.intn(len(t.files))]
			if !seen[o] {
				seen[o] = true
				p.docs[di].related = append(p.docs[di].related, p.docs[o].path)
			}
		}
	}
}

func (p *plan) planStubs(r *rng, n int) {
	used := map[string]bool{}
	for len(used) < n {
		ti := r.intn(len(p.topics))
		t := p.topics[ti]
		dom := domains[t.domain]
		title := makeTitle(r, dom, t.pool, "")
		slug := slugify(title)
		path := dom.name + "/" + t.name + "/_archived/" + slug + ".stub.md"
		if used[path] {
			continue
		}
		used[path] = true
		p.docs = append(p.docs, doc{path: path, title: title + " (archived)", topic: ti, stub: true})
	}
}

// inventor makes the distinctive words: pronounceable, in no pool, each used once, none a
// prefix of another and none starting with a pool word, so a prefix match on a query word
// cannot reach a second document through them.
type inventor struct {
	taken    map[string]bool // pool words and invented words
	prefixes map[string]bool // proper prefixes of invented words
}

func newInventor(pools ...[]string) *inventor {
	in := &inventor{taken: map[string]bool{}, prefixes: map[string]bool{}}
	for _, pool := range pools {
		for _, w := range pool {
			in.taken[w] = true
		}
	}
	return in
}

func (in *inventor) word(r *rng) string {
	for {
		var b strings.Builder
		for range r.between(2, 3) {
			b.WriteString(r.pick(onsets))
			b.WriteString(r.pick(vowels))
		}
		b.WriteString(r.pick(codas))
		w := b.String()
		if in.taken[w] || in.prefixes[w] || in.hasTakenPrefix(w) {
			continue
		}
		in.taken[w] = true
		for i := 1; i < len(w); i++ {
			in.prefixes[w[:i]] = true
		}
		return w
	}
}

func (in *inventor) hasTakenPrefix(w string) bool {
	for i := 1; i < len(w); i++ {
		if in.taken[w[:i]] {
			return true
		}
	}
	return false
}

func makeTitle(r *rng, dom domainDef, pool []string, x string) string {
	t1, t2 := r.pick(pool[6:]), r.pick(pool[:6])
	g := r.pick(gerunds)
	if x == "" || r.float() < 0.4 {
		switch r.intn(3) {
		case 0:
			return g + " the " + t1 + " " + t2
		case 1:
			return capitalize(t1) + " " + t2 + " " + r.pick(nouns)
		default:
			return capitalize(t2) + " " + t1 + " " + r.pick(nouns) + " in " + dom.name
		}
	}
	switch r.intn(3) {
	case 0:
		return g + " " + x + " " + t1 + " " + t2
	case 1:
		return capitalize(x) + " " + t1 + " " + r.pick(nouns)
	default:
		return g + " " + t1 + " " + t2 + " for " + x
	}
}

func slugify(title string) string {
	var parts []string
	for _, w := range strings.Fields(strings.ToLower(title)) {
		switch w {
		case "the", "for", "in":
			continue
		}
		parts = append(parts, w)
	}
	return strings.Join(parts, "-")
}

func uniqueSlug(slug string, used map[string]bool) string {
	s := slug
	for i := 2; used[s]; i++ {
		s = slug + "-" + strconv.Itoa(i)
	}
	used[s] = true
	return s
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// file is one file to write: a planned document, or a summary when doc < 0 (of a domain
// when top < 0, else of topic top).
type file struct {
	path, title   string
	doc, dom, top int
}

func (p *plan) files() []file {
	out := make([]file, 0, p.opt.Files)
	for i, d := range p.docs {
		out = append(out, file{path: d.path, title: d.title, doc: i})
	}
	for ti, t := range p.topics {
		name := domains[t.domain].name
		if ti == 0 || p.topics[ti-1].domain != t.domain {
			out = append(out, file{path: name + "/_index.md", title: domainTitle(t.domain), doc: -1, dom: t.domain, top: -1})
		}
		out = append(out, file{path: name + "/" + t.name + "/_index.md", title: topicTitle(t), doc: -1, top: ti})
	}
	return out
}

func (p *plan) manifest() *Manifest {
	files := p.files()
	m := &Manifest{Files: make([]FileInfo, 0, len(files))}
	for _, f := range files {
		fi := FileInfo{Path: f.path, Title: f.title}
		if f.doc >= 0 {
			fi.Distinctive = p.docs[f.doc].distinctive
		}
		m.Files = append(m.Files, fi)
	}
	slices.SortFunc(m.Files, func(a, b FileInfo) int { return strings.Compare(a.Path, b.Path) })
	return m
}

// write renders files on a few goroutines: creating files is syscall-bound, and each
// document has its own random stream, so the order of work cannot change the bytes.
func (p *plan) write(dir string) error {
	jobs := p.files()
	made := map[string]bool{}
	for _, j := range jobs {
		d := filepath.Dir(filepath.Join(dir, filepath.FromSlash(j.path)))
		if made[d] {
			continue
		}
		made[d] = true
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("kbgen: %w", err)
		}
	}
	workers := min(max(runtime.GOMAXPROCS(0)*2, 2), 8)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for wi := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf bytes.Buffer
			for k := wi; k < len(jobs); k += workers {
				buf.Reset()
				p.render(&buf, jobs[k])
				full := filepath.Join(dir, filepath.FromSlash(jobs[k].path))
				if err := os.WriteFile(full, buf.Bytes(), 0o644); err != nil {
					errs[wi] = fmt.Errorf("kbgen: %w", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (p *plan) render(buf *bytes.Buffer, j file) {
	switch {
	case j.doc >= 0 && p.docs[j.doc].stub:
		newWriter(buf, p, j.doc).stub()
	case j.doc >= 0:
		newWriter(buf, p, j.doc).knowledge()
	case j.top < 0:
		p.domainIndex(buf, j.dom)
	default:
		p.topicIndex(buf, j.top)
	}
}

func domainTitle(d int) string { return capitalize(domains[d].name) + " runbooks" }

func topicTitle(t topic) string { return capitalize(strings.ReplaceAll(t.name, "-", " ")) }

func (p *plan) domainIndex(buf *bytes.Buffer, d int) {
	fmt.Fprintf(buf, "---\ntitle: %q\n---\n", domainTitle(d))
	fmt.Fprintf(buf, "Runbooks and reference notes of the %s domain, owned by team-%s.\n", domains[d].name, domains[d].name)
	n := 0
	for _, t := range p.topics {
		if t.domain != d {
			continue
		}
		if n < 4 {
			fmt.Fprintf(buf, "- `%s/` — %s, %s and %s (%d files).\n", t.name, t.pool[1], t.pool[7], t.pool[8], len(t.files))
		}
		n++
	}
	if n > 4 {
		fmt.Fprintf(buf, "- and %d more topic folders.\n", n-4)
	}
}

func (p *plan) topicIndex(buf *bytes.Buffer, ti int) {
	t := p.topics[ti]
	fmt.Fprintf(buf, "---\ntitle: %q\n---\n", topicTitle(t))
	fmt.Fprintf(buf, "How the %s domain handles %s: %s.\n", domains[t.domain].name,
		strings.ReplaceAll(t.name, "-", " "), strings.Join(t.pool[1:5], ", "))
	// Titles that carry a distinctive word stay out of the summary: those words must occur
	// in one file only, or known-item questions would have two answers.
	shown := 0
	for _, di := range t.files {
		if shown == 3 {
			break
		}
		d := p.docs[di]
		if !slices.ContainsFunc(strings.Fields(strings.ToLower(d.title)), func(w string) bool { return slices.Contains(d.distinctive, w) }) {
			fmt.Fprintf(buf, "- %s\n", d.title)
			shown++
		}
	}
	if len(t.files) > shown {
		fmt.Fprintf(buf, "- and %d more documents on %s and %s.\n", len(t.files)-shown, t.pool[9], t.pool[10])
	}
}
