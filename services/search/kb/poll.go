package kb

import (
	"context"
	"errors"
	"io/fs"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/quarry-router/quarry/platform/workers"
	"github.com/quarry-router/quarry/services/search/tree"
)

// stamp is what a rescan compares a file by: an edit changes its size or its
// modification time.
type stamp struct {
	size  int64
	mtime time.Time
}

// PollFolders rescans the folder of every knowledge base each interval and applies the
// files that were added, removed, or changed in size or modification time since the
// previous rescan, like the watcher's edits (one generation per knowledge base and
// rescan; a file whose bytes did not change changes nothing). It is for the edits
// WatchFolders cannot see: a folder on a network volume (NFS, a ReadOnlyMany volume
// written by another machine) raises no inotify events here, and an overflowing event
// queue drops some. The first rescan only records the folders present when PollFolders
// returns (the watcher reads each whole once as its watch begins); a knowledge base
// loaded later (-kb-root's rescan) is read whole by the first rescan that sees it. A
// rescan reads directory entries and their metadata, never a file's content. wait
// returns once the poller has stopped after ctx is done.
func (r *Registry) PollFolders(ctx context.Context, interval time.Duration) (wait func()) {
	seen := map[string]folderStamps{} // knowledge base and folder → its stamps
	r.rescan(ctx, seen, true)
	return workers.Every(ctx, interval, func() { r.rescan(ctx, seen, false) })
}

// folderStamps is what a rescan found in a knowledge base's folder.
type folderStamps struct {
	// target is the folder the knowledge base's root named then: the root itself, or
	// where it led when it is a link (git-sync's checkout, a "current" link).
	target string
	files  map[string]stamp
	// whole: the folder is to be read whole at its next change. Its edits, or its whole
	// read, failed for a lasting reason (more files than -kb-max-files), which trying
	// again at every rescan cannot mend; taking the stamps as read would lose the edits
	// that failed.
	whole bool
}

// rescan walks every knowledge base's folder once and applies what changed since seen.
// A knowledge base seen for the first time is only recorded by the initial rescan;
// later, it is one loaded since (or from another folder), and what changed between its
// load and now made no event on a network volume: it is read whole once.
func (r *Registry) rescan(ctx context.Context, seen map[string]folderStamps, initial bool) {
	r.mu.RLock()
	roots := make(map[string]string, len(r.kbs))
	kbs := make(map[string]*KB, len(r.kbs))
	for id, k := range r.kbs {
		roots[id] = k.Tree.Root
		kbs[id] = k
	}
	r.mu.RUnlock()
	// A knowledge base is followed in its folder: unloaded, or loaded from another
	// folder, it starts afresh.
	key := func(id, root string) string { return id + "\x00" + root }
	for k := range seen {
		id, root, _ := strings.Cut(k, "\x00")
		if roots[id] != root {
			delete(seen, k)
		}
	}
	for id, root := range roots {
		if ctx.Err() != nil {
			return
		}
		// The loader follows a root that is a link (never one below it), and so does
		// the rescan: walking the link itself found no file at all.
		target, err := filepath.EvalSymlinks(root)
		if err != nil {
			r.log.Warn("rescan knowledge base folder", "kb", id, "err", err)
			continue
		}
		files, err := stampFolder(target)
		if err != nil {
			r.log.Warn("rescan knowledge base folder", "kb", id, "err", err)
			continue
		}
		now := folderStamps{target: target, files: files}
		before, known := seen[key(id, root)]
		if !known && initial {
			seen[key(id, root)] = now
			continue
		}
		var changed []string
		readWhole := !known || before.whole
		if before.whole && before.target == now.target && len(changedFiles(before.files, now.files)) == 0 {
			continue // nothing changed since its whole read failed for a lasting reason
		}
		switch {
		case readWhole:
			// Loaded since the last rescan, whose stamps it lacks, or its whole read
			// failed (whole): every file may differ from what the load read (a sync job
			// still copying the folder then), and applyEdits of the top-level names
			// reads the folder whole and drops what is gone. Those with the same bytes
			// change nothing.
			changed = topLevel(kbs[id], target)
		case before.target != now.target:
			// The link now names another folder: every file may differ, whatever its
			// stamp (a copy keeps modification times). Those with the same bytes
			// change nothing.
			changed = allFiles(before.files, now.files)
		default:
			changed = changedFiles(before.files, now.files)
		}
		if len(changed) == 0 {
			seen[key(id, root)] = now // a new empty folder: recorded, not read again
			continue
		}
		if _, err := r.applyEdits(ctx, id, changed); err != nil {
			if ctx.Err() == nil {
				r.log.Warn("apply folder edits found by rescan", "kb", id, "err", err)
			}
			if errors.Is(err, tree.ErrTooManyFiles) {
				// Read whole or not, these edits fail until the folder changes: then it
				// is read whole, and they are applied with the rest. Not the other
				// lasting errors: a folder gone may come back as it was, these edits
				// still to apply, which waiting for a change would leave undone; a
				// knowledge base unloaded is forgotten by the next rescan.
				seen[key(id, root)] = folderStamps{target: now.target, files: now.files, whole: true}
			}
			// Otherwise the stamps seen before stay, so the next rescan finds these
			// edits again rather than losing them.
			continue
		}
		seen[key(id, root)] = now
	}
}

// stampFolder returns the stamp of every regular file below root, by slash-separated
// path relative to it. Hidden files and folders and symbolic links are left out, as the
// loader leaves them out; links are not followed.
func stampFolder(root string) (map[string]stamp, error) {
	out := map[string]stamp{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return err
			}
			return nil // a file removed mid-walk: the next rescan settles it
		}
		if p != root && strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return nil
		}
		out[filepath.ToSlash(rel)] = stamp{size: fi.Size(), mtime: fi.ModTime()}
		return nil
	})
	return out, err
}

// changedFiles lists, sorted, the files added, removed or restamped from before to now.
func changedFiles(before, now map[string]stamp) []string {
	var out []string
	for p, s := range now {
		if b, ok := before[p]; !ok || b.size != s.size || !b.mtime.Equal(s.mtime) {
			out = append(out, p)
		}
	}
	for p := range before {
		if _, ok := now[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

// allFiles lists, sorted, every file of before and now.
func allFiles(before, now map[string]stamp) []string {
	out := make([]string, 0, len(now))
	for p := range now {
		out = append(out, p)
	}
	for p := range before {
		if _, ok := now[p]; !ok {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}
