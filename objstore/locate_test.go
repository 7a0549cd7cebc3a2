package objstore_test

import (
	"io"
	"net/http"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// TestLocate: every store is a Locator whose location reads the object's bytes without the
// store's credentials (a local file; a presigned URL fetched with a plain HTTP GET, which expires
// when it says), and refuses a key the store refuses.
func TestLocate(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		loc, ok := s.(objstore.Locator)
		if !ok {
			t.Fatalf("%s is not a Locator", s)
		}
		put(t, s, "tbl/data/a b.parquet", "the bytes")
		before := time.Now()
		where, expires, err := loc.Locate(t.Context(), "tbl/data/a b.parquet", time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(where)
		if err != nil {
			t.Fatal(err)
		}
		var got []byte
		switch u.Scheme {
		case "file":
			if !expires.IsZero() {
				t.Errorf("a file location expires at %v", expires)
			}
			got, err = os.ReadFile(u.Path)
		case "http", "https":
			if expires.Before(before.Add(time.Minute)) || expires.After(time.Now().Add(time.Minute)) {
				t.Errorf("presigned for a minute at %v, expires %v", before, expires)
			}
			var resp *http.Response
			if resp, err = http.Get(where); err == nil { //nolint:gosec,noctx // the URL is the store's own
				defer resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("GET %s: %s", where, resp.Status)
				}
				got, err = io.ReadAll(resp.Body)
			}
		default:
			t.Fatalf("location %q: scheme %q", where, u.Scheme)
		}
		if err != nil || string(got) != "the bytes" {
			t.Fatalf("reading %s: %q, %v", where, got, err)
		}
		if _, _, err := loc.Locate(t.Context(), "../escape", time.Minute); err == nil {
			t.Errorf("Locate of ../escape: no error")
		}
	})
}
