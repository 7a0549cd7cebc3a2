package engine

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"

	"github.com/flight-sink/flight-sink/engine/arrowschema"
	"github.com/flight-sink/flight-sink/objstore"
)

// Schemas in bounded manifests. A manifest names its schema's file (Manifest.SchemaFile,
// _schemas/<sha256>.arrows) instead of holding the schema, so a commit that does not change the
// schema writes a manifest whose size does not grow with the table's width, and a schema change
// writes the new schema once. Files are named by their bytes' SHA-256: equal schemas share one,
// and a retried write is a no-op.

// schemaCacheEntries bounds the schema files a table handle keeps decoded.
const schemaCacheEntries = 8

// writeSchemaFile makes sure m.SchemaFile names a stored file holding m.Schema: the file m
// inherited when its schema is unchanged, else a new one, written now.
func (t *Table) writeSchemaFile(ctx context.Context, m *Manifest) error {
	key := makeSchemaKey(schemaSum(m.Schema))
	if key == m.SchemaFile {
		return nil
	}
	if err := t.store.PutIfAbsent(ctx, t.key(key), m.Schema); err != nil && !errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("table %s: write schema file %s: %w", t.name, key, err)
	}
	m.SchemaFile = key
	t.rememberSchema(key, schemaFile{bytes: m.Schema, schema: m.schema})
	return nil
}

// resolveSchemaFile reads the schema m names (SchemaFile) into m.
func (t *Table) resolveSchemaFile(ctx context.Context, m *Manifest) error {
	t.schemaMu.Lock()
	c, ok := t.schemas[m.SchemaFile]
	t.schemaMu.Unlock()
	if !ok {
		b, err := t.store.Get(ctx, t.key(m.SchemaFile))
		if err != nil {
			return fmt.Errorf("table %s version %d: read schema file %s: %w", t.name, m.Version, m.SchemaFile, err)
		}
		// The name is the bytes' SHA-256: a file damaged in storage (one byte is enough to rename
		// a column) is refused here, never read as another schema.
		if want, ok := parseSchemaKey(m.SchemaFile); !ok || schemaSum(b) != want {
			return fmt.Errorf("%w: table %s version %d: schema file %s is damaged: the SHA-256 of its %d bytes is %s, not the one its name gives",
				ErrCorruptManifest, t.name, m.Version, t.key(m.SchemaFile), len(b), schemaSum(b))
		}
		sc, err := arrowschema.DecodeSchema(b)
		if err != nil {
			return fmt.Errorf("%w: table %s version %d: schema file %s: %v", ErrCorruptManifest, t.name, m.Version, m.SchemaFile, err)
		}
		c = schemaFile{bytes: b, schema: sc}
		t.rememberSchema(m.SchemaFile, c)
	}
	m.Schema, m.schema = c.bytes, c.schema
	return nil
}

// schemaSum returns the SHA-256 (hex) of a schema file's bytes: its name (makeSchemaKey).
func schemaSum(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// schemaFile is a schema file's bytes and their decoding; both are never modified.
type schemaFile struct {
	bytes  []byte
	schema *arrow.Schema
}

// rememberSchema keeps c as schema file key's.
func (t *Table) rememberSchema(key string, c schemaFile) {
	if c.schema == nil {
		return
	}
	t.schemaMu.Lock()
	defer t.schemaMu.Unlock()
	if t.schemas == nil || len(t.schemas) >= schemaCacheEntries {
		t.schemas = make(map[string]schemaFile, schemaCacheEntries)
	}
	t.schemas[key] = c
}
