package engine

import (
	"fmt"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
)

// TestIndexCacheThroughOptions: the index cache is configuration, not process state. Tables given
// one cache fill that cache and no other; a table with its own default cache leaves it alone; and
// a cache too small to hold a segment caches nothing while lookups stay correct.
func TestIndexCacheThroughOptions(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	shared, tiny := NewIndexCache(DefaultIndexCacheBytes), NewIndexCache(1)
	use := func(name string, opts *Options) *Table {
		tbl := hCreate(t, store, name, true, opts)
		model := pkModel{}
		pkUpsert(t, tbl, model, hRange(0, 50), "a")
		if _, err := tbl.CreateIndex(t.Context(), IndexSpec{}); err != nil {
			t.Fatal(err)
		}
		pkUpsert(t, tbl, model, hRange(25, 50), "b") // looks keys up through the index
		pkCheck(t, tbl, model, fmt.Sprintf("table %s", name))
		return tbl
	}
	use("one", &Options{IndexCache: shared})
	afterOne := shared.Bytes()
	if afterOne == 0 {
		t.Fatal("the shared cache holds nothing after index lookups")
	}
	use("two", &Options{IndexCache: shared})
	if shared.Bytes() <= afterOne {
		t.Fatalf("the second table's lookups left the shared cache at %d bytes (%d after the first)", shared.Bytes(), afterOne)
	}
	before := shared.Bytes()
	own := use("three", nil)
	if shared.Bytes() != before || own.opts.IndexCache == shared || own.opts.IndexCache.Bytes() == 0 {
		t.Fatalf("a table with its own cache: shared %d -> %d bytes, own %d", before, shared.Bytes(), own.opts.IndexCache.Bytes())
	}
	use("four", &Options{IndexCache: tiny})
	if tiny.Bytes() != 0 {
		t.Fatalf("a 1-byte cache holds %d bytes", tiny.Bytes())
	}
}

// TestIndexCacheBound: the cache evicts least recently used objects to stay within its bound.
func TestIndexCacheBound(t *testing.T) {
	c := NewIndexCache(100)
	c.put("a", 1, 40)
	c.put("b", 2, 40)
	c.get("a") // b is now the least recently used
	c.put("c", 3, 40)
	if _, ok := c.get("b"); ok {
		t.Error("b survived; it was the least recently used")
	}
	for _, k := range []string{"a", "c"} {
		if _, ok := c.get(k); !ok {
			t.Errorf("%s was evicted", k)
		}
	}
	if c.Bytes() != 80 {
		t.Errorf("cache holds %d bytes, want 80", c.Bytes())
	}
	c.put("huge", 4, 101)
	if _, ok := c.get("huge"); ok || c.Bytes() != 80 {
		t.Errorf("an object above the bound was cached (%d bytes)", c.Bytes())
	}
}
