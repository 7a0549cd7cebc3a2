package objstore_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// closedEndpoint returns an http:// URL of a loopback port nothing listens on.
func closedEndpoint(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return "http://" + addr
}

// TestS3UnavailableIsMarked: every operation of an S3 store that cannot be reached, or whose
// bucket does not exist (Stat aside: see below), fails with an error wrapping ErrUnavailable and never ErrNotFound.
func TestS3UnavailableIsMarked(t *testing.T) {
	t.Parallel()
	_, missingBucket := storetest.S3(t)
	missingBucket.Bucket = "flight-sink-no-such-bucket"
	stores := map[string]objstore.S3Options{
		"closed port":    {Bucket: "b", Endpoint: closedEndpoint(t), Region: "us-east-1", AccessKeyID: "k", SecretAccessKey: "s", PathStyle: true},
		"missing bucket": missingBucket,
	}
	for name, opts := range stores {
		t.Run(name, func(t *testing.T) {
			s, err := objstore.NewS3(t.Context(), opts)
			if err != nil {
				t.Fatal(err)
			}
			ops := map[string]func() error{
				"get":           func() error { _, err := s.Get(t.Context(), "k"); return err },
				"stat":          func() error { _, err := s.Stat(t.Context(), "k"); return err },
				"put":           func() error { return s.Put(t.Context(), "k", strings.NewReader("x")) },
				"put-if-absent": func() error { return s.PutIfAbsent(t.Context(), "k", []byte("x")) },
				"list":          func() error { _, err := s.List(t.Context(), "", ""); return err },
				"delete":        func() error { return s.Delete(t.Context(), "k") },
			}
			if name == "missing bucket" {
				// A HEAD response has no body, so S3 cannot say that the bucket is what is missing.
				delete(ops, "stat")
			}
			for op, fn := range ops {
				err := fn()
				if !errors.Is(err, objstore.ErrUnavailable) || errors.Is(err, objstore.ErrNotFound) {
					t.Errorf("%s: got %v, want an error wrapping ErrUnavailable and not ErrNotFound", op, err)
				}
			}
		})
	}
}

// TestS3MissingKeyIsNotUnavailable: a store that answers "no such key" is available.
func TestS3MissingKeyIsNotUnavailable(t *testing.T) {
	t.Parallel()
	_, opts := storetest.S3(t)
	s, err := objstore.NewS3(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(t.Context(), "missing"); !errors.Is(err, objstore.ErrNotFound) || errors.Is(err, objstore.ErrUnavailable) {
		t.Fatalf("stat of a missing key: got %v, want ErrNotFound only", err)
	}
}

// TestLocalRootRemoved: a local store whose root directory is removed behind its back answers
// its listings and writes with ErrUnavailable naming the root, never an empty listing, and never
// creates the root again; a missing key inside an existing root is still an empty listing.
func TestLocalRootRemoved(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/root"
	s, err := objstore.NewLocal(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if objs, err := s.List(ctx, "events/_versions/", ""); err != nil || len(objs) != 0 {
		t.Fatalf("listing an absent prefix: %v, %v; want empty", objs, err)
	}
	if err := s.PutIfAbsent(ctx, "events/_versions/1", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	for name, op := range map[string]func() error{
		"list":          func() error { _, err := s.List(ctx, "events/_versions/", ""); return err },
		"list root":     func() error { _, err := s.List(ctx, "", ""); return err },
		"put":           func() error { return s.Put(ctx, "events/_versions/2", strings.NewReader("y")) },
		"put-if-absent": func() error { return s.PutIfAbsent(ctx, "events/_versions/2", []byte("y")) },
		"delete prefix": func() error { return s.DeletePrefix(ctx, "events/") },
	} {
		err := op()
		if !errors.Is(err, objstore.ErrUnavailable) || !strings.Contains(err.Error(), dir) {
			t.Errorf("%s with the root removed: %v; want ErrUnavailable naming %s", name, err, dir)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the removed root was created again: %v", err)
	}
}
