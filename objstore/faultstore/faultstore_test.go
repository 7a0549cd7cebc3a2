package faultstore_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/faultstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

func TestMain(m *testing.M) { storetest.Main(m) }

// only is a schedule that makes every call of op fail with kind, and nothing else.
func only(op faultstore.Op, k faultstore.Kind) faultstore.Schedule {
	r := faultstore.Rates{}
	switch k {
	case faultstore.KindError:
		r.Error = 1
	case faultstore.KindAfter:
		r.After = 1
	case faultstore.KindTorn:
		r.Torn = 1
	}
	return faultstore.Schedule{Seed: 1, PerOp: map[faultstore.Op]faultstore.Rates{op: r}}
}

func wantFault(t *testing.T, err error, k faultstore.Kind) {
	t.Helper()
	var fe *faultstore.FaultError
	if !errors.As(err, &fe) || !errors.Is(err, faultstore.ErrInjected) || fe.Kind != k {
		t.Fatalf("got %v, want an injected %s fault", err, k)
	}
}

func TestDisabledIsTransparent(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, inner objstore.Store) {
		ctx := t.Context()
		s := faultstore.New(inner, faultstore.Uniform(7, 1, 0))
		s.SetEnabled(false)
		if err := s.Put(ctx, "a/b.bin", strings.NewReader("hello")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIfAbsent(ctx, "a/c.bin", []byte("x")); err != nil {
			t.Fatal(err)
		}
		if err := s.PutIfAbsent(ctx, "a/c.bin", []byte("y")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("second put-if-absent: %v, want ErrExists", err)
		}
		if b, err := s.Get(ctx, "a/b.bin"); err != nil || string(b) != "hello" {
			t.Fatalf("get: %q, %v", b, err)
		}
		if b, err := s.GetRange(ctx, "a/b.bin", 1, 3); err != nil || string(b) != "ell" {
			t.Fatalf("get range: %q, %v", b, err)
		}
		objs, err := s.List(ctx, "a/", "")
		if err != nil || len(objs) != 2 {
			t.Fatalf("list: %v, %v", objs, err)
		}
		if ps, err := s.ListPrefixes(ctx, ""); err != nil || !slices.Equal(ps, []string{"a"}) {
			t.Fatalf("list prefixes: %v, %v", ps, err)
		}
		if err := s.DeletePrefix(ctx, "a/"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Stat(ctx, "a/b.bin"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("stat after delete: %v", err)
		}
		st := s.Stats()
		if st.Failures() != 0 || st.TotalCalls() != 9 {
			t.Fatalf("stats %s", st)
		}
	})
}

func TestErrorBeforeChangesNothing(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, inner objstore.Store) {
		ctx := t.Context()
		s := faultstore.New(inner, only(faultstore.OpPutIfAbsent, faultstore.KindError))
		wantFault(t, s.PutIfAbsent(ctx, "k/v.json", []byte("data")), faultstore.KindError)
		if _, err := inner.Stat(ctx, "k/v.json"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("object after a failed-before put-if-absent: %v", err)
		}
		s = faultstore.New(inner, only(faultstore.OpGet, faultstore.KindError))
		if err := inner.Put(ctx, "k/w.json", strings.NewReader("w")); err != nil {
			t.Fatal(err)
		}
		_, err := s.Get(ctx, "k/w.json")
		wantFault(t, err, faultstore.KindError)
		if !strings.Contains(err.Error(), "get k/w.json") {
			t.Fatalf("message %q does not name the call", err)
		}
	})
}

func TestAfterLeavesCompleteObject(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, inner objstore.Store) {
		ctx := t.Context()
		s := faultstore.New(inner, only(faultstore.OpPutIfAbsent, faultstore.KindAfter))
		wantFault(t, s.PutIfAbsent(ctx, "k/v.json", []byte("complete")), faultstore.KindAfter)
		if b, err := inner.Get(ctx, "k/v.json"); err != nil || string(b) != "complete" {
			t.Fatalf("after an ambiguous put-if-absent: %q, %v; want the complete object", b, err)
		}
		// A store error is passed through, never turned into an ambiguous success.
		if err := s.PutIfAbsent(ctx, "k/v.json", []byte("other")); !errors.Is(err, objstore.ErrExists) {
			t.Fatalf("put-if-absent of an existing key: %v, want ErrExists", err)
		}
		s = faultstore.New(inner, only(faultstore.OpDelete, faultstore.KindAfter))
		wantFault(t, s.Delete(ctx, "k/v.json"), faultstore.KindAfter)
		if _, err := inner.Stat(ctx, "k/v.json"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("after an ambiguous delete: %v, want it deleted", err)
		}
	})
}

func TestTornWriteLeavesNothingVisible(t *testing.T) {
	storetest.ForEach(t, true, func(t *testing.T, inner objstore.Store) {
		ctx := t.Context()
		data := bytes.Repeat([]byte("0123456789"), 10_000)
		for _, op := range []faultstore.Op{faultstore.OpPut, faultstore.OpPutIfAbsent} {
			s := faultstore.New(inner, only(op, faultstore.KindTorn))
			for i := 0; i < 8; i++ {
				key := "torn/" + string(op) + "-" + string(rune('a'+i)) + ".bin"
				var err error
				if op == faultstore.OpPut {
					err = s.Put(ctx, key, bytes.NewReader(data))
				} else {
					err = s.PutIfAbsent(ctx, key, data)
				}
				wantFault(t, err, faultstore.KindTorn)
				if _, err := inner.Stat(ctx, key); !errors.Is(err, objstore.ErrNotFound) {
					t.Fatalf("%s %s: object visible after a torn write: %v", op, key, err)
				}
			}
			// A torn write over an existing object leaves it as it was.
			if err := inner.Put(ctx, "torn/existing.bin", strings.NewReader("old")); err != nil {
				t.Fatal(err)
			}
			if op == faultstore.OpPut {
				wantFault(t, s.Put(ctx, "torn/existing.bin", bytes.NewReader(data)), faultstore.KindTorn)
			} else {
				wantFault(t, s.PutIfAbsent(ctx, "torn/existing.bin", data), faultstore.KindTorn)
			}
			if b, err := inner.Get(ctx, "torn/existing.bin"); err != nil || string(b) != "old" {
				t.Fatalf("%s: existing object after a torn write: %q, %v", op, b, err)
			}
			st := s.Stats()
			if st.TornVisible != 0 {
				t.Fatalf("%s: %v", op, st.Violations)
			}
			if st.ByKind(faultstore.KindTorn) != 9 {
				t.Fatalf("%s: stats %s", op, st)
			}
			if l, ok := inner.(*objstore.Local); ok && st.TornTempFiles != 9 {
				t.Fatalf("%s on %s: %d torn temp files, want 9", op, l, st.TornTempFiles)
			}
		}
		objs, err := inner.List(ctx, "torn/", "")
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.Key != "torn/existing.bin" {
				t.Fatalf("listed %s after torn writes", o.Key)
			}
		}
		if l, ok := inner.(*objstore.Local); ok {
			ents, _ := os.ReadDir(filepath.Join(l.Root(), "torn"))
			temps := 0
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".tmp-") {
					temps++
				}
			}
			if temps != 18 {
				t.Fatalf("%d temp files on disk, want 18 (they model writers that died mid-write)", temps)
			}
		}
	})
}

func TestSeededScheduleReplays(t *testing.T) {
	run := func(seed uint64) []faultstore.Event {
		inner, err := objstore.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		s := faultstore.New(inner, faultstore.Uniform(seed, 0.2, time.Microsecond))
		ctx := context.Background()
		for i := 0; i < 200; i++ {
			_, _ = s.Stat(ctx, "x/missing")
			_ = s.PutIfAbsent(ctx, "x/k", []byte("v"))
			_ = s.Delete(ctx, "x/k")
		}
		ev := s.Events()
		for i := range ev {
			ev[i].Latency = 0
		}
		return ev
	}
	a, b, c := run(42), run(42), run(43)
	if len(a) == 0 || !slices.Equal(a, b) {
		t.Fatalf("seed 42 gave different schedules:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Fatal("seeds 42 and 43 gave the same schedule")
	}
}

func TestUniformRate(t *testing.T) {
	inner, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := faultstore.New(inner, faultstore.Uniform(3, 0.01, 0))
	ctx := t.Context()
	const n = 20_000
	failed := 0
	for i := 0; i < n; i++ {
		if _, err := s.Stat(ctx, "missing"); errors.Is(err, faultstore.ErrInjected) {
			failed++
		}
	}
	if failed < n/200 || failed > n*3/200 {
		t.Fatalf("%d of %d calls failed at a 1%% rate", failed, n)
	}
	if st := s.Stats(); st.Failures() != int64(failed) || st.Calls[faultstore.OpStat] != n {
		t.Fatalf("stats %s, counted %d failures", st, failed)
	}
}

func TestMatchAndLatency(t *testing.T) {
	inner, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	sched := faultstore.Schedule{Seed: 9, Default: faultstore.Rates{Error: 1},
		Match: func(op faultstore.Op, key string) bool { return strings.HasPrefix(key, "bad/") }}
	s := faultstore.New(inner, sched)
	ctx := t.Context()
	if err := s.Put(ctx, "good/a", strings.NewReader("a")); err != nil {
		t.Fatalf("unmatched key failed: %v", err)
	}
	wantFault(t, s.Put(ctx, "bad/a", strings.NewReader("a")), faultstore.KindError)

	slow := faultstore.New(inner, faultstore.Schedule{Seed: 1, Default: faultstore.Rates{Latency: 1, MaxLatency: time.Hour}})
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := slow.Get(cctx, "good/a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("delayed call under a 50ms deadline: %v", err)
	}
}

// TestFixedLatency: under FixedLatency every operation waits at least the latency and then
// proceeds normally, nothing counts as a fault, and calls that Match rejects or that run while
// injection is disabled are not delayed. It runs on every store kind: the bench puts versitygw in
// this regime.
func TestFixedLatency(t *testing.T) {
	calls := []struct {
		op   faultstore.Op
		call func(ctx context.Context, s *faultstore.Store) error
	}{
		{faultstore.OpPut, func(ctx context.Context, s *faultstore.Store) error {
			return s.Put(ctx, "lat/put", strings.NewReader("p"))
		}},
		{faultstore.OpPutIfAbsent, func(ctx context.Context, s *faultstore.Store) error {
			return s.PutIfAbsent(ctx, "lat/pia", []byte("x"))
		}},
		{faultstore.OpGet, func(ctx context.Context, s *faultstore.Store) error { _, err := s.Get(ctx, "lat/put"); return err }},
		{faultstore.OpGetRange, func(ctx context.Context, s *faultstore.Store) error {
			_, err := s.GetRange(ctx, "lat/put", 0, 1)
			return err
		}},
		{faultstore.OpStat, func(ctx context.Context, s *faultstore.Store) error { _, err := s.Stat(ctx, "lat/put"); return err }},
		{faultstore.OpList, func(ctx context.Context, s *faultstore.Store) error { _, err := s.List(ctx, "lat/", ""); return err }},
		{faultstore.OpListPrefixes, func(ctx context.Context, s *faultstore.Store) error { _, err := s.ListPrefixes(ctx, ""); return err }},
		{faultstore.OpDelete, func(ctx context.Context, s *faultstore.Store) error { return s.Delete(ctx, "lat/gone") }},
		{faultstore.OpDeletePrefix, func(ctx context.Context, s *faultstore.Store) error { return s.DeletePrefix(ctx, "lat/none/") }},
	}
	storetest.ForEach(t, true, func(t *testing.T, inner objstore.Store) {
		const d = 25 * time.Millisecond
		s := faultstore.New(inner, faultstore.FixedLatency(d))
		for _, c := range calls {
			start := time.Now()
			if err := c.call(t.Context(), s); err != nil {
				t.Fatalf("%s under fixed latency: %v", c.op, err)
			}
			if el := time.Since(start); el < d {
				t.Fatalf("%s returned after %v, before its fixed latency of %v", c.op, el, d)
			}
		}
		st := s.Stats()
		if st.TotalCalls() != int64(len(calls)) || len(st.Faults) != 0 || len(s.Events()) != 0 {
			t.Fatalf("fixed latency counted as faults or calls miscounted: %s, events %v", st, s.Events())
		}

		// A delay of an hour: a delayed call can only end by its context; one that is not
		// delayed returns at once.
		slow := faultstore.Schedule{Latency: time.Hour, Match: func(op faultstore.Op, key string) bool { return key != "lat/put" }}
		hs := faultstore.New(inner, slow)
		short, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
		defer cancel()
		if _, err := hs.Stat(short, "lat/other"); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call under an hour's fixed latency and a 100ms deadline: %v, want DeadlineExceeded", err)
		}
		generous, cancel2 := context.WithTimeout(t.Context(), 30*time.Second)
		defer cancel2()
		if _, err := hs.Get(generous, "lat/put"); err != nil {
			t.Fatalf("call Match rejects was delayed or failed: %v", err)
		}
		hs.SetEnabled(false)
		if _, err := hs.Stat(generous, "lat/put"); err != nil {
			t.Fatalf("call while injection is disabled was delayed or failed: %v", err)
		}
	})
}
