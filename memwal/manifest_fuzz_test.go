package memwal

// FuzzDecodeShardManifest: a shard manifest read back from storage. A corrupt manifest must give
// an error wrapping ErrCorrupt, never a panic, and what a commit writes must read back as
// written. (The WAL's fuzz targets are in memwal/wal.) `go test` runs the seeds (f.Add and
// testdata/fuzz/<Name>/) as ordinary tests; `make fuzz` runs each target for a fixed time.

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func FuzzDecodeShardManifest(f *testing.F) {
	paths := newShardPaths("t", testShardID)
	key := paths.makeManifestKey(5)
	m := &ShardManifest{FormatVersion: shardManifestFormat, Shard: testShardID, Version: 5, TimestampNanos: 9,
		WriterEpoch: 2, ReplayAfterWALEntryPosition: 40, NextGeneration: 4,
		FlushedGenerations: []FlushedGeneration{{Generation: 3, Dir: makeGenDir(3), Rows: 7,
			Files: []GenerationFile{{Name: "x.parquet", Rows: 7, SizeBytes: 100}}, FirstWALPosition: 30, LastWALPosition: 40}},
		Queries: map[string]QueryWatermark{"q": {Epoch: 12, Generation: 3, UpdatedNanos: 8}}}
	good, err := encodeShardManifest(m)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte(`{"format_version":1,"version":5}`))
	f.Add([]byte(`{"format_version":2,"version":5}`))
	f.Add([]byte(`{"format_version":1,"version":5,"flushed_generations":null,"queries":null}`))
	f.Add([]byte(`{"formAt_version":1,"version":5,"flushed_generAtions":[{"files":[]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeShardManifest(key, data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("decode error %q does not wrap ErrCorrupt", err)
			}
			return
		}
		if m.Version != 5 || m.Queries == nil {
			t.Fatalf("decoded manifest %+v: version must match its key and queries be non-nil", m)
		}
		b, err := encodeShardManifest(m)
		if err != nil {
			t.Fatal(err)
		}
		m2, err := decodeShardManifest(key, b)
		if err != nil {
			t.Fatalf("re-encoded manifest does not decode: %v\n%s", err, b)
		}
		if b2, _ := encodeShardManifest(m2); !bytes.Equal(b, b2) {
			t.Fatalf("encode/decode is not stable:\n%s\n%s", b, b2)
		}
		// Clone is what every CommitUpdate closure works on: it must be a faithful deep copy.
		if c, _ := encodeShardManifest(m2.Clone()); !bytes.Equal(normalizeClone(t, b), normalizeClone(t, c)) {
			t.Fatalf("Clone changed the manifest:\n%s\n%s", b, c)
		}
	})
}

// normalizeClone re-encodes manifest JSON through a decode so that nil and empty collections
// (Clone makes them non-nil) compare equal.
func normalizeClone(t *testing.T, b []byte) []byte {
	var m ShardManifest
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if len(m.FlushedGenerations) == 0 {
		m.FlushedGenerations = nil
	}
	for i := range m.FlushedGenerations {
		if len(m.FlushedGenerations[i].Files) == 0 {
			m.FlushedGenerations[i].Files = nil
		}
	}
	out, err := encodeShardManifest(&m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
