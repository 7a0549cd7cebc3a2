package iceberg

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	iceio "github.com/apache/iceberg-go/io"
	"github.com/apache/iceberg-go/table"

	"github.com/flight-sink/flight-sink/objstore"
)

// Layout of a table's Iceberg metadata (docs/iceberg.md, Layout), relative to the table.
const (
	metadataDir     = "metadata/"
	versionHintName = "version-hint.text"
	// deletesDir holds the position-delete files the publisher writes. They live under
	// metadata/, not data/: engine cleanup sweeps data/, and Iceberg snapshot expiry (which
	// removes only metadata/ files, storeIO.Remove) owns these.
	deletesDir = metadataDir + "deletes/"
	// keptMetadataFiles is how many metadata.json files stay beside the current one (the
	// table property write.metadata.previous-versions-max); older ones are removed after a
	// commit.
	keptMetadataFiles = 10
)

// makeMetadataName returns the name of metadata file n ("v3.metadata.json").
func makeMetadataName(n int) string { return "v" + strconv.Itoa(n) + ".metadata.json" }

// parseMetadataName is the inverse of makeMetadataName; ok is false for any other name.
func parseMetadataName(name string) (n int, ok bool) {
	s, found := strings.CutPrefix(name, "v")
	if !found {
		return 0, false
	}
	s, found = strings.CutSuffix(s, ".metadata.json")
	if !found {
		return 0, false
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || strconv.Itoa(n) != s {
		return 0, false
	}
	return n, true
}

// storeCatalog commits one table's Iceberg metadata through the object store (iceberg-go's
// table.CatalogIO). A commit applies the updates to the newest metadata file with iceberg-go's
// builder and creates the next v<N>.metadata.json put-if-absent: of two servers committing at
// once exactly one wins, and the other gets table.ErrCommitFailed and starts over from the
// newest metadata. version-hint.text is written after, best effort: readers that trust it may
// lag by a commit, and this catalog never reads it (it lists metadata/ instead).
type storeCatalog struct {
	io     *storeIO
	prefix string // the table's key prefix, "name/"
	ident  table.Identifier
	// last is the newest metadata this catalog read or wrote, lastN its number: a commit that
	// finds no newer file applies its updates to it instead of reading and parsing it again.
	last  table.Metadata
	lastN int
	// staged: last is staged (stage), not written yet; the next commit writes it as file
	// lastN+1.
	staged bool
}

var _ table.CatalogIO = (*storeCatalog)(nil)

func newStoreCatalog(io *storeIO, name string) *storeCatalog {
	return &storeCatalog{io: io, prefix: name + "/", ident: table.Identifier{name}}
}

func (c *storeCatalog) location() string { return c.io.location(strings.TrimSuffix(c.prefix, "/")) }

func (c *storeCatalog) metadataKey(n int) string { return c.prefix + metadataDir + makeMetadataName(n) }

// newest returns the number of the newest metadata file, 0 when there is none.
func (c *storeCatalog) newest(ctx context.Context) (int, error) {
	objs, err := c.io.store.List(ctx, c.prefix+metadataDir+"v", "")
	if err != nil {
		return 0, fmt.Errorf("list iceberg metadata of %s: %w", c.location(), err)
	}
	best := 0
	for _, o := range objs {
		if n, ok := parseMetadataName(strings.TrimPrefix(o.Key, c.prefix+metadataDir)); ok && n > best {
			best = n
		}
	}
	return best, nil
}

// load returns the table as of its newest metadata file and that file's number; nil and 0 when
// the table has no Iceberg metadata yet.
func (c *storeCatalog) load(ctx context.Context) (*table.Table, int, error) {
	for range 8 { // the newest file may be pruned between the list and the read
		n, err := c.newest(ctx)
		if err != nil || n == 0 {
			return nil, 0, err
		}
		key := c.metadataKey(n)
		b, err := c.io.store.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", key, err)
		}
		meta, err := table.ParseMetadataBytes(b)
		if err != nil {
			return nil, 0, fmt.Errorf("parse %s: %w", key, err)
		}
		c.last, c.lastN, c.staged = meta, n, false
		return c.tableOf(meta, n), n, nil
	}
	return nil, 0, fmt.Errorf("iceberg metadata of %s keeps changing under the reader", c.location())
}

func (c *storeCatalog) tableOf(meta table.Metadata, n int) *table.Table {
	return table.New(c.ident, meta, c.io.location(c.metadataKey(n)),
		func(context.Context) (iceio.IO, error) { return c.io, nil }, c)
}

// LoadTable implements table.CatalogIO.
func (c *storeCatalog) LoadTable(ctx context.Context, _ table.Identifier) (*table.Table, error) {
	t, _, err := c.load(ctx)
	if err == nil && t == nil {
		err = fmt.Errorf("%s has no iceberg metadata", c.location())
	}
	return t, err
}

// stage makes meta the table's metadata in place of metadata file over (0: before any file
// exists): the next CommitTable applies its updates to meta and creates file over+1
// put-if-absent (table.ErrCommitFailed when another server created it first).
func (c *storeCatalog) stage(meta table.Metadata, over int) *table.Table {
	c.last, c.lastN, c.staged = meta, over, true
	return c.tableOf(meta, over)
}

// pending reports whether the table's metadata is staged (stage) and not written yet.
func (c *storeCatalog) pending() bool { return c.last != nil && c.staged }

// CommitTable implements table.CatalogIO: it checks reqs against the newest metadata, applies
// updates to it and creates the next metadata file put-if-absent.
func (c *storeCatalog) CommitTable(ctx context.Context, _ table.Identifier, reqs []table.Requirement, updates []table.Update) (table.Metadata, string, error) {
	var cur *table.Table
	n, err := c.newest(ctx)
	if err != nil {
		return nil, "", err
	}
	staged := false
	if c.last != nil && n == c.lastN {
		// Nobody committed since (or, staged, nobody wrote the file after lastN): no need to
		// read it again.
		cur, staged = c.tableOf(c.last, n), c.staged
	} else if cur, n, err = c.load(ctx); err != nil {
		return nil, "", err
	}
	if cur == nil {
		return nil, "", fmt.Errorf("%w: %s has no iceberg metadata", table.ErrCommitFailed, c.location())
	}
	for _, r := range reqs {
		if err := r.Validate(cur.Metadata()); err != nil {
			return nil, "", fmt.Errorf("%w: %v", table.ErrCommitFailed, err)
		}
	}
	prev := cur.MetadataLocation()
	if staged {
		prev = "" // staged: no file of this table to log as the previous metadata
	}
	updated, err := table.UpdateTableMetadata(cur.Metadata(), updates, prev)
	if err != nil {
		return nil, "", fmt.Errorf("apply iceberg updates to %s: %w", cur.MetadataLocation(), err)
	}
	if err := c.put(ctx, n+1, updated); err != nil {
		return nil, "", err
	}
	c.last, c.lastN, c.staged = updated, n+1, false
	// Pruning after the new file exists: a reader that listed the old newest may still be
	// reading it, which is why a few stay (keptMetadataFiles).
	if old := n + 1 - keptMetadataFiles - 1; old > 0 {
		_ = c.io.store.Delete(ctx, c.metadataKey(old))
	}
	return updated, c.io.location(c.metadataKey(n + 1)), nil
}

// put creates metadata file n put-if-absent, then the version hint (best effort).
func (c *storeCatalog) put(ctx context.Context, n int, meta table.Metadata) error {
	b, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("encode iceberg metadata: %w", err)
	}
	key := c.metadataKey(n)
	if err := c.io.store.PutIfAbsent(ctx, key, b); err != nil {
		if errors.Is(err, objstore.ErrExists) {
			return fmt.Errorf("%w: %s was created by another publisher", table.ErrCommitFailed, key)
		}
		return fmt.Errorf("create %s: %w", key, err)
	}
	// After the metadata file: the hint may only ever name a file that exists. Best effort: a
	// reader that follows a stale hint sees the previous, complete, snapshot.
	_ = c.io.store.Put(ctx, c.prefix+metadataDir+versionHintName, bytes.NewReader([]byte(strconv.Itoa(n))))
	return nil
}

// ErrNoMetadata: the table has no Iceberg metadata (never published, or publishing is off from
// its creation).
var ErrNoMetadata = errors.New("table has no iceberg metadata")

// LatestMetadata returns table name's newest Iceberg metadata file in store: its location and
// its JSON as stored. It reads nothing else; ErrNoMetadata when there is none.
func LatestMetadata(ctx context.Context, store objstore.Store, name string) (location string, metadata []byte, err error) {
	c := newStoreCatalog(newStoreIO(ctx, store), name)
	for range 8 { // the newest file may be pruned between the list and the read
		n, err := c.newest(ctx)
		if err != nil {
			return "", nil, err
		}
		if n == 0 {
			return "", nil, fmt.Errorf("%s: %w", name, ErrNoMetadata)
		}
		key := c.metadataKey(n)
		b, err := store.Get(ctx, key)
		if errors.Is(err, objstore.ErrNotFound) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("read %s: %w", key, err)
		}
		return c.io.location(key), b, nil
	}
	return "", nil, fmt.Errorf("iceberg metadata of %s keeps changing under the reader", c.location())
}
