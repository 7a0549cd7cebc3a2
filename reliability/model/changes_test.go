package model

// The change feed against the table: after every step each table's change feed is read from the
// version it was last read to up to the latest, applied to the base rows of that version, and
// the result must be exactly the DoGet of the latest version.

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"
)

// feedCursor is how far one table incarnation's change feed has been replayed: the version, and
// the base rows at it (a multiset of feedKey).
type feedCursor struct {
	version uint64
	rows    map[string]int
}

// The change columns of a change feed read, and its change types.
const (
	feedKindColumn    = "_change_type"
	feedVersionColumn = "_commit_version"
	feedTimeColumn    = "_commit_timestamp"
)

// feedKey renders a row by its non-null columns, sorted: a column added after the row was
// written (absent, or null) reads the same.
func feedKey(r row) string {
	names := make([]string, 0, len(r))
	for name, v := range r {
		if v != "null" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	parts := make([]string, len(names))
	for i, name := range names {
		parts[i] = name + "=" + r[name]
	}
	return strings.Join(parts, "\x1f")
}

// errorReason returns the flight-sink ErrorInfo reason of a status error ("" without one).
func errorReason(err error) string {
	st, _ := status.FromError(err)
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok {
			return info.GetReason()
		}
	}
	return ""
}

// checkChanges replays table m's change feed through server s from its cursor to the latest
// version and compares the result with DoGet of that version. A range cleanup made unreadable
// (CHANGES_UNAVAILABLE) starts the cursor again at the latest version.
func (rn *runner) checkChanges(m *tableModel, s *server) {
	if !m.exists {
		m.feed = nil
		return
	}
	ctx, cancel := rn.callCtx()
	defer cancel()
	var st struct {
		Version uint64 `json:"version"`
	}
	if err := action(ctx, s.client, "table_stats", map[string]any{"table": m.name}, &st); err != nil {
		rn.failf("table_stats %s on %s: %v", m.name, s.name, err)
	}
	if m.feed == nil {
		m.feed = &feedCursor{rows: map[string]int{}}
	}
	if st.Version <= m.feed.version {
		return
	}
	read := func(ticket map[string]any) (readResult, error) {
		tk, _ := json.Marshal(ticket)
		return doGet(ctx, s.client, tk)
	}
	what := fmt.Sprintf("change feed of %s versions %d..%d on %s", m.name, m.feed.version+1, st.Version, s.name)
	feed, err := read(map[string]any{"table": m.name, "changes": map[string]any{"from_version": m.feed.version + 1, "to_version": st.Version}})
	if errorReason(err) == "CHANGES_UNAVAILABLE" {
		// Cleanup removed a version the range needs (the message names the oldest readable):
		// start again at the latest version's rows.
		base, err := read(map[string]any{"table": m.name, "version": st.Version})
		if err != nil {
			rn.failf("DoGet %s version %d on %s: %v", m.name, st.Version, s.name, err)
		}
		rows := map[string]int{}
		for _, r := range base.rows {
			rows[feedKey(r)]++
		}
		m.feed = &feedCursor{version: st.Version, rows: rows}
		rn.feedRestarts++
		return
	}
	if err != nil {
		rn.failf("%s: %v", what, err)
	}
	model := m.feed.rows
	var version uint64
	adding := false
	// An update's pre-images and post-images pair by primary key: the same keys, as often.
	pre, post := map[string]int{}, map[string]int{}
	paired := func() {
		if fmt.Sprint(pre) != fmt.Sprint(post) {
			rn.failf("%s: version %d has pre-images of keys %v and post-images of keys %v", what, version, pre, post)
		}
		clear(pre)
		clear(post)
	}
	for i, r := range feed.rows {
		kind, _ := strconv.Unquote(r[feedKindColumn])
		v, err := strconv.ParseUint(r[feedVersionColumn], 10, 64)
		if err != nil || v < version || v <= m.feed.version || v > st.Version {
			rn.failf("%s: row %d has version %s after %d", what, i, r[feedVersionColumn], version)
		}
		if v != version {
			paired()
			version, adding = v, false
		}
		switch kind {
		case "update_preimage":
			pre[m.keyOf(r)]++
		case "update_postimage":
			post[m.keyOf(r)]++
		}
		delete(r, feedKindColumn)
		delete(r, feedVersionColumn)
		delete(r, feedTimeColumn)
		k := feedKey(r)
		switch kind {
		case "delete", "update_preimage":
			if adding {
				rn.failf("%s: version %d has a %s after its inserts", what, v, kind)
			}
			if model[k] == 0 {
				rn.failf("%s: version %d: %s of a row the table did not hold: %s", what, v, kind, k)
			}
			if model[k]--; model[k] == 0 {
				delete(model, k)
			}
		case "insert", "update_postimage":
			adding = true
			model[k]++
		default:
			rn.failf("%s: row %d has change type %q", what, i, kind)
		}
	}
	paired()
	base, err := read(map[string]any{"table": m.name, "version": st.Version})
	if err != nil {
		rn.failf("DoGet %s version %d on %s: %v", m.name, st.Version, s.name, err)
	}
	want := map[string]int{}
	for _, r := range base.rows {
		want[feedKey(r)]++
	}
	var missing, extra []string
	for k, n := range want {
		for range n - model[k] {
			missing = append(missing, k)
		}
	}
	for k, n := range model {
		for range n - want[k] {
			extra = append(extra, k)
		}
	}
	if len(missing)+len(extra) > 0 {
		slices.Sort(missing)
		slices.Sort(extra)
		rn.failf("%s (%d rows) replayed onto version %d does not give version %d:\nmissing (%d):\n%s\nunexpected (%d):\n%s",
			what, len(feed.rows), m.feed.version, st.Version, len(missing), clip(missing), len(extra), clip(extra))
	}
	m.feed.version = st.Version
	rn.feedRows += len(feed.rows)
}
