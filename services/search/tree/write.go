package tree

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Errors returned by the write side.
var (
	// ErrNotKnowledgeFile means a path cannot hold a knowledge file: not ending in ".md",
	// hidden, too deep, or the root itself.
	ErrNotKnowledgeFile = errors.New("not a knowledge file path")
	// ErrSymlink means a path runs through or ends at a symbolic link; the loader never
	// follows links, so nothing is written through one.
	ErrSymlink = errors.New("symbolic link in path")
	// ErrRejected means a file's bytes cannot be loaded (size, encoding, front matter);
	// the message says why.
	ErrRejected = errors.New("file rejected")
	// ErrReadOnly means the tree's folder cannot be written.
	ErrReadOnly = errors.New("knowledge base folder is not writable")
)

// IsArchivedOriginal reports whether p is the full text of an archived file,
// <folder>/_archived/<name>.md, which is kept beside its ghost cue but never indexed.
func IsArchivedOriginal(p string) bool {
	return path.Base(path.Dir(p)) == archiveDir && strings.HasSuffix(p, mdSuffix) && !strings.HasSuffix(p, stubSuffix)
}

// IsStub reports whether p is an archived ghost cue, <folder>/_archived/<name>.stub.md.
func IsStub(p string) bool {
	return path.Base(path.Dir(p)) == archiveDir && strings.HasSuffix(p, stubSuffix)
}

// IsSummary reports whether p is a folder summary (_index.md).
func IsSummary(p string) bool { return path.Base(p) == indexName }

// ArchivePaths returns where archiving the knowledge file p puts its ghost cue and its
// full text: "a/b.md" → "a/_archived/b.stub.md", "a/_archived/b.md".
func ArchivePaths(p string) (stub, original string) {
	dir, name := path.Split(p)
	base := strings.TrimSuffix(name, mdSuffix)
	return dir + archiveDir + "/" + base + stubSuffix, dir + archiveDir + "/" + base + mdSuffix
}

// RestorePath returns the path an archived file goes back to, from its ghost cue or its
// kept full text: "a/_archived/b.stub.md" or "a/_archived/b.md" → "a/b.md". ok is false
// for any other path.
func RestorePath(p string) (string, bool) {
	if !IsStub(p) && !IsArchivedOriginal(p) {
		return "", false
	}
	dir := path.Dir(path.Dir(p))
	name := strings.TrimSuffix(strings.TrimSuffix(path.Base(p), stubSuffix), mdSuffix)
	if dir == "." {
		return name + mdSuffix, true
	}
	return dir + "/" + name + mdSuffix, true
}

// CheckFilePath validates a user-supplied path of a file to write and returns it clean.
// Beyond CleanPath's rules it must name a markdown file the loader would load: ending in
// ".md", no hidden segment, no deeper than cfg.MaxDepth folders.
func CheckFilePath(p string, cfg Config) (string, error) {
	c, err := CleanPath(p)
	if err != nil {
		return "", err
	}
	if c == "" {
		return "", fmt.Errorf("%w: empty path", ErrNotKnowledgeFile)
	}
	if !strings.HasSuffix(c, mdSuffix) || c == mdSuffix {
		return "", fmt.Errorf("%w: %q does not end in %s", ErrNotKnowledgeFile, c, mdSuffix)
	}
	segs := strings.Split(c, "/")
	for _, s := range segs {
		if strings.HasPrefix(s, hiddenStart) {
			return "", fmt.Errorf("%w: %q has a hidden segment", ErrNotKnowledgeFile, c)
		}
	}
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if len(segs)-1 > cfg.MaxDepth {
		return "", fmt.Errorf("%w: %q is deeper than %d folders", ErrNotKnowledgeFile, c, cfg.MaxDepth)
	}
	return c, nil
}

// ParseFile builds the Document a knowledge base would load from a file's bytes, with
// Load's limits: size, UTF-8, no NUL bytes, front matter. root is the tree's folder (it
// names the root summary). A refusal wraps ErrRejected.
func ParseFile(root, p string, data []byte, mtime time.Time, cfg Config) (*Document, error) {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if int64(len(data)) > cfg.MaxFileBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrRejected, len(data), cfg.MaxFileBytes)
	}
	d, _, err := parseDocument(p, data, mtime, rootName(root), cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRejected, err)
	}
	return d, nil
}

// With returns a new tree: t with the documents of upserts added or replacing those of the
// same path, and the paths of deletes removed. t is unchanged. Skips recorded for the
// paths written or removed are dropped. refused names files in the folder, not loaded,
// that the loader refuses: counted by Files, as Load counts them, until deleted.
func (t *Tree) With(upserts []*Document, deletes []string, refused ...string) *Tree {
	gone := make(map[string]bool, len(upserts)+len(deletes))
	for _, p := range deletes {
		gone[p] = true
	}
	for _, d := range upserts {
		gone[d.Path] = true
	}
	docs := make([]*Document, 0, len(t.Docs)+len(upserts))
	for _, d := range t.Docs {
		if !gone[d.Path] {
			docs = append(docs, d)
		}
	}
	seen := make(map[string]bool, len(upserts))
	for _, d := range upserts {
		if !seen[d.Path] {
			seen[d.Path] = true
			docs = append(docs, d)
		}
	}
	var skipped []Skip
	for _, s := range t.Skipped {
		if !gone[s.Path] {
			skipped = append(skipped, s)
		}
	}
	out := newTree(t.Root, docs, skipped)
	for p := range t.refused {
		if !gone[p] {
			if out.refused == nil {
				out.refused = map[string]bool{}
			}
			out.refused[p] = true
		}
	}
	for _, p := range refused {
		if _, ok := out.ByPath[p]; ok {
			continue
		}
		if out.refused == nil {
			out.refused = map[string]bool{}
		}
		out.refused[p] = true
	}
	return out
}

// Dir writes files of a tree's folder. Every path goes through an os.Root, so nothing is
// written outside the folder, and a path through a symbolic link is refused with
// ErrSymlink. Files are replaced atomically (written beside, then renamed over), so a
// reader sees the old bytes or the new, never half a file.
type Dir struct {
	root *os.Root
	path string
	// folders are the folders already checked to be real folders (no links), so a
	// write of many files checks each folder once. Guarded by mu: a Dir may be written
	// from several goroutines.
	mu      sync.Mutex
	folders map[string]bool
	// created are the folders Write made, so that an undone write can take them away
	// again: an empty folder left behind would refuse a later file of the same name.
	created []string
	// lazy, when set, writes without an fsync per file; Sync makes them durable at once.
	lazy bool
	// onSync, when set (by tests), is told each folder syncFolder syncs.
	onSync func(folder string)
}

// OpenDir opens a tree's folder for writing, creating it if needed (but not a
// Kubernetes volume's data link, which only the kubelet makes).
func OpenDir(dir string) (*Dir, error) {
	if !isVolumeData(dir) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("open %s: %w", dir, writeErr(err))
		}
	}
	r, err := openRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &Dir{root: r, path: dir, folders: map[string]bool{}}, nil
}

// OpenExisting opens a tree's folder that must exist, for reading: a read must not
// create the folder of a knowledge base that was removed.
func OpenExisting(dir string) (*Dir, error) {
	r, err := openRoot(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("open %s: %w: the folder is gone", dir, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", dir, err)
	}
	return &Dir{root: r, path: dir, folders: map[string]bool{}}, nil
}

// Batch makes Write skip the fsync of each file, for writes of many files: call Sync once
// they are all written. One fsync per file made a 5,000-file sync wait on the disk
// 5,000 times. Where nothing flushes many files at once (Windows), it does nothing.
func (d *Dir) Batch() { d.lazy = canBatch }

// Sync makes the files written since Batch durable.
func (d *Dir) Sync() error {
	if !d.lazy {
		return nil
	}
	f, err := os.Open(d.path)
	if err != nil {
		return fmt.Errorf("sync %s: %w", d.path, err)
	}
	defer f.Close()
	if err := syncFS(f); err != nil {
		return fmt.Errorf("sync %s: %w", d.path, err)
	}
	return nil
}

// Close releases the folder.
func (d *Dir) Close() error { return d.root.Close() }

// checkNoLinks refuses a path any of whose existing components is a symbolic link.
func (d *Dir) checkNoLinks(p string) error {
	segs := strings.Split(p, "/")
	for i := range segs {
		sub := strings.Join(segs[:i+1], "/")
		if i < len(segs)-1 && d.known(sub) {
			continue
		}
		fi, err := d.root.Lstat(sub)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stat %s: %w", sub, cause(err))
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("%w: %s", ErrSymlink, sub)
		}
		if i < len(segs)-1 && !fi.IsDir() {
			return fmt.Errorf("%w: %s is a file, not a folder", ErrNotKnowledgeFile, sub)
		}
		if i < len(segs)-1 {
			d.mu.Lock()
			d.folders[sub] = true
			d.mu.Unlock()
		}
		if i == len(segs)-1 && !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s is not a regular file", ErrNotKnowledgeFile, sub)
		}
	}
	return nil
}

func (d *Dir) known(folder string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.folders[folder]
}

// Check reports whether p (clean, see CheckFilePath) could be written: no component is a
// symbolic link and no folder on the way is a file.
func (d *Dir) Check(p string) error { return d.checkNoLinks(p) }

// Read returns the bytes of file p and whether it exists. Links are never followed.
func (d *Dir) Read(p string, maxBytes int64) ([]byte, bool, error) {
	if err := d.checkNoLinks(p); err != nil {
		return nil, false, err
	}
	if _, err := d.root.Lstat(p); errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	data, _, err := readRegular(d.root, p, maxBytes)
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", p, err)
	}
	return data, true, nil
}

// Write replaces file p with data, creating its folders, and returns the file's
// modification time as written.
func (d *Dir) Write(p string, data []byte) (time.Time, error) {
	if err := d.checkNoLinks(p); err != nil {
		return time.Time{}, err
	}
	dir := path.Dir(p)
	if dir != "." && !d.known(dir) {
		missing := d.missingFolders(dir)
		err := d.root.MkdirAll(dir, 0o755)
		d.mu.Lock()
		d.created = append(d.created, missing...)
		d.mu.Unlock()
		if err != nil {
			return time.Time{}, fmt.Errorf("create folder %s: %w", dir, writeErr(err))
		}
		// Checked again, now that it exists: MkdirAll follows a link planted meanwhile.
		if err := d.checkNoLinks(dir + "/x"); err != nil {
			return time.Time{}, err
		}
		// A new folder's name lives in the folder above it: unsynced, a crash could take
		// the folder, and the acknowledged file in it, away. The file's own folder is
		// synced below, once the file is renamed into it.
		for _, f := range missing {
			if err := d.syncFolder(path.Dir(f)); err != nil {
				return time.Time{}, fmt.Errorf("write %s: %w", p, err)
			}
		}
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	// Hidden, so a load that runs meanwhile ignores it.
	tmp := path.Join(dir, ".quarry-"+hex.EncodeToString(rnd[:])+".tmp")
	f, err := d.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return time.Time{}, fmt.Errorf("write %s: %w", p, writeErr(err))
	}
	_, err = f.Write(data)
	if err == nil && !d.lazy {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = d.root.Rename(tmp, p)
	}
	if err != nil {
		_ = d.root.Remove(tmp)
		return time.Time{}, fmt.Errorf("write %s: %w", p, writeErr(err))
	}
	if err := d.syncFolder(dir); err != nil {
		return time.Time{}, fmt.Errorf("write %s: %w", p, err)
	}
	fi, err := d.root.Lstat(p)
	if err != nil {
		return time.Time{}, fmt.Errorf("stat %s: %w", p, err)
	}
	return fi.ModTime(), nil
}

// missingFolders returns folder and those of its parents that do not exist yet.
func (d *Dir) missingFolders(folder string) []string {
	var missing []string
	for f := folder; f != "."; f = path.Dir(f) {
		if _, err := d.root.Lstat(f); !errors.Is(err, fs.ErrNotExist) {
			break
		}
		missing = append(missing, f)
	}
	return missing
}

// RemoveCreatedFolders removes the folders Write created that are empty again, deepest
// first: what undoing a write's files leaves of it.
func (d *Dir) RemoveCreatedFolders() {
	d.mu.Lock()
	defer d.mu.Unlock()
	sort.Slice(d.created, func(i, j int) bool {
		return strings.Count(d.created[i], "/") > strings.Count(d.created[j], "/")
	})
	for _, f := range d.created {
		// A folder that still holds something (a file another write put there) stays.
		if err := d.root.Remove(f); err == nil || errors.Is(err, fs.ErrNotExist) {
			delete(d.folders, f)
		}
	}
	d.created = nil
}

// Remove deletes file p; a missing file is no error.
func (d *Dir) Remove(p string) error {
	if err := d.checkNoLinks(p); err != nil {
		return err
	}
	if err := d.root.Remove(p); errors.Is(err, fs.ErrNotExist) {
		// Nothing changed, and the folder may be gone too (an undo that removes a file a
		// failed write never made): there is no name to make durable.
		return nil
	} else if err != nil {
		return fmt.Errorf("remove %s: %w", p, writeErr(err))
	}
	if err := d.syncFolder(path.Dir(p)); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}

// syncFolder makes a change to folder's entries (a file renamed into place, or removed)
// durable, outside a batch: the file's own fsync does not cover its name, and a crash
// could otherwise bring back the old file after the write was acknowledged.
func (d *Dir) syncFolder(folder string) error {
	if d.lazy {
		return nil // Sync covers the whole file system
	}
	if d.onSync != nil {
		d.onSync(folder)
	}
	f, err := d.root.Open(folder)
	if err != nil {
		return fmt.Errorf("sync folder %s: %w", folder, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync folder %s: %w", folder, writeErr(err))
	}
	return nil
}

// ReadFiles reads the markdown files under folder (clean, relative to the tree's folder)
// as the package's ReadFiles does, with paths relative to folder. Each folder on the way
// is opened through the tree's root and checked to be the real folder its entry names,
// never a link: opening the folder again by its full path would follow a link swapped in
// meanwhile, out of the tree. A folder on the way that is a link is ErrSymlink, one that
// is a file ErrNotKnowledgeFile, as Load would not read either.
func (d *Dir) ReadFiles(ctx context.Context, folder string, cfg Config) ([]File, []Skip, error) {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", folder, err)
	}
	cur := d.root
	defer func() {
		if cur != d.root {
			cur.Close()
		}
	}()
	segs := strings.Split(folder, "/")
	for i, seg := range segs {
		sub := strings.Join(segs[:i+1], "/")
		lfi, err := cur.Lstat(seg)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", folder, err)
		}
		if lfi.Mode()&fs.ModeSymlink != 0 {
			return nil, nil, fmt.Errorf("read %s: %w: %s", folder, ErrSymlink, sub)
		}
		if !lfi.IsDir() {
			return nil, nil, fmt.Errorf("read %s: %w: %s is not a folder", folder, ErrNotKnowledgeFile, sub)
		}
		next, err := cur.OpenRoot(seg)
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", folder, err)
		}
		if cur != d.root {
			cur.Close()
		}
		cur = next
		fi, err := cur.Stat(".")
		if err != nil {
			return nil, nil, fmt.Errorf("read %s: %w", folder, err)
		}
		if !os.SameFile(lfi, fi) {
			// Swapped between the check and the open, and os.Root may have followed a
			// link to get here.
			return nil, nil, fmt.Errorf("read %s: %w: %s changed while opened", folder, ErrSymlink, sub)
		}
	}
	files, skips, err := readFiles(ctx, cur, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", folder, err)
	}
	return files, skips, nil
}

// Lstat describes p without following a link.
func (d *Dir) Lstat(p string) (fs.FileInfo, error) { return d.root.Lstat(p) }

// ModTime returns the modification time of file p.
func (d *Dir) ModTime(p string) (time.Time, error) {
	fi, err := d.root.Lstat(p)
	if err != nil {
		return time.Time{}, err
	}
	return fi.ModTime(), nil
}

// writeErr marks errors that mean the folder cannot be written at all.
func writeErr(err error) error {
	if errors.Is(err, syscall.EROFS) || errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%w: %w", ErrReadOnly, err)
	}
	return err
}
