package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/flight-sink/flight-sink/engine"
	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/streaming"
)

// parseTableURI splits a table URI into the URI of the store root that holds the table and the
// table's name, which is the URI's last path element:
//
//	./flight-sink-data/events   ->  ./flight-sink-data     events
//	events                      ->  .                      events
//	/data/events                ->  /data                  events
//	file:///data/events         ->  file:///data           events
//	s3://bucket/prefix/events   ->  s3://bucket/prefix     events
//	s3://bucket/events          ->  s3://bucket            events
//
// Trailing slashes are ignored. The name must be a legal table name (engine.ValidateTableName).
func parseTableURI(uri string) (root, name string, err error) {
	if strings.TrimSpace(uri) == "" {
		return "", "", errors.New("empty table URI (want a path, file:///path/table or s3://bucket/prefix/table)")
	}
	scheme, rest := "", uri
	if i := strings.Index(uri, "://"); i >= 0 {
		scheme, rest = uri[:i+len("://")], uri[i+len("://"):]
	}
	switch scheme {
	case "", "file://", "s3://":
	default:
		return "", "", fmt.Errorf("table URI %q: unsupported scheme %q (use a path, file:// or s3://)", uri, strings.TrimSuffix(scheme, "://"))
	}
	trimmed := strings.TrimRight(rest, "/")
	parent, name := "", trimmed
	slash := strings.LastIndex(trimmed, "/")
	if slash >= 0 {
		parent, name = trimmed[:slash], trimmed[slash+1:]
	}
	if name == "" {
		return "", "", fmt.Errorf("table URI %q names no table (the table name is the last path element)", uri)
	}
	switch scheme {
	case "s3://":
		if slash < 0 {
			return "", "", fmt.Errorf("table URI %q names a bucket but no table (want s3://bucket/prefix/table)", uri)
		}
		root = scheme + parent
	case "file://":
		if !strings.HasPrefix(rest, "/") {
			return "", "", fmt.Errorf("table URI %q: a file URI needs an absolute path (file:///path/table)", uri)
		}
		if parent == "" {
			parent = "/"
		}
		root = scheme + parent
	default:
		switch {
		case slash < 0:
			parent = "."
		case parent == "":
			parent = "/"
		}
		root = parent
	}
	if err := engine.ValidateTableName(name); err != nil {
		return "", "", fmt.Errorf("table URI %q: %w", uri, err)
	}
	return root, name, nil
}

// localDir returns the directory of a local root URI, and false for a remote one.
func localDir(root string) (string, bool) {
	switch {
	case strings.HasPrefix(root, "s3://"):
		return "", false
	case strings.HasPrefix(root, "file://"):
		return strings.TrimPrefix(root, "file://"), true
	default:
		return root, true
	}
}

// openTableStore opens the store of the root a table URI names and returns it with the table's
// name. It never creates anything: a local root directory that does not exist means the table
// does not exist (objstore.Open would create it).
func openTableStore(ctx context.Context, g *Globals, uri string) (objstore.Store, string, error) {
	root, name, err := parseTableURI(uri)
	if err != nil {
		return nil, "", err
	}
	if dir, ok := localDir(root); ok {
		if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
			return nil, "", fmt.Errorf("table %s at %s: %w (directory %s does not exist)", name, root, engine.ErrTableNotFound, dir)
		}
	}
	store, err := objstore.Open(ctx, root, g.S3Options())
	if err != nil {
		return nil, "", err
	}
	return store, name, nil
}

// openTable opens the existing table a table URI names (openTableStore).
func openTable(ctx context.Context, g *Globals, uri string) (*engine.Table, error) {
	store, name, err := openTableStore(ctx, g, uri)
	if err != nil {
		return nil, err
	}
	// The options a server gives the table (Iceberg snapshot expiry moves with cleanup).
	opts := streaming.TableOptions(&streaming.Options{})
	return engine.Open(ctx, store, name, &opts)
}

// openLatest opens the table at uri and reads its latest version.
func openTableLatest(ctx context.Context, g *Globals, uri string) (*engine.Table, *engine.Manifest, error) {
	t, err := openTable(ctx, g, uri)
	if err != nil {
		return nil, nil, err
	}
	latest, err := t.Latest(ctx)
	if err != nil {
		return nil, nil, err
	}
	return t, latest, nil
}
