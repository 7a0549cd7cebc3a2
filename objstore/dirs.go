package objstore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sort"
	"strings"
)

// PrefixLister is implemented by stores that can list the "directories" directly under a prefix
// without listing every object below them (S3 with a delimiter, a local ReadDir).
type PrefixLister interface {
	// ListPrefixes returns the names of the immediate sub-prefixes of prefix (which is "" or ends
	// in "/"), without the trailing slash, sorted.
	ListPrefixes(ctx context.Context, prefix string) ([]string, error)
}

// ListPrefixes lists the immediate sub-prefixes of prefix, using the store's PrefixLister when it
// has one and a full listing otherwise.
func ListPrefixes(ctx context.Context, s Store, prefix string) ([]string, error) {
	if pl, ok := s.(PrefixLister); ok {
		return pl.ListPrefixes(ctx, prefix)
	}
	objs, err := s.List(ctx, prefix, "")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, prefix)
		if i := strings.Index(rest, "/"); i > 0 && !seen[rest[:i]] {
			seen[rest[:i]] = true
			out = append(out, rest[:i])
		}
	}
	sort.Strings(out)
	return out, nil
}

// ListPrefixes implements PrefixLister.
func (l *Local) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	dir := l.root
	if p := strings.TrimSuffix(prefix, "/"); p != "" {
		var err error
		if dir, err = l.path(p); err != nil {
			return nil, err
		}
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		return nil, fmt.Errorf("list prefixes %s: %w", prefix, err)
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), tmpPrefix) {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}
