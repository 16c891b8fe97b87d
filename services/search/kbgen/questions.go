package kbgen

import "strings"

// Question is a known-item question and the one file that answers it.
type Question struct {
	Query  string
	Expect string
}

var questionSrc = []string{
	"how do I {v} {x} in {t}",
	"how do I {v} {x} and {y} in the {t}",
	"what is {x} used for in {D} {t}",
	"where do I configure {x} for {t}",
	"{x} {y} {t} settings",
	"how does {x} affect the {t} in {D}",
}

// Questions returns up to n known-item questions, each naming one or two of a file's
// distinctive words with its topic and domain words, so exactly one file answers it.
// The same manifest, n and seed give the same questions.
func (m *Manifest) Questions(n int, seed int64) []Question {
	var pool []FileInfo
	for _, f := range m.Files {
		if len(f.Distinctive) > 0 {
			pool = append(pool, f)
		}
	}
	r := newRNG(seed, 1<<40)
	n = min(n, len(pool))
	out := make([]Question, 0, n)
	for i := range n {
		j := i + r.intn(len(pool)-i)
		pool[i], pool[j] = pool[j], pool[i]
		f := pool[i]
		segs := strings.Split(f.Path, "/")
		dom, top := segs[0], strings.ReplaceAll(segs[1], "-", " ")
		x := r.sample(f.Distinctive, 2)
		var b strings.Builder
		tpl := questionSrc[r.intn(len(questionSrc))]
		for tpl != "" {
			k := strings.IndexByte(tpl, '{')
			if k < 0 {
				b.WriteString(tpl)
				break
			}
			b.WriteString(tpl[:k])
			switch tpl[k+1] {
			case 'v':
				b.WriteString(r.pick(verbs))
			case 'x':
				b.WriteString(x[0])
			case 'y':
				b.WriteString(x[1])
			case 't':
				b.WriteString(top)
			case 'D':
				b.WriteString(dom)
			}
			tpl = tpl[k+3:]
		}
		out = append(out, Question{Query: b.String(), Expect: f.Path})
	}
	return out
}
