// Package app runs the search service: it is what cmd/search and the all-in-one
// "quarry up" start.
package app

import (
	"context"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"time"

	quarryv1 "github.com/quarry-router/quarry/gen/quarry/v1"
	"github.com/quarry-router/quarry/platform/auth"
	"github.com/quarry-router/quarry/platform/config"
	"github.com/quarry-router/quarry/platform/grpcx"
	"github.com/quarry-router/quarry/platform/limit"
	"github.com/quarry-router/quarry/platform/redisx"
	"github.com/quarry-router/quarry/platform/telemetry"
	"github.com/quarry-router/quarry/platform/workers"
	"github.com/quarry-router/quarry/services/search/kb"
	"github.com/quarry-router/quarry/services/search/lexicon"
	"github.com/quarry-router/quarry/services/search/resolve"
	"github.com/quarry-router/quarry/services/search/server"
	"github.com/quarry-router/quarry/services/search/signals"
	"github.com/quarry-router/quarry/services/search/tree"
	"google.golang.org/grpc"
)

// dataDirLock is the file in -data-dir that one process at a time holds (lockDataDir).
// Knowledge base ids start with a letter or digit, so it is no knowledge base's folder.
const dataDirLock = ".lock"

// Config is the search service's configuration.
type Config struct {
	Listen string
	// HealthListen, if set, serves the gRPC health service alone, in plaintext, for probes
	// that cannot speak TLS (Kubernetes' gRPC probes) while Listen requires it.
	HealthListen string
	// MetricsAddr serves Prometheus /metrics when set.
	MetricsAddr string
	// AuthKeys is a JSON file of API keys (platform/auth.Key); empty leaves the service
	// open, as an internal service behind network policies may be.
	AuthKeys string
	KBs      kbFlag
	KBRoot   string
	Load     kb.Config
	Resolve  resolve.Config

	// TLS is how the service serves (plaintext by default, for loopback).
	TLS grpcx.ServerTLSConfig
	// Limits hold each caller of the KnowledgeService (the write side) to a request
	// rate and a number of calls in flight; reads are bounded by the gateway's.
	Limits limit.Config
	// Serve is how callers' connections age and how the service drains.
	Serve grpcx.ServeConfig
	// ShareSignals pools the knowledge bases' runtime signals with the other search
	// replicas through Redis (Redis), so that every replica counts every replica's
	// hits and curations (signals.Pool).
	ShareSignals bool
	Redis        redisx.Config
}

// RegisterFlags registers every flag with its default.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.Listen, "listen", "127.0.0.1:7701", "address to serve the SearchService on (host:port)")
	fs.StringVar(&c.HealthListen, "health-listen", "", `address serving only the gRPC health service, in plaintext, for probes that cannot speak TLS ("" = off; -listen serves health too)`)
	fs.StringVar(&c.MetricsAddr, "metrics-addr", "", `address to serve Prometheus /metrics on ("" = off)`)
	fs.StringVar(&c.AuthKeys, "auth-keys", "", `JSON file of API keys allowed to call (name, sha256, knowledge_bases, write); "" = no key needed`)
	c.TLS.RegisterFlags(fs)
	c.Limits.RegisterFlags(fs)
	c.Serve.RegisterFlags(fs, grpcx.DefaultDrain.Timeout)
	fs.Var(&c.KBs, "kb", "knowledge base to serve as id=folder (repeatable)")
	fs.StringVar(&c.KBRoot, "kb-root", "", "folder whose subfolders are knowledge bases, each named after its folder")
	c.Load.RegisterFlags(fs)
	c.Resolve.RegisterFlags(fs)
	fs.BoolVar(&c.ShareSignals, "share-signals", false, "pool runtime signals (search hits, curations) with the other search replicas through Redis (-redis-*): each replica then counts every replica's hits")
	c.Redis.RegisterFlags(fs, redisx.Flags{
		Defaults: redisx.Config{
			Addr:        "127.0.0.1:6379",
			PoolSize:    4,
			DialTimeout: time.Second,
			Timeout:     time.Second,
			KeyPrefix:   "quarry:",
		},
		Use:         "with -share-signals",
		PastTimeout: "past it the flush counts this replica's hits alone and tries the pool again at the next",
		PasswordEnv: "QUARRY_SEARCH_REDIS_PASSWORD",
	})
}

// Validate rejects unusable settings, naming the flag.
func (c *Config) Validate() error {
	var errs []error
	if len(c.KBs) == 0 && c.KBRoot == "" {
		errs = append(errs, errors.New("no knowledge base: set -kb id=folder or -kb-root folder"))
	}
	if c.ShareSignals {
		errs = append(errs, c.Redis.Validate())
	}
	errs = append(errs, c.dataDirApart())
	return errors.Join(append(errs, c.TLS.Validate(), c.Limits.Validate(), c.Serve.Validate(), c.Load.Validate(), c.Resolve.Validate())...)
}

// dataDirApart refuses a -data-dir that is, holds or lies in a knowledge base's folder
// (or -kb-root): the service writes indexes, term statistics and signals there, which a
// watched folder would then read as edits to its tree, and it removes what it wrote.
// Validate checks the folders the flags name; Run checks again the ones -kb-root's
// entries link to.
func (c *Config) dataDirApart() error {
	folders := []string{c.KBRoot}
	for _, dir := range c.KBs {
		folders = append(folders, dir)
	}
	return dataDirApart(c.Load.DataDir, folders)
}

func dataDirApart(dataDir string, folders []string) error {
	if dataDir == "" {
		return nil
	}
	data := absPath(dataDir)
	within := func(p, dir string) bool { _, in := tree.Beneath(dir, p); return in }
	slices.Sort(folders) // the same folder named whatever the map's order
	for _, f := range folders {
		if f == "" {
			continue
		}
		if dir := absPath(f); within(data, dir) || within(dir, data) {
			return fmt.Errorf("-data-dir %s overlaps the knowledge base folder %s: give the service a folder of its own", dataDir, f)
		}
	}
	return nil
}

// absPath returns p absolute and with its symbolic links resolved, so two spellings of
// one folder compare equal. The links are resolved before "..", as the system resolves
// them; of a folder still to be made (-data-dir is created at start), those of its
// longest existing part.
func absPath(p string) string {
	if !filepath.IsAbs(p) {
		if wd, err := os.Getwd(); err == nil {
			p = wd + string(filepath.Separator) + p // not Join: it would clean ".." first
		}
	}
	// Parts are taken off the end as written, not through filepath.Dir, which would
	// clean the ".." away too.
	dir, rest := strings.TrimRight(p, string(filepath.Separator)), ""
	for dir != "" {
		if real, err := filepath.EvalSymlinks(dir); err == nil {
			return filepath.Join(real, rest)
		}
		i := strings.LastIndexByte(dir, filepath.Separator)
		if i < 0 {
			break
		}
		dir, rest = strings.TrimRight(dir[:i], string(filepath.Separator)), filepath.Join(dir[i+1:], rest)
	}
	return filepath.Clean(p)
}

// kbFlag collects -kb id=folder values.
type kbFlag map[string]string

func (f *kbFlag) String() string {
	var parts []string
	for id, dir := range *f {
		parts = append(parts, id+"="+dir)
	}
	sort.Strings(parts)
	return strings.Join(parts, ",")
}

func (f *kbFlag) Set(v string) error {
	for _, item := range strings.Split(v, ",") {
		id, dir, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || dir == "" {
			return fmt.Errorf("want id=folder, got %q", item)
		}
		if !kb.ValidID(id) {
			return fmt.Errorf("knowledge base id %q: want %s", id, kb.IDRule)
		}
		if *f == nil {
			*f = kbFlag{}
		}
		(*f)[id] = dir
	}
	return nil
}

// Run parses args, loads the knowledge bases, serves until ctx is done, and reports
// the bound address through ready.
func Run(ctx context.Context, args []string, log *slog.Logger, ready func(net.Addr)) error {
	fs := flag.NewFlagSet("search", flag.ContinueOnError)
	var cfg Config
	cfg.RegisterFlags(fs)
	if err := config.Parse(fs, "search", args, cfg.Validate); err != nil {
		return err
	}
	kbs, err := cfg.knowledgeBases(log)
	if err != nil {
		return err
	}
	if err := dataDirApart(cfg.Load.DataDir, slices.Collect(maps.Values(kbs))); err != nil {
		return err
	}

	// While the knowledge bases load, not on the first query that needs it.
	go lexicon.Warm()

	// Knowledge bases first created by a sync get a folder beside the others.
	cfg.Load.Write.NewRoot = cfg.KBRoot
	cfg.Load.VersionSalt = versionSalt(fs)
	if cfg.Load.DataDir != "" {
		release, err := lockDataDir(cfg.Load.DataDir)
		if err != nil {
			return err
		}
		defer release() // after the registry has closed its indexes and saved its signals
	}
	reg := kb.NewRegistry(cfg.Load, log)
	defer reg.Close()
	if cfg.ShareSignals {
		client, err := cfg.Redis.NewClient()
		if err != nil {
			return err
		}
		defer client.Close() // after the last flush, below
		pctx, cancel := context.WithTimeout(ctx, cfg.Redis.DialTimeout)
		if err := client.Ping(pctx).Err(); err != nil {
			// Not fatal: each replica counts its own hits until Redis is reachable.
			log.Warn("redis not reachable at start; signals are this replica's own until it is", "addr", cfg.Redis.Addr, "err", err)
		}
		cancel()
		prefix, timeout := cfg.Redis.Prefix(), cfg.Redis.Timeout
		reg.PoolSignalsVia(func(id string) signals.Pool { return signals.NewRedisPool(client, prefix, id, timeout) })
	}
	// -kb-root rescans for knowledge bases added (or repaired) while the service runs,
	// with the folder rescans (-watch-poll).
	followRoot := cfg.KBRoot != "" && cfg.Load.Write.Watch && cfg.Load.Write.WatchPoll > 0
	failed := map[string]string{} // -kb-root entries that did not load → the error logged
	var loadErrs []error
	for _, id := range sortedKeys(kbs) {
		if _, err := reg.Load(ctx, id, kbs[id]); err != nil {
			if ctx.Err() != nil {
				// SIGTERM during start: a stop asked for, not a failure. A half-built
				// index holds no fingerprint and is rebuilt by the next start.
				log.Info("stopped while loading the knowledge bases", "kb", id)
				return nil
			}
			err = loadError(err)
			if _, named := cfg.KBs[id]; named {
				return err
			}
			// One team's folder under -kb-root (too many files, unreadable) must not
			// take every other team's knowledge base down with it.
			retry := "it is not served until the service restarts"
			if followRoot {
				retry = "it is tried again at each -watch-poll rescan"
			}
			log.Error("knowledge base under -kb-root not loaded; the others are served and "+retry, "kb", id, "err", err)
			failed[id] = err.Error()
			loadErrs = append(loadErrs, err)
		}
	}
	if len(loadErrs) == len(kbs) {
		return fmt.Errorf("no knowledge base could be loaded: %w", errors.Join(loadErrs...))
	}
	// Not ended by ctx: the service goes on answering (and counting hits, and taking
	// writes' curations) through the drain that ctx's end begins. The deferred stop runs
	// once serving has stopped, so the last flush (and, with -data-dir, save) holds all
	// of it, and happens before the registry closes.
	signalsCtx, stopSignals := context.WithCancel(context.WithoutCancel(ctx))
	signalsDone := make(chan struct{})
	go func() { defer close(signalsDone); reg.RunSignals(signalsCtx, cfg.Load.Signals.FlushInterval) }()
	defer func() { stopSignals(); <-signalsDone }()
	if cfg.Load.Write.Watch {
		watchCtx, stopWatch := context.WithCancel(ctx)
		waitWatch, err := reg.WatchFolders(watchCtx)
		if err != nil {
			stopWatch()
			return fmt.Errorf("watch knowledge base folders: %w", err)
		}
		// The watcher writes through the registry: it must be gone before Close.
		defer func() { stopWatch(); waitWatch() }()
		if cfg.Load.Write.WatchPoll > 0 {
			pollCtx, stopPoll := context.WithCancel(ctx)
			waitPoll := reg.PollFolders(pollCtx, cfg.Load.Write.WatchPoll)
			defer func() { stopPoll(); waitPoll() }()
		}
	}
	if followRoot {
		rootCtx, stopRoot := context.WithCancel(ctx)
		waitRoot := cfg.followKBRoot(rootCtx, reg, cfg.Load.Write.WatchPoll, failed, log)
		// It loads through the registry: it must be gone before Close.
		defer func() { stopRoot(); waitRoot() }()
	}
	// Served until Run returns, through the drain after SIGTERM: a stopping replica's
	// last scrapes record how its last calls went.
	stopMetrics, err := telemetry.StartMetrics(context.WithoutCancel(ctx), cfg.MetricsAddr, log)
	if err != nil {
		return err
	}
	defer stopMetrics()

	lis, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", cfg.Listen, err)
	}
	defer lis.Close() // Serve closes it too; this covers a start that fails first
	policy, err := loadPolicy(cfg.AuthKeys, log)
	if err != nil {
		return err
	}
	cfg.TLS.WarnIfExposed(log, cfg.Listen, !policy.Open())
	tlsOpt, err := cfg.TLS.ServerOption()
	if err != nil {
		return err
	}
	// Auth runs before the limits: a refused key takes no token and no slot.
	opts := append([]grpc.ServerOption{tlsOpt}, grpcx.WithAuth(policy)...)
	opts = append(opts, grpcx.WithLimits(limit.New(cfg.Limits, time.Now), grpcx.Methods("/"+quarryv1.KnowledgeService_ServiceDesc.ServiceName+"/"))...)
	s := cfg.Serve.NewServer(log, opts...)
	defer s.Stop() // a start that fails below leaves nothing running
	if cfg.HealthListen != "" {
		if _, err := s.HealthOn(cfg.HealthListen); err != nil {
			return err
		}
	}
	searchSrv := server.New(reg, resolve.New(cfg.Resolve, reg, time.Now), log)
	searchSrv.StopWatchesOn(s.Draining())
	quarryv1.RegisterSearchServiceServer(s.Server, searchSrv)
	quarryv1.RegisterKnowledgeServiceServer(s.Server, server.NewKnowledge(reg, log))
	s.SetServing(quarryv1.SearchService_ServiceDesc.ServiceName)
	s.SetServing(quarryv1.KnowledgeService_ServiceDesc.ServiceName)
	log.Info("search serving", "addr", lis.Addr().String(), "knowledge_bases", len(reg.States()))
	if ready != nil {
		ready(lis.Addr())
	}
	return s.Serve(ctx, lis)
}

func (c *Config) knowledgeBases(log *slog.Logger) (map[string]string, error) {
	out := map[string]string{}
	var misnamed []string
	if c.KBRoot != "" {
		entries, err := os.ReadDir(c.KBRoot)
		if err != nil {
			return nil, fmt.Errorf("-kb-root: %w", err)
		}
		for _, e := range entries {
			if !kb.ValidID(e.Name()) {
				// "Runbooks" or "team docs" was skipped without a word. Hidden folders
				// and a volume's lost+found are no knowledge base by design.
				if name := e.Name(); e.IsDir() && !strings.HasPrefix(name, ".") && name != "lost+found" {
					misnamed = append(misnamed, name)
					log.Warn("folder under -kb-root skipped: its name is no knowledge base id (ids are "+kb.IDRule+")", "folder", name)
				}
				continue
			}
			dir := filepath.Join(c.KBRoot, e.Name())
			if e.Type()&os.ModeSymlink != 0 {
				// A link to a folder is a knowledge base, as git-sync publishes each
				// checkout (--link); the loader and the watcher follow a root link.
				if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
					continue
				}
			} else if !e.IsDir() {
				continue
			}
			out[e.Name()] = dir
		}
	}
	for id, dir := range c.KBs {
		out[id] = dir
	}
	if len(out) == 0 {
		if len(misnamed) > 0 {
			return nil, fmt.Errorf("no knowledge base found under -kb-root %s: %q skipped (ids are %s)", c.KBRoot, misnamed, kb.IDRule)
		}
		return nil, fmt.Errorf("no knowledge base found under -kb-root %s", c.KBRoot)
	}
	return out, nil
}

// loadError adds to a load's error what the operator can do about it.
func loadError(err error) error {
	if errors.Is(err, tree.ErrTooManyFiles) {
		return fmt.Errorf("%w (raise -kb-max-files to serve it)", err)
	}
	return err
}

// followKBRoot lists -kb-root every interval and loads the knowledge bases not served
// yet: folders (or links) added while the service runs, as a team's sync job or
// git-sync adds them, and those that failed to load before (failed, which it owns from
// now on: each error is logged once, not at every rescan). A knowledge base whose
// folder goes away is not unloaded (the registry cannot unload one). wait returns once
// it has stopped after ctx is done.
func (c *Config) followKBRoot(ctx context.Context, reg *kb.Registry, interval time.Duration, failed map[string]string, log *slog.Logger) (wait func()) {
	return workers.Every(ctx, interval, func() { c.loadNewKBs(ctx, reg, failed, log) })
}

// loadNewKBs loads the knowledge bases under -kb-root that the registry does not serve.
func (c *Config) loadNewKBs(ctx context.Context, reg *kb.Registry, failed map[string]string, log *slog.Logger) {
	// Misnamed folders were named at start; a root that cannot be read for a moment (a
	// volume being remounted) is read again at the next rescan.
	kbs, err := c.knowledgeBases(slog.New(slog.DiscardHandler))
	if err != nil {
		return
	}
	for _, id := range sortedKeys(kbs) {
		if ctx.Err() != nil {
			return
		}
		if _, err := reg.Get(id); err == nil {
			continue // served: its own folder's watcher and rescans follow it
		}
		// A link added under -kb-root may lead into -data-dir, as one at start may.
		err := dataDirApart(c.Load.DataDir, []string{kbs[id]})
		loaded := false
		if err == nil {
			// Not Load: a first sync may have created it since Get.
			_, loaded, err = reg.LoadNew(ctx, id, kbs[id])
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if err = loadError(err); failed[id] != err.Error() {
				failed[id] = err.Error()
				log.Error("knowledge base under -kb-root not loaded; it is tried again at each -watch-poll rescan", "kb", id, "err", err)
			}
			continue
		}
		delete(failed, id)
		if loaded {
			log.Info("knowledge base found under -kb-root and loaded", "kb", id, "folder", kbs[id])
		}
	}
}

// loadPolicy reads the API keys; the KnowledgeService needs the write right.
func loadPolicy(path string, log *slog.Logger) (*auth.Policy, error) {
	return auth.LoadPolicy(path, log, "/"+quarryv1.KnowledgeService_ServiceDesc.ServiceName+"/")
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// operationalFlags say where the service serves, reads and writes, with which
// credentials, and how it behaves as a process; not what it answers. Replicas differ in
// them (a folder mounted elsewhere, a Meilisearch reached by another name) and still
// answer alike. Any other flag, present or future, counts as deciding answers.
var operationalFlags = map[string]bool{
	"listen": true, "health-listen": true, "metrics-addr": true, "auth-keys": true,
	"drain-grace": true, "drain-timeout": true, "max-connection-age": true,
	"tls-cert": true, "tls-key": true, "tls-client-ca": true,
	"limit-burst": true, "limit-concurrency": true, "limit-rate": true,
	"kb": true, "kb-root": true, "data-dir": true, "sync-root": true,
	"watch": true, "watch-debounce": true, "watch-poll": true, "write-timeout": true, "signals-flush-interval": true,
	"meili-url": true, "meili-key": true, "meili-index-prefix": true, "meili-retries": true,
	"meili-retry-backoff": true, "meili-task-poll": true, "meili-task-timeout": true, "meili-request-timeout": true,
	"meili-batch-size": true, "meili-batch-bytes": true,
}

// versionSalt is what decides this service's answers beside the trees: every setting
// but the operational ones, and the build. Replicas of one deployment share it, and so
// share cached answers (kb.Config.VersionSalt); a changed setting or release computes
// afresh.
func versionSalt(fs *flag.FlagSet) string {
	var b strings.Builder
	fs.VisitAll(func(f *flag.Flag) {
		if !operationalFlags[f.Name] {
			fmt.Fprintf(&b, "%s=%q\n", f.Name, f.Value.String())
		}
	})
	if id := goBuildID(); id != "" {
		fmt.Fprintf(&b, "buildid=%s\n", id)
	} else if bi, ok := debug.ReadBuildInfo(); ok {
		fmt.Fprintf(&b, "build=%s %s\n", bi.Path, bi.Main.Version)
		for _, st := range bi.Settings {
			if strings.HasPrefix(st.Key, "vcs.") {
				fmt.Fprintf(&b, "%s=%s\n", st.Key, st.Value)
			}
		}
	}
	return b.String()
}

// goBuildID is the Go build ID of this executable (its ELF note), which changes with any
// change to the code it was built from, where the module version of a binary built
// without version control information says "(devel)" for every build. "" where the
// executable is not ELF or cannot be read.
func goBuildID() string {
	exe, err := os.Executable()
	if err != nil {
		return ""
	}
	f, err := elf.Open(exe)
	if err != nil {
		return ""
	}
	defer f.Close()
	sec := f.Section(".note.go.buildid")
	if sec == nil {
		return ""
	}
	data, err := sec.Data()
	if err != nil {
		return ""
	}
	return string(data)
}
