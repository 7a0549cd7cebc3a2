package panics

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

func TestRecover(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	err := Recover(quiet, "test op", func() error { panic("boom") })
	if !errors.Is(err, ErrPanic) || !strings.Contains(err.Error(), "test op") || !strings.Contains(err.Error(), "boom") {
		t.Fatalf("Recover of a panic = %v", err)
	}
	want := errors.New("plain")
	if err := Recover(quiet, "test op", func() error { return want }); err != want {
		t.Fatalf("Recover of an error = %v", err)
	}
	var nilMap map[string]int
	err = Recover(quiet, "runtime error", func() error { nilMap["x"] = 1; return nil })
	if !errors.Is(err, ErrPanic) {
		t.Fatalf("Recover of a runtime panic = %v", err)
	}
}
