package objstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/google/uuid"
)

// tmpPrefix marks files a Local store is still writing; List never returns them.
const tmpPrefix = ".tmp-"

// Local is a Store on a local directory, the embedded default.
//
// Durability: Put and PutIfAbsent write a temporary file, fsync it, move it into place and fsync
// the directory, so an object is either absent or complete after a crash.
type Local struct {
	root string
}

// NewLocal returns a Store rooted at dir, creating dir if needed.
func NewLocal(dir string) (*Local, error) {
	if dir == "" {
		return nil, errors.New("local store: empty root path")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("local store %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("local store %q: %w", dir, err)
	}
	return &Local{root: abs}, nil
}

// Root returns the absolute directory of the store.
func (l *Local) Root() string { return l.root }

func (l *Local) String() string { return "file://" + l.root }

func (l *Local) path(key string) (string, error) {
	if key == "" || strings.HasPrefix(key, "/") || strings.Contains(key, "\\") {
		return "", fmt.Errorf("local store: invalid key %q", key)
	}
	for _, part := range strings.Split(key, "/") {
		if part == ".." || part == "." {
			return "", fmt.Errorf("local store: invalid key %q", key)
		}
	}
	return filepath.Join(l.root, filepath.FromSlash(key)), nil
}

func notFound(key string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return err
}

// Get implements Store.
func (l *Local) Get(ctx context.Context, key string) ([]byte, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, notFound(key, err)
	}
	return b, nil
}

// GetRange implements Store.
func (l *Local) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	p, err := l.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if err != nil {
		return nil, notFound(key, err)
	}
	defer f.Close()
	if offset < 0 || length < 0 {
		return nil, fmt.Errorf("read %s: invalid range offset %d length %d", key, offset, length)
	}
	// Size the buffer by what the file holds, not by length: "read to the end" callers pass a
	// huge length, and the contract truncates a range at the object's end.
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	length = max(0, min(length, fi.Size()-offset))
	buf := make([]byte, length)
	n, err := f.ReadAt(buf, offset)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	return buf[:n], nil
}

// Stat implements Store.
func (l *Local) Stat(ctx context.Context, key string) (ObjectInfo, error) {
	p, err := l.path(key)
	if err != nil {
		return ObjectInfo{}, err
	}
	fi, err := os.Stat(p)
	if err != nil {
		return ObjectInfo{}, notFound(key, err)
	}
	if fi.IsDir() {
		return ObjectInfo{}, fmt.Errorf("%s: %w", key, ErrNotFound)
	}
	return ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()}, nil
}

// rootMissing returns an error wrapping ErrUnavailable when the store's root directory no
// longer exists (removed behind the store's back), else nil. The store never creates its root
// again after NewLocal: a removed root is a failure of the storage to report, not an empty store
// to fill. Operations call it only after a path was not found, so it costs nothing otherwise.
func (l *Local) rootMissing() error {
	if _, err := os.Stat(l.root); errors.Is(err, fs.ErrNotExist) {
		return unavailable(fmt.Errorf("local root directory %s is missing", l.root))
	}
	return nil
}

// mkdirs creates dir and its missing parents below the store's root (os.MkdirAll that never
// creates the root itself: a missing root is rootMissing's error).
func (l *Local) mkdirs(dir string) error {
	under := l.root
	if !strings.HasSuffix(under, string(filepath.Separator)) {
		under += string(filepath.Separator)
	}
	if !strings.HasPrefix(dir, under) {
		return l.rootMissing()
	}
	err := os.Mkdir(dir, 0o755)
	if err == nil || errors.Is(err, fs.ErrExist) {
		return nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := l.mkdirs(filepath.Dir(dir)); err != nil {
		return err
	}
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return nil
}

// writeTemp writes body to a synced temporary file in the directory of p and returns its path.
func (l *Local) writeTemp(p string, body io.Reader) (string, error) {
	dir := filepath.Dir(p)
	if err := l.mkdirs(dir); err != nil {
		return "", err
	}
	tmp := filepath.Join(dir, tmpPrefix+uuid.NewString())
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", err
	}
	if err := copyWithWriteback(f, body); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	// fsync before the file gets its real name: a crash must never leave a named, short object.
	if err := f.Sync(); err != nil {
		f.Close()
		os.Remove(tmp)
		return "", err
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// writebackChunk is how many bytes of a file are written before the kernel is asked to start
// writing them back (startWriteback). A variable only so the benchmark can turn it off.
var writebackChunk int64 = 8 << 20

// copyWithWriteback copies body into f, starting the write-back of every full chunk as soon as
// it is written; a file smaller than a chunk is written plainly, its write-back left to the fsync.
func copyWithWriteback(f *os.File, body io.Reader) error {
	_, err := io.Copy(&writebackWriter{f: f}, body) // a bytes.Reader body hands over its slice at once
	return err
}

// writebackWriter writes to f in pieces that end on chunk boundaries and starts each full chunk's
// write-back.
type writebackWriter struct {
	f   *os.File
	off int64
}

func (w *writebackWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), int(writebackChunk-w.off%writebackChunk))
		m, err := w.f.Write(p[:k])
		n += m
		w.off += int64(m)
		if err != nil {
			return n, err
		}
		if w.off%writebackChunk == 0 {
			startWriteback(w.f, w.off-writebackChunk, writebackChunk)
		}
		p = p[k:]
	}
	return n, nil
}

// SyncDir fsyncs directory dir, so that the entries created, renamed or removed in it are
// durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Put implements Store.
func (l *Local) Put(ctx context.Context, key string, body io.Reader) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	tmp, err := l.writeTemp(p, body)
	if err != nil {
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := os.Rename(tmp, p); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("put %s: %w", key, err)
	}
	if err := SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("put %s: sync dir: %w", key, err)
	}
	return nil
}

// PutIfAbsent implements Store with link(2), which fails with EEXIST when the name is taken and
// never replaces it: the file system arbitrates races between processes.
func (l *Local) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	tmp, err := l.writeTemp(p, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("put-if-absent %s: %w", key, err)
	}
	defer os.Remove(tmp)
	if err := os.Link(tmp, p); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s: %w", key, ErrExists)
		}
		return fmt.Errorf("put-if-absent %s: %w", key, err)
	}
	if err := SyncDir(filepath.Dir(p)); err != nil {
		return fmt.Errorf("put-if-absent %s: sync dir: %w", key, err)
	}
	return nil
}

// List implements Store.
func (l *Local) List(ctx context.Context, prefix, startAfter string) ([]ObjectInfo, error) {
	// Walk from the deepest directory the prefix names, then filter by the full prefix.
	dirKey := ""
	if i := strings.LastIndex(prefix, "/"); i >= 0 {
		dirKey = prefix[:i]
	}
	start := l.root
	if dirKey != "" {
		p, err := l.path(dirKey)
		if err != nil {
			return nil, err
		}
		start = p
	}
	var out []ObjectInfo
	err := filepath.WalkDir(start, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				if p == start {
					// Nothing under the prefix, or no root at all: a listing must not read a
					// removed root as an empty store (a table put would then create it anew).
					return l.rootMissing()
				}
				return nil
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		if strings.HasPrefix(d.Name(), tmpPrefix) {
			return nil
		}
		rel, err := filepath.Rel(l.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) || (startAfter != "" && key <= startAfter) {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil // deleted while we walked
			}
			return err
		}
		out = append(out, ObjectInfo{Key: key, Size: fi.Size(), ModTime: fi.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store.
func (l *Local) Delete(ctx context.Context, key string) error {
	p, err := l.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s: %w", key, err)
	}
	return nil
}

// DeletePrefix implements Store.
func (l *Local) DeletePrefix(ctx context.Context, prefix string) error {
	if prefix == "" {
		return errors.New("delete prefix: refusing to delete the whole store")
	}
	objs, err := l.List(ctx, prefix, "")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := l.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	if strings.HasSuffix(prefix, "/") {
		if p, err := l.path(strings.TrimSuffix(prefix, "/")); err == nil {
			os.RemoveAll(p) // empty directories and abandoned temp files
		}
	}
	return nil
}
