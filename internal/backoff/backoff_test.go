package backoff

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWindow: the window doubles from Base per attempt and stops at Max, for any attempt.
func TestWindow(t *testing.T) {
	for _, tc := range []struct {
		p       Policy
		attempt int
		want    time.Duration
	}{
		{Race, 0, time.Millisecond},
		{Race, 1, 2 * time.Millisecond},
		{Race, 6, 64 * time.Millisecond},
		{Race, 7, 100 * time.Millisecond},
		{Race, 63, 100 * time.Millisecond},
		{Race, 1 << 30, 100 * time.Millisecond},
		{Policy{Base: 20 * time.Millisecond, Max: time.Hour}, 4, 320 * time.Millisecond},
		{Policy{Base: time.Hour, Max: time.Minute}, 0, time.Minute},
		{Policy{}, 3, 1},
	} {
		if got := tc.p.Window(tc.attempt); got != tc.want {
			t.Errorf("%+v.Window(%d) = %v, want %v", tc.p, tc.attempt, got, tc.want)
		}
	}
}

// TestSleepEndsWithContext: a done context ends the wait with its error.
func TestSleepEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := (Policy{Base: time.Hour, Max: time.Hour}).Sleep(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a cancelled context = %v, want context.Canceled", err)
	}
	if err := Race.Sleep(context.Background(), 0); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}
