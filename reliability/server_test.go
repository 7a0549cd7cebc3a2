package reliability

// `flight-sink serve` as an OS process the harness can kill -9 and restart on the same root.

import (
	"bytes"
	"fmt"
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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

var (
	binOnce sync.Once
	binDir  string // removed by TestMain
	binPath string
	binErr  error
)

// serverBinary builds cmd/flight-sink once per test run.
func serverBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "reliability-bin-")
		if err != nil {
			binErr = err
			return
		}
		binDir = dir
		bin := filepath.Join(dir, "flight-sink")
		out, err := exec.Command("go", "build", "-o", bin, "github.com/flight-sink/flight-sink/cmd/flight-sink").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("build cmd/flight-sink: %v: %s", err, out)
			return
		}
		binPath = bin
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binPath
}

// servingLine matches the line a server logs once it serves, capturing its address.
var servingLine = regexp.MustCompile(`flight-sink serving.*?\baddr"?[=:]"?(127\.0\.0\.1:[1-9][0-9]*)`)

// server is one `flight-sink serve` process and a Flight client on it.
type server struct {
	Name   string
	Addr   string
	Client flight.Client
	cmd    *exec.Cmd
	out    *logBuffer
	exited chan struct{}
}

// logBuffer keeps a process's output (the tail, for failure messages) and spots the serving line.
type logBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	addr  string
	ready chan struct{}
}

const logKeep = 64 << 10

func (w *logBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
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
	return len(p), nil
}

func (w *logBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// startServer launches `flight-sink serve` on root (Flight and HTTP on free loopback ports) and
// connects to it. env is added to the process environment (S3 settings).
func startServer(t testing.TB, name, root string, env ...string) (*server, error) {
	bin := serverBinary(t)
	c := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
		"--root", root, "--log-level", "info", "--shutdown-grace", "2s")
	c.Env = append(os.Environ(), env...)
	w := &logBuffer{ready: make(chan struct{})}
	c.Stdout, c.Stderr = w, w
	if err := c.Start(); err != nil {
		return nil, err
	}
	s := &server{Name: name, cmd: c, out: w, exited: make(chan struct{})}
	go func() { c.Wait(); close(s.exited) }()
	select {
	case <-w.ready:
	case <-s.exited:
		return nil, fmt.Errorf("server %s exited before serving:\n%s", name, w)
	case <-time.After(60 * time.Second):
		s.kill9()
		return nil, fmt.Errorf("server %s not serving after 60s:\n%s", name, w)
	}
	w.mu.Lock()
	s.Addr = w.addr
	w.mu.Unlock()
	cl, err := flight.NewClientWithMiddleware(s.Addr, nil, nil,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20)))
	if err != nil {
		s.kill9()
		return nil, fmt.Errorf("dial %s: %w", s.Addr, err)
	}
	s.Client = cl
	// Closed only when the test is over: producers may still hold the client of a killed
	// server, and calls on a closed arrow-go client crash instead of failing.
	t.Cleanup(func() { cl.Close() })
	return s, nil
}

// mustStartServer is startServer that fails the test, and stops the process when the test ends.
func mustStartServer(t testing.TB, name, root string, env ...string) *server {
	t.Helper()
	s, err := startServer(t, name, root, env...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.stop)
	return s
}

// kill9 kills the process with SIGKILL (no shutdown code runs) and waits for it to be gone.
func (s *server) kill9() {
	s.cmd.Process.Kill()
	<-s.exited
}

// stop ends the process gracefully (SIGTERM), or with SIGKILL after 10 s.
func (s *server) stop() {
	select {
	case <-s.exited:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(10 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// alive reports whether the process is still running.
func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// panics returns the lines of the server's output that show a panic or a fatal runtime error.
func (s *server) panics() []string {
	var out []string
	for _, l := range strings.Split(s.out.String(), "\n") {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") || strings.Contains(l, "panic in request") {
			out = append(out, l)
		}
	}
	return out
}
