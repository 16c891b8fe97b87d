package kbgen

import "math/bits"

// rng is a splitmix64 generator. It is written out here rather than taken from math/rand so
// that a seed produces the same tree on every Go version: benchmarks and evaluation sets are
// compared across releases.
type rng struct{ s uint64 }

func newRNG(seed int64, stream uint64) *rng {
	r := &rng{s: uint64(seed) ^ (stream * 0x9e3779b97f4a7c15)}
	r.next() // decorrelate neighbouring streams
	return r
}

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0,n); the multiply-shift reduction's bias is far below anything a
// synthetic corpus could show.
func (r *rng) intn(n int) int {
	if n <= 0 {
		return 0
	}
	hi, _ := bits.Mul64(r.next(), uint64(n))
	return int(hi)
}

// between returns a number in [lo,hi].
func (r *rng) between(lo, hi int) int { return lo + r.intn(hi-lo+1) }

func (r *rng) float() float64 { return float64(r.next()>>11) / (1 << 53) }

func (r *rng) pick(words []string) string { return words[r.intn(len(words))] }

// sample returns k distinct elements of words (all of them if k >= len(words)).
func (r *rng) sample(words []string, k int) []string {
	idx := make([]int, len(words))
	for i := range idx {
		idx[i] = i
	}
	if k > len(idx) {
		k = len(idx)
	}
	out := make([]string, k)
	for i := 0; i < k; i++ {
		j := i + r.intn(len(idx)-i)
		idx[i], idx[j] = idx[j], idx[i]
		out[i] = words[idx[i]]
	}
	return out
}
