// Package numbered makes and parses the keys of numbered objects, <dir><number><ext> with the
// number zero-padded to 20 digits (every uint64 fits), so that keys sort as their numbers do and
// no key is also the prefix of another. Table versions, MemWAL shard manifests, WAL entries and
// WAL segments are named this way.
package numbered

import (
	"fmt"
	"strconv"
	"strings"
)

// Digits is the width of the number in a key.
const Digits = 20

// Key returns prefix followed by n in Digits digits and ext.
func Key(prefix string, n uint64, ext string) string {
	return fmt.Sprintf("%s%020d%s", prefix, n, ext)
}

// Parse is the inverse of Key for a key whose last directory is dir (dir ends in "/" and starts
// the key or follows a "/"): it returns the number. ok is false for any other key.
func Parse(key, dir, ext string) (n uint64, ok bool) {
	i := strings.LastIndex(key, dir)
	if i < 0 || (i > 0 && key[i-1] != '/') {
		return 0, false
	}
	name := key[i+len(dir):]
	if len(name) != Digits+len(ext) || !strings.HasSuffix(name, ext) {
		return 0, false
	}
	n, err := strconv.ParseUint(name[:Digits], 10, 64)
	return n, err == nil
}
