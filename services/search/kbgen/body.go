package kbgen

import (
	"bytes"
	"strconv"
	"strings"
	"time"
)

// Sentence templates. Slots: {s} shared word, {d} domain word, {t} topic word, {T} the same
// capitalised, {x} one of the document's distinctive words, {v} verb, {V} capitalised verb,
// {n} number, {k} config key, {c} command in backticks, {D} domain name, {o} owning team.
var sentenceSrc = []string{
	"{V} the {t} {s} before you {v} the {d} {s}.",
	"The {t} {s} defaults to {n}; raise it only when the {d} {s} is under load.",
	"If the {s} fails, {v} the {t} {s} and check the {d} {s} again.",
	"Each {d} {s} keeps its own {t} {s} for {n} minutes.",
	"Use {c} to {v} the {t} {s}.",
	"Do not {v} the {t} {s} while the {s} {s} is running.",
	"{o} owns the {t} {s} and reviews every change to it.",
	"When the {t} {s} reaches {n} percent, the {d} {s} alert fires.",
	"Set `{k}: {n}` in the {t} config and {v} the {s}.",
	"Expect about {n} {s} events per {s} on a busy {d} {s}.",
	"The {x} {s} controls how the {t} {s} behaves during a {d} {s}.",
	"Run {c} first; it prints the {t} {s} and the {x} {s}.",
	"Most {t} problems come from a stale {d} {s}, not from the {s} itself.",
	"After you {v} the {t} {s}, wait {n} seconds for the {d} {s} to settle.",
	"The {s} {s} for {x} lives next to the {t} {s} in the {D} repository.",
	"A {t} {s} above {n} means the {d} {s} needs attention.",
	"{T} {s} changes roll out region by region, {n} percent at a time.",
	"Ask the {D} on-call before you {v} a production {t} {s}.",
	"Older {d} {s} versions ignore the {t} {s}, so {v} them first.",
	"The {t} and {t} settings interact: {v} one and the {s} of the other changes too.",
	"{V} {x} only after the {t} {s} is healthy again.",
}

var headings = []string{"Background", "Steps", "Configuration", "Checking", "When it fails",
	"Limits", "Notes", "Rolling back", "Ownership", "Known problems", "Verification",
	"Prerequisites", "Troubleshooting", "Examples", "Monitoring", "Defaults", "Escalation"}

var numbers = []string{"2", "3", "5", "10", "15", "20", "30", "60", "90", "100", "200", "250", "500", "1000", "5000"}

type part struct {
	lit  string
	slot byte
}

var sentences = compile(sentenceSrc)

// compile splits templates once so filling one costs no parsing.
func compile(src []string) [][]part {
	out := make([][]part, len(src))
	for i, s := range src {
		for s != "" {
			j := strings.IndexByte(s, '{')
			if j < 0 {
				out[i] = append(out[i], part{lit: s})
				break
			}
			if j > 0 {
				out[i] = append(out[i], part{lit: s[:j]})
			}
			out[i] = append(out[i], part{slot: s[j+1]})
			s = s[j+3:]
		}
	}
	return out
}

// writer renders one document with its own random stream, so a file's bytes do not depend
// on how many words the files before it happened to use.
type writer struct {
	buf   *bytes.Buffer
	r     *rng
	dom   domainDef
	t     topic
	d     doc
	now   time.Time
	xUses []int
	// words counts the body's white-space separated words up to scanned, a byte offset in
	// buf, so length targets are met in the same unit a reader would count.
	words   int
	scanned int
	inWord  bool
}

// count brings words up to date with everything written since the last call.
func (w *writer) count() int {
	for _, c := range w.buf.Bytes()[w.scanned:] {
		space := c == ' ' || c == '\n' || c == '\t'
		if !space && !w.inWord {
			w.words++
		}
		w.inWord = !space
	}
	w.scanned = w.buf.Len()
	return w.words
}

// sentencesFor returns how many sentences a section gets: what it would have drawn, fewer
// as the body nears its target length.
func (w *writer) sentencesFor(target, lo, hi int) int {
	left := (target-w.count())/15 + 1
	return max(1, min(left, w.r.between(lo, hi)))
}

func newWriter(buf *bytes.Buffer, p *plan, i int) *writer {
	d := p.docs[i]
	t := p.topics[d.topic]
	return &writer{buf: buf, r: newRNG(p.opt.Seed, uint64(i)+1), dom: domains[t.domain], t: t, d: d,
		now: p.opt.Now, xUses: make([]int, len(d.distinctive))}
}

func (w *writer) fill(tpl []part) {
	for _, p := range tpl {
		if p.slot == 0 {
			w.buf.WriteString(p.lit)
			continue
		}
		w.slot(p.slot)
	}
}

func (w *writer) slot(c byte) {
	r := w.r
	switch c {
	case 's':
		w.buf.WriteString(r.pick(shared))
	case 'd':
		w.buf.WriteString(r.pick(w.dom.words))
	case 't':
		w.buf.WriteString(r.pick(w.t.pool))
	case 'T':
		w.buf.WriteString(capitalize(r.pick(w.t.pool)))
	case 'x':
		if len(w.d.distinctive) == 0 {
			w.buf.WriteString(r.pick(w.t.pool))
			break
		}
		i := r.intn(len(w.d.distinctive))
		w.xUses[i]++
		w.buf.WriteString(w.d.distinctive[i])
	case 'v':
		w.buf.WriteString(r.pick(verbs))
	case 'V':
		w.buf.WriteString(capitalize(r.pick(verbs)))
	case 'n':
		w.buf.WriteString(r.pick(numbers))
	case 'k':
		w.buf.WriteString(r.pick(w.t.pool) + "_" + r.pick(shared))
	case 'c':
		w.buf.WriteString("`" + w.dom.tool + " " + r.pick(verbs) + " " + r.pick(w.t.pool) + " --" + r.pick(shared) + "`")
	case 'D':
		w.buf.WriteString(w.dom.name)
	case 'o':
		w.buf.WriteString("team-" + w.dom.name)
	}
}

func (w *writer) sentence() { w.fill(sentences[w.r.intn(len(sentences))]) }

func (w *writer) frontMatter(title string, tags []string, extra bool) {
	b := w.buf
	b.WriteString("---\ntitle: ")
	b.WriteString(strconv.Quote(title))
	b.WriteString("\ntags: [")
	b.WriteString(strings.Join(tags, ", "))
	b.WriteString("]\n")
	if extra {
		b.WriteString("related: [")
		b.WriteString(strings.Join(w.d.related, ", "))
		b.WriteString("]\nimportance: ")
		b.WriteString(strconv.Itoa(w.r.between(5, 98)))
		b.WriteString("\nmaturity: ")
		switch m := w.r.float(); {
		case m < 0.45:
			b.WriteString("draft")
		case m < 0.8:
			b.WriteString("validated")
		default:
			b.WriteString("core")
		}
		b.WriteString("\n")
	}
	b.WriteString("updated: ")
	b.WriteString(w.now.AddDate(0, 0, -w.r.intn(365)).Format(time.DateOnly))
	b.WriteString("\n")
	if extra && w.r.float() < 0.1 {
		b.WriteString("owner: team-" + w.dom.name + "\n")
	}
	b.WriteString("---\n")
}

func (w *writer) knowledge() {
	r := w.r
	tags := []string{w.dom.name, w.t.pool[6], r.pick(w.t.pool[:6])}
	w.frontMatter(w.d.title, tags, true)
	target := r.between(150, 740)
	b := w.buf
	w.scanned = b.Len()
	b.WriteString("# ")
	b.WriteString(w.d.title)
	b.WriteString("\n\nThis runbook covers ")
	b.WriteString(strings.ToLower(w.d.title))
	b.WriteString(" in the ")
	b.WriteString(w.dom.name + " " + strings.ReplaceAll(w.t.name, "-", " "))
	b.WriteString(" area. It applies to every ")
	b.WriteString(r.pick(shared))
	b.WriteString(" that uses ")
	for i, x := range w.d.distinctive {
		switch {
		case i == 0:
		case i == len(w.d.distinctive)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(x)
		w.xUses[i]++
	}
	b.WriteString(". ")
	for range r.between(1, 3) {
		w.sentence()
		b.WriteByte(' ')
	}
	b.WriteString("\n")
	order := r.sample(headings, len(headings))
	for sec := 0; w.count() < target; sec++ {
		b.WriteString("\n## ")
		b.WriteString(order[sec%len(order)])
		b.WriteString("\n\n")
		switch r.intn(4) {
		case 0: // paragraph
			for range w.sentencesFor(target, 3, 6) {
				w.sentence()
				b.WriteByte(' ')
			}
			b.WriteString("\n")
		case 1: // numbered steps
			for i := range w.sentencesFor(target, 3, 6) {
				b.WriteString(strconv.Itoa(i+1) + ". ")
				w.sentence()
				b.WriteString("\n")
			}
		case 2: // bullets
			for range w.sentencesFor(target, 3, 5) {
				b.WriteString("- ")
				w.sentence()
				b.WriteString("\n")
			}
		default: // config or commands, then a sentence that explains them
			w.codeBlock()
			w.sentence()
			b.WriteString("\n")
		}
	}
	// Every distinctive word must occur at least twice, or a known-item question built on
	// it would have only the opening line to hit.
	for i, x := range w.d.distinctive {
		if w.xUses[i] < 2 {
			b.WriteString("\nCheck ")
			b.WriteString(x)
			b.WriteString(" whenever you ")
			b.WriteString(r.pick(verbs))
			b.WriteString(" the ")
			b.WriteString(r.pick(w.t.pool) + " " + r.pick(shared))
			b.WriteString(".\n")
		}
	}
}

func (w *writer) codeBlock() {
	r, b := w.r, w.buf
	b.WriteString("```\n")
	if r.intn(2) == 0 {
		for range r.between(2, 4) {
			b.WriteString(w.dom.tool + " " + r.pick(verbs) + " ")
			if len(w.d.distinctive) > 0 && r.intn(3) == 0 {
				i := r.intn(len(w.d.distinctive))
				w.xUses[i]++
				b.WriteString(w.d.distinctive[i])
			} else {
				b.WriteString(r.pick(w.t.pool))
			}
			b.WriteString(" --" + r.pick(shared) + " " + r.pick(numbers) + "\n")
		}
	} else {
		b.WriteString(r.pick(w.t.pool) + ":\n")
		for range r.between(2, 5) {
			b.WriteString("  " + r.pick(w.t.pool) + "_" + r.pick(shared) + ": " + r.pick(numbers) + "\n")
		}
	}
	b.WriteString("```\n\n")
}

// stub writes a ghost cue of about 150 words: what the archived file held and why it left.
func (w *writer) stub() {
	r, b := w.r, w.buf
	w.frontMatter(w.d.title, []string{"archived", w.dom.name, w.t.pool[6]}, false)
	w.scanned = b.Len()
	b.WriteString("Archived ghost cue. This file used to describe ")
	b.WriteString(strings.ToLower(strings.TrimSuffix(w.d.title, " (archived)")))
	b.WriteString(" for the " + w.dom.name + " domain: ")
	for w.count() < 130 {
		w.sentence()
		b.WriteByte(' ')
	}
	b.WriteString("It was archived because the ")
	b.WriteString(r.pick(w.t.pool) + " " + r.pick(shared))
	b.WriteString(" it described was replaced; see the other documents in `")
	b.WriteString(w.dom.name + "/" + w.t.name + "/` for the current procedure.\n")
}
