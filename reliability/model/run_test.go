package model

// The runner: one seed's servers, tables and operation log; each operation changes the servers'
// tables and the model alike, and every read is checked against the model after each step.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// runner runs one seed.
type runner struct {
	t       testing.TB
	ctx     context.Context
	seed    uint64
	r       *rand.Rand
	root    string
	servers []*server
	tables  []*tableModel
	log     []string
	step    int
	skip    knownIssues
	python  string // the interpreter of the Python checks; "" skips them
	// maintenance is the servers' --maintenance: background maintenance (folds, compactions,
	// cleanups at moments the seed does not fix) or off, drawn per seed.
	maintenance string
	restart     int // servers started so far
	// figures
	epochs, deletes, pyChecks int
	directFiles, icebergReads int
	feedRows, feedRestarts    int // change feed rows replayed; cursors started again after cleanup
}

// logf appends one line to the operation log.
func (rn *runner) logf(format string, args ...any) {
	rn.log = append(rn.log, fmt.Sprintf("%4d ", rn.step)+fmt.Sprintf(format, args...))
}

// failf ends the run: the seed, the operation log and the servers' panics.
func (rn *runner) failf(format string, args ...any) {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d of seed %d: %s\n", rn.step, rn.seed, fmt.Sprintf(format, args...))
	fmt.Fprintf(&b, "replay: %s=%d go test ./reliability/model -run 'TestModel$' -count=1 -v\n", envSeed, rn.seed)
	b.WriteString("operation log:\n")
	for _, l := range rn.log {
		b.WriteString("  " + l + "\n")
	}
	for _, s := range rn.servers {
		if p := s.Panics(); len(p) > 0 {
			out := s.Output()
			if at := strings.Index(out, p[0]); at >= 0 {
				out = out[at:]
			}
			if len(out) > 6000 {
				out = out[:6000]
			}
			fmt.Fprintf(&b, "server %s panicked:\n%s\n", s.name, out)
		} else if !s.Alive() {
			out := s.Output()
			if len(out) > 4000 {
				out = out[len(out)-4000:]
			}
			fmt.Fprintf(&b, "server %s exited; its output ends:\n%s\n", s.name, out)
		}
	}
	rn.t.Fatal(b.String())
}

// server returns a random server.
func (rn *runner) server() *server { return rn.servers[rn.r.IntN(len(rn.servers))] }

// callCtx bounds one call: generous, a failure bound, never a pace.
func (rn *runner) callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(rn.ctx, 2*time.Minute)
}

// retryable reports whether an error is one a client answers by sending the same request again
// (a shard writer fenced by another server, a commit conflict).
func retryable(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.Aborted:
		return true
	}
	return false
}

// startServers starts n servers on the root.
func (rn *runner) startServers(n int) {
	for range n {
		rn.servers = append(rn.servers, rn.mustStart())
	}
}

func (rn *runner) mustStart() *server {
	name := fmt.Sprintf("s%d", rn.restart)
	rn.restart++
	s, err := startServer(rn.t, name, rn.root, rn.maintenance)
	if err != nil {
		rn.failf("start %s: %v", name, err)
	}
	rn.t.Cleanup(func() { s.Stop(); s.client.Close() })
	return s
}

// stepOnce draws and runs one operation.
func (rn *runner) stepOnce() {
	m := rn.tables[rn.r.IntN(len(rn.tables))]
	rn.op(m)
}

func (rn *runner) op(m *tableModel) {
	if !m.exists {
		rn.opEpoch(m)
		return
	}
	switch n := rn.r.IntN(100); {
	case n < 45:
		rn.opEpoch(m)
	case n < 51:
		rn.opReplay(m)
	case n < 63:
		rn.opDelete(m)
	case n < 70:
		rn.opCompact(m)
	case n < 78:
		rn.opFlush(m)
	case n < 85:
		rn.opFold(m)
	case n < 90:
		rn.opCleanup(m)
	case n < 93:
		rn.opIndex(m)
	case n < 97:
		rn.opRestart()
	default:
		rn.opDrop(m)
	}
}

// newSchema draws the schema and options of a table about to be created by its first epoch.
func (rn *runner) newSchema(m *tableModel) {
	r := rn.r
	m.cols = []column{{name: "id", typ: leaf("int64")}}
	m.keys = nil
	if r.IntN(5) < 2 {
		m.keys = []string{"id"}
		if r.IntN(4) == 0 {
			m.cols = append(m.cols, column{name: "k2", typ: leaf("utf8")})
			m.keys = append(m.keys, "k2")
		}
	}
	for i := range 1 + r.IntN(6) {
		m.cols = append(m.cols, column{name: fmt.Sprintf("c%d", i), typ: randomType(r, 2), nullable: r.IntN(5) != 0})
	}
	m.nextCol = len(m.cols)
	m.shards = []int{0, 0, 1, 2}[r.IntN(4)]
	m.rows = nil
	m.queries = map[string]*query{}
	m.indexed = false
}

// epoch is one epoch as sent: enough to send it again.
type epoch struct {
	command map[string]any
	cols    []column
	values  [][]string
	n       int
	status  string // the status its first ack had
}

// batchRows draws n rows of the columns sent (cols, in the stream's order) as JSON per column,
// and their model rows. A keyed table's keys are distinct within the batch.
func (rn *runner) batchRows(m *tableModel, cols []column, n int) ([][]string, []row) {
	r := rn.r
	values := make([][]string, len(cols))
	seen := map[string]bool{}
	for i := 0; i < n; i++ {
		var vals []string
		for tries := 0; ; tries++ {
			vals = make([]string, len(cols))
			for j, c := range cols {
				switch {
				case c.name == "id" && m.keyed():
					vals[j] = fmt.Sprint(r.IntN(30))
				case c.name == "id":
					vals[j] = fmt.Sprint(r.IntN(60))
				case c.name == "k2":
					vals[j] = fmt.Sprintf(`"k%d"`, r.IntN(3))
				case c.nullable:
					vals[j] = nullable(r, c.typ.value)
				default:
					vals[j] = c.typ.value(r)
				}
			}
			if !m.keyed() {
				break
			}
			key := ""
			for j, c := range cols {
				if slices.Contains(m.keys, c.name) {
					key += c.name + "=" + vals[j] + ";"
				}
			}
			if !seen[key] || tries > 50 {
				seen[key] = true
				break
			}
		}
		if m.keyed() && len(seen) < i+1 {
			n = i // the key space is used up
			break
		}
		for j := range cols {
			values[j] = append(values[j], vals[j])
		}
	}
	rows := make([]row, n)
	for i := range rows {
		rows[i] = row{}
	}
	for j, c := range cols {
		canon, err := canonicalValues(c.typ.stored, values[j][:n])
		if err != nil {
			rn.failf("the model cannot build column %s (%s): %v", c.name, c.typ.label, err)
		}
		for i := range rows {
			rows[i][c.name] = canon[i]
		}
		values[j] = values[j][:n]
	}
	return values, rows
}

// opEpoch sends one epoch: the first of a table creates it (a new random schema and options),
// later ones append, overwrite (complete) or upsert (update, keyed), on the table's route or
// directly, sometimes adding a nullable column (merge_schema).
func (rn *runner) opEpoch(m *tableModel) {
	r := rn.r
	create := !m.exists
	if create {
		rn.newSchema(m)
	}
	merge := !create && r.IntN(8) == 0
	var mode string
	switch n := r.IntN(10); {
	case m.keyed() && n < 9, !m.keyed() && n == 8: // a keyed table takes no append (protocol.md, Modes)
		mode = "update"
	case n == 9:
		mode = "complete"
	default:
		mode = "append"
	}
	route := ""
	if m.shards > 0 && mode != "complete" && r.IntN(6) == 0 {
		route = "direct"
	}
	if merge {
		m.cols = append(m.cols, column{name: fmt.Sprintf("c%d", m.nextCol), typ: randomType(r, 2), nullable: true})
		m.nextCol++
	}
	qid := fmt.Sprintf("q%d", r.IntN(3))
	q := m.queries[qid]
	if q == nil {
		q = &query{}
		m.queries[qid] = q
	}
	// The columns sent: every required one, most nullable ones, in table order or shuffled.
	var cols []column
	for i, c := range m.cols {
		if create || !c.nullable || (merge && i == len(m.cols)-1) || r.IntN(8) != 0 {
			cols = append(cols, c)
		}
	}
	if r.IntN(3) == 0 {
		r.Shuffle(len(cols), func(i, j int) { cols[i], cols[j] = cols[j], cols[i] })
	}
	if create {
		m.cols = slices.Clone(cols) // a create-on-put takes the stream's schema, in its order
	}
	n := 1 + r.IntN(10)
	if r.IntN(15) == 0 {
		n = 0
	}
	values, rows := rn.batchRows(m, cols, n)
	n = len(rows)
	cmd := map[string]any{"table": m.name, "query_id": qid, "epoch_id": q.next, "mode": mode, "rows": n}
	if route != "" {
		cmd["route"] = route
	}
	if merge {
		cmd["merge_schema"] = true
	}
	if create {
		opts := map[string]any{}
		if m.keyed() {
			opts["primary_key"] = m.keys
		}
		if m.shards > 0 {
			opts["memwal"] = map[string]any{"shards": m.shards}
		}
		if len(opts) == 0 {
			cmd["create"] = true
		} else {
			cmd["create"] = opts
		}
	}
	e := &epoch{command: cmd, cols: cols, values: values, n: n}
	wantStatus := "committed"
	if n == 0 && mode != "complete" && (!merge || m.keyed()) {
		// An epoch with no rows commits nothing but an append's schema change (docs/protocol.md,
		// the status `empty`); a keyed table's update epoch upserts, and no rows are no upsert.
		wantStatus = "empty"
	}
	wantRoute := "direct"
	if m.shards > 0 && mode != "complete" && route != "direct" && !merge {
		wantRoute = "memwal"
	}
	var labels []string
	for _, c := range cols {
		l := c.name + ":" + c.typ.label
		if !c.nullable {
			l += " not null"
		}
		labels = append(labels, l)
	}
	what := fmt.Sprintf("epoch %s %s/%d %s route=%s rows=%d", m.name, qid, q.next, mode, routeName(route), n)
	if create {
		what += fmt.Sprintf(" CREATE keys=%v shards=%d", m.keys, m.shards)
	}
	if merge {
		what += " MERGE_SCHEMA +" + m.cols[len(m.cols)-1].name
	}
	what += " [" + strings.Join(labels, ", ") + "]"
	a, s := rn.send(e, what)
	if a.Status != wantStatus && !(a.Status == "duplicate" && e.status == "retried") {
		rn.failf("%s on %s: status %q, want %q (ack %+v)", what, s.name, a.Status, wantStatus, a)
	}
	if a.Status == "committed" && a.Route != wantRoute {
		rn.failf("%s on %s: route %q, want %q (ack %+v)", what, s.name, a.Route, wantRoute, a)
	}
	e.status = wantStatus
	q.last = e
	q.next++
	m.exists = true
	rn.epochs++
	if wantStatus == "empty" {
		if merge {
			m.cols = m.cols[:len(m.cols)-1] // an empty epoch commits nothing, its schema change neither
		}
		return
	}
	m.apply(mode, rows)
}

func routeName(r string) string {
	if r == "" {
		return "auto"
	}
	return r
}

// send sends an epoch to a random server, again (to any server) while the answer is one a client
// retries; e.status becomes "retried" once it was sent more than once.
func (rn *runner) send(e *epoch, what string) (ack, *server) {
	for attempt := 0; ; attempt++ {
		s := rn.server()
		rec, err := buildBatch(e.cols, e.values, e.n)
		if err != nil {
			rn.failf("%s: build the batch: %v", what, err)
		}
		ctx, cancel := rn.callCtx()
		a, err := doPut(ctx, s.client, e.command, rec)
		cancel()
		rec.Release()
		if err == nil {
			rn.logf("%s on %s: %s v%d route=%s", what, s.name, a.Status, a.Version, a.Route)
			return a, s
		}
		rn.logf("%s on %s: %v", what, s.name, err)
		if !retryable(err) || attempt >= 5 {
			rn.failf("%s on %s: %v", what, s.name, err)
		}
		e.status = "retried"
		rn.checkAlive()
	}
}

// opReplay sends a query's last epoch again, the same command and rows, to any server: the answer
// is duplicate (empty for an empty epoch) and nothing changes.
func (rn *runner) opReplay(m *tableModel) {
	var qs []string
	for id, q := range m.queries {
		if q.last != nil {
			qs = append(qs, id)
		}
	}
	if len(qs) == 0 {
		rn.opEpoch(m)
		return
	}
	slices.Sort(qs)
	e := m.queries[qs[rn.r.IntN(len(qs))]].last
	what := fmt.Sprintf("replay %s %s/%v", m.name, e.command["query_id"], e.command["epoch_id"])
	want := "duplicate"
	if e.status == "empty" {
		want = "empty"
	}
	a, s := rn.send(&epoch{command: e.command, cols: e.cols, values: e.values, n: e.n}, what)
	if a.Status != want {
		rn.failf("%s on %s: status %q, want %q", what, s.name, a.Status, want)
	}
}

// opDelete deletes the rows a random predicate matches.
func (rn *runner) opDelete(m *tableModel) {
	p := randomPredicate(rn.r, m, 2)
	var want []row
	var kept []row
	for _, rw := range m.rows {
		if p.eval(rw) == trueV {
			want = append(want, rw)
		} else {
			kept = append(kept, rw)
		}
	}
	s := rn.server()
	var res struct {
		Version     uint64 `json:"version"`
		Committed   bool   `json:"committed"`
		RowsDeleted int64  `json:"rows_deleted"`
	}
	ctx, cancel := rn.callCtx()
	err := action(ctx, s.client, "delete", map[string]any{"table": m.name, "where": p.json}, &res)
	cancel()
	what := fmt.Sprintf("delete %s where %s on %s", m.name, p, s.name)
	if err != nil {
		rn.logf("%s: %v", what, err)
		rn.failf("%s: %v", what, err)
	}
	rn.logf("%s: %d rows deleted (model: %d) v%d committed=%v", what, res.RowsDeleted, len(want), res.Version, res.Committed)
	m.rows = kept
	rn.deletes++
	if m.shards == 0 && res.RowsDeleted != int64(len(want)) {
		rn.failf("%s: rows_deleted %d, the model deletes %d:\n%s", what, res.RowsDeleted, len(want), strings.Join(renderAll(m, want), "\n"))
	}
}

func renderAll(m *tableModel, rows []row) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = "  " + m.render(r)
	}
	return out
}

// foldEverything flushes and folds every shard of m through every server, and reports whether
// the table has no MemWAL rows left.
func (rn *runner) foldEverything(m *tableModel) bool {
	for _, s := range rn.servers {
		rn.memwalAction(s, m, "flush_memwal", map[string]any{"table": m.name})
		rn.memwalAction(s, m, "fold_memwal_shard", map[string]any{"table": m.name})
	}
	var st struct {
		MemWALRows int64 `json:"memwal_rows"`
	}
	ctx, cancel := rn.callCtx()
	defer cancel()
	// servers[0], not a random one: steering around a known issue draws nothing from the seed.
	if err := action(ctx, rn.servers[0].client, "table_stats", map[string]any{"table": m.name}, &st); err != nil {
		rn.failf("table_stats %s: %v", m.name, err)
	}
	return st.MemWALRows == 0
}

// opCompact rewrites small fragments and fragments with deleted rows.
func (rn *runner) opCompact(m *tableModel) {
	body := map[string]any{"table": m.name}
	if rn.r.IntN(2) == 0 {
		body["target_rows_per_fragment"] = 1 + rn.r.IntN(50)
	}
	if rn.r.IntN(2) == 0 {
		body["max_deleted_share"] = []float64{0.0001, 0.1, 0.5, 1}[rn.r.IntN(4)]
	}
	rn.simpleAction(m, "compact", body)
}

func (rn *runner) opFlush(m *tableModel) {
	if m.shards == 0 {
		rn.opCompact(m)
		return
	}
	rn.memwalAction(rn.server(), m, "flush_memwal", map[string]any{"table": m.name})
}

func (rn *runner) opFold(m *tableModel) {
	if m.shards == 0 {
		rn.opCompact(m)
		return
	}
	rn.memwalAction(rn.server(), m, "fold_memwal_shard", map[string]any{"table": m.name})
}

// memwalAction runs flush_memwal or fold_memwal_shard on s.
func (rn *runner) memwalAction(s *server, m *tableModel, typ string, body map[string]any) {
	for attempt := 0; ; attempt++ {
		ctx, cancel := rn.callCtx()
		b, err := rnAction(ctx, s, typ, body)
		cancel()
		rn.logf("%s %s on %s: %s %v", typ, m.name, s.name, b, err)
		switch {
		case err == nil, retryable(err):
			return
		}
		rn.failf("%s %s on %s: %v", typ, m.name, s.name, err)
	}
}

func (rn *runner) opCleanup(m *tableModel) {
	rn.simpleAction(m, "cleanup", map[string]any{"table": m.name, "older_than_seconds": 1, "keep_last": 1 + rn.r.IntN(3)})
}

// opIndex builds the primary-key index of a keyed table, or optimizes it once built.
func (rn *runner) opIndex(m *tableModel) {
	if !m.keyed() {
		rn.opCompact(m)
		return
	}
	if !m.indexed {
		rn.simpleAction(m, "create_index", map[string]any{"table": m.name})
		m.indexed = true
		return
	}
	rn.simpleAction(m, "optimize_indices", map[string]any{"table": m.name, "merge_all": rn.r.IntN(2) == 0})
}

// simpleAction runs an action that leaves the table's rows as they are, on a random server; a
// retryable failure (a conflict with maintenance, a fenced shard) is logged, anything else fails
// the run.
func (rn *runner) simpleAction(m *tableModel, typ string, body map[string]any) {
	s := rn.server()
	ctx, cancel := rn.callCtx()
	b, err := rnAction(ctx, s, typ, body)
	cancel()
	rn.logf("%s %v on %s: %s %v", typ, bodyArgs(body), s.name, b, err)
	if err != nil && !retryable(err) {
		rn.failf("%s %s on %s: %v", typ, m.name, s.name, err)
	}
}

func rnAction(ctx context.Context, s *server, typ string, body any) (string, error) {
	var raw map[string]any
	err := action(ctx, s.client, typ, body, &raw)
	if err != nil {
		return "", err
	}
	delete(raw, "format_version")
	delete(raw, "files_removed")
	delete(raw, "duration_ns")
	return fmt.Sprint(raw), nil
}

func bodyArgs(body map[string]any) string {
	var parts []string
	for k, v := range body {
		parts = append(parts, fmt.Sprintf("%s=%v", k, v))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// opRestart stops a server (gracefully or with kill -9) and starts another in its place.
func (rn *runner) opRestart() {
	i := rn.r.IntN(len(rn.servers))
	old := rn.servers[i]
	rn.checkAlive()
	kill := rn.r.IntN(2) == 0
	if kill {
		old.Kill9()
	} else {
		old.Stop()
	}
	rn.servers[i] = rn.mustStart()
	rn.logf("restart %s (kill -9: %v) as %s", old.name, kill, rn.servers[i].name)
}

// opDrop drops a table; its next epoch creates it afresh, with a new schema.
func (rn *runner) opDrop(m *tableModel) {
	s := rn.server()
	ctx, cancel := rn.callCtx()
	b, err := rnAction(ctx, s, "drop_table", map[string]any{"table": m.name})
	cancel()
	rn.logf("drop_table %s on %s: %s %v", m.name, s.name, b, err)
	if err != nil {
		rn.failf("drop_table %s on %s: %v", m.name, s.name, err)
	}
	m.exists = false
	m.rows = nil
	m.queries = map[string]*query{}
	m.feed = nil
}

// checkAlive fails the run when a server exited or panicked.
func (rn *runner) checkAlive() {
	for _, s := range rn.servers {
		if !s.Alive() {
			rn.failf("server %s exited", s.name)
		}
		if p := s.Panics(); len(p) > 0 {
			rn.failf("server %s panicked", s.name)
		}
	}
}

// isNotFound reports whether err says the table does not exist.
func isNotFound(err error) bool {
	return status.Code(err) == codes.NotFound
}
