package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

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

// streamsArchiveFormat is the archive format this build writes; a higher one is refused.
const streamsArchiveFormat = 1

// streamsArchive is the encoding of a watermark archive.
type streamsArchive struct {
	FormatVersion int                        `json:"format_version"`
	Streams       map[string]StreamWatermark `json:"streams"`
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
	var a streamsArchive
	if err := json.Unmarshal(b, &a); err != nil {
		return nil, fmt.Errorf("table %s: watermark archive %s: %w: %v", t.name, key, ErrCorruptManifest, err)
	}
	if a.FormatVersion > streamsArchiveFormat {
		return nil, fmt.Errorf("table %s: watermark archive %s has format version %d: %w", t.name, key, a.FormatVersion, ErrUnsupportedFormat)
	}
	t.archiveMu.Lock()
	t.archive = &streamsArchiveCache{key: key, streams: a.Streams}
	t.archiveMu.Unlock()
	return a.Streams, nil
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

// checkArchivedEpoch returns an *EpochCommittedError when txn is a streaming epoch whose query's
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
		return &EpochCommittedError{QueryID: ep.QueryID, EpochID: ep.EpochID, WatermarkEpoch: wm.Epoch, Version: wm.Version}
	}
	return nil
}

// spillStreams moves, when next carries more than StreamWatermarksInManifest watermarks, the
// ones that committed longest ago out of next into a new archive (base's archive plus them,
// without the watermarks idle past the retention or carried by next itself), which it writes
// before returning. It returns the new archive's key ("" when nothing moved): the caller's
// manifest names it and deletes it if that manifest is not created.
func (t *Table) spillStreams(ctx context.Context, base, next *Manifest) (string, error) {
	limit := t.opts.StreamWatermarksInManifest
	if len(next.Streams) <= limit {
		return "", nil
	}
	old, err := t.readStreamsArchive(ctx, base.StreamsArchive)
	if err != nil {
		return "", err
	}
	queries := make([]string, 0, len(next.Streams))
	for q := range next.Streams {
		queries = append(queries, q)
	}
	// Oldest commit first; ties (one version never holds two epochs of one query, but several
	// queries' watermarks may share a version through a multi-writer stage) by query id.
	slices.SortFunc(queries, func(a, b string) int {
		va, vb := next.Streams[a].Version, next.Streams[b].Version
		switch {
		case va < vb:
			return -1
		case va > vb:
			return 1
		}
		if a < b {
			return -1
		}
		return 1
	})
	cutoff := next.TimestampNanos - int64(t.opts.StreamWatermarkRetention)
	archived := make(map[string]StreamWatermark, len(old)+len(queries))
	for q, wm := range old {
		if _, hot := next.Streams[q]; !hot && wm.TimestampNanos >= cutoff {
			archived[q] = wm
		}
	}
	for _, q := range queries[:len(queries)-limit/2] {
		archived[q] = next.Streams[q]
		delete(next.Streams, q)
	}
	b, err := json.Marshal(streamsArchive{FormatVersion: streamsArchiveFormat, Streams: archived})
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
