// Package reload keeps a value read from files up to date with them: certificates, CA
// bundles and API keys are rotated by replacing files (cert-manager, a Kubernetes
// Secret's volume) while the processes that read them keep running.
package reload

import (
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Value is a value parsed from files, parsed again when one of them changes. Files that
// fail to parse (a rotation caught half-written, a bad edit) leave the previous value in
// use, and are tried again at each look until they parse.
type Value[T any] struct {
	files []string
	parse func() (T, error)
	// Every is the least time between two looks at the files (a stat each): 0 looks at
	// every Get. Set it before the first Get.
	Every time.Duration
	// OnChange, if set, is called after each parse of changed files, with its error.
	// Set it before the first Get.
	OnChange func(error)

	next atomic.Int64 // when the files may be looked at again, in Unix nanoseconds

	mu     sync.Mutex
	val    atomic.Pointer[T]
	stamps []stamp // of the files val was parsed from
	failed []stamp // of the files that last failed to parse
}

// New parses the files once with parse, which reads them; an error is parse's.
func New[T any](parse func() (T, error), files ...string) (*Value[T], error) {
	v := &Value[T]{files: files, parse: parse}
	st := v.stamp()
	val, err := parse()
	if err != nil {
		return nil, err
	}
	v.val.Store(&val)
	v.stamps = st
	return v, nil
}

// Get returns the current value, first parsing the files again if it is time to look
// at them and one changed.
func (v *Value[T]) Get() T {
	if v.Claim() {
		v.Refresh()
	}
	return *v.val.Load()
}

// Peek returns the current value without looking at the files: for callers that must
// not wait on the file system (a connection's reader goroutine). With Claim and Refresh
// they can hand the look to a goroutine that may.
func (v *Value[T]) Peek() T { return *v.val.Load() }

// Claim reports whether it is time to look at the files, and takes the look for the
// caller that gets true: one caller per Every, which should then call Refresh (a Get
// before that does not look).
func (v *Value[T]) Claim() bool {
	now := time.Now().UnixNano()
	next := v.next.Load()
	return now >= next && v.next.CompareAndSwap(next, now+int64(v.Every))
}

// Refresh looks at the files now, parsing them again if one changed.
func (v *Value[T]) Refresh() {
	v.mu.Lock()
	defer v.mu.Unlock()
	st := v.stamp()
	if slices.EqualFunc(st, v.stamps, stamp.same) {
		return
	}
	val, err := v.parse()
	if err != nil {
		// Parsed again at the next look (the rest of a rotation may be on its way, in
		// files whose stamps have not moved yet), told once.
		if !slices.EqualFunc(st, v.failed, stamp.same) && v.OnChange != nil {
			v.OnChange(err)
		}
		v.failed = st
		return
	}
	v.val.Store(&val)
	v.stamps, v.failed = st, nil
	if v.OnChange != nil {
		v.OnChange(nil)
	}
}

func (v *Value[T]) stamp() []stamp {
	st := make([]stamp, len(v.files))
	for i, f := range v.files {
		if fi, err := os.Stat(f); err == nil {
			st[i] = stamp{fi}
		}
	}
	return st
}

// stamp tells one version of a file from the next: a file put in place of another (as
// the kubelet updates a Secret's volume, through a renamed folder) is another file even
// when its size and modification time, whose clock ticks every few milliseconds, are the
// same.
type stamp struct {
	info os.FileInfo // nil when the file cannot be read
}

func (s stamp) same(o stamp) bool {
	if s.info == nil || o.info == nil {
		return s.info == nil && o.info == nil
	}
	return os.SameFile(s.info, o.info) && s.info.ModTime().Equal(o.info.ModTime()) && s.info.Size() == o.info.Size()
}
