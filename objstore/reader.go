package objstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
)

// ReadAtSeekCloser is a random-access handle on one object, what a Parquet reader needs.
type ReadAtSeekCloser interface {
	io.ReaderAt
	io.ReadSeeker
	io.Closer
}

// OpenReader returns a random-access reader on key and the object's size. On a local store it is
// the file itself; elsewhere every read becomes a ranged get, so only the bytes a reader asks for
// (a footer, the projected column chunks) travel.
func OpenReader(ctx context.Context, s Store, key string) (ReadAtSeekCloser, int64, error) {
	if l, ok := s.(*Local); ok {
		p, err := l.path(key)
		if err != nil {
			return nil, 0, err
		}
		f, err := os.Open(p)
		if err != nil {
			return nil, 0, notFound(key, err)
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
	info, err := s.Stat(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	return &rangeReader{ctx: ctx, s: s, key: key, size: info.Size}, info.Size, nil
}

type rangeReader struct {
	ctx  context.Context
	s    Store
	key  string
	size int64
	pos  int64
}

func (r *rangeReader) ReadAt(p []byte, off int64) (int, error) {
	if off >= r.size {
		return 0, io.EOF
	}
	b, err := r.s.GetRange(r.ctx, r.key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	n := copy(p, b)
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (r *rangeReader) Read(p []byte) (int, error) {
	n, err := r.ReadAt(p, r.pos)
	r.pos += int64(n)
	return n, err
}

func (r *rangeReader) Seek(offset int64, whence int) (int64, error) {
	var abs int64
	switch whence {
	case io.SeekStart:
		abs = offset
	case io.SeekCurrent:
		abs = r.pos + offset
	case io.SeekEnd:
		abs = r.size + offset
	default:
		return 0, errors.New("seek: bad whence")
	}
	if abs < 0 {
		return 0, fmt.Errorf("seek %s: negative position", r.key)
	}
	r.pos = abs
	return abs, nil
}

func (r *rangeReader) Close() error { return nil }
