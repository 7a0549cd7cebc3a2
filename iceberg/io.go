package iceberg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"time"

	iceio "github.com/apache/iceberg-go/io"

	"github.com/flight-sink/flight-sink/objstore"
)

// storeIO is iceberg-go's file IO (iceio.IO, ReadFileIO, WriteFileIO) over the table's object
// store, so that its manifest and manifest-list writers and its footer readers go through the
// same store as the rest of the table. Names are absolute locations: the store's URI
// (objstore.Store.String, "file:///data" or "s3://bucket/prefix") followed by "/" and the key.
//
// Remove only removes Iceberg's own files (under a table's metadata/ directory): snapshot
// expiry in iceberg-go also deletes the data files no retained snapshot references, but data
// and deletion files belong to the table's versions and only engine cleanup removes them.
type storeIO struct {
	ctx   context.Context
	store objstore.Store
	root  string // store.String() + "/"
}

var (
	_ iceio.ReadFileIO  = (*storeIO)(nil)
	_ iceio.WriteFileIO = (*storeIO)(nil)
)

func newStoreIO(ctx context.Context, store objstore.Store) *storeIO {
	return &storeIO{ctx: ctx, store: store, root: store.String() + "/"}
}

// location returns the absolute location of key.
func (s *storeIO) location(key string) string { return s.root + key }

// key returns the store key of an absolute location. A local store also accepts the plain path
// ("/data/t/x" for "file:///data/t/x"), which some writers produce.
func (s *storeIO) key(name string) (string, error) {
	if k, ok := strings.CutPrefix(name, s.root); ok && k != "" {
		return k, nil
	}
	if local, ok := strings.CutPrefix(s.root, "file://"); ok {
		if k, ok := strings.CutPrefix(name, local); ok && k != "" {
			return k, nil
		}
		if k, ok := strings.CutPrefix(name, "file:"+local); ok && k != "" { // file:/data/... (Java)
			return k, nil
		}
	}
	return "", fmt.Errorf("iceberg io: location %q is outside the store %s", name, s.store)
}

func (s *storeIO) Open(name string) (iceio.File, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	info, err := s.store.Stat(s.ctx, key)
	if err != nil {
		if errors.Is(err, objstore.ErrNotFound) {
			return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
		}
		return nil, err
	}
	return &storeFile{io: s, key: key, name: name, size: info.Size, mod: info.ModTime}, nil
}

func (s *storeIO) ReadFile(name string) ([]byte, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	b, err := s.store.Get(s.ctx, key)
	if errors.Is(err, objstore.ErrNotFound) {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	return b, err
}

// Remove removes name if it is one of Iceberg's own files (under metadata/); any other file is
// left alone and nil returned (see storeIO).
func (s *storeIO) Remove(name string) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	if !strings.Contains(key, "/"+metadataDir) {
		return nil
	}
	return s.store.Delete(s.ctx, key)
}

func (s *storeIO) Create(name string) (iceio.FileWriter, error) {
	key, err := s.key(name)
	if err != nil {
		return nil, err
	}
	return &storeWriter{io: s, key: key}, nil
}

func (s *storeIO) WriteFile(name string, p []byte) error {
	key, err := s.key(name)
	if err != nil {
		return err
	}
	return s.store.Put(s.ctx, key, bytes.NewReader(p))
}

// storeWriter buffers a file and puts it on Close: iceberg-go's files (manifests, manifest
// lists) are small, and an object appears whole or not at all.
type storeWriter struct {
	io  *storeIO
	key string
	buf bytes.Buffer
}

func (w *storeWriter) Write(p []byte) (int, error)         { return w.buf.Write(p) }
func (w *storeWriter) ReadFrom(r io.Reader) (int64, error) { return w.buf.ReadFrom(r) }
func (w *storeWriter) Close() error {
	return w.io.store.Put(w.io.ctx, w.key, bytes.NewReader(w.buf.Bytes()))
}

// storeFile reads an object by ranged gets (Parquet footers, Avro manifests).
type storeFile struct {
	io   *storeIO
	key  string
	name string
	size int64
	mod  time.Time
	off  int64
}

func (f *storeFile) Stat() (fs.FileInfo, error) { return fileInfo{f}, nil }
func (f *storeFile) Close() error               { return nil }

func (f *storeFile) Read(p []byte) (int, error) {
	n, err := f.ReadAt(p, f.off)
	f.off += int64(n)
	return n, err
}

func (f *storeFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= f.size {
		return 0, io.EOF
	}
	want := min(int64(len(p)), f.size-off)
	b, err := f.io.store.GetRange(f.io.ctx, f.key, off, want)
	if err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", f.name, off, err)
	}
	n := copy(p, b)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (f *storeFile) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += f.off
	case io.SeekEnd:
		offset += f.size
	default:
		return 0, fmt.Errorf("seek %s: bad whence %d", f.name, whence)
	}
	if offset < 0 {
		return 0, fmt.Errorf("seek %s: negative offset", f.name)
	}
	f.off = offset
	return offset, nil
}

type fileInfo struct{ f *storeFile }

func (i fileInfo) Name() string       { return i.f.name[strings.LastIndex(i.f.name, "/")+1:] }
func (i fileInfo) Size() int64        { return i.f.size }
func (i fileInfo) Mode() fs.FileMode  { return 0o444 }
func (i fileInfo) ModTime() time.Time { return i.f.mod }
func (i fileInfo) IsDir() bool        { return false }
func (i fileInfo) Sys() any           { return nil }
