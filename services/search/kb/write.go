package kb

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quarry-router/quarry/services/search/engine"
	"github.com/quarry-router/quarry/services/search/engine/bleve"
	"github.com/quarry-router/quarry/services/search/manifest"
	"github.com/quarry-router/quarry/services/search/rank"
	"github.com/quarry-router/quarry/services/search/signals"
	"github.com/quarry-router/quarry/services/search/tree"
)

// Errors returned by the write side. Path and file problems are the tree package's
// (tree.ErrOutsideTree, tree.ErrInvalidPath, tree.ErrNotKnowledgeFile, tree.ErrSymlink,
// tree.ErrRejected, tree.ErrNotFound, tree.ErrReadOnly).
var (
	// ErrDuplicatePath means one sync named the same file twice.
	ErrDuplicatePath = errors.New("path given twice")
	// ErrExists means an archive or restore would overwrite a file.
	ErrExists = errors.New("file exists")
	// ErrNotArchivable means the file is a folder summary or already a ghost cue, or
	// archiving it would write files the loader cannot read back as archived.
	ErrNotArchivable = errors.New("not an archivable knowledge file")
	// ErrNotArchived means there is no archived full text for the path.
	ErrNotArchived = errors.New("not archived")
	// ErrSyncSource means SyncTree was asked for a folder outside -sync-root, or the
	// service has none.
	ErrSyncSource = errors.New("sync source not allowed")
	// ErrEngine means the search engine did not confirm a write; the files were put back.
	ErrEngine = errors.New("search engine write failed")
)

// WriteConfig configures the write side.
type WriteConfig struct {
	// NewRoot is where knowledge bases first created by a sync get their folder
	// (NewRoot/<id>); "" means a sync cannot create one. The service sets it to -kb-root.
	NewRoot string
	// SyncRoot is the only folder (with its subfolders) SyncTree reads from; "" disables
	// SyncTree, since the service would otherwise index any markdown it can read.
	SyncRoot string
	// Timeout bounds the commit of one write (disk and engine), which is not cancelled
	// when its caller goes away: it completes or is undone.
	Timeout time.Duration
	// ArchiveBelow is SuggestArchive's default threshold (SPEC: importance below 35).
	ArchiveBelow float64
	// GhostCueTokens is the length of an archived file's ghost cue (SPEC: about 220).
	GhostCueTokens int
	// Watch makes the service watch each knowledge base's folder and apply edits made
	// there (embedded mode).
	Watch bool
	// WatchDebounce is how long the watcher waits for a burst of edits to settle.
	WatchDebounce time.Duration
	// WatchPoll, with Watch, also rescans the folders this often (0: never), for the
	// edits inotify does not report: a network volume written from another machine, an
	// overflowing event queue.
	WatchPoll time.Duration
}

// RegisterFlags registers the write-side flags.
func (c *WriteConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.SyncRoot, "sync-root", "", "folder SyncTree may read knowledge bases from (empty: SyncTree is refused); an API key limited to some knowledge bases may sync each only from <sync-root>/<id> or beneath")
	fs.DurationVar(&c.Timeout, "write-timeout", 2*time.Minute, "longest a write may take to commit (files and index) before it is undone")
	fs.Float64Var(&c.ArchiveBelow, "archive-below", 35, "SuggestArchive lists files whose importance is below this")
	fs.IntVar(&c.GhostCueTokens, "ghost-cue-tokens", 220, "length of an archived file's ghost cue, in tokens (4 characters each)")
	fs.BoolVar(&c.Watch, "watch", true, "watch knowledge base folders and apply edits made there within a second")
	fs.DurationVar(&c.WatchDebounce, "watch-debounce", 100*time.Millisecond, "quiet time the folder watcher waits for before applying a burst of edits")
	fs.DurationVar(&c.WatchPoll, "watch-poll", time.Minute, "with -watch, also rescan knowledge base folders this often for edits the watcher cannot see, such as on a network volume written from another machine (0 = never)")
}

// Validate rejects unusable settings.
func (c *WriteConfig) Validate() error {
	var errs []error
	if c.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("-write-timeout must be positive, got %v", c.Timeout))
	}
	if !(c.ArchiveBelow >= 0 && c.ArchiveBelow <= 100) {
		errs = append(errs, fmt.Errorf("-archive-below must be in [0,100], got %v", c.ArchiveBelow))
	}
	if c.GhostCueTokens < 20 {
		errs = append(errs, fmt.Errorf("-ghost-cue-tokens must be at least 20, got %d", c.GhostCueTokens))
	}
	if c.WatchDebounce < 0 {
		errs = append(errs, fmt.Errorf("-watch-debounce must be >= 0, got %v", c.WatchDebounce))
	}
	if c.WatchPoll < 0 {
		errs = append(errs, fmt.Errorf("-watch-poll must be >= 0, got %v", c.WatchPoll))
	}
	return errors.Join(errs...)
}

// Outcome says what a write did with one file.
type Outcome int

// Outcomes of a file in a write.
const (
	Indexed Outcome = iota + 1
	Unchanged
	Removed
	Rejected
)

// FileResult is what a write did with one file.
type FileResult struct {
	Path    string
	Outcome Outcome
	// Reason says why a file was rejected.
	Reason string
}

// WriteResult reports a write.
type WriteResult struct {
	// KB is the snapshot after the write (the unchanged current one if nothing changed).
	KB *KB
	// Changed is true when the write changed the knowledge base and bumped its generation.
	Changed bool
	// Files holds one result per file, sorted by path.
	Files []FileResult
}

// Count returns the number of files with outcome o.
func (w *WriteResult) Count(o Outcome) int {
	n := 0
	for _, f := range w.Files {
		if f.Outcome == o {
			n++
		}
	}
	return n
}

// Upload is one file given to a sync.
type Upload struct {
	// Path is relative to the knowledge base root.
	Path string
	Data []byte
}

// op is one change to a knowledge base's folder.
type op struct {
	path string
	// remove deletes the file; otherwise data is written, even when empty (gRPC
	// delivers an empty file's bytes as nil, so nil cannot mean "remove").
	remove bool
	data   []byte
	// doc is the document data holds, for files the index holds (nil for removals and
	// archived originals).
	doc *tree.Document
	// onDisk marks a change the folder already holds (an edit the watcher saw).
	onDisk bool
	// refused marks, with onDisk, a new file in the folder that the loader refuses:
	// nothing is indexed, but it counts toward -kb-max-files as Load counts it, and
	// DeleteFile and a full sync can take it away.
	refused bool
}

// plan is a write worked out against the current snapshot, before anything is changed.
type plan struct {
	ops   []op
	files []FileResult
	// curations are the paths whose change is a curation update (+5 importance).
	curations []string
	// placeholder is the modification time docs were parsed with; the real one replaces
	// it once the file is written.
	placeholder time.Time
}

// planner works out a write against the current snapshot and the knowledge base's folder.
type planner func(cur *KB, dir *tree.Dir) (*plan, error)

// UpsertFile adds or replaces one file. A file that cannot be loaded is an error wrapping
// tree.ErrRejected (or the path error), and nothing changes.
func (r *Registry) UpsertFile(ctx context.Context, id, path string, data []byte) (*WriteResult, error) {
	return r.write(ctx, id, false, func(cur *KB, dir *tree.Dir) (*plan, error) {
		return r.planUploads(cur, dir, []Upload{{Path: path, Data: data}}, nil, true, true)
	})
}

// SyncFiles makes a knowledge base hold the uploaded files: added, changed, unchanged
// or rejected per file, and, unless keepMissing, its other files removed. A knowledge
// base that does not exist is created under WriteConfig.NewRoot. The same path twice is
// an error (ErrDuplicatePath) and changes nothing.
func (r *Registry) SyncFiles(ctx context.Context, id string, files []Upload, keepMissing bool) (*WriteResult, error) {
	return r.write(ctx, id, true, func(cur *KB, dir *tree.Dir) (*plan, error) {
		return r.planUploads(cur, dir, files, nil, keepMissing, false)
	})
}

// SyncTree makes a knowledge base equal to a folder under WriteConfig.SyncRoot, read
// with the loader's rules (files the loader would skip are rejected with its reason).
func (r *Registry) SyncTree(ctx context.Context, id, source string, keepMissing bool) (*WriteResult, error) {
	return r.syncTree(ctx, id, source, keepMissing, false)
}

// SyncOwnTree is SyncTree for a caller limited to some knowledge bases: the source must
// be the folder named id under WriteConfig.SyncRoot or one beneath it, links resolved.
// A sync root holds the sources of several knowledge bases; a key allowed to write one
// of them must not copy another's source into its own and read it there.
func (r *Registry) SyncOwnTree(ctx context.Context, id, source string, keepMissing bool) (*WriteResult, error) {
	return r.syncTree(ctx, id, source, keepMissing, true)
}

func (r *Registry) syncTree(ctx context.Context, id, source string, keepMissing, own bool) (*WriteResult, error) {
	base, src, err := r.syncSource(id, source, own)
	if err != nil {
		return nil, err
	}
	return r.write(ctx, id, true, func(cur *KB, dir *tree.Dir) (*plan, error) {
		// Read beneath the allowed folder: a link swapped in on the way since
		// syncSource checked it cannot lead out.
		files, skips, err := tree.ReadFilesBeneath(ctx, base, src, r.cfg.Tree)
		if err != nil {
			return nil, fmt.Errorf("sync %s: %w", id, err)
		}
		uploads := make([]Upload, len(files))
		for i, f := range files {
			uploads[i] = Upload{Path: f.Path, Data: f.Data}
		}
		return r.planUploads(cur, dir, uploads, skips, keepMissing, false)
	})
}

// syncSource resolves a SyncTree source and checks it is under SyncRoot (with own,
// under SyncRoot/id), links resolved: it returns that folder, resolved, and the source
// relative to it. A source is checked as written before anything is looked up, and the
// messages quote the caller's words only: a path outside is refused alike whether it
// exists or not, and no message names the service's folders (an operating system
// error would: "lstat /srv/sync/x: no such file or directory").
func (r *Registry) syncSource(id, source string, own bool) (root, rel string, err error) {
	if r.cfg.Write.SyncRoot == "" {
		return "", "", fmt.Errorf("%w: the service has no -sync-root; upload the files with SyncFiles", ErrSyncSource)
	}
	sub, where := "", "-sync-root"
	if own {
		if !ValidID(id) {
			return "", "", fmt.Errorf("%w: %q", ErrInvalidID, id)
		}
		sub, where = id, fmt.Sprintf("the folder %s/ of -sync-root (an API key limited to some knowledge bases syncs each from the folder named after it)", id)
	}
	configured, err := filepath.Abs(r.cfg.Write.SyncRoot)
	if err != nil {
		return "", "", fmt.Errorf("%w: -sync-root cannot be used", ErrSyncSource)
	}
	resolved, err := filepath.EvalSymlinks(configured)
	if err != nil {
		r.log.Error("-sync-root cannot be resolved", "err", err)
		return "", "", fmt.Errorf("%w: -sync-root cannot be read", ErrSyncSource)
	}
	resolved, _ = filepath.Abs(resolved)
	outside := fmt.Errorf("%w: %q is outside %s", ErrSyncSource, source, where)
	src := filepath.Clean(source)
	if !filepath.IsAbs(src) {
		src = filepath.Join(resolved, src)
	}
	_, inResolved := tree.Beneath(filepath.Join(resolved, sub), src)
	_, inConfigured := tree.Beneath(filepath.Join(configured, sub), src)
	if !inResolved && !inConfigured {
		return "", "", outside
	}
	if src, err = filepath.EvalSymlinks(src); err != nil {
		return "", "", fmt.Errorf("%w: %q is not a folder under %s", ErrSyncSource, source, where)
	}
	src, _ = filepath.Abs(src)
	root = filepath.Join(resolved, sub)
	rel, in := tree.Beneath(root, src)
	if !in {
		return "", "", outside
	}
	// Said here, in the caller's words: read as a folder, a file failed deep in the
	// loader and reached the caller as an internal error.
	if fi, err := os.Stat(src); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%w: %q is not a folder under %s", ErrSyncSource, source, where)
	}
	return root, rel, nil
}

// planUploads works out a sync (or, with single, an upsert, whose rejection is an error).
// skips are files of the source that could not be read; they count as rejected.
func (r *Registry) planUploads(cur *KB, dir *tree.Dir, uploads []Upload, skips []tree.Skip, keepMissing, single bool) (*plan, error) {
	p := &plan{placeholder: time.Now()}
	seen := make(map[string]bool, len(uploads)+len(skips))
	reject := func(path string, err error) error {
		if single {
			return err
		}
		p.files = append(p.files, FileResult{Path: printable(path), Outcome: Rejected, Reason: printable(reason(err))})
		return nil
	}
	for _, s := range skips {
		seen[s.Path] = true
		p.files = append(p.files, FileResult{Path: printable(s.Path), Outcome: Rejected, Reason: printable(s.Reason)})
	}
	parsed := r.parseAll(cur, uploads, p.placeholder)
	for i, u := range uploads {
		clean, err := tree.CheckFilePath(u.Path, r.cfg.Tree)
		if err != nil {
			if err := reject(u.Path, err); err != nil {
				return nil, err
			}
			continue
		}
		if seen[clean] {
			return nil, fmt.Errorf("%w: %q", ErrDuplicatePath, clean)
		}
		seen[clean] = true
		if err := dir.Check(clean); err != nil {
			if err := reject(clean, err); err != nil {
				return nil, err
			}
			continue
		}
		if tree.IsArchivedOriginal(clean) {
			old, ok, err := dir.Read(clean, r.cfg.Tree.MaxFileBytes)
			if err == nil && ok && string(old) == string(u.Data) {
				p.files = append(p.files, FileResult{Path: clean, Outcome: Unchanged})
				continue
			}
			// Not indexed, but read back with the loader's rules (ReadArchivedFile,
			// RestoreFile): what they would refuse is refused now, before it is written.
			if _, err := tree.ParseFile(cur.Tree.Root, clean, u.Data, p.placeholder, r.cfg.Tree); err != nil {
				if err := reject(clean, err); err != nil {
					return nil, err
				}
				continue
			}
			p.ops = append(p.ops, op{path: clean, data: u.Data})
			p.files = append(p.files, FileResult{Path: clean, Outcome: Indexed, Reason: "archived original: kept readable, not searched"})
			continue
		}
		prev := cur.Tree.ByPath[clean]
		restore := false
		if prev != nil && prev.Hash != "" && prev.Hash == hash(u.Data) {
			// The index holds these bytes, but the folder, which a restart loads, may not:
			// an edit the watcher refused (bad front matter) leaves its bytes there and
			// the indexed version in the index. Then the upload is written again.
			if old, ok, err := dir.Read(clean, r.cfg.Tree.MaxFileBytes); err == nil && ok && bytes.Equal(old, u.Data) {
				p.files = append(p.files, FileResult{Path: clean, Outcome: Unchanged})
				continue
			}
			restore = true
		}
		doc, err := parsed[i].doc, parsed[i].err
		if restore {
			// parseAll skipped it as unchanged.
			doc, err = tree.ParseFile(cur.Tree.Root, clean, u.Data, p.placeholder, r.cfg.Tree)
		}
		if err != nil {
			if err := reject(clean, err); err != nil {
				return nil, err
			}
			continue
		}
		p.ops = append(p.ops, op{path: clean, data: u.Data, doc: doc})
		p.files = append(p.files, FileResult{Path: clean, Outcome: Indexed})
		if prev != nil && !restore {
			p.curations = append(p.curations, clean)
		}
	}
	if !keepMissing {
		for _, d := range cur.Tree.Docs {
			if seen[d.Path] {
				continue
			}
			p.ops = append(p.ops, op{path: d.Path, remove: true})
			p.files = append(p.files, FileResult{Path: d.Path, Outcome: Removed})
			if tree.IsStub(d.Path) {
				// The archived file's full text goes with its ghost cue.
				if orig, ok := originalOf(d.Path); ok && !seen[orig] {
					if _, exists, _ := dir.Read(orig, r.cfg.Tree.MaxFileBytes); exists {
						p.ops = append(p.ops, op{path: orig, remove: true})
						p.files = append(p.files, FileResult{Path: orig, Outcome: Removed})
					}
				}
			}
		}
		// The folder is to hold what was sent: a file the loader refused goes too, or it
		// would stay on the volume, counted toward -kb-max-files, where no one sent it.
		for _, f := range cur.Tree.Refused() {
			if !seen[f] {
				p.ops = append(p.ops, op{path: f, remove: true})
				p.files = append(p.files, FileResult{Path: f, Outcome: Removed})
			}
		}
	}
	sort.Slice(p.files, func(i, j int) bool { return p.files[i].Path < p.files[j].Path })
	return p, nil
}

type parsed struct {
	doc *tree.Document
	err error
}

// parseAll parses the uploads whose path is a loadable one and whose bytes differ from the
// indexed version, on every core but one while queries are being served: parsing is most
// of the planning of a large sync, and queries keep running beside it.
func (r *Registry) parseAll(cur *KB, uploads []Upload, mtime time.Time) []parsed {
	out := make([]parsed, len(uploads))
	work := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(engine.IndexWorkers(), len(uploads)/32)) {
		wg.Go(func() {
			for i := range work {
				u := uploads[i]
				clean, err := tree.CheckFilePath(u.Path, r.cfg.Tree)
				if err != nil || tree.IsArchivedOriginal(clean) {
					continue
				}
				if prev := cur.Tree.ByPath[clean]; prev != nil && prev.Hash != "" && prev.Hash == hash(u.Data) {
					continue
				}
				out[i].doc, out[i].err = tree.ParseFile(cur.Tree.Root, clean, u.Data, mtime, r.cfg.Tree)
			}
		})
	}
	for i := range uploads {
		work <- i
	}
	close(work)
	wg.Wait()
	return out
}

// DeleteFile removes one file of the knowledge base (a ghost cue with its archived full
// text), or a file in its folder that the loader refused: that one counts toward
// -kb-max-files, and without this only someone with the disk could take it away.
func (r *Registry) DeleteFile(ctx context.Context, id, path string) (*WriteResult, error) {
	return r.write(ctx, id, false, func(cur *KB, dir *tree.Dir) (*plan, error) {
		d, err := cur.Tree.Doc(path)
		if errors.Is(err, tree.ErrNotFound) {
			if c, cerr := tree.CleanPath(path); cerr == nil && cur.Tree.Counts(c) {
				if err := dir.Check(c); err != nil {
					return nil, err
				}
				return &plan{ops: []op{{path: c, remove: true}}, files: []FileResult{{Path: c, Outcome: Removed}}}, nil
			}
		}
		if err != nil {
			return nil, err
		}
		if err := dir.Check(d.Path); err != nil {
			return nil, err
		}
		p := &plan{ops: []op{{path: d.Path, remove: true}}, files: []FileResult{{Path: d.Path, Outcome: Removed}}}
		if orig, ok := originalOf(d.Path); ok && tree.IsStub(d.Path) {
			if _, exists, _ := dir.Read(orig, r.cfg.Tree.MaxFileBytes); exists {
				p.ops = append(p.ops, op{path: orig, remove: true})
				p.files = append(p.files, FileResult{Path: orig, Outcome: Removed})
			}
		}
		return p, nil
	})
}

// ArchiveResult reports an archive.
type ArchiveResult struct {
	*WriteResult
	// StubPath is the ghost cue written; ArchivedPath keeps the full text.
	StubPath, ArchivedPath string
	// GhostCue is the cue's text (without front matter).
	GhostCue string
}

// ArchiveFile replaces a knowledge file by its ghost cue (<folder>/_archived/<name>.stub.md)
// and keeps its full text beside the cue (<folder>/_archived/<name>.md).
func (r *Registry) ArchiveFile(ctx context.Context, id, path string) (*ArchiveResult, error) {
	out := &ArchiveResult{}
	res, err := r.write(ctx, id, false, func(cur *KB, dir *tree.Dir) (*plan, error) {
		d, err := cur.Tree.Doc(path)
		if err != nil {
			return nil, err
		}
		if d.Summary || d.Archived || tree.IsArchivedOriginal(d.Path) {
			return nil, fmt.Errorf("%w: %s is a %s", ErrNotArchivable, d.Path, map[bool]string{true: "folder summary", false: "ghost cue"}[d.Summary])
		}
		stub, orig := tree.ArchivePaths(d.Path)
		// The loader must read back what archiving writes, or the snapshot and a restart
		// disagree: a name ending in .stub.md would keep its full text where the loader
		// takes it for a ghost cue, and a file at the deepest level would get its cue one
		// level deeper than the loader walks.
		if tree.IsStub(orig) {
			return nil, fmt.Errorf("%w: %s: its full text would be read as a ghost cue; rename it first", ErrNotArchivable, d.Path)
		}
		for _, p := range []string{stub, orig} {
			if _, err := tree.CheckFilePath(p, r.cfg.Tree); err != nil {
				return nil, fmt.Errorf("%w: %s: %v", ErrNotArchivable, d.Path, err)
			}
		}
		if _, ok := cur.Tree.ByPath[stub]; ok {
			return nil, fmt.Errorf("%w: %s", ErrExists, stub)
		}
		for _, p := range []string{stub, orig} {
			if err := dir.Check(p); err != nil {
				return nil, err
			}
			// Anything there, of any size, is in the way.
			if _, err := dir.Lstat(p); err == nil {
				return nil, fmt.Errorf("%w: %s", ErrExists, p)
			} else if !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("archive %s: %w", d.Path, err)
			}
		}
		full, exists, err := dir.Read(d.Path, r.cfg.Tree.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, fmt.Errorf("archive %s: %w: the file is gone from the folder", d.Path, tree.ErrNotFound)
		}
		cue := ghostCue(d, orig, r.cfg.Write.GhostCueTokens)
		data, err := stubFile(d, orig, cur.Signals.Get(d.Path).Importance, cue, time.Now())
		if err != nil {
			return nil, err
		}
		pl := &plan{placeholder: time.Now()}
		doc, err := tree.ParseFile(cur.Tree.Root, stub, data, pl.placeholder, r.cfg.Tree)
		if err != nil {
			return nil, fmt.Errorf("archive %s: ghost cue: %w", d.Path, err)
		}
		pl.ops = []op{{path: orig, data: full}, {path: stub, data: data, doc: doc}, {path: d.Path, remove: true}}
		pl.files = []FileResult{
			{Path: orig, Outcome: Indexed, Reason: "archived original: kept readable, not searched"},
			{Path: stub, Outcome: Indexed},
			{Path: d.Path, Outcome: Removed},
		}
		out.StubPath, out.ArchivedPath, out.GhostCue = stub, orig, cue
		return pl, nil
	})
	if err != nil {
		return nil, err
	}
	out.WriteResult = res
	return out, nil
}

// Writable reports what a write to the knowledge base id would be refused for before any
// of its files is read: an invalid id, or an unknown knowledge base that no write may
// create (no folder for new ones). A sync's stream is checked with it at its header,
// not after the whole upload has been received and held.
func (r *Registry) Writable(id string) error {
	if !ValidID(id) {
		return fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	if _, err := r.Get(id); err != nil && r.cfg.Write.NewRoot == "" {
		return err
	}
	return nil
}

// RestoreFile brings an archived file back to its folder, given its original path or the
// path of its ghost cue, and removes the cue. It is a curation update.
func (r *Registry) RestoreFile(ctx context.Context, id, path string) (*WriteResult, error) {
	return r.write(ctx, id, false, func(cur *KB, dir *tree.Dir) (*plan, error) {
		target, stub, orig, err := archivedPaths(path, r.cfg.Tree)
		if err != nil {
			return nil, err
		}
		full, exists, err := dir.Read(orig, r.cfg.Tree.MaxFileBytes)
		if err != nil {
			return nil, err
		}
		if !exists {
			return nil, fmt.Errorf("%w: no archived full text at %s", ErrNotArchived, orig)
		}
		if _, ok := cur.Tree.ByPath[target]; ok {
			return nil, fmt.Errorf("%w: %s", ErrExists, target)
		}
		if err := dir.Check(target); err != nil {
			return nil, err
		}
		if _, there, err := dir.Read(target, r.cfg.Tree.MaxFileBytes); err != nil || there {
			return nil, fmt.Errorf("%w: %s", ErrExists, target)
		}
		p := &plan{placeholder: time.Now()}
		doc, err := tree.ParseFile(cur.Tree.Root, target, full, p.placeholder, r.cfg.Tree)
		if err != nil {
			return nil, err
		}
		p.ops = []op{{path: target, data: full, doc: doc}, {path: orig, remove: true}}
		p.files = []FileResult{{Path: target, Outcome: Indexed}, {Path: orig, Outcome: Removed}}
		if _, ok := cur.Tree.ByPath[stub]; ok {
			p.ops = append(p.ops, op{path: stub, remove: true})
			p.files = append(p.files, FileResult{Path: stub, Outcome: Removed})
		}
		p.curations = []string{target}
		sort.Slice(p.files, func(i, j int) bool { return p.files[i].Path < p.files[j].Path })
		return p, nil
	})
}

// ReadArchivedFile returns the full text of an archived file, given its original path or
// the path of its ghost cue, and the path of the cue.
func (r *Registry) ReadArchivedFile(_ context.Context, id, path string) (*KB, *tree.Document, string, error) {
	k, err := r.Get(id)
	if err != nil {
		return nil, nil, "", err
	}
	_, stub, orig, err := archivedPaths(path, r.cfg.Tree)
	if err != nil {
		return nil, nil, "", err
	}
	dir, err := tree.OpenExisting(k.Tree.Root)
	if err != nil {
		return nil, nil, "", err
	}
	defer dir.Close()
	data, exists, err := dir.Read(orig, r.cfg.Tree.MaxFileBytes)
	if err != nil {
		return nil, nil, "", err
	}
	if !exists {
		return nil, nil, "", fmt.Errorf("%w: no archived full text at %s", ErrNotArchived, orig)
	}
	mtime, _ := dir.ModTime(orig)
	d, err := tree.ParseFile(k.Tree.Root, orig, data, mtime, r.cfg.Tree)
	if err != nil {
		return nil, nil, "", err
	}
	d.Archived = true
	return k, d, stub, nil
}

// Candidate is a file SuggestArchive lists.
type Candidate struct {
	Doc        *tree.Document
	Importance float64
	Maturity   tree.Maturity
	LastAccess time.Time
}

// SuggestArchive lists the knowledge files (not summaries or ghost cues) whose runtime
// importance is below below (WriteConfig.ArchiveBelow when 0), least important first, at
// most limit.
func (r *Registry) SuggestArchive(id string, below float64, limit int) (*KB, []Candidate, error) {
	k, err := r.Get(id)
	if err != nil {
		return nil, nil, err
	}
	if below <= 0 {
		below = r.cfg.Write.ArchiveBelow
	}
	var out []Candidate
	for _, d := range k.Tree.Docs {
		if d.Summary || d.Archived {
			continue
		}
		s := k.Signals.Get(d.Path)
		if s.Importance < below {
			out = append(out, Candidate{Doc: d, Importance: s.Importance, Maturity: s.Maturity, LastAccess: s.LastAccess})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Importance < out[j].Importance })
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return k, out, nil
}

// archivedPaths returns, for an archived file named by its original path or its ghost
// cue's, where it is restored to, its cue and its kept full text.
func archivedPaths(path string, cfg tree.Config) (target, stub, orig string, err error) {
	clean, err := tree.CheckFilePath(path, cfg)
	if err != nil {
		return "", "", "", err
	}
	if t, ok := tree.RestorePath(clean); ok {
		target = t
	} else {
		target = clean
	}
	stub, orig = tree.ArchivePaths(target)
	if tree.IsStub(orig) {
		// "a/b.stub.md" would be kept at "a/_archived/b.stub.md", which is a/b.md's
		// ghost cue: ArchiveFile never archives such a name, so none is archived.
		return "", "", "", fmt.Errorf("%w: %s", ErrNotArchived, clean)
	}
	return target, stub, orig, nil
}

// originalOf returns the kept full text beside a ghost cue.
func originalOf(stub string) (string, bool) {
	target, ok := tree.RestorePath(stub)
	if !ok {
		return "", false
	}
	_, orig := tree.ArchivePaths(target)
	return orig, true
}

// write runs a write: plan it against the current snapshot, change the folder, change
// the index, and swap in the new snapshot with the next generation, all under loadMu so
// writes, loads and the watcher never interleave. Anything that fails after the folder
// was changed puts the folder (and the index) back as they were.
func (r *Registry) write(ctx context.Context, id string, create bool, plan planner) (*WriteResult, error) {
	return r.writeIn(ctx, id, create, tree.OpenDir, plan)
}

// writeIn is write with the knowledge base's folder opened by open: tree.OpenDir, which
// creates it, for writes of the API; one that does not for edits found in the folder.
func (r *Registry) writeIn(ctx context.Context, id string, create bool, open func(string) (*tree.Dir, error), plan planner) (*WriteResult, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%w: %q", ErrInvalidID, id)
	}
	r.loadMu.Lock()
	defer r.loadMu.Unlock()
	r.mu.RLock()
	cur := r.kbs[id]
	r.mu.RUnlock()
	if _, ok := r.repairs[id]; ok && cur != nil {
		// An earlier write left the index out of step with the folder: nothing more is
		// written until it is rebuilt.
		rctx, cancel := context.WithTimeout(ctx, r.cfg.Write.Timeout)
		k, err := r.loadLocked(rctx, id, cur.Tree.Root)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%w: the index of %q is being rebuilt after a failed write: %w", ErrEngine, id, err)
		}
		cur = k
	}
	fresh := cur == nil
	// made is set when this write makes the knowledge base's folder: an undone first
	// write takes it away again, or -kb-root would serve the refused knowledge base,
	// empty, from the next start.
	made := false
	if fresh {
		if !create || r.cfg.Write.NewRoot == "" {
			return nil, fmt.Errorf("%w: %q", ErrUnknownKB, id)
		}
		// Planned against an empty knowledge base that is registered only if the write
		// succeeds: a refused first sync creates nothing.
		root := filepath.Join(r.cfg.Write.NewRoot, id)
		cur = &KB{ID: id, Tree: tree.New(root, nil), Corpus: rank.NewCorpus(nil), Signals: signals.New(r.cfg.Signals, time.Now)}
		if _, err := os.Stat(root); err == nil {
			// A folder left there (by hand, or a crash) is what the knowledge base holds.
			if cur.Tree, err = tree.Load(ctx, root, r.cfg.Tree, r.log); err != nil {
				return nil, err
			}
		} else {
			made = true
		}
	}
	dir, err := open(cur.Tree.Root)
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	p, err := plan(cur, dir)
	if err == nil {
		err = r.checkFileCount(cur, p)
	}
	if err != nil {
		if fresh {
			_ = os.Remove(cur.Tree.Root) // only if empty
		}
		return nil, err
	}
	if fresh && len(p.ops) == 0 {
		if cur.Tree.Len() == 0 {
			_ = os.Remove(cur.Tree.Root)
			return nil, fmt.Errorf("%w: %q (nothing to create it from%s)", ErrUnknownKB, id, rejections(p.files))
		}
		k, err := r.loadLocked(ctx, id, cur.Tree.Root)
		if err != nil {
			return nil, err
		}
		return &WriteResult{KB: k, Changed: true, Files: p.files}, nil
	}
	res := &WriteResult{KB: cur, Files: p.files}
	if len(p.ops) == 0 {
		return res, nil
	}
	// From here on the write completes or is undone: a caller that goes away does not
	// leave it half done.
	wctx, cancel := r.writeTime(ctx)
	defer cancel()
	if len(p.ops) > 1 {
		dir.Batch()
	}
	undoFiles, err := r.applyFiles(dir, p)
	undo := func() {
		undoFiles()
		if made {
			_ = os.Remove(cur.Tree.Root) // only if the undo left it empty
		}
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		undo()
		return nil, err
	}
	if fresh {
		// A new knowledge base is loaded from the folder just written, like any other.
		k, err := r.loadLocked(wctx, id, cur.Tree.Root)
		if err != nil {
			undo()
			return nil, err
		}
		res.KB, res.Changed = k, true
		return res, nil
	}
	k, err := r.apply(wctx, cur, p)
	if err != nil {
		undo()
		if errors.Is(err, errRebuild) {
			// The index may hold part of the write: rebuild it from the folder, which
			// is back as it was. With time of its own, as the undo has: on wctx, past
			// its deadline when the write ran out of -write-timeout, the rebuild failed
			// at once and the half-written index was searched until the repair.
			rctx, rcancel := r.writeTime(ctx)
			defer rcancel()
			if _, lerr := r.loadLocked(rctx, id, cur.Tree.Root); lerr != nil {
				r.log.Error("rebuild after a failed write; retrying in the background", "kb", id, "err", lerr)
				r.repairLocked(id, cur.Tree.Root, 0)
			}
		}
		return nil, err
	}
	r.mu.Lock()
	k.Generation = nextGeneration(cur)
	r.kbs[id] = k
	r.notifyLocked([]State{k.state()})
	r.mu.Unlock()
	if k.ref == cur.ref {
		// The engine stays open through the new snapshot; queries still on the old one
		// use the same engine.
		r.releaseLocked(cur)
	} else {
		r.retireLocked(cur)
	}
	res.KB, res.Changed = k, true
	r.log.Info("knowledge base written", "kb", id, "generation", k.Generation,
		"indexed", res.Count(Indexed), "removed", res.Count(Removed), "rejected", res.Count(Rejected))
	return res, nil
}

// writeTime is the time a write has, and its undo and its rebuild each have after it:
// -write-timeout, whatever the caller does meanwhile, since a write completes or is undone.
func (r *Registry) writeTime(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), r.cfg.Write.Timeout)
}

// checkFileCount refuses a plan that would leave the knowledge base with more markdown
// files than -kb-max-files: the next Load would refuse the whole knowledge base. A write
// that does not add to the count is never refused, so a knowledge base over the limit
// (the limit lowered since) can still be cut down.
func (r *Registry) checkFileCount(cur *KB, p *plan) error {
	before := cur.Tree.Files()
	n := before
	for _, o := range p.ops {
		if tree.IsArchivedOriginal(o.path) {
			continue // never read by Load, so never counted
		}
		removal := o.remove || (o.onDisk && o.doc == nil && !o.refused)
		switch {
		case removal && cur.Tree.Counts(o.path):
			n--
		case !removal && !cur.Tree.Counts(o.path):
			n++
		}
	}
	if n > before && n > r.cfg.Tree.MaxFiles {
		return fmt.Errorf("%w: the knowledge base would hold %d markdown files, over the limit of %d (-kb-max-files)", tree.ErrTooManyFiles, n, r.cfg.Tree.MaxFiles)
	}
	return nil
}

// syncDir makes a batched write's files durable. A variable, so that a test sees when
// it runs: what it does is invisible short of a crash.
var syncDir = (*tree.Dir).Sync

// errRebuild marks an engine failure whose undo failed too.
var errRebuild = errors.New("index needs a rebuild")

// applyFiles changes the folder and returns how to put it back. Files are written by a
// few goroutines: a large sync is mostly waiting on file system calls.
func (r *Registry) applyFiles(dir *tree.Dir, p *plan) (func(), error) {
	type saved struct {
		done   bool
		data   []byte
		exists bool
	}
	saves := make([]saved, len(p.ops))
	undo := func() {
		for i := len(p.ops) - 1; i >= 0; i-- {
			s := saves[i]
			if !s.done {
				continue
			}
			var err error
			if s.exists {
				_, err = dir.Write(p.ops[i].path, s.data)
			} else {
				err = dir.Remove(p.ops[i].path)
			}
			if err != nil {
				r.log.Error("undo a failed write", "path", p.ops[i].path, "err", err)
			}
		}
		dir.RemoveCreatedFolders()
		// A batch's files are written without an fsync each, and so are the ones put
		// back: unsynced, a crash could bring back the write that was refused.
		if err := syncDir(dir); err != nil {
			r.log.Error("sync the undo of a failed write", "err", err)
		}
	}
	// Files already in the folder may be larger than a loadable one (that is why they
	// were skipped); they are kept whole for the undo.
	const maxUndo = 1 << 30
	one := func(i int) error {
		o := &p.ops[i]
		if o.onDisk {
			return nil
		}
		old, exists, err := dir.Read(o.path, maxUndo)
		if err != nil {
			return err
		}
		// Saved for the undo before the change is made: Write and Remove can fail after
		// the file has changed (its folder's sync), and an undo that skipped such a file
		// would leave it changed while the call fails and the index holds the old one.
		// Undoing a change that was never made rewrites the same bytes, or removes
		// nothing.
		if o.remove {
			if !exists {
				return nil
			}
			saves[i] = saved{true, old, true}
			return dir.Remove(o.path)
		}
		saves[i] = saved{true, old, exists}
		mtime, err := dir.Write(o.path, o.data)
		if err != nil {
			return err
		}
		if o.doc != nil && o.doc.Updated.Equal(p.placeholder) {
			o.doc.Updated = mtime
		}
		return nil
	}
	workers := 1
	if len(p.ops) > 16 {
		// The file system calls are mostly waiting, but in the kernel on the same
		// cores as queries: while queries are served, the files get one core fewer.
		workers = 4
		if engine.Searching() {
			workers = engine.IndexWorkers()
		}
	}
	next := make(chan int)
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range next {
				if errs[w] == nil {
					errs[w] = one(i)
				}
			}
		})
	}
	for i := range p.ops {
		next <- i
	}
	close(next)
	wg.Wait()
	return undo, errors.Join(errs...)
}

// apply builds the snapshot after a plan: the engine changed in place (or rebuilt, see
// rebuilds), the tree and the term statistics updated for the changed documents only, the
// signals carried over.
func (r *Registry) apply(ctx context.Context, cur *KB, p *plan) (*KB, error) {
	var changes []engine.Change
	var upserts []*tree.Document
	var deletes, refused []string
	for _, o := range p.ops {
		if tree.IsArchivedOriginal(o.path) {
			continue
		}
		old := cur.Tree.ByPath[o.path]
		switch {
		case o.doc != nil:
			upserts = append(upserts, o.doc)
			c := engine.Change{New: engineDoc(o.doc)}
			if old != nil {
				c.Old = engineDoc(old)
			}
			changes = append(changes, c)
		case old != nil:
			deletes = append(deletes, o.path)
			changes = append(changes, engine.Change{Old: engineDoc(old)})
		case o.refused:
			refused = append(refused, o.path)
		case (o.remove || o.onDisk) && cur.Tree.Counts(o.path):
			// A file the loader refused: never indexed, but counted toward -kb-max-files
			// until it is gone.
			deletes = append(deletes, o.path)
		}
	}
	t := cur.Tree.With(upserts, deletes, refused...)
	ref := cur.ref
	if r.rebuilds(cur, len(changes)) {
		// Queries keep searching the current index while the new one is built; it is
		// released (after retireAfter) once the new snapshot serves.
		docs := make([]engine.Doc, len(t.Docs))
		for i, d := range t.Docs {
			docs[i] = *engineDoc(d)
		}
		b, err := r.build(ctx, cur.ID, docs, r.cfg.Bleve)
		if err != nil {
			return nil, fmt.Errorf("%w: rebuild: %w", ErrEngine, err)
		}
		ref = &openIndex{engine: b}
	} else if len(changes) > 0 {
		w, ok := cur.Engine.(engine.Writer)
		if !ok {
			return nil, fmt.Errorf("%w: %T cannot be changed in place", ErrEngine, cur.Engine)
		}
		// Changed in place even if the write fails and is undone: a persisted index
		// then no longer holds the tree its folder is named after.
		if ref.dir != "" {
			ref.dirty = true
		}
		if err := engine.Apply(ctx, w, changes); err != nil {
			// Never kept at stop, even once undone: the undo takes back the whole write,
			// while its failed batch's BM25 counts were never added, so kept statistics
			// would be off for good.
			ref.broken = true
			// The undo has time of its own: a write that failed because its time ran
			// out (-write-timeout) failed its undo at once on the same context, and the
			// index was rebuilt, in the background when the rebuild failed that way too.
			uctx, cancel := r.writeTime(ctx)
			defer cancel()
			if uerr := engine.Apply(uctx, w, engine.Inverse(changes)); uerr != nil {
				r.log.Error("undo a failed index write", "kb", cur.ID, "err", uerr)
				return nil, fmt.Errorf("%w: %w (%w)", ErrEngine, err, errRebuild)
			}
			return nil, fmt.Errorf("%w: %w", ErrEngine, err)
		}
	}
	sig := cur.Signals
	for _, d := range upserts {
		sig.SeedNew(d.Path, d.Importance, d.Maturity, d.Updated)
	}
	var forget []string
	for _, p := range deletes {
		if _, ok := t.ByPath[p]; !ok {
			forget = append(forget, p)
		}
	}
	sig.Forget(forget)
	for _, c := range p.curations {
		// Named by the content it made: replicas sharing the folder each see the edit
		// (their watchers, their rescans), and pooled it counts once.
		if d := t.ByPath[c]; d != nil && d.Hash != "" {
			sig.RecordEdit(c, d.Hash)
		} else {
			sig.RecordCuration(c)
		}
	}
	if len(p.curations) > 0 && r.pools == nil {
		// At once, so the new snapshot ranks by them; pooled, they are published with
		// the next flush and apply on every replica alike.
		sig.Flush()
	}
	ref.refs++
	k := &KB{
		ID:        cur.ID,
		Version:   contentVersion(r.cfg.VersionSalt, t),
		Tree:      t,
		Engine:    ref.engine,
		Corpus:    cur.Corpus.With(upserts, deletes),
		Signals:   sig,
		manifests: &manifest.Cache{},
		cfg:       cur.cfg,
		dir:       cur.dir,
		ref:       ref,
	}
	for _, d := range t.Docs {
		if !d.Summary && !d.Archived {
			k.files++
		}
	}
	return k, nil
}

// rebuilds reports whether a write of n changes builds a new in-memory Bleve index
// rather than changing the current one in place. An in-memory index never merges its
// segments (Bleve merges only persisted ones), and every batch written in place adds
// one: after a sync that rewrote a 5,000-file knowledge base in place, Resolve's p50 went
// from 1.3 ms to 2.0 ms and stayed there; rebuilt instead, it did not move. A write of at
// least a batch that changes a quarter of the documents costs about as much to index from
// scratch, and queries keep the compact current index meanwhile.
func (r *Registry) rebuilds(cur *KB, n int) bool {
	if r.cfg.Engine == EngineMeilisearch || cur.dir != "" {
		return false
	}
	if _, ok := cur.Engine.(*bleve.Index); !ok {
		return false
	}
	return n >= r.cfg.Bleve.BatchSize && n*4 >= cur.Engine.Len()
}

func engineDoc(d *tree.Document) *engine.Doc {
	return &engine.Doc{Path: d.Path, Title: d.Title, Content: d.Content, Folder: d.Folder(), Archived: d.Archived, Summary: d.Summary}
}

func hash(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// printable returns s with any bytes that are not UTF-8 replaced by U+FFFD: a folder may
// hold names no tree path may hold, and a result carrying one raw could not be sent
// (protobuf strings are UTF-8), failing the whole sync instead of rejecting one file.
func printable(s string) string { return strings.ToValidUTF8(s, "\uFFFD") }

// reason is a rejection's reason for a per-file result: the error without the sentinel's
// prefix.
func reason(err error) string {
	msg := err.Error()
	for _, prefix := range []string{tree.ErrRejected.Error() + ": "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return msg
}

// rejections says why the files of a first sync were all refused, as the caller would
// read them for a knowledge base that exists: the first few, with their reasons.
func rejections(files []FileResult) string {
	const shown = 5
	var b strings.Builder
	n := 0
	for _, f := range files {
		if f.Outcome != Rejected {
			continue
		}
		if n < shown {
			fmt.Fprintf(&b, "; %s: %s", f.Path, f.Reason)
		}
		n++
	}
	if n == 0 {
		return ""
	}
	if n > shown {
		fmt.Fprintf(&b, "; and %d more", n-shown)
	}
	noun := "files"
	if n == 1 {
		noun = "file"
	}
	return fmt.Sprintf(": %d %s rejected%s", n, noun, b.String())
}
