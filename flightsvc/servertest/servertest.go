// Package servertest runs the real flight-sink binary for tests, as net/http/httptest serves
// handlers: built once per test binary, started as an OS process on free loopback ports,
// stopped gracefully or killed with SIGKILL. Only tests import it.
package servertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/flight"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// Binary returns cmd/flight-sink, built on first use in this test binary.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "flight-sink-test-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binDir = dir
		bin := filepath.Join(dir, "flight-sink")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/flight-sink/flight-sink/cmd/flight-sink").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("build cmd/flight-sink: %v: %s", err, out)
			return
		}
		binPath = bin
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// RemoveBinary deletes the built binary; call it from TestMain once the tests have run.
func RemoveBinary() {
	if binDir != "" {
		os.RemoveAll(binDir)
	}
}

// servingLine matches the line a server logs once it serves, capturing its address, in slog's
// text (addr=H:P) and JSON ("addr":"H:P") formats.
var servingLine = regexp.MustCompile(`flight-sink serving.*?\baddr"?[=:]"?(127\.0\.0\.1:[1-9][0-9]*)`)

// Process is one `flight-sink serve` process.
type Process struct {
	Addr   string // the Flight address it serves
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{}
}

// Start runs `flight-sink serve --listen 127.0.0.1:0 --http-listen 127.0.0.1:0` with args
// appended and env added to the environment, and waits up to timeout for it to serve. A process
// that does not serve in time is killed; the error carries its output.
func Start(t testing.TB, args, env []string, timeout time.Duration) (*Process, error) {
	bin := Binary(t)
	c := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0"}, args...)...)
	c.Env = append(os.Environ(), env...)
	w := &logBuffer{ready: make(chan struct{})}
	c.Stdout, c.Stderr = w, w
	if err := c.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: c, out: w, exited: make(chan struct{})}
	go func() { _ = c.Wait(); close(p.exited) }()
	select {
	case <-w.ready:
	case <-p.exited:
		return nil, fmt.Errorf("server exited before serving:\n%s", w)
	case <-time.After(timeout):
		p.Kill9()
		return nil, fmt.Errorf("server not serving after %v:\n%s", timeout, w)
	}
	w.mu.Lock()
	p.Addr = w.addr
	w.mu.Unlock()
	return p, nil
}

// Stop ends the process gracefully (SIGTERM), or with SIGKILL after 10 s.
func (p *Process) Stop() {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(10 * time.Second):
		p.Kill9()
	}
}

// Kill9 kills the process with SIGKILL (no shutdown code runs) and waits for it to be gone.
func (p *Process) Kill9() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Output returns what the process printed (its last 64 KiB once it serves).
func (p *Process) Output() string { return p.out.String() }

// Panics returns the lines of the output that show a panic or a fatal runtime error.
func (p *Process) Panics() []string {
	var out []string
	for _, l := range strings.Split(p.Output(), "\n") {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.Contains(l, "panic in request") {
			out = append(out, l)
		}
	}
	return out
}

// logBuffer keeps a process's output (the tail, for failure messages) and spots the serving line.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addr  string
	ready chan struct{}
}

const logKeep = 64 << 10

func (w *logBuffer) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(b)
	if w.addr == "" {
		if m := servingLine.FindSubmatch(w.buf.Bytes()); m != nil {
			w.addr = string(m[1])
			close(w.ready)
		}
	}
	if w.addr != "" && w.buf.Len() > 2*logKeep {
		tail := append([]byte(nil), w.buf.Bytes()[w.buf.Len()-logKeep:]...)
		w.buf.Reset()
		w.buf.Write(tail)
	}
	return len(b), nil
}

func (w *logBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// Action runs one Flight action and returns the body of its single result. body is sent as is
// when it is a []byte, else as JSON.
func Action(ctx context.Context, c flight.Client, typ string, body any) ([]byte, error) {
	b, ok := body.([]byte)
	if !ok {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
	}
	stream, err := c.DoAction(ctx, &flight.Action{Type: typ, Body: b})
	if err != nil {
		return nil, err
	}
	var out []byte
	n := 0
	for {
		r, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		out = r.GetBody()
		n++
	}
	if n != 1 {
		return nil, fmt.Errorf("action %s: %d results, want 1", typ, n)
	}
	return out, nil
}
