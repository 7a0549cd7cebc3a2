package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/internal/epochid"
	"github.com/flight-sink/flight-sink/objstore"
)

// Streaming watermarks in bounded space. A manifest carries the watermarks of at most
// Options.StreamWatermarksInManifest queries, the ones that committed most recently. When a
// commit would carry more, the half that committed longest ago move to the table's watermark
// archive: an immutable object (_streams/<uuid>.json) that holds every other query's watermark,
// rewritten under a new name (the old archive's watermarks plus the moved ones) by that commit
// and named by its manifest (StreamsArchive). So a manifest stays bounded however many queries a
// table has seen, the archive is written once per half-bound of queries that leave the manifest,
// and nothing is forgotten: a query's watermark is read from the manifest or, if it is not there,
// from the archive, until it has been idle for Options.StreamWatermarkRetention (the archive drops
// those when it is next rewritten, a manifest at its next commit).

// WatermarkArchiveFormat is the watermark archive format this build writes; a higher one is
// refused.
const WatermarkArchiveFormat = 1

// watermarkArchive is the encoding of a watermark archive.
type watermarkArchive[W any] struct {
	FormatVersion int          `json:"format_version"`
	Streams       map[string]W `json:"streams"`
}

// EncodeWatermarkArchive encodes the watermarks of an archive. The table's archive and a MemWAL
// shard manifest's archive share the format, and the policy of SpillWatermarks.
func EncodeWatermarkArchive[W any](streams map[string]W) ([]byte, error) {
	return json.Marshal(watermarkArchive[W]{FormatVersion: WatermarkArchiveFormat, Streams: streams})
}

// DecodeWatermarkArchive decodes an archive EncodeWatermarkArchive wrote. Its errors wrap
// ErrCorruptManifest or ErrUnsupportedFormat.
func DecodeWatermarkArchive[W any](b []byte) (map[string]W, error) {
	var a watermarkArchive[W]
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCorruptManifest, err)
	}
	if a.FormatVersion > WatermarkArchiveFormat {
		return nil, fmt.Errorf("format version %d: %w", a.FormatVersion, ErrUnsupportedFormat)
	}
	return a.Streams, nil
}

// SpillWatermarks is the one policy of a manifest that keeps at most limit watermarks itself.
// When hot holds more than limit, it moves out of hot the ones that committed longest ago
// (ascending by order, ties by query id), leaving the newest limit/2, and returns the new
// archive: those plus the watermarks of old (the current archive) that keep accepts and hot does
// not hold. It returns nil, changing nothing, when hot is within limit. The caller writes the
// new archive (EncodeWatermarkArchive) under a new key before the manifest that names it.
func SpillWatermarks[W any](hot, old map[string]W, limit int, order func(W) uint64, keep func(W) bool) map[string]W {
	if len(hot) <= limit {
		return nil
	}
	queries := make([]string, 0, len(hot))
	for q := range hot {
		queries = append(queries, q)
	}
	slices.SortFunc(queries, func(a, b string) int {
		if c := cmp.Compare(order(hot[a]), order(hot[b])); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	archived := make(map[string]W, len(old)+len(queries))
	for q, wm := range old {
		if _, inHot := hot[q]; !inHot && keep(wm) {
			archived[q] = wm
		}
	}
	for _, q := range queries[:len(queries)-limit/2] {
		archived[q] = hot[q]
		delete(hot, q)
	}
	return archived
}

// streamsArchiveCache is an archive as read: its key and its watermarks (never modified).
type streamsArchiveCache struct {
	key     string
	streams map[string]StreamWatermark
}

// readStreamsArchive returns the watermarks of the archive at key (relative to the table); empty
// for key "". The archive read last is kept: archives are immutable.
func (t *Table) readStreamsArchive(ctx context.Context, key string) (map[string]StreamWatermark, error) {
	if key == "" {
		return nil, nil
	}
	t.archiveMu.Lock()
	c := t.archive
	t.archiveMu.Unlock()
	if c != nil && c.key == key {
		return c.streams, nil
	}
	b, err := t.store.Get(ctx, t.key(key))
	if err != nil {
		return nil, fmt.Errorf("table %s: read watermark archive %s: %w", t.name, key, err)
	}
	streams, err := DecodeWatermarkArchive[StreamWatermark](b)
	if err != nil {
		return nil, fmt.Errorf("table %s: watermark archive %s: %w", t.name, key, err)
	}
	t.archiveMu.Lock()
	t.archive = &streamsArchiveCache{key: key, streams: streams}
	t.archiveMu.Unlock()
	return streams, nil
}

// StreamWatermark returns query q's watermark as of version m: the manifest's, or the archive's
// when the manifest does not carry it. ok is false when the table keeps none for q (it never
// committed, or it has been idle longer than the watermark retention).
func (t *Table) StreamWatermark(ctx context.Context, m *Manifest, q string) (wm StreamWatermark, ok bool, err error) {
	if wm, ok := m.Streams[q]; ok {
		return wm, true, nil
	}
	archived, err := t.readStreamsArchive(ctx, m.StreamsArchive)
	if err != nil {
		return StreamWatermark{}, false, err
	}
	wm, ok = archived[q]
	if ok && wm.TimestampNanos < m.TimestampNanos-int64(t.opts.StreamWatermarkRetention) {
		return StreamWatermark{}, false, nil // idle past the retention: forgotten
	}
	return wm, ok, nil
}

// checkArchivedEpoch returns an *epochid.CommittedError when txn is a streaming epoch whose query's
// watermark, archived as of base, is already at or past its epoch. The manifest's own watermarks
// are checked by apply.
func (t *Table) checkArchivedEpoch(ctx context.Context, base *Manifest, txn *Transaction) error {
	ep, ok := txn.Epoch()
	if !ok || base.StreamsArchive == "" {
		return nil
	}
	if _, hot := base.Streams[ep.QueryID]; hot {
		return nil
	}
	wm, ok, err := t.StreamWatermark(ctx, base, ep.QueryID)
	if err != nil {
		return err
	}
	if ok && wm.Epoch >= ep.EpochID {
		return &epochid.CommittedError{QueryID: ep.QueryID, EpochID: ep.EpochID, WatermarkEpoch: wm.Epoch, Version: wm.Version}
	}
	return nil
}

// spillStreams moves, when next carries more than StreamWatermarksInManifest watermarks, the
// ones that committed longest ago out of next into a new archive (base's archive plus them,
// without the watermarks idle past the retention or carried by next itself), which it writes
// before returning. It returns the new archive's key ("" when nothing moved): the caller's
// manifest names it and deletes it if that manifest is not created.
func (t *Table) spillStreams(ctx context.Context, base, next *Manifest) (string, error) {
	if len(next.Streams) <= t.opts.StreamWatermarksInManifest {
		return "", nil
	}
	old, err := t.readStreamsArchive(ctx, base.StreamsArchive)
	if err != nil {
		return "", err
	}
	// Oldest commit first: one version never holds two epochs of one query, but several
	// queries' watermarks may share a version through a multi-writer stage (then by query id).
	cutoff := next.TimestampNanos - int64(t.opts.StreamWatermarkRetention)
	archived := SpillWatermarks(next.Streams, old, t.opts.StreamWatermarksInManifest,
		func(wm StreamWatermark) uint64 { return wm.Version },
		func(wm StreamWatermark) bool { return wm.TimestampNanos >= cutoff })
	b, err := EncodeWatermarkArchive(archived)
	if err != nil {
		return "", err
	}
	key := makeStreamsKey(uuid.NewString())
	// The archive is durable before the manifest that names it can exist: a crash in between
	// leaves an unreferenced archive, which cleanup removes.
	if err := t.store.PutIfAbsent(ctx, t.key(key), b); err != nil && !errors.Is(err, objstore.ErrExists) {
		return "", fmt.Errorf("table %s: write watermark archive: %w", t.name, err)
	}
	next.StreamsArchive = key
	t.archiveMu.Lock()
	t.archive = &streamsArchiveCache{key: key, streams: archived}
	t.archiveMu.Unlock()
	return key, nil
}
