package engine

import (
	"errors"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
)

// goldenStage is a stage record exactly as the server wrote it before staging moved from
// streaming into the engine: a stage left by an older server must still commit, and a new
// server writes the same bytes.
const goldenStage = `{"token":"5b3c1f0e-8a7d-4e2b-9c61-0d2f4a6b8c9e","query_id":"q-123","epoch_id":42,"mode":"append",` +
	`"partition":{"id":3,"attempt":1},"rows":7,"fragments":[{"id":0,"files":[{"path":"data/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.parquet","size_bytes":1234}],"physical_rows":7}],` +
	`"created_nanos":1700000000123456789}`

func TestStageRecordFormat(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl, err := Create(ctx, store, "t", hSchema, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const token = "5b3c1f0e-8a7d-4e2b-9c61-0d2f4a6b8c9e"
	if err := store.PutIfAbsent(ctx, "t/_staging/"+token+".stage", []byte(goldenStage)); err != nil {
		t.Fatal(err)
	}
	got, err := tbl.ReadStage(ctx, token)
	if err != nil {
		t.Fatal(err)
	}
	want := Stage{Token: token, QueryID: "q-123", EpochID: 42, Mode: "append", PartitionID: 3, Attempt: 1, Rows: 7,
		Fragments: []Fragment{{Files: []DataFile{{Path: "data/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0.parquet", SizeBytes: 1234}}, PhysicalRows: 7}},
		Created:   time.Unix(0, 1700000000123456789)}
	if got.Token != want.Token || got.QueryID != want.QueryID || got.EpochID != want.EpochID || got.Mode != want.Mode ||
		got.PartitionID != want.PartitionID || got.Attempt != want.Attempt || got.Rows != want.Rows || !got.Created.Equal(want.Created) ||
		len(got.Fragments) != 1 || got.Fragments[0].Files[0] != want.Fragments[0].Files[0] || got.Fragments[0].PhysicalRows != 7 {
		t.Fatalf("read the golden stage as %+v, want %+v", got, want)
	}

	// Written again, the same stage is the same bytes (under a new token).
	again := want
	if err := tbl.WriteStage(ctx, &again); err != nil {
		t.Fatal(err)
	}
	b, err := store.Get(ctx, "t/"+makeStageKey(again.Token))
	if err != nil {
		t.Fatal(err)
	}
	if wantBytes := `{"token":"` + again.Token + goldenStage[len(`{"token":"`)+len(token):]; string(b) != wantBytes {
		t.Fatalf("WriteStage wrote\n%s\nwant\n%s", b, wantBytes)
	}

	if err := tbl.RemoveStage(ctx, token); err != nil {
		t.Fatal(err)
	}
	if _, err := tbl.ReadStage(ctx, token); !errors.Is(err, ErrStageNotFound) {
		t.Fatalf("a removed stage: %v, want %v", err, ErrStageNotFound)
	}
	if err := tbl.RemoveStage(ctx, token); err != nil {
		t.Fatalf("removing a stage twice: %v", err)
	}
	for _, bad := range []string{"", "../../x", "not-a-token", token + "/x"} {
		if _, err := tbl.ReadStage(ctx, bad); !errors.Is(err, ErrInvalidStageToken) {
			t.Errorf("ReadStage(%q): %v, want %v", bad, err, ErrInvalidStageToken)
		}
	}
}

func TestStageKeys(t *testing.T) {
	const token = "5b3c1f0e-8a7d-4e2b-9c61-0d2f4a6b8c9e"
	key := makeStageKey(token)
	if key != "_staging/"+token+".stage" {
		t.Fatalf("makeStageKey: %q", key)
	}
	for _, c := range []struct {
		key   string
		token string
		ok    bool
	}{
		{key, token, true},
		{"t/" + key, token, true},
		{"_staging/" + token, "", false},
		{"_staging/.stage", "", false},
		{"_staging/a/b.stage", "", false},
		{"data/" + token + ".stage", "", false},
	} {
		tok, ok := parseStageKey(c.key)
		if tok != c.token || ok != c.ok {
			t.Errorf("parseStageKey(%q) = %q, %v; want %q, %v", c.key, tok, ok, c.token, c.ok)
		}
	}
}

// Cleanup expires exactly the stages past the TTL, counts them the same in a dry run, and keeps
// the data files of the stages it keeps whatever their age; the file sweep takes an expired
// stage's files once they are past the grace.
func TestCleanupExpiresStages(t *testing.T) {
	store, err := objstore.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	tbl, err := Create(ctx, store, "t", hSchema, CreateOptions{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	stage := func(created time.Time, ids ...int64) Stage {
		t.Helper()
		w, err := tbl.NewWriter(ctx, hSchema)
		if err != nil {
			t.Fatal(err)
		}
		rec := hBatch(ids, "s")
		err = w.Write(ctx, rec)
		rec.Release()
		if err != nil {
			t.Fatal(err)
		}
		frags, err := w.Finish(ctx)
		if err != nil {
			t.Fatal(err)
		}
		st := Stage{QueryID: "q", EpochID: 1, Mode: "append", Rows: int64(len(ids)), Fragments: frags, Created: created}
		if err := tbl.WriteStage(ctx, &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	now := time.Now()
	old, fresh := stage(now.Add(-2*time.Hour), 1, 2), stage(now, 3)
	// Every file is past the grace at this reference time: only stage records keep them.
	policy := CleanupPolicy{StageTTL: time.Hour, Grace: time.Second, Now: now.Add(time.Minute)}
	dry := policy
	dry.DryRun = true
	for _, p := range []CleanupPolicy{dry, policy} {
		rep, err := tbl.Cleanup(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if rep.StagesExpired != 1 || rep.DataFilesRemoved != 1 || len(rep.FilesRemoved) != 1 || rep.FilesRemoved[0] != old.Fragments[0].Files[0].Path {
			t.Fatalf("cleanup (dry %v): %+v; want the old stage expired and its data file removed", p.DryRun, rep)
		}
	}
	if _, err := tbl.ReadStage(ctx, old.Token); !errors.Is(err, ErrStageNotFound) {
		t.Fatalf("the expired stage: %v", err)
	}
	if _, err := tbl.ReadStage(ctx, fresh.Token); err != nil {
		t.Fatalf("the kept stage: %v", err)
	}
	if _, err := store.Stat(ctx, "t/"+fresh.Fragments[0].Files[0].Path); err != nil {
		t.Fatalf("the kept stage's data file: %v", err)
	}
}
