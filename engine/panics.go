package engine

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
)

// ErrPanic marks an error that was a panic inside an operation (in arrow-go or Parquet code, or
// our own): the operation failed, the process did not.
var ErrPanic = errors.New("internal panic")

// RecoverError runs f and returns its error. A panic inside f is recovered and returned as an
// error wrapping ErrPanic that names op and the panic value; it is logged with its stack on log
// (slog.Default() when nil). Every goroutine the engine, memwal and streaming start runs its work
// through RecoverError, so a panic fails that one operation and never the process: an unrecovered
// panic in any goroutine kills it.
func RecoverError(log *slog.Logger, op string, f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if log == nil {
				log = slog.Default()
			}
			log.Error("recovered a panic; the operation fails", "op", op, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("%s: %w: %v", op, ErrPanic, r)
		}
	}()
	return f()
}
