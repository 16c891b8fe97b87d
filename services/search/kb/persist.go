package kb

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/quarry-router/quarry/services/search/signals"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// signalsFile holds what the runtime learned about a knowledge base's files (importance,
// maturity, last access), beside its index in -data-dir and never in the markdown, so a
// restart carries it over.
const signalsFile = "signals.json"

// signalsVersion is the format of signalsFile this release writes and reads. Bump it
// when a field changes meaning or name: a release reads no file of a newer format (after
// a rollback) rather than misread it. Files written before versions were (none) are 1.
const signalsVersion = 1

// savedSignals is the content of signalsFile.
type savedSignals struct {
	Version int       `json:"version"`
	Saved   time.Time `json:"saved"`
	// Cursor is the last batch of the signals pool applied to Records (pooled
	// signals, PoolSignalsVia), where the store reads on from after a restart, and
	// Seen the batches and edits applied lately, so that each still counts once.
	Cursor  string               `json:"cursor,omitempty"`
	At      time.Time            `json:"at,omitzero"`
	Seen    map[string]time.Time `json:"seen,omitempty"`
	Records []signals.Record     `json:"records"`
	// Pending is this replica's batches the pool had not confirmed: published again
	// after a restart, rather than lost to the other replicas.
	Pending []signals.PendingBatch `json:"pending,omitempty"`
}

// RunSignals flushes every knowledge base's runtime signals in the background until
// ctx is done, then flushes once more. With a -data-dir, each flush that changed something
// is saved there, and the last one before returning.
func (r *Registry) RunSignals(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var sv signalSaver
	for {
		select {
		case <-ctx.Done():
			// The last flush publishes what this replica counted since the one before.
			last, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastPoolFlush)
			sv.flush(last, r)
			cancel()
			return
		case <-t.C:
			sv.flush(ctx, r)
		}
	}
}

// signalSaver flushes the knowledge bases' signals and saves those that changed.
type signalSaver struct {
	// saved is, per current store, its Changes() when last saved (0: never).
	saved map[*signals.Store]uint64
	// failing holds the knowledge bases whose pool failed at the last flush: a
	// failure is logged when it starts and when it ends, not at every flush.
	failing map[string]bool
}

// lastPoolFlush bounds the flush that publishes a stopping replica's last hits.
const lastPoolFlush = 5 * time.Second

// poolFlushes counts the flushes of pooled signals by outcome: ok; error (the pool
// was unreachable: this replica's hits count here only until it is back); missed
// (batches other replicas counted were trimmed before this one read them); snapshot
// (the pool's snapshot could not be read or offered); unreadable (an entry was passed
// by). Created at init from the global provider, a no-op until telemetry sets one up.
var poolFlushes, _ = otel.Meter("github.com/quarry-router/quarry/services/search/kb").Int64Counter(
	"quarry.search.signals.pool.flushes",
	metric.WithDescription("Flushes of runtime signals through the pool the search replicas share, by outcome"),
	metric.WithUnit("{flush}"))

// poolOutcomes are the outcomes of a pooled flush, the first whose error it returned
// first: what its kind of error says, and its metric options.
var poolOutcomes = []struct {
	err  error
	name string
	opts []metric.AddOption
}{
	{signals.ErrUnreachable, "error", nil},
	{signals.ErrMissed, "missed", nil},
	{signals.ErrSnapshot, "snapshot", nil},
	{signals.ErrUnreadable, "unreadable", nil},
	{nil, "ok", nil},
}

func init() {
	for i, o := range poolOutcomes {
		poolOutcomes[i].opts = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(attribute.String("quarry.outcome", o.name)))}
	}
}

// flushVia flushes k's signals through its pool. An unreachable pool is logged when
// it becomes so and when it is back, not at every flush; the other problems, rare,
// whenever they happen.
func (sv *signalSaver) flushVia(ctx context.Context, r *Registry, k *KB) {
	err := k.Signals.FlushVia(ctx, r.pools(k.ID))
	outcome := poolOutcomes[len(poolOutcomes)-1]
	for _, o := range poolOutcomes {
		if o.err != nil && errors.Is(err, o.err) {
			outcome = o
			break
		}
	}
	poolFlushes.Add(ctx, 1, outcome.opts...)
	unreachable := errors.Is(err, signals.ErrUnreachable)
	switch {
	case unreachable && !sv.failing[k.ID]:
		if sv.failing == nil {
			sv.failing = map[string]bool{}
		}
		sv.failing[k.ID] = true
		r.log.Warn("signals pool unreachable; this replica counts its own hits alone until it is back", "kb", k.ID, "err", err)
	case !unreachable && sv.failing[k.ID]:
		delete(sv.failing, k.ID)
		r.log.Info("signals pool reachable again", "kb", k.ID)
	}
	if err != nil && !unreachable {
		r.log.Warn("signals pool", "kb", k.ID, "outcome", outcome.name, "err", err)
	}
}

func (sv *signalSaver) flush(ctx context.Context, r *Registry) {
	r.mu.RLock()
	kbs := make([]*KB, 0, len(r.kbs))
	for _, k := range r.kbs {
		kbs = append(kbs, k)
	}
	r.mu.RUnlock()
	// Only the current stores are kept: a store a reload replaced is never saved again,
	// and holding it kept it and all its entries alive.
	next := make(map[*signals.Store]uint64, len(kbs))
	for _, k := range kbs {
		if r.pools == nil {
			k.Signals.Flush()
		} else {
			sv.flushVia(ctx, r, k)
		}
		if r.cfg.DataDir == "" {
			continue
		}
		last := sv.saved[k.Signals]
		if c := k.Signals.Changes(); last != c {
			if err := r.saveSignals(k); err != nil {
				r.log.Warn("save signals", "kb", k.ID, "err", err)
			} else {
				last = c
			}
		}
		next[k.Signals] = last
	}
	sv.saved = next
}

func (r *Registry) saveSignals(k *KB) error {
	state, current := k.Signals.SavedState()
	if !current {
		return nil // replaced by a reload since it was listed: its successor is saved
	}
	raw, err := json.Marshal(savedSignals{Version: signalsVersion, Saved: time.Now().UTC(), Cursor: state.Cursor, At: state.At, Seen: state.Seen, Records: state.Records, Pending: state.Pending})
	if err != nil {
		return err
	}
	return replaceFile(filepath.Join(r.cfg.DataDir, k.ID), signalsFile, func(w io.Writer) error {
		_, err := w.Write(raw)
		return err
	})
}

// replaceFile writes dir/name through a temporary file renamed over it, so that a
// reader, or a restart after a crash or a power loss, finds the old file or the new one,
// never a part of one.
func replaceFile(dir, name string, write func(io.Writer) error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+name+"-*.tmp")
	if err != nil {
		return err
	}
	err = write(tmp)
	if err == nil {
		// On disk before the rename: after a power loss the file is the old one or the
		// new one, never an empty one.
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, name))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return err
	}
	// The new name is an entry of dir: until dir is synced, a crash can bring back the
	// older file (for signals, ones already acknowledged as saved).
	return syncFolder(dir)
}

func syncFolder(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// restoreSignals applies the signals saved for a knowledge base, if any, to a new store.
func (r *Registry) restoreSignals(id string, sig *signals.Store) {
	if r.cfg.DataDir == "" {
		return
	}
	raw, err := os.ReadFile(filepath.Join(r.cfg.DataDir, id, signalsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	var s savedSignals
	if err == nil {
		err = json.Unmarshal(raw, &s)
	}
	if err == nil && s.Version > signalsVersion {
		err = fmt.Errorf("format version %d, newer than this release's %d (a rollback?); the next save replaces it", s.Version, signalsVersion)
	}
	if err != nil {
		// Lost signals cost ranking hints, not correctness: start from the front matter.
		r.log.Warn("saved signals unreadable; starting from the front matter", "kb", id, "err", fmt.Errorf("%s: %w", signalsFile, err))
		return
	}
	sig.Resume(signals.Snapshot{Cursor: s.Cursor, At: s.At, Records: s.Records, Seen: s.Seen, Pending: s.Pending})
}
