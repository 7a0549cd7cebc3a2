package objstore_test

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

func put(t *testing.T, s objstore.Store, key, data string) {
	t.Helper()
	if err := s.Put(t.Context(), key, strings.NewReader(data)); err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
}

func mustGet(t *testing.T, s objstore.Store, key string) string {
	t.Helper()
	b, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("get %s: %v", key, err)
	}
	return string(b)
}

func keys(objs []objstore.ObjectInfo) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return out
}

func listKeys(t *testing.T, s objstore.Store, prefix, startAfter string) []string {
	t.Helper()
	objs, err := s.List(t.Context(), prefix, startAfter)
	if err != nil {
		t.Fatalf("list %q after %q: %v", prefix, startAfter, err)
	}
	return keys(objs)
}

func TestPutIfAbsentRace(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		const writers = 16
		const key = "t/_versions/00000000000000000001.manifest"
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			errs    = make([]error, writers)
			winners atomic.Int32
		)
		for i := range writers {
			wg.Go(func() {
				<-start
				errs[i] = s.PutIfAbsent(t.Context(), key, []byte(fmt.Sprintf("writer %d", i)))
				if errs[i] == nil {
					winners.Add(1)
				}
			})
		}
		close(start)
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("%d winners, want exactly 1; errors: %v", n, errs)
		}
		winner := slices.IndexFunc(errs, func(err error) bool { return err == nil })
		for i, err := range errs {
			if i != winner && !errors.Is(err, objstore.ErrExists) {
				t.Errorf("writer %d: got %v, want ErrExists", i, err)
			}
		}
		if got, want := mustGet(t, s, key), fmt.Sprintf("writer %d", winner); got != want {
			t.Errorf("content %q, want the winner's %q", got, want)
		}
	})
}

func TestPutIfAbsentExisting(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		ctx := t.Context()
		if err := s.PutIfAbsent(ctx, "k/first", []byte("one")); err != nil {
			t.Fatalf("first put-if-absent: %v", err)
		}
		if err := s.PutIfAbsent(ctx, "k/first", []byte("two")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second put-if-absent: got %v, want ErrExists", err)
		}
		put(t, s, "k/plain", "by put")
		if err := s.PutIfAbsent(ctx, "k/plain", []byte("two")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("put-if-absent over a put: got %v, want ErrExists", err)
		}
		if got := mustGet(t, s, "k/first"); got != "one" {
			t.Errorf("k/first = %q after losing put-if-absent, want %q", got, "one")
		}
		if got := mustGet(t, s, "k/plain"); got != "by put" {
			t.Errorf("k/plain = %q after losing put-if-absent, want %q", got, "by put")
		}
		// An empty object is a valid commit marker.
		if err := s.PutIfAbsent(ctx, "k/empty", nil); err != nil {
			t.Fatalf("empty put-if-absent: %v", err)
		}
		if got := mustGet(t, s, "k/empty"); got != "" {
			t.Errorf("k/empty = %q, want empty", got)
		}
	})
}

func TestMissing(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		ctx := t.Context()
		put(t, s, "present/x", "x")
		for _, key := range []string{"missing", "present/y", "nodir/x"} {
			if _, err := s.Get(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("get %s: got %v, want ErrNotFound", key, err)
			}
			if _, err := s.GetRange(ctx, key, 0, 10); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("get range %s: got %v, want ErrNotFound", key, err)
			}
			if _, err := s.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
				t.Errorf("stat %s: got %v, want ErrNotFound", key, err)
			}
			if err := s.Delete(ctx, key); err != nil {
				t.Errorf("delete missing %s: %v", key, err)
			}
		}
		if objs := listKeys(t, s, "missing", ""); len(objs) != 0 {
			t.Errorf("list of a missing prefix: %v", objs)
		}
	})
}

func TestStat(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		before := time.Now()
		put(t, s, "s/obj", "twelve bytes")
		info, err := s.Stat(t.Context(), "s/obj")
		if err != nil {
			t.Fatal(err)
		}
		if info.Key != "s/obj" || info.Size != 12 {
			t.Errorf("stat = %+v, want key s/obj size 12", info)
		}
		// S3 reports modification times in whole seconds.
		if d := info.ModTime.Sub(before); d < -2*time.Second || d > time.Minute {
			t.Errorf("mod time %v is %v from the put", info.ModTime, d)
		}
	})
}

func TestGetRange(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		data := make([]byte, 100)
		for i := range data {
			data[i] = byte(i)
		}
		if err := s.Put(t.Context(), "r/obj", bytes.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct {
			name           string
			offset, length int64
			want           []byte
		}{
			{"whole", 0, 100, data},
			{"head", 0, 1, data[:1]},
			{"middle", 10, 20, data[10:30]},
			{"tail", 99, 1, data[99:]},
			{"past end truncates", 90, 50, data[90:]},
			{"at end", 100, 10, nil},
			{"beyond end", 200, 10, nil},
			{"empty", 5, 0, nil},
			{"to the end", 50, 1 << 62, data[50:]},
		} {
			got, err := s.GetRange(t.Context(), "r/obj", tc.offset, tc.length)
			if err != nil {
				t.Errorf("%s: get range %d+%d: %v", tc.name, tc.offset, tc.length, err)
				continue
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("%s: get range %d+%d = %v, want %v", tc.name, tc.offset, tc.length, got, tc.want)
			}
		}
	})
}

func TestPutReplaces(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		put(t, s, "p/obj", "a longer first version")
		put(t, s, "p/obj", "second")
		if got := mustGet(t, s, "p/obj"); got != "second" {
			t.Errorf("get = %q, want %q", got, "second")
		}
		info, err := s.Stat(t.Context(), "p/obj")
		if err != nil || info.Size != 6 {
			t.Errorf("stat = %+v, %v; want size 6", info, err)
		}
		put(t, s, "p/obj", "")
		if got := mustGet(t, s, "p/obj"); got != "" {
			t.Errorf("get = %q after an empty put, want empty", got)
		}
		if info, err := s.Stat(t.Context(), "p/obj"); err != nil || info.Size != 0 {
			t.Errorf("stat = %+v, %v; want size 0", info, err)
		}
	})
}

// streamReader yields n pseudo-random bytes and hides its length, the way a pipe or an encoder
// does, so the store cannot size the upload up front.
type streamReader struct {
	rng *rand.ChaCha8
	n   int64
}

func (r *streamReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > r.n {
		p = p[:r.n]
	}
	_, _ = r.rng.Read(p)
	r.n -= int64(len(p))
	return len(p), nil
}

func TestPutLarge(t *testing.T) {
	const size = 20<<20 + 12345 // more than one 16 MiB part: multipart on S3
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		seed := [32]byte{1, 2, 3}
		want := make([]byte, size)
		_, _ = io.ReadFull(&streamReader{rng: rand.NewChaCha8(seed), n: size}, want)
		if err := s.Put(t.Context(), "big/obj", &streamReader{rng: rand.NewChaCha8(seed), n: size}); err != nil {
			t.Fatal(err)
		}
		got := []byte(mustGet(t, s, "big/obj"))
		if len(got) != size || sha256.Sum256(got) != sha256.Sum256(want) {
			t.Fatalf("round trip of %d bytes returned %d different bytes", size, len(got))
		}
		// A range across the first part boundary.
		part, err := s.GetRange(t.Context(), "big/obj", 16<<20-5, 10)
		if err != nil || !bytes.Equal(part, want[16<<20-5:16<<20+5]) {
			t.Errorf("range across the part boundary: %v, %v", part, err)
		}
		if info, err := s.Stat(t.Context(), "big/obj"); err != nil || info.Size != size {
			t.Errorf("stat = %+v, %v; want size %d", info, err, size)
		}
		// The same bytes from memory, as data files and WAL entries are written.
		if err := s.Put(t.Context(), "big/mem", bytes.NewReader(want)); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIfAbsent(t.Context(), "big/once", want); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"big/mem", "big/once"} {
			if got := []byte(mustGet(t, s, k)); sha256.Sum256(got) != sha256.Sum256(want) {
				t.Fatalf("%s: round trip of %d bytes returned %d different bytes", k, size, len(got))
			}
		}
	})
}

func TestList(t *testing.T) {
	all := []string{
		"a/_versions/00000000000000000001.manifest",
		"a/_versions/00000000000000000002.manifest",
		"a/_versions/00000000000000000010.manifest",
		"a/_versions/10000000000000000000.manifest",
		"a/data/f1.parquet",
		"a/data/f2.parquet",
		"ab/c",
		"b/d/e/f",
	}
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		// Written in reverse so a store that returned insertion order would fail.
		for _, k := range slices.Backward(all) {
			put(t, s, k, "data of "+k)
		}
		for _, tc := range []struct {
			prefix, startAfter string
			want               []string
		}{
			{"", "", all},
			{"a/", "", all[:6]},
			{"a", "", all[:7]},
			{"a/_versions/", "", all[:4]},
			{"a/_versions/0000", "", all[:3]}, // a prefix that ends inside a file name
			{"a/_versions/", "a/_versions/00000000000000000001.manifest", all[1:4]},
			{"a/_versions/0000", "a/_versions/00000000000000000002.manifest", all[2:3]},
			{"a/_versions/", "a/_versions/00000000000000000005", all[2:4]}, // startAfter need not exist
			{"a/data/", "a/", all[4:6]},  // startAfter before the prefix
			{"a/data/", "b", []string{}}, // startAfter past the prefix
			{"b/", "", all[7:]},
			{"b/d/e/f", "", all[7:]}, // the whole key as prefix
			{"c", "", []string{}},
		} {
			got := listKeys(t, s, tc.prefix, tc.startAfter)
			if !slices.Equal(got, tc.want) {
				t.Errorf("list %q after %q = %q, want %q", tc.prefix, tc.startAfter, got, tc.want)
			}
		}
		objs, err := s.List(t.Context(), "a/data/f1", "")
		if err != nil || len(objs) != 1 || objs[0].Size != int64(len("data of a/data/f1.parquet")) {
			t.Errorf("list a/data/f1 = %+v, %v; want one object with its size", objs, err)
		}
	})
}

func TestDelete(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		ctx := t.Context()
		put(t, s, "d/x", "x")
		put(t, s, "d/y", "y")
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Get(ctx, "d/x"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("get after delete: %v, want ErrNotFound", err)
		}
		if got := listKeys(t, s, "d/", ""); !slices.Equal(got, []string{"d/y"}) {
			t.Errorf("list after delete = %q, want [d/y]", got)
		}
		if err := s.Delete(ctx, "d/x"); err != nil {
			t.Errorf("second delete: %v", err)
		}
		// A deleted key can be created again, also put-if-absent.
		if err := s.PutIfAbsent(ctx, "d/x", []byte("again")); err != nil {
			t.Errorf("put-if-absent after delete: %v", err)
		}
	})
}

func TestDeletePrefix(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		ctx := t.Context()
		for _, k := range []string{"t/_mem_wal/s1/g1/a", "t/_mem_wal/s1/g1/b", "t/_mem_wal/s1/g10/a", "t/_mem_wal/s2/x", "t/data/f"} {
			put(t, s, k, k)
		}
		if err := s.DeletePrefix(ctx, "t/_mem_wal/s1/g1/"); err != nil {
			t.Fatal(err)
		}
		want := []string{"t/_mem_wal/s1/g10/a", "t/_mem_wal/s2/x", "t/data/f"}
		if got := listKeys(t, s, "", ""); !slices.Equal(got, want) {
			t.Errorf("after deleting g1/: %q, want %q", got, want)
		}
		if _, err := s.Get(ctx, "t/_mem_wal/s1/g1/a"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("get of a deleted key: %v, want ErrNotFound", err)
		}
		if err := s.DeletePrefix(ctx, "t/"); err != nil {
			t.Fatal(err)
		}
		if got := listKeys(t, s, "", ""); len(got) != 0 {
			t.Errorf("after deleting t/: %q, want nothing", got)
		}
		if _, err := s.Get(ctx, "t/data/f"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("get of a deleted key: %v, want ErrNotFound", err)
		}
		if err := s.DeletePrefix(ctx, "t/"); err != nil {
			t.Errorf("delete of an empty prefix: %v", err)
		}
		if err := s.DeletePrefix(ctx, ""); err == nil {
			t.Error("delete prefix \"\" succeeded, want a refusal")
		}
	})
}

// TestDeletePrefixBatches deletes more keys than one DeleteObjects request may name.
func TestDeletePrefixBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 1,100 objects")
	}
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		ctx := t.Context()
		const n = 1100
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				errs <- s.Put(ctx, fmt.Sprintf("many/%04d", i), strings.NewReader("x"))
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		put(t, s, "other/keep", "k")
		if got := len(listKeys(t, s, "many/", "")); got != n {
			t.Fatalf("listed %d keys, want %d", got, n)
		}
		if err := s.DeletePrefix(ctx, "many/"); err != nil {
			t.Fatal(err)
		}
		if got := listKeys(t, s, "", ""); !slices.Equal(got, []string{"other/keep"}) {
			t.Errorf("after delete prefix: %d keys left (%q...), want [other/keep]", len(got), got[:min(len(got), 3)])
		}
	})
}

func TestListPrefixes(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		if _, ok := s.(objstore.PrefixLister); !ok {
			t.Errorf("%T does not implement PrefixLister", s)
		}
		for _, k := range []string{"t/_mem_wal/s2/g1/f", "t/_mem_wal/s1/g1/f", "t/_mem_wal/s1/g2/f", "t/_mem_wal/s10/m", "t/data/f", "top"} {
			put(t, s, k, k)
		}
		for _, tc := range []struct {
			prefix string
			want   []string
		}{
			{"", []string{"t"}},
			{"t/", []string{"_mem_wal", "data"}},
			{"t/_mem_wal/", []string{"s1", "s10", "s2"}},
			{"t/_mem_wal/s1/", []string{"g1", "g2"}},
			{"t/data/", nil},
			{"none/", nil},
		} {
			got, err := objstore.ListPrefixes(t.Context(), s, tc.prefix)
			if err != nil {
				t.Fatalf("list prefixes %q: %v", tc.prefix, err)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("list prefixes %q = %q, want %q", tc.prefix, got, tc.want)
			}
		}
	})
}

// TestSiblingKeys: keys that share a directory coexist. The layout never makes a key that is also
// a prefix of another key ("x" and "x/a"), which versitygw's posix backend cannot store.
func TestSiblingKeys(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		put(t, s, "x/a", "A")
		put(t, s, "x/b", "B")
		if a, b := mustGet(t, s, "x/a"), mustGet(t, s, "x/b"); a != "A" || b != "B" {
			t.Errorf("x/a = %q, x/b = %q", a, b)
		}
		if got := listKeys(t, s, "x/", ""); !slices.Equal(got, []string{"x/a", "x/b"}) {
			t.Errorf("list x/ = %q", got)
		}
		if _, err := s.Stat(t.Context(), "x"); !errors.Is(err, objstore.ErrNotFound) {
			t.Errorf("stat of the directory x: %v, want ErrNotFound", err)
		}
	})
}

func TestInvalidKeys(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, s objstore.Store) {
		for _, key := range []string{"", "/abs", "a/../b", "./a", `a\b`} {
			if err := s.Put(t.Context(), key, strings.NewReader("x")); err == nil {
				t.Errorf("put %q succeeded, want an error", key)
			}
		}
	})
}

func TestOpen(t *testing.T) {
	ctx := t.Context()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, uri, want string
	}{
		{"bare path", filepath.Join(dir, "bare"), "file://" + filepath.Join(dir, "bare")},
		{"file URI", "file://" + filepath.Join(dir, "uri"), "file://" + filepath.Join(dir, "uri")},
	} {
		s, err := objstore.Open(ctx, tc.uri, nil)
		if err != nil {
			t.Fatalf("%s: open %q: %v", tc.name, tc.uri, err)
		}
		if s.String() != tc.want {
			t.Errorf("%s: open %q = %s, want %s", tc.name, tc.uri, s, tc.want)
		}
		if _, ok := s.(*objstore.Local); !ok {
			t.Errorf("%s: open %q gave a %T, want *objstore.Local", tc.name, tc.uri, s)
		}
	}
	// Two handles on one local root see the same objects.
	a, err := objstore.Open(ctx, filepath.Join(dir, "shared"), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := objstore.Open(ctx, "file://"+filepath.Join(dir, "shared"), nil)
	if err != nil {
		t.Fatal(err)
	}
	put(t, a, "k", "v")
	if got := mustGet(t, b, "k"); got != "v" {
		t.Errorf("second handle read %q", got)
	}

	for _, uri := range []string{"gs://bucket/x", "http://host/x", "s3://", "s3:///prefix"} {
		if s, err := objstore.Open(ctx, uri, nil); err == nil {
			t.Errorf("open %q = %s, want an error", uri, s)
		}
	}

	// An s3:// URI names the bucket and prefix; the options say how to reach the server.
	fixed := objstore.S3Options{Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", Endpoint: "http://127.0.0.1:1"}
	for uri, want := range map[string]string{
		"s3://bucket/some/prefix":  "s3://bucket/some/prefix",
		"s3://bucket/some/prefix/": "s3://bucket/some/prefix",
		"s3://bucket":              "s3://bucket",
	} {
		s, err := objstore.Open(ctx, uri, &fixed)
		if err != nil {
			t.Fatalf("open %q: %v", uri, err)
		}
		if s.String() != want {
			t.Errorf("open %q = %s, want %s", uri, s, want)
		}
	}

	t.Run("s3", func(t *testing.T) {
		uri, opts := storetest.S3(t)
		a, err := objstore.Open(ctx, uri, &opts)
		if err != nil {
			t.Fatal(err)
		}
		if a.String() != uri {
			t.Errorf("open %q = %s", uri, a)
		}
		put(t, a, "k", "v")
		// The URI, not opts.Bucket/Prefix, decides where the store lives.
		other := opts
		other.Bucket, other.Prefix = "elsewhere", "nowhere"
		b, err := objstore.Open(ctx, uri, &other)
		if err != nil {
			t.Fatal(err)
		}
		if got := mustGet(t, b, "k"); got != "v" {
			t.Errorf("second handle read %q", got)
		}
	})
}

// TestOpenFromEnvironment: a process given storetest.S3Env reaches the server from the URI alone,
// through the SDK's AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL handling and FLIGHT_SINK_S3_PATH_STYLE.
// The endpoint is named "localhost" here: for an IP-address endpoint the SDK falls back to path
// style by itself, which would hide whether the variable is honoured.
func TestOpenFromEnvironment(t *testing.T) {
	// setEnv applies S3Env with the endpoint host renamed, under endpointVar, and pathStyle.
	setEnv := func(t *testing.T, opts objstore.S3Options, endpointVar, pathStyle string) {
		for _, k := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_PROFILE", "AWS_CONFIG_FILE"} {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
		for _, kv := range storetest.S3Env(opts) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "AWS_ENDPOINT_URL_S3":
				k, v = endpointVar, strings.Replace(v, "127.0.0.1", "localhost", 1)
			case objstore.PathStyleEnv:
				v = pathStyle
			}
			t.Setenv(k, v)
		}
	}
	for _, endpointVar := range []string{"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"} {
		t.Run(endpointVar, func(t *testing.T) {
			uri, opts := storetest.S3(t)
			setEnv(t, opts, endpointVar, "1")
			s, err := objstore.Open(t.Context(), uri, nil)
			if err != nil {
				t.Fatal(err)
			}
			put(t, s, "k", "from env")
			if got := mustGet(t, s, "k"); got != "from env" {
				t.Errorf("get = %q", got)
			}
		})
	}
	t.Run("virtual host style without the variable", func(t *testing.T) {
		uri, opts := storetest.S3(t)
		setEnv(t, opts, "AWS_ENDPOINT_URL_S3", "")
		s, err := objstore.Open(t.Context(), uri, nil)
		if err != nil {
			t.Fatal(err)
		}
		// The bucket moves into the host name (flight-sink-test.localhost), which does not reach
		// the server's bucket.
		if err := s.Put(t.Context(), "k", strings.NewReader("x")); err == nil {
			t.Error("put without path style succeeded; is the variable tested at all?")
		}
	})
	t.Run("bad path style value", func(t *testing.T) {
		t.Setenv(objstore.PathStyleEnv, "maybe")
		if _, err := objstore.Open(t.Context(), "s3://bucket/x", nil); err == nil {
			t.Error("open with FLIGHT_SINK_S3_PATH_STYLE=maybe succeeded, want an error")
		}
	})
}

// faultyTransport passes requests to a real server, and fails the first conditional PutObject
// with a connection reset: before sending it (the write did not happen) or after the server
// answered (the write happened, the client never heard).
type faultyTransport struct {
	afterSend bool
	fired     atomic.Bool
}

func (f *faultyTransport) Do(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodPut || req.Header.Get("If-None-Match") == "" || f.fired.Swap(true) {
		return http.DefaultClient.Do(req)
	}
	if f.afterSend {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	return nil, errors.New("read tcp: connection reset by peer (injected)")
}

// TestS3PutIfAbsentResent: a conditional write the client resent after a lost answer must not
// report "someone else won" when the earlier attempt was its own.
func TestS3PutIfAbsentResent(t *testing.T) {
	ctx := t.Context()
	_, opts := storetest.S3(t)
	plain, err := objstore.NewS3(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name      string
		afterSend bool
		existing  string // put before, "" for none
		wantErr   error
	}{
		{"lost answer, own write landed", true, "", nil},
		{"lost request, key free", false, "", nil},
		{"lost request, key taken", false, "other", objstore.ErrExists},
		{"lost answer, key taken", true, "other", objstore.ErrExists},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "resent/" + strings.ReplaceAll(tc.name, " ", "_")
			if tc.existing != "" {
				put(t, plain, key, tc.existing)
			}
			ft := &faultyTransport{afterSend: tc.afterSend}
			s, err := objstore.NewS3WithHTTPClient(ctx, opts, ft)
			if err != nil {
				t.Fatal(err)
			}
			err = s.PutIfAbsent(ctx, key, []byte("mine"))
			if !ft.fired.Load() {
				t.Fatal("fault was not injected")
			}
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Fatalf("put-if-absent: %v, want %v", err, tc.wantErr)
			}
			want := "mine"
			if tc.existing != "" {
				want = tc.existing
			}
			if got := mustGet(t, plain, key); got != want {
				t.Errorf("content %q, want %q", got, want)
			}
		})
	}
}
