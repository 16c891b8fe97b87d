package kb

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/quarry-router/quarry/services/search/tree"
)

// maxWatchDelay bounds how long a stream of edits can hold back the ones already seen.
const maxWatchDelay = time.Second

// folderWatcher applies edits made in knowledge base folders.
type folderWatcher struct {
	w *fsnotify.Watcher
	// mu guards roots, folders and parents, which Load adds to while the watcher runs.
	mu    sync.Mutex
	roots map[string]string // absolute folder → knowledge base id
	// folders holds the folder each root named when it was last walked (os.Stat, so
	// through a root that is a link): a root swapped for another folder (a link
	// replaced, as git-sync publishes a checkout, or a folder renamed into its place)
	// is told by a folder that is no longer the same file.
	folders map[string]os.FileInfo
	// parents holds the folders that hold a root, watched to see a root swapped: the
	// watches below a root stay on the folder it named before.
	parents map[string]bool
	// gone holds the roots their parent reported removed or renamed away: a folder put
	// back there is another one, though the file system may give it the same inode
	// (ext4 reuses a freed one at once), which os.SameFile takes for the same folder.
	gone map[string]bool
	// watched holds the folders walk watches (by the paths events come under): a path
	// it does not hold (a file, most removals) has no watch below it to drop, and
	// unwatch need not scan every watch for one. Scanned for each removed file, 10,000
	// removals (rm -r, a branch switch) of a tree of 5,000 folders took 6.2 s (5 ms now).
	watched map[string]bool
	// catchUp holds the knowledge bases whose watch began after their folder was read
	// (Load reads it, then the watch is added): what changed in between made no event,
	// and no rescan sees it either (the first only records). The loop reads each whole
	// once, as after a swap; unchanged files change nothing. caught signals it.
	catchUp map[string]bool
	caught  chan struct{}
	// addWatch watches one folder: w.Add, but for tests of a full watch table.
	addWatch func(name string) error
}

// WatchFolders watches the folder of every knowledge base, present and future, until ctx
// is done, and applies edits made there as writes: a changed file is re-indexed, a
// removed one removed, each burst of edits (settled for WriteConfig.WatchDebounce, at
// most a second) one generation. The service's own writes show up as events too and
// change nothing, since the files already hold what the snapshot indexed. An edit the
// loader would refuse (bad front matter, too large) leaves the indexed version in place
// and is logged. The folders are watched when WatchFolders returns; wait returns once the
// watcher has stopped after ctx is done.
func (r *Registry) WatchFolders(ctx context.Context) (wait func(), err error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	fw := newFolderWatcher(w)
	r.loadMu.Lock()
	r.watcher = fw
	r.mu.RLock()
	for id, k := range r.kbs {
		fw.add(id, k.Tree.Root, r)
	}
	r.mu.RUnlock()
	r.loadMu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer func() {
			r.loadMu.Lock()
			r.watcher = nil
			r.loadMu.Unlock()
			_ = w.Close()
		}()
		r.watchLoop(ctx, fw)
	}()
	return func() { <-done }, nil
}

func newFolderWatcher(w *fsnotify.Watcher) *folderWatcher {
	return &folderWatcher{w: w, roots: map[string]string{}, folders: map[string]os.FileInfo{}, parents: map[string]bool{}, gone: map[string]bool{},
		watched: map[string]bool{}, catchUp: map[string]bool{}, caught: make(chan struct{}, 1), addWatch: w.Add}
}

func (r *Registry) watchLoop(ctx context.Context, fw *folderWatcher) {
	w := fw.w
	pending := map[string]map[string]bool{} // id → relative paths
	queue := func(id string, paths ...string) {
		if pending[id] == nil {
			pending[id] = map[string]bool{}
		}
		for _, p := range paths {
			pending[id][p] = true
		}
	}
	var quiet <-chan time.Time
	var first time.Time
	// swapCheck is set by an event in a folder holding a root: the next flush looks for
	// roots that name another folder now.
	swapCheck := false
	arm := func() {
		if first.IsZero() {
			first = time.Now()
		}
		wait := r.cfg.Write.WatchDebounce
		if left := maxWatchDelay - time.Since(first); left < wait {
			wait = max(0, left)
		}
		quiet = time.After(wait)
	}
	flush := func() {
		if swapCheck {
			swapCheck = false
			for id, paths := range fw.swapped(r) {
				// Everything the new folder holds and everything indexed from the old
				// one, by their top-level names: applyEdits reads each folder whole and
				// drops what is gone.
				queue(id, paths...)
			}
		}
		retry := false
		for id, set := range pending {
			paths := make([]string, 0, len(set))
			for p := range set {
				paths = append(paths, p)
			}
			sort.Strings(paths)
			_, err := r.applyEdits(ctx, id, paths)
			if err == nil || ctx.Err() != nil {
				delete(pending, id)
				continue
			}
			r.log.Warn("apply folder edits", "kb", id, "err", err)
			if lasting(err) {
				// Retried each second, it was a warning a second for as long as it
				// lasted.
				delete(pending, id)
				continue
			}
			// The events are gone once read: the edits stay pending, or they would be
			// lost until the files change again.
			retry = true
		}
		quiet, first = nil, time.Time{}
		if retry {
			first = time.Now()
			quiet = time.After(maxWatchDelay)
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			r.log.Warn("folder watcher", "err", err)
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				fw.overflowed(r)
			}
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if fw.isParent(filepath.Dir(ev.Name)) {
				if ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename) {
					fw.rootGone(ev.Name)
				}
				swapCheck = true
				arm()
			}
			id, rel, ok := fw.locate(ev.Name)
			if !ok || hidden(rel) {
				continue
			}
			if ev.Has(fsnotify.Rename) || ev.Has(fsnotify.Remove) {
				fw.unwatch(ev.Name)
			}
			if ev.Has(fsnotify.Create) {
				if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
					fw.walk(ev.Name, id, r)
				}
			}
			queue(id, rel)
			arm()
		case <-fw.caught:
			fw.mu.Lock()
			ids := fw.catchUp
			fw.catchUp = map[string]bool{}
			fw.mu.Unlock()
			for id := range ids {
				if k, err := r.Get(id); err == nil {
					queue(id, topLevel(k, k.Tree.Root)...)
				}
			}
			arm()
		case <-quiet:
			flush()
		}
	}
}

// overflowed follows the kernel's event queue overflowing (a burst of edits past its
// 16,384 events): the events dropped may have created folders, which nothing watches
// then, and edits nothing will report. Every knowledge base's folder is walked again
// (watching what it lacks) and read whole once, as when its watch began.
func (fw *folderWatcher) overflowed(r *Registry) {
	fw.mu.Lock()
	roots := maps.Clone(fw.roots)
	fw.mu.Unlock()
	for abs, id := range roots {
		fw.walk(abs, id, r)
		fw.requestCatchUp(id)
	}
}

// requestCatchUp asks the loop to read the folder of id whole once (catchUp).
func (fw *folderWatcher) requestCatchUp(id string) {
	fw.mu.Lock()
	fw.catchUp[id] = true
	fw.mu.Unlock()
	select {
	case fw.caught <- struct{}{}:
	default: // already signalled
	}
}

// add watches a knowledge base's folder and its subfolders.
func (fw *folderWatcher) add(id, root string, r *Registry) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return
	}
	fi, _ := os.Stat(abs)
	parent := filepath.Dir(abs)
	fw.mu.Lock()
	fw.roots[abs] = id
	fw.folders[abs] = fi
	watchParent := !fw.parents[parent]
	fw.parents[parent] = true
	fw.mu.Unlock()
	if watchParent {
		if err := fw.addWatch(parent); err != nil {
			r.log.Warn("watch the folder holding a knowledge base (a swap of its folder is found by rescans only)", "kb", id, "dir", parent, "err", err)
		}
	}
	fw.walk(abs, id, r)
	fw.requestCatchUp(id)
}

// walk watches dir and the folders below it, links and hidden folders excluded, as the
// loader skips them. dir itself may be a link (a knowledge base's root, which the loader
// follows): the folders are watched by their paths through it, under which events come.
// Past the kernel's limit on watches, the folders left are counted, not tried, and one
// warning says so: each folder's own warning was thousands of lines for a large tree.
func (fw *folderWatcher) walk(dir, id string, r *Registry) {
	unwatched := 0
	defer func() {
		if unwatched == 0 {
			return
		}
		then := "applied by the -watch-poll rescans only"
		if r.cfg.Write.WatchPoll <= 0 {
			then = "not applied at all (-watch-poll is 0)"
		}
		r.log.Warn("inotify watch limit reached (raise the fs.inotify.max_user_watches sysctl, which every process of this user on the node shares): edits in the folders left unwatched are "+then,
			"kb", id, "dir", dir, "unwatched", unwatched)
	}()
	src := dir
	if fi, err := os.Lstat(dir); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
		target, err := filepath.EvalSymlinks(dir)
		if err != nil {
			r.log.Warn("watch folder", "kb", id, "dir", dir, "err", err)
			return
		}
		src = target
	}
	_ = filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		if p != src && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		name := dir
		if p != src {
			rel, err := filepath.Rel(src, p)
			if err != nil {
				return nil
			}
			name = filepath.Join(dir, rel)
		}
		if unwatched > 0 {
			unwatched++
			return nil
		}
		if err := fw.addWatch(name); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				unwatched++
				return nil
			}
			r.log.Warn("watch folder", "kb", id, "dir", name, "err", err)
			return nil
		}
		fw.mu.Lock()
		fw.watched[name] = true
		fw.mu.Unlock()
		return nil
	})
}

// rootGone records that name, if it is a knowledge base's root, was removed or renamed.
func (fw *folderWatcher) rootGone(name string) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if _, ok := fw.roots[name]; ok {
		fw.gone[name] = true
	}
}

// isParent reports whether dir holds a knowledge base's root.
func (fw *folderWatcher) isParent(dir string) bool {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	return fw.parents[dir]
}

// swapped finds the roots that name another folder than when they were walked, watches
// the new folder in place of the old one, and returns for each knowledge base swapped
// the paths that bring its index in line with the new folder: the top-level names of
// what it indexed and of what the folder holds.
func (fw *folderWatcher) swapped(r *Registry) map[string][]string {
	type root struct {
		abs, id string
		was     os.FileInfo
		gone    bool
	}
	fw.mu.Lock()
	roots := make([]root, 0, len(fw.roots))
	for abs, id := range fw.roots {
		roots = append(roots, root{abs, id, fw.folders[abs], fw.gone[abs]})
	}
	fw.mu.Unlock()
	out := map[string][]string{}
	for _, rt := range roots {
		now, err := os.Stat(rt.abs)
		if err != nil || !now.IsDir() || (!rt.gone && rt.was != nil && os.SameFile(rt.was, now)) {
			continue // gone for now (a link being replaced), or the same folder
		}
		fw.mu.Lock()
		fw.folders[rt.abs] = now
		delete(fw.gone, rt.abs)
		fw.mu.Unlock()
		fw.unwatch(rt.abs)
		fw.walk(rt.abs, rt.id, r)
		r.log.Info("knowledge base folder swapped", "kb", rt.id, "root", rt.abs)
		if k, err := r.Get(rt.id); err == nil {
			out[rt.id] = topLevel(k, rt.abs)
		}
	}
	return out
}

// topLevel returns the top-level names of what k indexed or refused (which it counts
// until they are gone) and of what the folder dir holds: applyEdits of them reads the
// folder whole and drops what is gone.
func topLevel(k *KB, dir string) []string {
	top := map[string]bool{}
	for _, d := range k.Tree.Docs {
		first, _, _ := strings.Cut(d.Path, "/")
		top[first] = true
	}
	for _, p := range k.Tree.Refused() {
		first, _, _ := strings.Cut(p, "/")
		top[first] = true
	}
	if entries, err := os.ReadDir(dir); err == nil {
		for _, e := range entries {
			if !strings.HasPrefix(e.Name(), ".") {
				top[e.Name()] = true
			}
		}
	}
	return slices.Sorted(maps.Keys(top))
}

// unwatch stops watching a folder that was renamed or removed, and the folders below it.
// inotify keeps a watch on a folder moved inside the tree, and fsnotify keeps its old
// path: the walk of the new path would get that watch back, stale path and all, and
// every later edit in it would be reported under the old path.
func (fw *folderWatcher) unwatch(dir string) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	if !fw.watched[dir] {
		return // walk watches a folder's parent first: nothing below dir is watched
	}
	for _, p := range fw.w.WatchList() {
		if p == dir || strings.HasPrefix(p, dir+string(filepath.Separator)) {
			_ = fw.w.Remove(p) // a watch the kernel already dropped with its folder
			delete(fw.watched, p)
		}
	}
}

// locate returns the knowledge base and relative path of an event's file.
func (fw *folderWatcher) locate(name string) (id, rel string, ok bool) {
	fw.mu.Lock()
	defer fw.mu.Unlock()
	best := ""
	for root, kid := range fw.roots {
		if (name == root || strings.HasPrefix(name, root+string(filepath.Separator))) && len(root) > len(best) {
			best, id = root, kid
		}
	}
	if best == "" || name == best {
		return "", "", false
	}
	rel, err := filepath.Rel(best, name)
	if err != nil {
		return "", "", false
	}
	return id, filepath.ToSlash(rel), true
}

func hidden(rel string) bool {
	for _, s := range strings.Split(rel, "/") {
		if strings.HasPrefix(s, ".") {
			return true
		}
	}
	return false
}

// lasting reports an error of applyEdits that trying the same edits again cannot mend:
// the knowledge base was unloaded, its folder holds more files than it may, or the
// folder is gone (read whole when it is back: a swap, a rescan). Only a change in the
// folder can.
func lasting(err error) bool {
	return errors.Is(err, ErrUnknownKB) || errors.Is(err, tree.ErrTooManyFiles) || errors.Is(err, errFolderGone)
}

// errFolderGone marks edits of a knowledge base whose folder is gone: there is nothing
// to read them from until the folder is back, and then it is read whole (a swap, or the
// next rescan).
var errFolderGone = errors.New("the knowledge base's folder is gone; the indexed version stays until it is back")

// openEdited opens the folder of a knowledge base to read its edits. Not tree.OpenDir,
// which creates the folder for a write: the removals of a folder's files reported as
// it was removed (rm -r, a team's folder taken out of -kb-root) made it again, empty.
func openEdited(root string) (*tree.Dir, error) {
	dir, err := tree.OpenExisting(root)
	if errors.Is(err, tree.ErrNotFound) {
		return nil, fmt.Errorf("%w: %w", errFolderGone, err)
	}
	return dir, err
}

// applyEdits brings the index in line with what the folder now holds at paths (files or
// folders, relative to the knowledge base root).
func (r *Registry) applyEdits(ctx context.Context, id string, paths []string) (*WriteResult, error) {
	return r.writeIn(ctx, id, false, openEdited, func(cur *KB, dir *tree.Dir) (*plan, error) {
		p := &plan{}
		seen := map[string]bool{}
		seenRefused := map[string]bool{}
		remove := func(path string) {
			// A file the loader refused counts too: gone, it no longer does.
			if cur.Tree.Counts(path) && !seen[path] {
				seen[path] = true
				p.ops = append(p.ops, op{path: path, onDisk: true})
				p.files = append(p.files, FileResult{Path: path, Outcome: Removed})
			}
		}
		under := func(folder string) []string {
			var out []string
			for _, d := range cur.Tree.Docs {
				if strings.HasPrefix(d.Path, folder+"/") {
					out = append(out, d.Path)
				}
			}
			for _, f := range cur.Tree.Refused() {
				if strings.HasPrefix(f, folder+"/") {
					out = append(out, f)
				}
			}
			return out
		}
		// refuse records a new file the loader would refuse (unreadable, too large, bad
		// front matter): Load counts it toward -kb-max-files, so the snapshot does, and
		// DeleteFile or a full sync can take it away. A file indexed before keeps its
		// indexed version.
		refuse := func(rel string) {
			clean, err := tree.CheckFilePath(rel, r.cfg.Tree)
			if err != nil || seenRefused[clean] || tree.IsArchivedOriginal(clean) || cur.Tree.Counts(clean) {
				return
			}
			seenRefused[clean] = true
			p.ops = append(p.ops, op{path: clean, onDisk: true, refused: true})
		}
		file := func(rel string, data []byte, mtime time.Time) {
			if seen[rel] || tree.IsArchivedOriginal(rel) {
				return
			}
			seen[rel] = true
			clean, err := tree.CheckFilePath(rel, r.cfg.Tree)
			if err != nil {
				return
			}
			prev := cur.Tree.ByPath[clean]
			if prev != nil && prev.Hash == hash(data) {
				return
			}
			doc, err := tree.ParseFile(cur.Tree.Root, clean, data, mtime, r.cfg.Tree)
			if err != nil {
				r.log.Warn("edited file refused; the indexed version stays", "kb", id, "path", clean, "err", err)
				refuse(clean)
				return
			}
			p.ops = append(p.ops, op{path: clean, data: data, doc: doc, onDisk: true})
			p.files = append(p.files, FileResult{Path: clean, Outcome: Indexed})
			if prev != nil {
				p.curations = append(p.curations, clean)
			}
		}
		// drop removes rel and what was under it: it is no longer a file or folder the
		// loader would reach.
		drop := func(rel string) {
			remove(rel)
			for _, d := range under(rel) {
				remove(d)
			}
		}
		for _, rel := range paths {
			fi, err := dir.Lstat(rel)
			switch {
			case err != nil && (lost(err) || throughNonFolder(dir, rel)):
				drop(rel)
			case errors.Is(err, fs.ErrPermission):
				r.log.Warn("edited path unreadable; the indexed version stays", "kb", id, "path", rel, "err", err)
			case err != nil:
				return nil, err
			case fi.IsDir():
				files, skips, err := dir.ReadFiles(ctx, rel, r.cfg.Tree)
				switch {
				case err != nil && lost(err):
					drop(rel)
					continue
				case errors.Is(err, fs.ErrPermission):
					r.log.Warn("edited folder unreadable; the indexed version stays", "kb", id, "path", rel, "err", err)
					continue
				case err != nil:
					return nil, err
				}
				have := map[string]bool{}
				for _, f := range files {
					full := path.Join(rel, f.Path)
					have[full] = true
					file(full, f.Data, f.ModTime)
				}
				for _, s := range skips {
					if s.Refused {
						full := path.Join(rel, s.Path)
						have[full] = true
						refuse(full)
					}
				}
				for _, d := range under(rel) {
					if !have[d] {
						remove(d)
					}
				}
			case !fi.Mode().IsRegular():
				drop(rel) // the loader skips links and special files, and what is under a link
			case strings.HasSuffix(rel, ".md"):
				data, _, err := dir.Read(rel, r.cfg.Tree.MaxFileBytes)
				if err != nil && lost(err) {
					drop(rel)
					continue
				}
				if err != nil {
					r.log.Warn("edited file unreadable; the indexed version stays", "kb", id, "path", rel, "err", err)
					if !errors.Is(err, tree.ErrSymlink) && !errors.Is(err, tree.ErrNotKnowledgeFile) {
						refuse(rel)
					}
					continue
				}
				file(rel, data, fi.ModTime())
			}
		}
		sort.Slice(p.files, func(i, j int) bool { return p.files[i].Path < p.files[j].Path })
		return p, nil
	})
}

// lost reports whether err, met looking up a path of the tree, means the path is no
// longer a file or folder the loader would reach: missing, or through a file or a link.
func lost(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) || errors.Is(err, syscall.ELOOP) ||
		errors.Is(err, tree.ErrSymlink) || errors.Is(err, tree.ErrNotKnowledgeFile)
}

// throughNonFolder reports whether a folder on the way to rel is a link or a file. os.Root
// refuses a path through a link out of the tree with an error no errors.Is matches
// ("path escapes from parent"), so the way is checked one folder at a time.
func throughNonFolder(dir *tree.Dir, rel string) bool {
	for i := range len(rel) {
		if rel[i] != '/' {
			continue
		}
		fi, err := dir.Lstat(rel[:i])
		if err != nil {
			return lost(err)
		}
		if !fi.IsDir() {
			return true
		}
	}
	return false
}
