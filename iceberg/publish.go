package iceberg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/RoaringBitmap/roaring/v2"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/iceberg-go"
	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/engine"
)

const (
	// formatVersion is the Iceberg format the publisher writes: v2, with position-delete files,
	// because PyIceberg 0.12 (and so Polars) does not read v3 deletion vectors.
	formatVersion = 2

	// PropVersion is the snapshot summary property (and table property) that holds the
	// flight-sink version an Iceberg snapshot mirrors (docs/iceberg.md).
	PropVersion = "flight-sink.version"
	// propOperation is the summary property naming the flight-sink operations a snapshot mirrors.
	propOperation = "flight-sink.operation"
	// propFilesWithoutFieldIDs ("true") marks a table holding data files written without
	// Parquet field ids (before tables had them): only such a table publishes the name mapping
	// (schema.name-mapping.default), which readers need to resolve those files' columns by name.
	// Readers that honour a name mapping over field ids (iceberg-rust) read nested columns of
	// files with ids as null through it, so a table whose files all carry ids has none.
	propFilesWithoutFieldIDs = "flight-sink.files-without-field-ids"
	// propTableID is the table property naming the incarnation of the table the metadata
	// mirrors (engine.Manifest.TableID). Metadata of another incarnation (a table of the same
	// name dropped since, whose publisher committed after the drop removed its metadata) is
	// not built on: the publisher starts the table's metadata over (mirrors).
	propTableID = "flight-sink.table-id"

	// ConfigPublish is the table configuration key that turns publishing off ("false").
	ConfigPublish = "iceberg.publish"
	// ConfigMaxSnapshots is the table configuration key bounding the Iceberg snapshots kept
	// (DefaultMaxSnapshots; 0 keeps every snapshot of a retained version).
	ConfigMaxSnapshots = "iceberg.max_snapshots"
	// ConfigPublishInterval is the table configuration key of the least time between two publishes
	// after commits, in milliseconds (0: publish after every commit); default the server's
	// (DefaultPublishInterval). The publish_iceberg action and the CLI publish at once regardless.
	ConfigPublishInterval = "iceberg.publish_interval_ms"
	// DefaultPublishInterval is the publish interval of a table that configures none, unless the
	// server sets another.
	DefaultPublishInterval = time.Second
	// DefaultMaxSnapshots is the number of newest snapshots kept when the table does not say.
	DefaultMaxSnapshots = 100

	// commitAttempts bounds how often in a row a publish starts over after losing a metadata
	// commit to another publisher; a commit that lands (a step of a split publish too) resets it.
	commitAttempts = 16
)

// ErrDisabled: publishing is turned off for the table (ConfigPublish).
var ErrDisabled = errors.New("iceberg publishing is off for this table")

// ErrUnpublishable: a version of the table holds a column whose type has no Iceberg equivalent
// (a table created before the type policy gave every stored type one,
// arrowschema.IcebergType). The error names the table, the version and the column; nothing is
// written. Turn publishing off for the table (ConfigPublish) or rewrite the column.
var ErrUnpublishable = errors.New("table cannot be published as an iceberg table")

// Enabled reports whether version m of a table is to be published: unless its configuration
// sets ConfigPublish to "false".
func Enabled(m *engine.Manifest) bool {
	v, ok := m.Config[ConfigPublish]
	if !ok {
		return true
	}
	on, err := strconv.ParseBool(v)
	return err != nil || on
}

// PublishInterval is version m's ConfigPublishInterval, or def when it sets none (or no valid
// non-negative number of milliseconds).
func PublishInterval(m *engine.Manifest, def time.Duration) time.Duration {
	if ms, err := strconv.ParseInt(m.Config[ConfigPublishInterval], 10, 64); err == nil && ms >= 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return def
}

// maxSnapshots is the table's ConfigMaxSnapshots.
func maxSnapshots(m *engine.Manifest) int {
	if n, err := strconv.Atoi(m.Config[ConfigMaxSnapshots]); err == nil && n >= 0 {
		return n
	}
	return DefaultMaxSnapshots
}

// Options tune a Publisher. The zero value is usable.
type Options struct {
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Publisher keeps a table's Iceberg metadata (docs/iceberg.md) in step with its versions.
// It holds no state: every Publish starts from the newest metadata file and the newest version,
// so it catches up after a crash, after publishing was off for a while and after another server
// published or committed. Safe for concurrent use, across processes too (commits are
// put-if-absent).
type Publisher struct {
	t   *engine.Table
	log *slog.Logger
}

// New returns the publisher of t.
func New(t *engine.Table, o *Options) *Publisher {
	p := &Publisher{t: t, log: slog.Default()}
	if o != nil && o.Logger != nil {
		p.log = o.Logger
	}
	return p
}

// Report says what one Publish did.
type Report struct {
	// From is the version the Iceberg metadata mirrored before, To the one it mirrors after.
	From, To uint64
	// Snapshots counts the Iceberg snapshots added (coalesced versions make one).
	Snapshots int
	// MetadataFile is the newest metadata file.
	MetadataFile string
}

// Publish brings the table's Iceberg metadata up to its newest version: one snapshot mirroring
// the newest version however many versions it lags (several versions coalesce), or, when the
// versions since the last one changed no data file (an index, a configuration), a metadata
// commit that records the version without a snapshot. It returns ErrDisabled when the table's
// configuration turns publishing off.
func (p *Publisher) Publish(ctx context.Context) (Report, error) {
	start := time.Now()
	rep, err := p.publish(ctx)
	var lag time.Duration
	if err == nil && rep.To > rep.From {
		lag = lagSince(ctx, p.t, rep.To)
	}
	var behind uint64
	if latest, lerr := p.t.Latest(ctx); lerr == nil && latest.Version > rep.To {
		behind = latest.Version - rep.To
	}
	recordPublish(ctx, p.t.Name(), rep, err, time.Since(start), lag, behind)
	return rep, err
}

func (p *Publisher) publish(ctx context.Context) (Report, error) {
	var rep Report
	latest, err := p.t.Latest(ctx)
	if err != nil {
		return rep, err
	}
	if !Enabled(latest) {
		return rep, ErrDisabled
	}
	fio := newStoreIO(ctx, p.t.Store())
	cat := newStoreCatalog(fio, p.t.Name())
	first := true
	// Every landed step advances the published version, so the loop ends: caught up, or
	// commitAttempts commits in a row lost to other publishers.
	for lost := 0; lost < commitAttempts; {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		tbl, n, err := cat.load(ctx)
		if err != nil {
			return rep, err
		}
		if tbl != nil && !mirrors(tbl.Metadata(), latest) {
			// A dropped table's metadata: its snapshot reads files this table never held, and
			// its versions are not this table's. Start over: fresh metadata (a new table uuid,
			// no snapshot) written as the file after n by the first step's commit.
			p.log.Warn("iceberg metadata of a dropped table of the same name: publishing starts over",
				"table", p.t.Name(), "metadata", tbl.MetadataLocation(), "table_id", latest.TableID)
			if tbl, err = p.create(cat, latest, n); err != nil {
				return rep, err
			}
		}
		if tbl == nil {
			// Not written yet: the first metadata file is written by the first step's commit,
			// with its snapshot, so no reader ever sees metadata without the table's rows.
			if tbl, err = p.create(cat, latest, 0); err != nil {
				return rep, err
			}
		}
		pub := publishedVersion(tbl.Metadata())
		if first {
			rep.From, first = pub, false
		}
		if !cat.pending() {
			rep.To, rep.MetadataFile = pub, tbl.MetadataLocation()
			if pub >= latest.Version {
				return rep, nil
			}
		}
		next, snap, err := p.step(ctx, fio, cat, tbl, pub, latest)
		if errors.Is(err, table.ErrCommitFailed) {
			lost++
			continue // another publisher moved first: start over from its metadata
		}
		if err != nil {
			return rep, fmt.Errorf("publish iceberg snapshot of %s version %d: %w", p.t.Name(), latest.Version, err)
		}
		lost = 0
		if snap {
			rep.Snapshots++
		}
		rep.To, rep.MetadataFile = publishedVersion(next.Metadata()), next.MetadataLocation()
		if err := capSnapshots(ctx, cat, next, maxSnapshots(latest)); err != nil && !errors.Is(err, table.ErrCommitFailed) {
			return rep, err // the snapshot landed; the next publish expires again
		}
		if rep.To >= latest.Version {
			return rep, nil
		}
	}
	return rep, fmt.Errorf("publish iceberg metadata of %s: lost %d commits in a row to other publishers", p.t.Name(), commitAttempts)
}

// mirrors reports whether metadata m mirrors the incarnation of the table latest is a version
// of (propTableID; metadata without the property, written before it existed, is taken to).
func mirrors(m table.Metadata, latest *engine.Manifest) bool {
	id, ok := m.Properties()[propTableID]
	return !ok || latest.TableID == "" || id == latest.TableID
}

// publishedVersion is the flight-sink version the metadata mirrors (0: none yet).
func publishedVersion(m table.Metadata) uint64 {
	v, _ := strconv.ParseUint(m.Properties().Get(PropVersion, "0"), 10, 64)
	return v
}

// tableProperties are the Iceberg table properties the publisher sets at creation (no name
// mapping: a step adds it when it finds a data file without field ids, propFilesWithoutFieldIDs).
func tableProperties(tableID string) iceberg.Properties {
	return iceberg.Properties{
		propTableID:                                  tableID,
		"format-version":                             strconv.Itoa(formatVersion),
		table.ManifestMergeEnabledKey:                "true",
		"write.metadata.previous-versions-max":       strconv.Itoa(keptMetadataFiles),
		"write.metadata.delete-after-commit.enabled": "true",
		"write.parquet.compression-codec":            "zstd",
		PropVersion:                                  "0",
	}
}

// create returns the table's first metadata, its schema and no snapshot, pending in cat: it is
// written (metadata file over+1; v1.metadata.json when over is 0) by the first commit, with that
// commit's updates applied.
func (p *Publisher) create(cat *storeCatalog, latest *engine.Manifest, over int) (*table.Table, error) {
	sc, err := icebergSchema(latest.ArrowSchema(), latest.PrimaryKey...)
	if err != nil {
		return nil, fmt.Errorf("publish iceberg metadata of %s version %d: %w", p.t.Name(), latest.Version, err)
	}
	spec, err := icebergSpec(latest.PartitionSpec, sc)
	if err != nil {
		return nil, fmt.Errorf("publish iceberg metadata of %s version %d: %w", p.t.Name(), latest.Version, err)
	}
	meta, err := table.NewMetadata(sc, &spec, table.UnsortedSortOrder, cat.location(), tableProperties(latest.TableID))
	if err != nil {
		return nil, fmt.Errorf("new iceberg metadata: %w", err)
	}
	return cat.stage(meta, over), nil
}

// liveFiles is what the current Iceberg snapshot reads: its data files by location, and the
// position-delete files by the data file they reference.
type liveFiles struct {
	data    map[string]iceberg.DataFile
	deletes map[string][]iceberg.DataFile
	// seq holds every file's data sequence number.
	seq map[string]int64
}

func currentFiles(fio *storeIO, tbl *table.Table) (liveFiles, error) {
	lf := liveFiles{data: map[string]iceberg.DataFile{}, deletes: map[string][]iceberg.DataFile{}, seq: map[string]int64{}}
	snap := tbl.CurrentSnapshot()
	if snap == nil {
		return lf, nil
	}
	mans, err := snap.Manifests(fio)
	if err != nil {
		return lf, fmt.Errorf("read manifest list %s: %w", snap.ManifestList, err)
	}
	for _, m := range mans {
		entries, err := m.FetchEntries(fio, true) //nolint:staticcheck // SA1019: Entries streams; the publisher needs every entry of a manifest at once
		if err != nil {
			return lf, fmt.Errorf("read manifest %s: %w", m.FilePath(), err)
		}
		for _, e := range entries {
			df := e.DataFile()
			lf.seq[df.FilePath()] = e.SequenceNum()
			switch df.ContentType() {
			case iceberg.EntryContentData:
				lf.data[df.FilePath()] = df
			case iceberg.EntryContentPosDeletes:
				if ref, ok := referencedDataFile(df); ok {
					lf.deletes[ref] = append(lf.deletes[ref], df)
				}
			}
		}
	}
	return lf, nil
}

// referencedDataFile returns the data file a position-delete file deletes from. Format v2
// manifests do not keep referenced_data_file, so it is read from the file_path column's bounds,
// which are equal for the publisher's files (one data file each, full metrics on file_path).
func referencedDataFile(df iceberg.DataFile) (string, bool) {
	if ref := df.ReferencedDataFile(); ref != nil {
		return *ref, true
	}
	lo, hi := df.LowerBoundValues()[filePathFieldID], df.UpperBoundValues()[filePathFieldID]
	if lo == nil || string(lo) != string(hi) {
		return "", false
	}
	return string(lo), true
}

// filePathFieldID is the field id of the file_path column of position-delete files.
const filePathFieldID = 2147483546

// step commits one Iceberg snapshot (or a metadata-only commit) that moves tbl, which mirrors
// version pub, to version target. It reports whether a snapshot was added.
//
// The snapshot is computed from what the Iceberg snapshot reads and what target holds
// (planSnapshot), so its rows are target's base table with deletions applied, whatever happened
// in between. A plan that cannot be one snapshot mirroring target (needsSplit) publishes an
// earlier version first (splitTarget); otherwise commitSnapshot commits it.
func (p *Publisher) step(ctx context.Context, fio *storeIO, cat *storeCatalog, tbl *table.Table, pub uint64, target *engine.Manifest) (*table.Table, bool, error) {
	tbl, err := p.alignSchema(ctx, cat, tbl, pub, target)
	if err != nil {
		return nil, false, err
	}
	plan, err := p.planSnapshot(ctx, fio, tbl, pub, target)
	if err != nil {
		return nil, false, err
	}
	if plan.needsSplit() && target.Version > pub+1 {
		// Split: publish the appends after pub together, or else the next version alone (its
		// own step may split no further); the caller goes on to target.
		next, err := p.splitTarget(ctx, pub, target.Version)
		if err != nil {
			return nil, false, err
		}
		if next.Version < target.Version {
			return p.step(ctx, fio, cat, tbl, pub, next)
		}
		// Every version between pub and target is gone (cleanup keeps pub's, not the unpublished):
		// no snapshot can mirror one of them, so target is published as one snapshot. Its
		// rows are still target's: position deletes of a data file added in the same snapshot
		// apply to it (equal sequence numbers), and deletes beside removals commit as a
		// rewrite whose added files keep the removed deletes' sequence number.
		p.log.Warn("iceberg versions between the published one and the latest were removed: publishing them as one snapshot",
			"table", p.t.Name(), "from", pub, "to", target.Version)
	}
	return p.commitSnapshot(ctx, tbl, plan)
}

// alignSchema returns tbl with target's schema current: tbl itself when its columns are target's,
// else the table after a schema commit (evolveSchema). It fails with table.ErrCommitFailed when
// the schema commit landed on metadata another publisher had moved past pub.
func (p *Publisher) alignSchema(ctx context.Context, cat *storeCatalog, tbl *table.Table, pub uint64, target *engine.Manifest) (*table.Table, error) {
	sc, err := icebergSchema(target.ArrowSchema(), target.PrimaryKey...)
	if err != nil {
		return nil, fmt.Errorf("version %d: %w", target.Version, err)
	}
	if sameColumns(sc, tbl.Schema()) {
		return tbl, nil
	}
	if tbl, err = p.evolveSchema(ctx, cat, tbl, sc); err != nil {
		return nil, err
	}
	if v := publishedVersion(tbl.Metadata()); v != pub {
		// The schema commit landed on metadata another publisher moved on since: the step
		// is computed from version pub, so it starts over from the newer metadata (its
		// schema is in place). Building on it would add that publisher's files again.
		return nil, fmt.Errorf("%w: the metadata moved from version %d to %d under a schema change", table.ErrCommitFailed, pub, v)
	}
	return tbl, nil
}

// snapshotPlan is the difference between what an Iceberg snapshot mirroring version pub reads
// and what version target holds, as the files one snapshot adds and removes.
type snapshotPlan struct {
	pub    uint64
	target *engine.Manifest
	sc     *iceberg.Schema    // the table's current schema, target's columns
	ops    []engine.Operation // the operations of the versions after pub up to target, oldest first
	live   liveFiles          // the snapshot's own entries; read only when the plan removes files

	added, removed, newDeletes, removedDeletes []iceberg.DataFile
	addedRows, deletedRows                     int64

	// withoutIDs: a data file the plan checked lacks Parquet field ids; withoutIDsKnown: the
	// table is already marked as holding one (propFilesWithoutFieldIDs).
	withoutIDs, withoutIDsKnown bool
}

// planSnapshot computes the snapshot that moves tbl from version pub to target:
//   - data files of target that the snapshot lacks are added (appends, MemWAL folds, upserts'
//     new rows, compactions' outputs), with their footer statistics;
//   - data files the snapshot reads that target no longer has are removed (overwrites,
//     compactions' inputs), with their position deletes;
//   - a data file whose deletion bitmap changed gets a position-delete file holding the
//     positions deleted since pub (position deletes add up; a bitmap only grows). planSnapshot
//     writes these files; nothing reads them until a commit names them.
func (p *Publisher) planSnapshot(ctx context.Context, fio *storeIO, tbl *table.Table, pub uint64, target *engine.Manifest) (*snapshotPlan, error) {
	prefix := p.t.Name() + "/"
	sc := tbl.Schema()
	// The snapshot reads exactly version pub (it was made from it), so pub's fragments say what
	// it reads without reading its manifests; only removals need the snapshot's own entries.
	// A base that cleanup removed (the retention hook keeps it, but another process may not
	// run it) is read from the snapshot instead, and costs position deletes written again:
	// they add up.
	baseKnown := pub == 0
	baseFrags := map[string]engine.Fragment{}
	if pub > 0 {
		base, err := p.t.Manifest(ctx, pub)
		if err != nil && !errors.Is(err, engine.ErrVersionNotFound) {
			return nil, err
		}
		if base != nil {
			baseKnown = true
			for _, f := range base.Fragments {
				baseFrags[f.Files[0].Path] = f
			}
		}
	}
	needLive := !baseKnown
	if !needLive {
		inTarget := make(map[string]bool, len(target.Fragments))
		for _, f := range target.Fragments {
			inTarget[f.Files[0].Path] = true
		}
		for path := range baseFrags {
			needLive = needLive || !inTarget[path]
		}
	}
	live := liveFiles{}
	if needLive {
		var err error
		if live, err = currentFiles(fio, tbl); err != nil {
			return nil, err
		}
	}
	isLive := func(rel, loc string) bool {
		if baseKnown {
			_, ok := baseFrags[rel]
			return ok
		}
		_, ok := live.data[loc]
		return ok
	}
	ops, err := p.operations(ctx, pub, target.Version)
	if err != nil {
		return nil, err
	}

	var (
		added, removed, newDeletes, removedDeletes []iceberg.DataFile
		inTarget                                   = map[string]bool{}
		addedRows, deletedRows                     int64
	)
	// Field ids: the data files a step adds are checked for them until the table is known to
	// hold a file without (then it keeps the name mapping). A name mapping without the mark was
	// published by a publisher that always wrote one: every data file is checked once, and the
	// mapping removed when all carry ids.
	_, mapped := tbl.Properties()[table.DefaultNameMappingKey]
	withoutIDsKnown := tbl.Properties()[propFilesWithoutFieldIDs] == "true"
	checkAll := mapped && !withoutIDsKnown
	withoutIDs := false
	for _, f := range target.Fragments {
		if len(f.Files) != 1 {
			return nil, fmt.Errorf("fragment %d has %d data files; iceberg needs one", f.ID, len(f.Files))
		}
		loc := fio.location(prefix + f.Files[0].Path)
		inTarget[loc] = true
		isLive := isLive(f.Files[0].Path, loc)
		if !withoutIDsKnown && !withoutIDs && (checkAll || !isLive) {
			ids, err := fileHasFieldIDs(fio, loc)
			if err != nil {
				return nil, err
			}
			withoutIDs = !ids
		}
		parts, err := partitionValues(tbl.Spec(), sc, f.Partition)
		if err != nil {
			return nil, fmt.Errorf("fragment %d: %w", f.ID, err)
		}
		if !isLive {
			df, err := dataFile(ctx, fio, loc, sc, tbl.Properties())
			if err == nil {
				df, err = withPartition(df, tbl.Spec(), parts)
			}
			if err != nil {
				return nil, err
			}
			added = append(added, df)
			addedRows += f.PhysicalRows
		}
		if f.DeletionFile == "" {
			continue
		}
		prev, inBase := baseFrags[f.Files[0].Path]
		if isLive && inBase && prev.DeletionFile == f.DeletionFile {
			continue
		}
		bm, err := p.t.Deletions(ctx, f)
		if err != nil {
			return nil, err
		}
		if isLive && inBase && prev.DeletionFile != "" {
			old, err := p.t.Deletions(ctx, prev)
			if err != nil {
				return nil, err
			}
			bm = roaring.AndNot(bm, old)
		}
		if bm.IsEmpty() {
			continue
		}
		pd, err := writePositionDeletes(ctx, fio, prefix, loc, bm, isLive)
		if err == nil {
			pd, err = withPartition(pd, tbl.Spec(), parts) // a delete file is in its data file's partition
		}
		if err != nil {
			return nil, err
		}
		newDeletes = append(newDeletes, pd)
		deletedRows += int64(bm.GetCardinality())
	}
	for loc, df := range live.data {
		if !inTarget[loc] {
			removed = append(removed, df)
			removedDeletes = append(removedDeletes, live.deletes[loc]...)
		}
	}

	return &snapshotPlan{pub: pub, target: target, sc: sc, ops: ops, live: live,
		added: added, removed: removed, newDeletes: newDeletes, removedDeletes: removedDeletes,
		addedRows: addedRows, deletedRows: deletedRows, withoutIDs: withoutIDs, withoutIDsKnown: withoutIDsKnown}, nil
}

// rewriteOnly reports whether every version the plan covers is a compaction.
func (pl *snapshotPlan) rewriteOnly() bool {
	rewriteOnly := len(pl.ops) > 0
	for _, op := range pl.ops {
		rewriteOnly = rewriteOnly && op == engine.OpRewrite
	}
	return rewriteOnly
}

// needsSplit reports whether the plan cannot be one snapshot mirroring its target: it both removes
// data files and adds deletes over versions that are not all compactions, or it adds deletes of
// rows in data files it also adds. Such a step publishes one version at a time, so every snapshot
// still mirrors a version.
func (pl *snapshotPlan) needsSplit() bool {
	// A position delete may only reference a data file the snapshot already reads: deletes of
	// rows appended since pub need the appends published first.
	deletesAdded := false
	if len(pl.newDeletes) > 0 && len(pl.added) > 0 {
		addedLoc := make(map[string]bool, len(pl.added))
		for _, df := range pl.added {
			addedLoc[df.FilePath()] = true
		}
		for _, pd := range pl.newDeletes {
			ref, _ := referencedDataFile(pd)
			deletesAdded = deletesAdded || addedLoc[ref]
		}
	}
	return (len(pl.removed) > 0 && len(pl.newDeletes) > 0 && !pl.rewriteOnly()) || deletesAdded
}

// commitSnapshot commits plan as one transaction on tbl: the table properties (the version
// mirrored, the name mapping when a data file lacks field ids) and the snapshot operation
// (addOperation). It returns the committed table and whether a snapshot was added.
func (p *Publisher) commitSnapshot(ctx context.Context, tbl *table.Table, pl *snapshotPlan) (*table.Table, bool, error) {
	target := pl.target
	props := iceberg.Properties{PropVersion: strconv.FormatUint(target.Version, 10), propOperation: joinOps(pl.ops)}
	tx := tbl.NewTransaction()
	tprops := iceberg.Properties{PropVersion: props[PropVersion], propTableID: target.TableID}
	if pl.withoutIDs && !pl.withoutIDsKnown {
		nm, err := nameMapping(pl.sc)
		if err != nil {
			return nil, false, err
		}
		tprops[table.DefaultNameMappingKey], tprops[propFilesWithoutFieldIDs] = nm, "true"
	}
	if err := tx.SetProperties(tprops); err != nil {
		return nil, false, err
	}
	snap, err := addOperation(ctx, tx, tbl.CurrentSnapshot() == nil, pl, props)
	if err == nil && !pl.withoutIDs && !pl.withoutIDsKnown {
		// iceberg-go's snapshot operations add a name mapping to a table that has none.
		err = tx.RemoveProperties([]string{table.DefaultNameMappingKey})
	}
	if err != nil {
		return nil, false, err
	}
	next, err := tx.Commit(ctx)
	if err != nil {
		return nil, false, err
	}
	p.log.Debug("published iceberg snapshot", "table", p.t.Name(), "version", target.Version, "from", pl.pub,
		"added_files", len(pl.added), "removed_files", len(pl.removed), "delete_files", len(pl.newDeletes),
		"added_rows", pl.addedRows, "deleted_rows", pl.deletedRows, "metadata", next.MetadataLocation())
	return next, snap, nil
}

// addOperation adds to tx the snapshot operation that applies pl, and reports whether it adds a
// snapshot (noSnapshot: the table has none yet). Only additions is an append; additions and
// deletes a RowDelta (delete or overwrite); removals a replace when every version the plan covers
// is a compaction, else an overwrite; nothing a reader sees changed records the version only.
func addOperation(ctx context.Context, tx *table.Transaction, noSnapshot bool, pl *snapshotPlan, props iceberg.Properties) (snap bool, err error) {
	added, removed, newDeletes, removedDeletes := pl.added, pl.removed, pl.newDeletes, pl.removedDeletes
	snap = true
	switch {
	case len(removed) == 0 && len(newDeletes) == 0 && len(added) == 0 && noSnapshot:
		// The first snapshot, of a table with no rows: an empty append, so that every reader
		// finds a current snapshot to read.
		var rdr array.RecordReader
		if rdr, err = emptyReader(pl.sc); err == nil {
			err = tx.Append(ctx, rdr, props)
			rdr.Release()
		}
	case len(removed) == 0 && len(newDeletes) == 0 && len(added) == 0:
		snap = false // nothing a reader sees changed: record the version only
	case len(removed) == 0 && len(newDeletes) == 0:
		// No duplicate check: only files the snapshot does not read are added (it would read
		// every manifest).
		err = tx.AddDataFiles(ctx, added, props, table.WithoutDuplicateCheck())
	case len(removed) == 0:
		err = tx.NewRowDelta(props).AddRows(added...).AddDeletes(newDeletes...).Commit(ctx)
	case pl.rewriteOnly() || len(newDeletes) > 0:
		rw := tx.NewRewrite(props)
		if len(newDeletes) > 0 {
			// The rewritten files keep the data sequence number of the deletes they replace,
			// so that the position deletes added for them (which inherit it) apply to them.
			var seq int64
			for _, df := range removedDeletes {
				seq = max(seq, pl.live.seq[df.FilePath()])
			}
			rw.DataSequenceNumber(seq)
		}
		for _, df := range removed {
			rw.DeleteFile(df)
		}
		for _, df := range removedDeletes {
			rw.DeleteFile(df)
		}
		for _, df := range added {
			rw.AddDataFile(df)
		}
		for _, df := range newDeletes {
			rw.AddDeleteFile(df)
		}
		err = rw.Commit(ctx)
	default:
		err = tx.ReplaceFiles(ctx, removed, added, removedDeletes, props)
	}
	return snap, err
}

// evolveSchema commits sc as the table's current schema (a metadata commit before the snapshot
// that needs it; the snapshots before it keep their schema id), and the name mapping for it
// when the table publishes one (propFilesWithoutFieldIDs).
func (p *Publisher) evolveSchema(ctx context.Context, cat *storeCatalog, tbl *table.Table, sc *iceberg.Schema) (*table.Table, error) {
	reqs := []table.Requirement{table.AssertCurrentSchemaID(tbl.Schema().ID), table.AssertTableUUID(tbl.Metadata().TableUUID())}
	updates := []table.Update{table.NewAddSchemaUpdate(sc), table.NewSetCurrentSchemaUpdate(-1)}
	if _, mapped := tbl.Properties()[table.DefaultNameMappingKey]; mapped {
		nm, err := nameMapping(sc)
		if err != nil {
			return nil, err
		}
		updates = append(updates, table.NewSetPropertiesUpdate(iceberg.Properties{table.DefaultNameMappingKey: nm}))
	}
	meta, loc, err := cat.CommitTable(ctx, cat.ident, reqs, updates)
	if err != nil {
		return nil, err
	}
	return table.New(cat.ident, meta, loc, tbl.FS, cat), nil
}

// operations returns the operations of the versions after pub up to target, oldest first
// (versions cleanup removed are left out).
func (p *Publisher) operations(ctx context.Context, pub, target uint64) ([]engine.Operation, error) {
	hist, err := p.t.HistoryFrom(ctx, target, int(min(target-pub, 1<<20)))
	if err != nil {
		return nil, err
	}
	var ops []engine.Operation
	for i := len(hist) - 1; i >= 0; i-- {
		if h := hist[i]; !h.Missing && h.Version > pub {
			ops = append(ops, h.Operation)
		}
	}
	return ops, nil
}

// splitTarget returns the version a split step publishes: the newest of the versions after pub
// that only add rows or change no data (appends, MemWAL folds, index and configuration changes)
// when the oldest is one, so a burst of appends still makes one snapshot; else the oldest
// existing version after pub alone.
func (p *Publisher) splitTarget(ctx context.Context, pub, target uint64) (*engine.Manifest, error) {
	hist, err := p.t.HistoryFrom(ctx, target, int(min(target-pub, 1<<20)))
	if err != nil {
		return nil, err
	}
	var last uint64
	for i := len(hist) - 1; i >= 0; i-- { // oldest first
		h := hist[i]
		if h.Missing || h.Version <= pub {
			continue
		}
		switch h.Operation {
		case engine.OpAppend, engine.OpCreate, engine.OpCreateIndex, engine.OpOptimizeIndex, engine.OpUpdateConfig:
			last = h.Version
			continue
		}
		if last == 0 {
			last = h.Version
		}
		break
	}
	if last == 0 || last >= target {
		return p.nextVersion(ctx, pub, target)
	}
	return p.t.Manifest(ctx, last)
}

// nextVersion returns the oldest existing version after pub, up to target.
func (p *Publisher) nextVersion(ctx context.Context, pub, target uint64) (*engine.Manifest, error) {
	for v := pub + 1; v <= target; v++ {
		m, err := p.t.Manifest(ctx, v)
		if errors.Is(err, engine.ErrVersionNotFound) {
			continue
		}
		return m, err
	}
	return p.t.Manifest(ctx, target)
}

func joinOps(ops []engine.Operation) string {
	seen := map[engine.Operation]bool{}
	s := ""
	for _, op := range ops {
		if seen[op] {
			continue
		}
		seen[op] = true
		if s != "" {
			s += ","
		}
		s += string(op)
	}
	return s
}

// sameColumns reports whether two Iceberg schemas have the same columns (ids, names, types),
// whatever their schema ids.
func sameColumns(a, b *iceberg.Schema) bool {
	return a != nil && b != nil && a.Equals(b)
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
