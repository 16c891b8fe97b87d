package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/kbpath"
	"github.com/schollz/progressbar/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// knowledgeClient dials the search service's KnowledgeService.
func knowledgeClient(srv *serverFlags) (quarryv1.KnowledgeServiceClient, func(), error) {
	conn, err := srv.dial()
	if err != nil {
		return nil, nil, err
	}
	return quarryv1.NewKnowledgeServiceClient(conn), func() { conn.Close() }, nil
}

// syncCmd is "quarry sync DIR -kb K": upload a local tree so the knowledge base equals
// it (files added, changed and removed), with a progress bar and a summary.
func syncCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("sync", flag.ContinueOnError)
	var srv serverFlags
	srv.register(fs, "127.0.0.1:7701", "search service (KnowledgeService) address; the API key needs the write right")
	kbID := fs.String("kb", "", "knowledge base to sync into (created if new)")
	keep := fs.Bool("keep-missing", false, "keep files the knowledge base has and the folder does not")
	allowEmpty := fs.Bool("allow-empty", false, "let a folder without markdown files empty the knowledge base")
	timeout := fs.Duration("timeout", 10*time.Minute, "deadline for the whole sync")
	if err := parseFlags(fs, reorderArgs(fs, args), true); err != nil {
		return err
	}
	if fs.NArg() != 1 || *kbID == "" {
		return usagef("usage: quarry sync DIR -kb K")
	}
	if err := checkCallFlags(*timeout, *kbID); err != nil {
		return err
	}
	dir := fs.Arg(0)
	if fi, err := os.Stat(dir); err != nil {
		return err
	} else if !fi.IsDir() {
		// Walked, a file lists nothing, and a sync of nothing empties the knowledge base.
		return fmt.Errorf("%s is not a folder: quarry sync uploads a folder's markdown files (quarry sync DIR -kb K)", dir)
	}
	files, skipped, err := collect(dir)
	if err != nil {
		return err
	}
	if err := checkUploadable(dir, files); err != nil {
		return err
	}
	if len(files) == 0 && !*keep && !*allowEmpty {
		return fmt.Errorf("%s holds no markdown files: the sync would remove every file of %s (-allow-empty to do that)", dir, *kbID)
	}
	for _, s := range skipped {
		fmt.Fprintf(stderr, "skipped %s\n", s)
	}
	kc, closeConn, err := knowledgeClient(&srv)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	stream, err := kc.SyncFiles(ctx)
	if err != nil {
		return statusError(err)
	}
	if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_Header{Header: &quarryv1.SyncFilesHeader{KnowledgeBase: *kbID, KeepMissing: *keep}}}); err != nil {
		_, err = stream.CloseAndRecv() // Send says only io.EOF; this says why
		return statusError(err)
	}
	// A bar redrawn with carriage returns is noise in a log (CI, a pipe): drawn on a
	// terminal only.
	bar := progressbar.NewOptions(len(files), progressbar.OptionSetWriter(stderr), progressbar.OptionSetDescription("uploading"),
		progressbar.OptionShowCount(), progressbar.OptionClearOnFinish(), progressbar.OptionSetVisibility(isTerminal(stderr)))
	for _, p := range files {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		if err := stream.Send(&quarryv1.SyncFilesRequest{Message: &quarryv1.SyncFilesRequest_File{File: &quarryv1.UploadedFile{Path: p, Content: data}}}); err != nil {
			break // the server ended the stream; CloseAndRecv says why
		}
		_ = bar.Add(1)
	}
	_ = bar.Finish()
	fmt.Fprintln(stderr, "indexing...")
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return statusError(err)
	}
	s := resp.GetSummary()
	fmt.Fprintf(stdout, "synced %d files into %s: %d indexed, %d unchanged, %d removed, %d rejected; generation %d, %d documents\n",
		len(files), *kbID, s.GetIndexed(), s.GetUnchanged(), s.GetRemoved(), s.GetRejected(), s.GetGeneration(), s.GetDocumentCount())
	for _, f := range resp.GetFiles() {
		if f.GetOutcome() == quarryv1.FileOutcome_FILE_OUTCOME_REJECTED {
			fmt.Fprintf(stdout, "  rejected %s: %s\n", f.GetPath(), f.GetReason())
		}
	}
	if resp.GetFilesTruncated() {
		fmt.Fprintf(stdout, "  (the search service listed %d of the results, rejected files first)\n", len(resp.GetFiles()))
	}
	if s.GetRejected() > 0 {
		return fmt.Errorf("%d files rejected", s.GetRejected())
	}
	return nil
}

// checkUploadable refuses a sync with a file too large for one gRPC message before
// anything is sent. Read whole and sent, such a file ended the stream with "trying to
// send message larger than max" and the whole sync failed; left out, the sync would
// remove the file's indexed version. The search service takes files up to its
// -kb-max-file-bytes (1 MiB by default) and rejects larger ones on its own.
func checkUploadable(dir string, files []string) error {
	var tooBig []string
	for _, p := range files {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(p)))
		if err != nil {
			return err
		}
		if fi.Size() > maxUploadBytes(p) {
			tooBig = append(tooBig, fmt.Sprintf("%s (%d bytes)", p, fi.Size()))
		}
	}
	if len(tooBig) > 0 {
		return fmt.Errorf("nothing synced: %d files are over the %d bytes one upload message carries (the search service indexes files up to -kb-max-file-bytes, 1 MiB by default); move them out of the folder: %s",
			len(tooBig), grpcx.MaxMessageBytes, strings.Join(tooBig, ", "))
	}
	return nil
}

// maxUploadBytes is the largest file of this path that fits one SyncFiles message.
func maxUploadBytes(path string) int64 {
	// The message's own bytes: the oneof field's and the file's tags and lengths
	// (at most 2+5 and 1+5+1+5) and the path.
	const overhead = 32
	return int64(grpcx.MaxMessageBytes - overhead - len(path))
}

// collect lists the markdown files under dir as slash paths; links, hidden entries,
// files that are not regular (a named pipe) and names no knowledge base path may hold
// (not UTF-8, a control character, a backslash) are left out, as the search service's
// loader leaves them out of a folder it serves.
func collect(dir string) (files, skipped []string, err error) {
	// The folder named may itself be a link (~/notes to a synced drive): WalkDir does not
	// follow the link it starts from and listed nothing, so the folder was refused as
	// holding no markdown. Only that one link is followed; those inside still are not.
	if fi, lerr := os.Lstat(dir); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
		if dir, err = filepath.EvalSymlinks(dir); err != nil {
			return nil, nil, fmt.Errorf("collect: %w", err)
		}
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.Type()&fs.ModeSymlink != 0 {
			skipped = append(skipped, rel+" (symbolic link)")
			return nil
		}
		if !d.IsDir() && !strings.HasSuffix(d.Name(), ".md") {
			return nil
		}
		// A name no knowledge base path may hold, as the service's own loader skips it:
		// one that is not UTF-8 could not even be sent (the whole sync failed with
		// "Internal: grpc: error while marshaling: string field contains invalid UTF-8",
		// naming no file).
		if _, err := kbpath.Clean(filepath.ToSlash(rel)); err != nil {
			skipped = append(skipped, fmt.Sprintf("%q (%v)", rel, err))
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			// A named pipe read blocked the sync for good, Ctrl-C included.
			skipped = append(skipped, rel+" (not a regular file)")
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	})
	return files, skipped, err
}

// archiveCmd is "quarry archive -kb K -suggest [-apply]": list the files whose
// importance fell below the archive threshold, and archive them on request.
func archiveCmd(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("archive", flag.ContinueOnError)
	var srv serverFlags
	srv.register(fs, "127.0.0.1:7701", "search service (KnowledgeService) address; -apply needs an API key with the write right")
	kbID := fs.String("kb", "", "knowledge base")
	suggest := fs.Bool("suggest", false, "list archive candidates (importance below -below)")
	below := fs.Float64("below", 35, "importance under which a file is a candidate")
	limit := fs.Int("limit", 20, "most candidates listed")
	apply := fs.Bool("apply", false, "archive the candidates listed")
	timeout := fs.Duration("timeout", time.Minute, "deadline for the listing and every archive it applies")
	if err := parseFlags(fs, args, false); err != nil {
		return err
	}
	if *kbID == "" || !*suggest {
		return usagef("usage: quarry archive -kb K -suggest [-below 35] [-apply]")
	}
	if err := checkCallFlags(*timeout, *kbID); err != nil {
		return err
	}
	// The service's bounds, checked before the conversion to the request's int32: a
	// -limit past it wrapped round ("-limit 4294967297" listed one candidate).
	if *limit < 1 || *limit > 10000 {
		return usagef("-limit must be in [1,10000], got %d", *limit)
	}
	kc, closeConn, err := knowledgeClient(&srv)
	if err != nil {
		return err
	}
	defer closeConn()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	resp, err := kc.SuggestArchive(ctx, &quarryv1.SuggestArchiveRequest{KnowledgeBase: *kbID, BelowImportance: *below, Limit: int32(*limit)})
	if err != nil {
		return statusError(err)
	}
	if len(resp.GetCandidates()) == 0 {
		fmt.Fprintf(stdout, "no file of %s is below importance %.0f\n", *kbID, *below)
		return nil
	}
	for _, c := range resp.GetCandidates() {
		fmt.Fprintf(stdout, "%6.1f  %-10s %s  %s\n", c.GetImportance(), strings.TrimPrefix(c.GetMaturity().String(), "MATURITY_"), c.GetPath(), c.GetTitle())
		if *apply {
			a, err := kc.ArchiveFile(ctx, &quarryv1.ArchiveFileRequest{KnowledgeBase: *kbID, Path: c.GetPath()})
			if err != nil {
				return statusError(err)
			}
			fmt.Fprintf(stdout, "        archived: stub %s\n", a.GetStubPath())
		}
	}
	return nil
}

func statusError(err error) error {
	st := status.Convert(err)
	return fmt.Errorf("%s: %s%s", st.Code(), st.Message(), statusHint(st))
}

// statusHint says what to do about the failures a command line causes: the wrong
// address, or the wrong service at it, or no key.
func statusHint(st *status.Status) string {
	msg := st.Message()
	switch st.Code() {
	case codes.Unavailable:
		if strings.Contains(msg, "connection refused") {
			return " (is Quarry running there? `quarry up` serves the gateway on 127.0.0.1:7700 and the search service on 127.0.0.1:7701; -addr names another)"
		}
	case codes.Unimplemented:
		switch {
		case strings.Contains(msg, "quarry.v1.KnowledgeService"):
			return " (-addr names a gateway: sync and archive talk to the search service, 127.0.0.1:7701 by default)"
		case strings.Contains(msg, "quarry.v1.QueryService"):
			return " (-addr names a search service: query talks to the gateway, 127.0.0.1:7700 by default)"
		}
	case codes.Unauthenticated:
		return " (pass -api-key, or set $QUARRY_API_KEY)"
	}
	return ""
}

// reorderArgs lets flags follow the positional argument ("sync DIR -kb K"), which the
// flag package alone does not. A flag of fs that is a switch (-tls) takes no value, so
// the word after it stays positional; after "--" every word is positional.
func reorderArgs(fs *flag.FlagSet, args []string) []string {
	var flags, pos []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			pos = append(pos, args[i+1:]...)
			break
		}
		if strings.HasPrefix(a, "-") && a != "-" {
			flags = append(flags, a)
			if !strings.Contains(a, "=") && i+1 < len(args) && !strings.HasPrefix(args[i+1], "-") && !isSwitch(fs, a) {
				flags = append(flags, args[i+1])
				i++
			}
			continue
		}
		pos = append(pos, a)
	}
	if len(pos) == 0 {
		return flags
	}
	// "--" keeps a positional word that starts with a dash from being read as a flag.
	return append(append(flags, "--"), pos...)
}

func isSwitch(fs *flag.FlagSet, arg string) bool {
	f := fs.Lookup(strings.TrimLeft(arg, "-"))
	if f == nil {
		return false
	}
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
