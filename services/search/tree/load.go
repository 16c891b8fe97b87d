package tree

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"
)

const (
	indexName   = "_index.md"
	archiveDir  = "_archived"
	stubSuffix  = ".stub.md"
	mdSuffix    = ".md"
	utf8BOM     = "\ufeff"
	hiddenStart = "."
)

// Load reads the knowledge base under root. Every open goes through an os.Root, so no
// path in the tree can reach outside it, and symbolic links are never followed: a link
// (to a file or a folder, inside the tree or not) is skipped and recorded. The one
// exception is a Kubernetes ConfigMap, Secret or projected volume, whose every name is a
// link: it is read through its "..data" link, which must stay inside root (Tree.Root
// names it). Hidden files and folders and files not ending in ".md" are ignored. A file
// that is too large, not UTF-8, holds NUL bytes, or has front matter that fails to parse
// or sets an invalid importance or maturity is skipped and recorded in Tree.Skipped with
// the reason; it never fails the load. Load fails when root cannot be opened, when ctx ends, or when the
// tree holds more than cfg.MaxFiles markdown files (ErrTooManyFiles). The zero Config
// means DefaultConfig(); any other must pass Validate.
func Load(ctx context.Context, root string, cfg Config, log *slog.Logger) (*Tree, error) {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("load %s: %w", root, err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r, err := openRoot(root)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", root, err)
	}
	r, inVolume := throughVolume(r)
	if inVolume {
		root = filepath.Join(root, volumeDataLink)
		log.Debug("reading a Kubernetes volume through its data link", "root", root)
	}
	defer r.Close()
	l := &loader{ctx: ctx, root: r, rootName: rootName(root), cfg: cfg, log: log}
	if err := fs.WalkDir(r.FS(), ".", l.visit); err != nil {
		return nil, fmt.Errorf("load %s: %w", root, err)
	}
	if err := l.readAll(); err != nil {
		return nil, fmt.Errorf("load %s: %w", root, err)
	}
	t := newTree(root, l.docs, l.skipped)
	t.refused = l.refused
	return t, nil
}

// rootName is the title fallback of the root folder's _index.md: the folder's name, or
// for a volume read through its data link, the name of the folder it is mounted on.
func rootName(root string) string {
	if abs, err := filepath.Abs(root); err == nil {
		root = abs
	}
	if isVolumeData(root) {
		root = filepath.Dir(root)
	}
	return filepath.Base(root)
}

// volumeDataLink is where the kubelet publishes a ConfigMap, Secret or projected volume
// (pkg/volume/util/atomic_writer.go): the files are in a hidden timestamped folder, this
// link names it, and each top-level name in the volume is a link through it. An update
// writes a new folder and renames a new link over this one, so reading through it sees
// one version or the next, never a mix.
const volumeDataLink = "..data"

// openRoot opens a tree's root folder. A root that is a volume's data link
// ("<folder>/..data", as Load names it) is opened through its folder every time, so
// that the link, however the folder's writer re-points it, never leads out of it.
func openRoot(root string) (*os.Root, error) {
	if !isVolumeData(root) {
		return os.OpenRoot(root)
	}
	folder, err := os.OpenRoot(filepath.Dir(root))
	if err != nil {
		return nil, err
	}
	defer folder.Close()
	return folder.OpenRoot(volumeDataLink)
}

// isVolumeData reports whether root names a volume's data link.
func isVolumeData(root string) bool { return filepath.Base(root) == volumeDataLink }

// throughVolume returns the folder to read for r: when r is a Kubernetes volume, whose
// visible names are links, which are never followed, the folder its data link names
// (r is closed), and true; otherwise r. The link is resolved through r, so it cannot
// lead out of it.
func throughVolume(r *os.Root) (*os.Root, bool) {
	fi, err := r.Lstat(volumeDataLink)
	if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
		return r, false
	}
	data, err := r.OpenRoot(volumeDataLink)
	if err != nil {
		return r, false
	}
	r.Close()
	return data, true
}

type loader struct {
	ctx      context.Context
	root     *os.Root
	rootName string
	cfg      Config
	log      *slog.Logger
	files    int
	pending  []string // markdown files listed by the walk, read by readAll
	docs     []*Document
	skipped  []Skip
	// refused are the markdown files read and refused (size, encoding, front matter):
	// they count toward MaxFiles like the loaded ones.
	refused map[string]bool
	// raw lists archived originals too, for ReadFiles, which reads files unparsed.
	raw bool
}

func (l *loader) skip(p, reason string) {
	l.log.Warn("skipped", "path", p, "reason", reason)
	l.skipped = append(l.skipped, Skip{Path: p, Reason: reason})
}

// skipRefused records a listed markdown file that could not be read or loaded.
func (l *loader) skipRefused(p, reason string) {
	l.log.Warn("skipped", "path", p, "reason", reason)
	l.skipped = append(l.skipped, Skip{Path: p, Reason: reason, Refused: true})
}

func (l *loader) visit(p string, d fs.DirEntry, err error) error {
	if cerr := l.ctx.Err(); cerr != nil {
		return cerr
	}
	if err != nil {
		if p == "." {
			return err
		}
		l.skip(p, fmt.Sprintf("unreadable: %v", cause(err)))
		return nil
	}
	if p == "." {
		return nil
	}
	name := d.Name()
	if strings.HasPrefix(name, hiddenStart) {
		l.log.Debug("ignored hidden entry", "path", p)
		if d.IsDir() {
			return fs.SkipDir
		}
		return nil
	}
	if d.IsDir() || strings.HasSuffix(name, mdSuffix) {
		// A name the file system allows but no tree path may hold (not UTF-8, a control
		// character, a backslash): its document could be searched but never read,
		// written or removed by its path, and a result naming it could not be sent.
		if _, err := CleanPath(p); err != nil {
			l.skip(p, err.Error())
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil
		}
	}
	if d.Type()&fs.ModeSymlink != 0 {
		l.skip(p, "symbolic link (links are never followed)")
		return nil
	}
	if d.IsDir() {
		if depth := strings.Count(p, "/") + 1; depth > l.cfg.MaxDepth {
			l.skip(p, fmt.Sprintf("folder deeper than %d levels", l.cfg.MaxDepth))
			return fs.SkipDir
		}
		return nil
	}
	if !strings.HasSuffix(name, mdSuffix) {
		return nil
	}
	if !d.Type().IsRegular() {
		l.skip(p, "not a regular file")
		return nil
	}
	if IsArchivedOriginal(p) && !l.raw {
		// Archiving replaces a file by its ghost cue; an original left beside the stub
		// would bring archived knowledge back into search at full weight. It is never
		// read, so it does not count toward MaxFiles: the files counted are the ones
		// read, which a write can count too (Tree.Files).
		l.skip(p, "archived original: only "+stubSuffix+" ghost cues are loaded from "+archiveDir)
		return nil
	}
	l.files++
	if l.files > l.cfg.MaxFiles {
		return fmt.Errorf("%w: more than %d markdown files", ErrTooManyFiles, l.cfg.MaxFiles)
	}
	l.pending = append(l.pending, p)
	return nil
}

// readAll reads and parses the files the walk listed, on every core: reading and parsing
// 5,000 files is most of a knowledge base's load time. Results are applied in walk
// order, so skips and logs do not depend on scheduling.
func (l *loader) readAll() error {
	type result struct {
		doc   *Document
		notes []string
		err   error
	}
	results := make([]result, len(l.pending))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(l.pending))) {
		wg.Go(func() {
			for i := range next {
				d, notes, err := l.read(l.pending[i])
				results[i] = result{d, notes, err}
			}
		})
	}
	var err error
	for i := range l.pending {
		if err = l.ctx.Err(); err != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if err != nil {
		return err
	}
	for i, p := range l.pending {
		r := results[i]
		if r.err != nil {
			l.skipRefused(p, r.err.Error())
			if l.refused == nil {
				l.refused = map[string]bool{}
			}
			l.refused[p] = true
			continue
		}
		for _, n := range r.notes {
			l.log.Info("front matter", "path", p, "note", n)
		}
		l.docs = append(l.docs, r.doc)
	}
	return nil
}

// read reads and parses one listed file.
func (l *loader) read(p string) (*Document, []string, error) {
	data, mtime, err := readRegular(l.root, p, l.cfg.MaxFileBytes)
	if err != nil {
		return nil, nil, err
	}
	return parseDocument(p, data, mtime, l.rootName, l.cfg)
}

// File is one markdown file as ReadFiles read it, before parsing.
type File struct {
	// Path is relative to the root, forward slashes.
	Path string
	Data []byte
	// ModTime is the file's modification time.
	ModTime time.Time
	// Original marks the full text of an archived file (<folder>/_archived/<name>.md),
	// which Load does not index.
	Original bool
}

// ReadFiles reads the markdown files under root with Load's rules (no symbolic link
// followed but a volume's data link, hidden entries ignored, size, depth and count
// limits) without parsing them, for copying a tree into a knowledge base. Archived
// originals are returned too, marked. Files Load would skip before parsing are returned
// as Skips with the reason.
func ReadFiles(ctx context.Context, root string, cfg Config) ([]File, []Skip, error) {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", root, err)
	}
	r, err := openRoot(root)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", root, err)
	}
	return readOpened(ctx, r, cfg, root)
}

// ReadFilesBeneath is ReadFiles of the folder rel under base, where links on the way to
// rel may be followed but never out of base, even when one is swapped in while the
// folder is opened: os.Root resolves every step beneath base.
func ReadFilesBeneath(ctx context.Context, base, rel string, cfg Config) ([]File, []Skip, error) {
	if cfg == (Config{}) {
		cfg = DefaultConfig()
	}
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", rel, err)
	}
	b, err := os.OpenRoot(base)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", base, err)
	}
	defer b.Close()
	r, err := b.OpenRoot(rel)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", rel, err)
	}
	return readOpened(ctx, r, cfg, rel)
}

// readOpened is readFiles of the folder r, or of the one its data link names when r is
// a Kubernetes volume; it closes r, and its errors name the folder as name.
func readOpened(ctx context.Context, r *os.Root, cfg Config, name string) ([]File, []Skip, error) {
	r, _ = throughVolume(r)
	defer r.Close()
	files, skips, err := readFiles(ctx, r, cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", name, err)
	}
	return files, skips, nil
}

// readFiles is ReadFiles on a folder already open, cfg valid.
func readFiles(ctx context.Context, r *os.Root, cfg Config) ([]File, []Skip, error) {
	l := &loader{ctx: ctx, root: r, cfg: cfg, log: slog.New(slog.DiscardHandler), raw: true}
	if err := fs.WalkDir(r.FS(), ".", l.visit); err != nil {
		return nil, nil, err
	}
	// Read on every core, as Load does; results in walk order.
	read := make([]File, len(l.pending))
	errs := make([]error, len(l.pending))
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(runtime.GOMAXPROCS(0), len(l.pending))) {
		wg.Go(func() {
			for i := range next {
				p := l.pending[i]
				data, mtime, err := readRegular(r, p, cfg.MaxFileBytes)
				read[i], errs[i] = File{Path: p, Data: data, ModTime: mtime, Original: IsArchivedOriginal(p)}, err
			}
		})
	}
	var cerr error
	for i := range l.pending {
		if cerr = ctx.Err(); cerr != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
	if cerr != nil {
		return nil, nil, cerr
	}
	files := make([]File, 0, len(l.pending))
	for i, f := range read {
		if errs[i] != nil {
			l.skipRefused(f.Path, errs[i].Error())
			continue
		}
		files = append(files, f)
	}
	return files, l.skipped, nil
}

// readRegular opens one file through the root without following a final symbolic link,
// and checks that what was opened is the regular file the walk saw: a file swapped for a
// link or a FIFO between listing and opening is refused rather than read.
func readRegular(root *os.Root, p string, maxBytes int64) ([]byte, time.Time, error) {
	lfi, err := root.Lstat(p)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stat: %w", cause(err))
	}
	if !lfi.Mode().IsRegular() {
		return nil, time.Time{}, errors.New("not a regular file")
	}
	// O_NONBLOCK keeps a FIFO swapped in after the Lstat from blocking the open.
	f, err := root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("open: %w", cause(err))
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("stat: %w", err)
	}
	if !fi.Mode().IsRegular() || !os.SameFile(lfi, fi) {
		return nil, time.Time{}, errors.New("changed while loading (not the regular file that was listed)")
	}
	if fi.Size() > maxBytes {
		return nil, time.Time{}, fmt.Errorf("%d bytes, over the %d-byte limit", fi.Size(), maxBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("read: %w", err)
	}
	if int64(len(data)) > maxBytes {
		return nil, time.Time{}, fmt.Errorf("over the %d-byte limit", maxBytes)
	}
	return data, fi.ModTime(), nil
}

// parseDocument builds a Document from a file's bytes. It returns notes on front matter
// problems that did not cost the file.
func parseDocument(p string, data []byte, mtime time.Time, rootName string, cfg Config) (*Document, []string, error) {
	sum := sha256.Sum256(data)
	if bytes.IndexByte(data, 0) >= 0 {
		return nil, nil, errors.New("holds NUL bytes (binary file)")
	}
	if !utf8.Valid(data) {
		return nil, nil, errors.New("not valid UTF-8")
	}
	data = bytes.TrimPrefix(data, []byte(utf8BOM))
	fmBytes, body, err := splitFrontMatter(data, cfg.MaxFrontMatterBytes)
	if err != nil {
		return nil, nil, err
	}
	fm, err := parseFrontMatter(fmBytes)
	if err != nil {
		return nil, nil, err
	}
	name := path.Base(p)
	doc := &Document{
		Hash:       hex.EncodeToString(sum[:]),
		Path:       p,
		Title:      fm.title,
		Content:    strings.ReplaceAll(string(body), "\r\n", "\n"),
		Tags:       fm.tags,
		Related:    fm.related,
		Importance: cfg.DefaultImportance,
		Maturity:   fm.maturity,
		Updated:    mtime,
		Summary:    name == indexName,
		Archived:   path.Base(path.Dir(p)) == archiveDir && strings.HasSuffix(name, stubSuffix),
		Extra:      fm.extra,
	}
	if fm.hasImportance {
		doc.Importance = fm.importance
	}
	if fm.hasUpdated {
		doc.Updated = fm.updated
	}
	if doc.Title == "" {
		doc.Title = firstHeading(doc.Content)
	}
	if doc.Title == "" {
		doc.Title = fallbackTitle(p, rootName)
	}
	return doc, fm.notes, nil
}

// firstHeading returns the text of the first level-one ATX heading ("# Title") outside
// fenced code blocks, where "# " usually starts a shell comment.
func firstHeading(content string) string {
	var f Fence
	in := false
	for line := range strings.Lines(content) {
		line = strings.TrimRight(line, "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if len(line)-len(trimmed) > 3 {
			continue // indented code
		}
		if in {
			in = !f.ClosedBy(trimmed)
			continue
		}
		if f, in = OpenFence(trimmed); in {
			continue
		}
		if rest, ok := cutHeadingMark(trimmed); ok {
			rest = strings.TrimSpace(rest)
			// A closing sequence of #s is not part of the heading.
			if t := strings.TrimRight(rest, "#"); t != rest && (t == "" || strings.HasSuffix(t, " ")) {
				rest = strings.TrimSpace(t)
			}
			if t := cleanTitle(rest); t != "" {
				return t
			}
		}
	}
	return ""
}

// cutHeadingMark returns the text of a level-one ATX heading line after its "#": the
// mark is followed by a space or a tab (CommonMark), so "#\tTitle" is a heading too.
func cutHeadingMark(trimmed string) (string, bool) {
	if rest, ok := strings.CutPrefix(trimmed, "#"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
		return rest, true
	}
	return "", false
}

// fallbackTitle names a document after its file: "rotation.md" → "rotation", a stub
// "rotation.stub.md" → "rotation", and a folder summary after its folder.
func fallbackTitle(p, rootName string) string {
	name := path.Base(p)
	if name == indexName {
		if dir := path.Dir(p); dir != "." {
			return path.Base(dir)
		}
		return rootName
	}
	if t, ok := strings.CutSuffix(name, stubSuffix); ok && t != "" {
		return t
	}
	return strings.TrimSuffix(name, mdSuffix)
}

// cause drops the *PathError wrapper, whose path (absolute, through the root) would only
// repeat the relative path already recorded.
func cause(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
