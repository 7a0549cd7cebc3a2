package memwal

import (
	"bufio"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flight-sink/flight-sink/objstore"
	"github.com/flight-sink/flight-sink/objstore/storetest"
)

// processStore opens store st for a test that hands it to a helper process as well: the store,
// the URI the process opens (helperStoreEnv) and the environment it needs (helperProcessEnv, and
// the S3 server's credentials for "s3").
func processStore(t *testing.T, st storetest.Named) (objstore.Store, string, []string) {
	t.Helper()
	env := append(os.Environ(), helperProcessEnv+"=1")
	if st.Name != "s3" {
		uri := t.TempDir()
		store, err := objstore.NewLocal(uri)
		if err != nil {
			t.Fatal(err)
		}
		return store, uri, env
	}
	uri, opts := storetest.S3(t)
	store, err := objstore.NewS3(t.Context(), opts)
	if err != nil {
		t.Fatal(err)
	}
	return store, uri, append(env, storetest.S3Env(opts)...)
}

// helperProcess is this test binary run as a helper process: one TestHelperProcess* test.
type helperProcess struct {
	cmd    *exec.Cmd
	stderr strings.Builder
	lines  chan string // its stdout, line by line; closed when stdout ends
}

// startHelper runs test run of this binary with env and store uri (helperStoreEnv), killed after
// limit. The caller reads lines and waits for cmd.
func startHelper(t *testing.T, run, uri string, env []string, limit time.Duration) *helperProcess {
	t.Helper()
	p := &helperProcess{lines: make(chan string, 1<<16)}
	p.cmd = exec.Command(os.Args[0], "-test.run=^"+run+"$", "-test.count=1")
	p.cmd.Env = append(env, helperStoreEnv+"="+uri)
	p.cmd.Stderr = &p.stderr
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	timeout := time.AfterFunc(limit, func() { _ = p.cmd.Process.Kill() })
	t.Cleanup(func() { timeout.Stop() })
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
	}()
	return p
}

// ack parses an "ACK <epoch>" line.
func ack(line string) (int64, bool) {
	e, ok := strings.CutPrefix(line, "ACK ")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(e, 10, 64)
	return n, err == nil
}

// awaitAcks reads p's lines until it has acknowledged n epochs, or its stdout ended (then it
// fails the test with p's stderr). It returns the epochs acknowledged so far.
func (p *helperProcess) awaitAcks(t *testing.T, n int) map[int64]bool {
	t.Helper()
	acked := map[int64]bool{}
	for line := range p.lines {
		if e, ok := ack(line); ok {
			acked[e] = true
			if len(acked) == n {
				return acked
			}
		}
	}
	_ = p.cmd.Wait()
	t.Fatalf("child stopped after %d acks: %s", len(acked), p.stderr.String())
	return nil
}

// drainAcks adds to acked the epochs of the acknowledgements p printed that were not read yet
// (before it stopped or was killed); it returns once p's stdout ended.
func (p *helperProcess) drainAcks(acked map[int64]bool) {
	for line := range p.lines {
		if e, ok := ack(line); ok {
			acked[e] = true
		}
	}
}
