// Package faultstore wraps a real objstore.Store and injects failures into its calls by a seeded
// schedule: errors, latency, ambiguous outcomes and torn writes. Tests run the engine and MemWAL
// on it to prove that no fault corrupts a version or loses an acknowledged write, and that every
// fault surfaces as an error a user can act on.
//
// # The fault model
//
// Only failures the real stores can produce are injected (docs/reliability.md explains why):
//
//   - Error: the call fails before it reaches the store. Nothing changed.
//   - After (mutating calls only): the call reaches the store and succeeds there, then the caller
//     gets an error, as when a connection drops after S3 stored the object but before the reply
//     arrived. The outcome is unknown to the caller: a Put or PutIfAbsent object exists, complete;
//     a Delete happened.
//   - Torn (Put and PutIfAbsent): the upload is cut short. The wrapped store really receives a body
//     that fails part-way through, and the call fails. A correct store leaves no object behind (the
//     local store writes a temporary file and links it into place only when it is complete; S3
//     stores nothing of a failed PutObject); the wrapper checks that no truncated object became
//     visible and counts any that did (Stats.TornVisible, always 0 for a correct store). On a local
//     store the wrapper also leaves a truncated temporary file beside the key, as a process that
//     died mid-write would: it must never be listed or read.
//   - Latency: the call is delayed up to a maximum, then proceeds (it may still fail).
//   - Fixed latency (Schedule.Latency, FixedLatency): every call waits the same time before it
//     proceeds, the round trip of a remote object store. It is a regime, not a fault: it is not
//     counted among the faults and draws nothing from the generator.
//
// A torn *named* object cannot happen on either real store, so it is never injected.
//
// # Determinism
//
// Decisions are drawn from one PCG generator seeded by Schedule.Seed, in call order. A
// single-threaded workload replays exactly from its seed; with concurrent callers the order of
// calls, and so the fault each call gets, depends on scheduling.
package faultstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/flight-sink/flight-sink/objstore"
)

// Op names a Store method.
type Op string

// The operations of objstore.Store (and objstore.PrefixLister).
const (
	OpGet          Op = "get"
	OpGetRange     Op = "get-range"
	OpStat         Op = "stat"
	OpPut          Op = "put"
	OpPutIfAbsent  Op = "put-if-absent"
	OpList         Op = "list"
	OpListPrefixes Op = "list-prefixes"
	OpDelete       Op = "delete"
	OpDeletePrefix Op = "delete-prefix"
)

// Ops lists every operation, in a fixed order for reports.
var Ops = []Op{OpGet, OpGetRange, OpStat, OpPut, OpPutIfAbsent, OpList, OpListPrefixes, OpDelete, OpDeletePrefix}

// mutates reports whether op changes the store (and so can have an ambiguous outcome).
func (op Op) mutates() bool {
	switch op {
	case OpPut, OpPutIfAbsent, OpDelete, OpDeletePrefix:
		return true
	}
	return false
}

// writes reports whether op uploads a body (and so can be torn).
func (op Op) writes() bool { return op == OpPut || op == OpPutIfAbsent }

// Kind is the kind of an injected fault.
type Kind string

// Fault kinds (see the package documentation).
const (
	KindError   Kind = "error"
	KindAfter   Kind = "after"
	KindTorn    Kind = "torn"
	KindLatency Kind = "latency"
)

// Kinds lists every kind, in a fixed order for reports.
var Kinds = []Kind{KindError, KindAfter, KindTorn, KindLatency}

// ErrInjected is wrapped by every error the wrapper makes up.
var ErrInjected = errors.New("injected storage fault")

// FaultError is an injected failure of one call.
type FaultError struct {
	Seq  uint64 // 1-based number of the fault in the store's schedule
	Op   Op
	Key  string
	Kind Kind
}

func (e *FaultError) Error() string {
	var what string
	switch e.Kind {
	case KindAfter:
		what = "the store applied the call before the failure (outcome unknown to the caller)"
	case KindTorn:
		what = "the upload was cut short"
	default:
		what = "the call did not reach the store"
	}
	return fmt.Sprintf("faultstore: injected fault #%d (%s) in %s %s: %s", e.Seq, e.Kind, e.Op, e.Key, what)
}

// Unwrap makes errors.Is(err, ErrInjected) hold.
func (e *FaultError) Unwrap() error { return ErrInjected }

// Rates are the per-call probabilities of each fault of one operation. Error, After and Torn are
// exclusive (their sum is the chance the call fails); latency is drawn independently.
type Rates struct {
	Error float64
	// After applies to mutating operations only; it is ignored for reads.
	After float64
	// Torn applies to Put and PutIfAbsent only.
	Torn float64
	// Latency is the chance that the call is delayed by a uniform draw in (0, MaxLatency].
	Latency    float64
	MaxLatency time.Duration
}

// Schedule decides which calls fail.
type Schedule struct {
	Seed uint64
	// Default applies to every operation without an entry in PerOp.
	Default Rates
	PerOp   map[Op]Rates
	// Match, when set, limits faults to the calls it accepts (key is the call's key or prefix).
	Match func(op Op, key string) bool
	// Latency, when positive, delays every call (of those Match accepts, while injection is
	// enabled) by exactly this long before it proceeds, on top of any latency drawn from the
	// rates: an object store's round trip (20 ms is typical of S3) on a store that has none.
	Latency time.Duration
}

// FixedLatency is a schedule that injects no failures and delays every call by d: a local store
// or a loopback S3 server put in the regime of a remote object store.
func FixedLatency(d time.Duration) Schedule { return Schedule{Latency: d} }

// Uniform is a schedule under which every call fails with probability rate: reads with an error;
// writes half with an error, a quarter after the write landed, a quarter torn; deletes half before
// and half after. One call in twenty is also delayed by up to maxLatency (none when it is 0).
func Uniform(seed uint64, rate float64, maxLatency time.Duration) Schedule {
	lat := 0.0
	if maxLatency > 0 {
		lat = 0.05
	}
	read := Rates{Error: rate, Latency: lat, MaxLatency: maxLatency}
	write := Rates{Error: rate / 2, After: rate / 4, Torn: rate / 4, Latency: lat, MaxLatency: maxLatency}
	del := Rates{Error: rate / 2, After: rate / 2, Latency: lat, MaxLatency: maxLatency}
	return Schedule{Seed: seed, Default: read, PerOp: map[Op]Rates{
		OpPut: write, OpPutIfAbsent: write, OpDelete: del, OpDeletePrefix: del,
	}}
}

func (s *Schedule) rates(op Op) Rates {
	if r, ok := s.PerOp[op]; ok {
		return r
	}
	return s.Default
}

// Event records one injected fault, for failure reports.
type Event struct {
	Seq     uint64
	Op      Op
	Key     string
	Kind    Kind
	Latency time.Duration
}

func (e Event) String() string {
	if e.Kind == KindLatency {
		return fmt.Sprintf("#%d %s %s: latency %v", e.Seq, e.Op, e.Key, e.Latency)
	}
	return fmt.Sprintf("#%d %s %s: %s", e.Seq, e.Op, e.Key, e.Kind)
}

// maxEvents bounds the events a Store keeps (the most recent ones).
const maxEvents = 256

// Store is an objstore.Store that injects faults into the calls it forwards to a real one. It is
// safe for concurrent use.
type Store struct {
	inner objstore.Store
	sched Schedule
	on    atomic.Bool

	mu     sync.Mutex
	rng    *rand.Rand
	seq    uint64
	calls  map[Op]int64
	faults map[Op]map[Kind]int64
	events []Event
	// tornTemp counts truncated temporary files left on a local store; tornVisible counts torn
	// writes after which a truncated object was visible under the key (a store bug).
	tornTemp, tornVisible int64
	violations            []string
}

var (
	_ objstore.Store        = (*Store)(nil)
	_ objstore.PrefixLister = (*Store)(nil)
)

// New wraps inner. Faults are on from the start; SetEnabled turns them off and on.
func New(inner objstore.Store, sched Schedule) *Store {
	s := &Store{
		inner: inner, sched: sched,
		rng:    rand.New(rand.NewPCG(sched.Seed, sched.Seed^0x9e3779b97f4a7c15)),
		calls:  make(map[Op]int64),
		faults: make(map[Op]map[Kind]int64),
	}
	s.on.Store(true)
	return s
}

// SetEnabled turns fault injection on or off (calls are forwarded and counted either way).
func (s *Store) SetEnabled(on bool) { s.on.Store(on) }

// Inner returns the wrapped store.
func (s *Store) Inner() objstore.Store { return s.inner }

// String implements objstore.Store; it names the wrapped store.
func (s *Store) String() string { return s.inner.String() }

// plan is what the schedule decided for one call.
type plan struct {
	seq     uint64
	kind    Kind // "" for no failure
	latency time.Duration
	cut     float64 // Torn: the fraction of the body sent before the cut
}

// decide draws the faults of one call and records them.
func (s *Store) decide(op Op, key string) plan {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls[op]++
	if !s.on.Load() || (s.sched.Match != nil && !s.sched.Match(op, key)) {
		return plan{}
	}
	r := s.sched.rates(op)
	var p plan
	if r.Latency > 0 && r.MaxLatency > 0 && s.rng.Float64() < r.Latency {
		p.latency = time.Duration(s.rng.Int64N(int64(r.MaxLatency))) + 1
		s.record(op, key, KindLatency, p.latency)
	}
	p.latency += max(s.sched.Latency, 0)
	errP, afterP, tornP := r.Error, 0.0, 0.0
	if op.mutates() {
		afterP = r.After
	}
	if op.writes() {
		tornP = r.Torn
	}
	switch u := s.rng.Float64(); {
	case u < errP:
		p.kind = KindError
	case u < errP+afterP:
		p.kind = KindAfter
	case u < errP+afterP+tornP:
		p.kind = KindTorn
		p.cut = s.rng.Float64()
	}
	if p.kind != "" {
		p.seq = s.record(op, key, p.kind, 0)
	}
	return p
}

// record counts a fault and remembers it. REQUIRES: s.mu held.
func (s *Store) record(op Op, key string, k Kind, lat time.Duration) uint64 {
	s.seq++
	m := s.faults[op]
	if m == nil {
		m = make(map[Kind]int64)
		s.faults[op] = m
	}
	m[k]++
	if len(s.events) == maxEvents {
		s.events = append(s.events[:0], s.events[1:]...)
	}
	s.events = append(s.events, Event{Seq: s.seq, Op: op, Key: key, Kind: k, Latency: lat})
	return s.seq
}

// begin applies a plan's latency and returns the error a failing-before plan ends the call with.
func (s *Store) begin(ctx context.Context, op Op, key string, p plan) error {
	if p.latency > 0 {
		t := time.NewTimer(p.latency)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	if p.kind == KindError {
		return &FaultError{Seq: p.seq, Op: op, Key: key, Kind: KindError}
	}
	return nil
}

// end turns a successful call into an ambiguous failure when the plan says so.
func (s *Store) end(op Op, key string, p plan, err error) error {
	if err == nil && p.kind == KindAfter {
		return &FaultError{Seq: p.seq, Op: op, Key: key, Kind: KindAfter}
	}
	return err
}

// Get implements objstore.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	p := s.decide(OpGet, key)
	if err := s.begin(ctx, OpGet, key, p); err != nil {
		return nil, err
	}
	return s.inner.Get(ctx, key)
}

// GetRange implements objstore.Store.
func (s *Store) GetRange(ctx context.Context, key string, offset, length int64) ([]byte, error) {
	p := s.decide(OpGetRange, key)
	if err := s.begin(ctx, OpGetRange, key, p); err != nil {
		return nil, err
	}
	return s.inner.GetRange(ctx, key, offset, length)
}

// Stat implements objstore.Store.
func (s *Store) Stat(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	p := s.decide(OpStat, key)
	if err := s.begin(ctx, OpStat, key, p); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return s.inner.Stat(ctx, key)
}

// Put implements objstore.Store.
func (s *Store) Put(ctx context.Context, key string, body io.Reader) error {
	p := s.decide(OpPut, key)
	if err := s.begin(ctx, OpPut, key, p); err != nil {
		return err
	}
	if p.kind == KindTorn {
		data, err := io.ReadAll(body)
		if err != nil {
			return fmt.Errorf("faultstore: read body of put %s: %w", key, err)
		}
		return s.torn(ctx, OpPut, key, data, p)
	}
	return s.end(OpPut, key, p, s.inner.Put(ctx, key, body))
}

// PutIfAbsent implements objstore.Store.
func (s *Store) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	p := s.decide(OpPutIfAbsent, key)
	if err := s.begin(ctx, OpPutIfAbsent, key, p); err != nil {
		return err
	}
	if p.kind == KindTorn {
		return s.torn(ctx, OpPutIfAbsent, key, data, p)
	}
	return s.end(OpPutIfAbsent, key, p, s.inner.PutIfAbsent(ctx, key, data))
}

// torn sends the wrapped store a body that fails after a prefix of data, checks that no
// truncated object became visible, and on a local store leaves a truncated temporary file as a
// crashed writer would. It always fails.
//
// The body goes through the wrapped store's Put for both Put and PutIfAbsent: the torn part of
// either is the upload (Local's temporary file, S3's request body), and a failed upload must
// change nothing whichever call it belongs to.
func (s *Store) torn(ctx context.Context, op Op, key string, data []byte, p plan) error {
	n := int(p.cut * float64(len(data)))
	fault := &FaultError{Seq: p.seq, Op: op, Key: key, Kind: KindTorn}
	ierr := s.inner.Put(ctx, key, &cutReader{data: data[:n], err: fault})
	if ierr == nil {
		s.violation(fmt.Sprintf("%s %s: the store accepted a body that failed after %d of %d bytes", op, key, n, len(data)))
	}
	if n < len(data) {
		if got, err := s.inner.Get(ctx, key); err == nil && len(got) == n && bytes.Equal(got, data[:n]) {
			s.violation(fmt.Sprintf("%s %s: a truncated object (%d of %d bytes) is visible after a torn write", op, key, n, len(data)))
		}
	}
	if l, ok := s.inner.(*objstore.Local); ok {
		s.leaveTempFile(l, key, data[:n], p.seq)
	}
	return fault
}

// tempPrefix is the name prefix of objstore.Local's temporary files, which List never returns.
const tempPrefix = ".tmp-"

// leaveTempFile writes a truncated temporary file in key's directory, as a writer that died
// before linking it would. Best effort: the fault is injected whether or not it lands.
func (s *Store) leaveTempFile(l *objstore.Local, key string, partial []byte, seq uint64) {
	dir := filepath.Join(l.Root(), filepath.FromSlash(path.Dir(key)))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return
	}
	name := filepath.Join(dir, fmt.Sprintf("%storn-%d-%s-%s", tempPrefix, seq, uuid.NewString()[:8], path.Base(key)))
	if err := os.WriteFile(name, partial, 0o644); err == nil {
		s.mu.Lock()
		s.tornTemp++
		s.mu.Unlock()
	}
}

func (s *Store) violation(msg string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tornVisible++
	s.violations = append(s.violations, msg)
}

// cutReader yields data, then fails with err instead of io.EOF: an upload cut short.
type cutReader struct {
	data []byte
	err  error
}

func (r *cutReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// List implements objstore.Store.
func (s *Store) List(ctx context.Context, prefix, startAfter string) ([]objstore.ObjectInfo, error) {
	p := s.decide(OpList, prefix)
	if err := s.begin(ctx, OpList, prefix, p); err != nil {
		return nil, err
	}
	return s.inner.List(ctx, prefix, startAfter)
}

// ListPrefixes implements objstore.PrefixLister with the wrapped store's listing.
func (s *Store) ListPrefixes(ctx context.Context, prefix string) ([]string, error) {
	p := s.decide(OpListPrefixes, prefix)
	if err := s.begin(ctx, OpListPrefixes, prefix, p); err != nil {
		return nil, err
	}
	return objstore.ListPrefixes(ctx, s.inner, prefix)
}

// Delete implements objstore.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	p := s.decide(OpDelete, key)
	if err := s.begin(ctx, OpDelete, key, p); err != nil {
		return err
	}
	return s.end(OpDelete, key, p, s.inner.Delete(ctx, key))
}

// DeletePrefix implements objstore.Store.
func (s *Store) DeletePrefix(ctx context.Context, prefix string) error {
	p := s.decide(OpDeletePrefix, prefix)
	if err := s.begin(ctx, OpDeletePrefix, prefix, p); err != nil {
		return err
	}
	return s.end(OpDeletePrefix, prefix, p, s.inner.DeletePrefix(ctx, prefix))
}

// Stats counts the calls a Store forwarded and the faults it injected.
type Stats struct {
	Calls  map[Op]int64
	Faults map[Op]map[Kind]int64
	// TornTempFiles counts truncated temporary files left on a local store.
	TornTempFiles int64
	// TornVisible counts torn writes after which a truncated object was visible or the store
	// accepted the cut body: store bugs. Violations describes them.
	TornVisible int64
	Violations  []string
}

// Stats returns a snapshot of the counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{Calls: make(map[Op]int64, len(s.calls)), Faults: make(map[Op]map[Kind]int64, len(s.faults)),
		TornTempFiles: s.tornTemp, TornVisible: s.tornVisible, Violations: append([]string(nil), s.violations...)}
	for op, n := range s.calls {
		st.Calls[op] = n
	}
	for op, m := range s.faults {
		c := make(map[Kind]int64, len(m))
		for k, n := range m {
			c[k] = n
		}
		st.Faults[op] = c
	}
	return st
}

// TotalCalls returns the number of calls of every operation.
func (st Stats) TotalCalls() int64 {
	var n int64
	for _, c := range st.Calls {
		n += c
	}
	return n
}

// Failures returns the number of calls that were made to fail (latency alone is not a failure).
func (st Stats) Failures() int64 {
	var n int64
	for _, m := range st.Faults {
		for k, c := range m {
			if k != KindLatency {
				n += c
			}
		}
	}
	return n
}

// ByKind sums the faults of kind k over every operation.
func (st Stats) ByKind(k Kind) int64 {
	var n int64
	for _, m := range st.Faults {
		n += m[k]
	}
	return n
}

// String is a one-line summary per operation that saw calls, for logs.
func (st Stats) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d calls, %d failures injected (error %d, after %d, torn %d), %d delayed",
		st.TotalCalls(), st.Failures(), st.ByKind(KindError), st.ByKind(KindAfter), st.ByKind(KindTorn), st.ByKind(KindLatency))
	ops := make([]string, 0, len(st.Calls))
	for _, op := range Ops {
		if st.Calls[op] == 0 {
			continue
		}
		var ks []string
		for _, k := range Kinds {
			if n := st.Faults[op][k]; n > 0 {
				ks = append(ks, fmt.Sprintf("%s %d", k, n))
			}
		}
		sort.Strings(ks)
		ops = append(ops, fmt.Sprintf("%s: %d calls [%s]", op, st.Calls[op], strings.Join(ks, ", ")))
	}
	if len(ops) > 0 {
		b.WriteString("; ")
		b.WriteString(strings.Join(ops, "; "))
	}
	if st.TornTempFiles > 0 {
		fmt.Fprintf(&b, "; %d torn temporary files left", st.TornTempFiles)
	}
	if st.TornVisible > 0 {
		fmt.Fprintf(&b, "; %d TORN WRITES VISIBLE", st.TornVisible)
	}
	return b.String()
}

// Events returns the most recent injected faults, oldest first.
func (s *Store) Events() []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Event(nil), s.events...)
}
