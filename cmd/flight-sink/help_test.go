package main

import (
	"bytes"
	"flag"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden files of the help tests")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -run %s -update writes it)", err, t.Name())
	}
	if got != string(want) {
		t.Errorf("output differs from %s (go test -update rewrites it):\n--- got\n%s\n--- want\n%s", path, got, want)
	}
}

// runInProcess runs the command line in this process and returns its output and status.
func runInProcess(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FLIGHT_SINK_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return out.String(), errb.String(), code
}

// TestHelp: bare flight-sink, --help, help and help CMD print the help on stdout and exit 0; the
// texts are held in golden files.
func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		golden string
		args   [][]string
	}{
		{"help.golden", [][]string{{}, {"--help"}, {"help"}}},
		{"help_serve.golden", [][]string{{"help", "serve"}, {"serve", "--help"}}},
		{"help_action.golden", [][]string{{"help", "action"}, {"action", "--help"}}},
		{"help_history.golden", [][]string{{"help", "history"}, {"history", "--help"}}},
		{"help_changes.golden", [][]string{{"help", "changes"}, {"changes", "--help"}}},
	} {
		for _, args := range tc.args {
			out, errOut, code := runInProcess(t, args...)
			if code != 0 || errOut != "" {
				t.Fatalf("flight-sink %q: exit %d, stderr %q", args, code, errOut)
			}
			golden(t, tc.golden, out)
		}
	}
}

// TestVersionFlag: --version prints what the version command prints.
func TestVersionFlag(t *testing.T) {
	flagOut, _, code := runInProcess(t, "--version")
	cmdOut, _, _ := runInProcess(t, "version")
	if code != 0 || flagOut != cmdOut || !regexp.MustCompile(`^flight-sink \S+ \(go\S+ \w+/\w+, manifest format \d+\)\n$`).MatchString(flagOut) {
		t.Errorf("--version: exit %d %q; version: %q", code, flagOut, cmdOut)
	}
}

// TestActionErrors: action without a server answering says where it looked and how to set it,
// on one line, exit 1.
func TestActionErrors(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	t.Setenv("FLIGHT_SINK_SERVER", addr)
	var out, errb bytes.Buffer
	code := run([]string{"action", "table_stats", `{"table": "t"}`, "--timeout", "5s"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "no flight-sink server answers at "+addr) || strings.Count(errb.String(), "\n") != 1 {
		t.Errorf("exit %d, stderr %q", code, errb.String())
	}
}

// TestInterruptExits130: a command interrupted by SIGINT exits 130. The command is an action
// against a listener that accepts connections and never answers, so it waits until the signal.
func TestInterruptExits130(t *testing.T) {
	bin := buildCLI(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer lis.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := lis.Accept(); err == nil {
			accepted <- c
		}
	}()
	cmd := exec.Command(bin, "action", "--server", lis.Addr().String(), "table_stats", `{"table": "t"}`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	select {
	case c := <-accepted: // the command is waiting for the server now
		defer c.Close()
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the command never connected")
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d (%v), want 130; stderr %q", code, err, stderr.String())
	}
	if !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("stderr %q does not say interrupted", stderr.String())
	}
}

// TestStoreErrorHint: an admin command on an S3 root that does not answer fails with one line
// naming the table and what to check.
func TestStoreErrorHint(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + lis.Addr().String()
	lis.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	var out, errb bytes.Buffer
	code := run([]string{"history", "--s3-endpoint", endpoint, "--s3-region", "us-east-1", "--s3-path-style", "s3://bucket/prefix/events"}, &out, &errb)
	msg := errb.String()
	if code != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "events") || !strings.Contains(msg, "hint: the S3 store did not answer") {
		t.Errorf("exit %d, stderr %q", code, msg)
	}
}

// TestServeStoreErrorSaysHintOnce: serve on an S3 root that does not answer exits with one
// line: the root, the store's failure, and its hint once.
func TestServeStoreErrorSaysHintOnce(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	endpoint := "http://" + lis.Addr().String()
	lis.Close()
	t.Setenv("AWS_ACCESS_KEY_ID", "k")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "s")
	var out, errb bytes.Buffer
	code := run([]string{"serve", "--listen", "127.0.0.1:0", "--http-listen", "off", "--log-level", "error",
		"--s3-endpoint", endpoint, "--s3-region", "us-east-1", "--s3-path-style", "--root", "s3://bucket/prefix"}, &out, &errb)
	msg := errb.String()
	if code != 1 || strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "s3://bucket/prefix does not answer") {
		t.Fatalf("exit %d, stderr %q; want exit 1 and one line naming the root", code, msg)
	}
	for _, once := range []string{"hint:", "check the bucket exists", "--s3-endpoint", "--store-unreachable=not-ready"} {
		if n := strings.Count(msg, once); n != 1 {
			t.Errorf("%q appears %d times in %q; want once", once, n, msg)
		}
	}
	// The S3 client's layers (retries, an empty response's ids, the request URL) are left out.
	for _, noise := range []string{"RequestID", "HostID", "list-type=", "exceeded maximum"} {
		if strings.Contains(msg, noise) {
			t.Errorf("stderr %q carries the S3 client's %q", msg, noise)
		}
	}
	if len(msg) > 500 {
		t.Errorf("stderr is %d characters: %q", len(msg), msg)
	}
}

// TestCompletion: completion bash|zsh|fish print scripts held in golden files; the bash one,
// run by bash, completes commands, a group's commands and a command's flags.
func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runInProcess(t, "completion", shell)
		if code != 0 || errOut != "" {
			t.Fatalf("completion %s: exit %d, stderr %q", shell, code, errOut)
		}
		golden(t, "completion_"+shell+".golden", out)
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	script, _, _ := runInProcess(t, "completion", "bash")
	for _, tc := range []struct {
		words []string
		want  string
	}{
		{[]string{"flight-sink", "hi"}, "history"},
		{[]string{"flight-sink", "iceberg", "p"}, "publish"},
		{[]string{"flight-sink", "serve", "--shutdown-d"}, "--shutdown-delay"},
		{[]string{"flight-sink", "iceberg", "status", "--js"}, "--json"},
	} {
		prog := script + "\nCOMP_WORDS=(" + strings.Join(tc.words, " ") + ")\nCOMP_CWORD=" +
			strconv.Itoa(len(tc.words)-1) + "\n_flight_sink\necho \"${COMPREPLY[*]}\"\n"
		out, err := exec.Command(bash, "-c", prog).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != tc.want {
			t.Errorf("completing %q: %q (%v), want %q", tc.words, out, err, tc.want)
		}
	}
}
