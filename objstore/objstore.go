// Package objstore is the storage boundary of flight-sink: every byte a table owns is read and
// written through the Store interface, whether it lives in a local directory or in an S3 bucket.
//
// Keys are slash-separated paths relative to the store's root ("events/_versions/...").
// Implementations must make PutIfAbsent atomic: of any number of concurrent callers creating the
// same key, exactly one succeeds and every other gets ErrExists. The table commit protocol is
// built on that single guarantee.
package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrNotFound is returned (wrapped) when a key does not exist.
var ErrNotFound = errors.New("object not found")

// ErrExists is returned (wrapped) by PutIfAbsent when the key already exists: another writer won.
var ErrExists = errors.New("object already exists")

// ErrUnavailable is wrapped by the errors of an S3 store's requests that the store did not answer
// with an object or a missing key: the endpoint could not be reached, the credentials or the
// bucket were refused, the server failed; and by a local store's listings and writes once its
// root directory is gone (it is never created again behind the operator's back). Such a failure says nothing about the data and may pass
// once the store is back, so callers may retry. A cancelled or expired context is not wrapped.
var ErrUnavailable = errors.New("object store unavailable")

// unavailableError marks err as ErrUnavailable and keeps err's chain; its message is err's in
// brief (briefError).
type unavailableError struct{ err error }

func (e unavailableError) Error() string        { return briefError(e.err) }
func (e unavailableError) Unwrap() error        { return e.err }
func (e unavailableError) Is(target error) bool { return target == ErrUnavailable }

// unavailable marks err as ErrUnavailable unless it is a context's cancellation or expiry.
func unavailable(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return unavailableError{err}
}

// ObjectInfo describes one stored object.
type ObjectInfo struct {
	Key     string
	Size    int64
	ModTime time.Time
}

// Store is the object-store interface the engine and MemWAL use.
//
// All methods are safe for concurrent use.
type Store interface {
	// Get returns the whole object.
	Get(ctx context.Context, key string) ([]byte, error)
	// GetRange returns length bytes starting at offset. A range running past the end of the object
	// is truncated to the object's end.
	GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error)
	// Stat returns the object's size and modification time.
	Stat(ctx context.Context, key string) (ObjectInfo, error)
	// Put writes (or replaces) the object with everything read from body. The object becomes
	// visible only once it is complete and durable.
	Put(ctx context.Context, key string, body io.Reader) error
	// PutIfAbsent atomically creates the object; if it already exists it returns an error wrapping
	// ErrExists and leaves the existing object untouched.
	PutIfAbsent(ctx context.Context, key string, data []byte) error
	// List returns the objects whose keys start with prefix and sort after startAfter (when it is
	// not empty), in lexicographic key order.
	List(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error)
	// Delete removes the object. Deleting a missing object is not an error.
	Delete(ctx context.Context, key string) error
	// DeletePrefix removes every object whose key starts with prefix.
	DeletePrefix(ctx context.Context, prefix string) error
	// String names the store and its root for messages ("file:///data", "s3://bucket/prefix").
	String() string
}

// Open returns a Store for a URI: a bare path or file:///path for the local filesystem, or
// s3://bucket/prefix for S3 (configured by s3Opts, which may be nil to use the environment).
func Open(ctx context.Context, uri string, s3Opts *S3Options) (Store, error) {
	switch {
	case strings.HasPrefix(uri, "s3://"):
		rest := strings.TrimPrefix(uri, "s3://")
		bucket, prefix, _ := strings.Cut(rest, "/")
		if bucket == "" {
			return nil, fmt.Errorf("open store %q: s3 URI has no bucket", uri)
		}
		opts := S3Options{}
		if s3Opts != nil {
			opts = *s3Opts
		}
		opts.Bucket = bucket
		opts.Prefix = strings.Trim(prefix, "/")
		return NewS3(ctx, opts)
	case strings.HasPrefix(uri, "file://"):
		return NewLocal(strings.TrimPrefix(uri, "file://"))
	case strings.Contains(uri, "://"):
		return nil, fmt.Errorf("open store %q: unsupported scheme (use a path, file:// or s3://)", uri)
	default:
		return NewLocal(uri)
	}
}
