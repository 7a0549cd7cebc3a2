package storetest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/google/uuid"
)

// gateway is a running versitygw process serving a temporary directory.
type gateway struct {
	cmd       *exec.Cmd
	exited    chan struct{} // closed when the process is gone
	dir       string        // temp root: data/, sidecar/, versitygw.log
	endpoint  string        // http://127.0.0.1:PORT
	region    string
	accessKey string
	secretKey string
}

const (
	tempPattern   = "flight-sink-s3-"
	ownerFile     = "owner.pid"      // pid of the test binary that owns a gateway directory
	startAttempts = 3                // a free port may be taken before versitygw binds it
	readyTimeout  = 15 * time.Second // it answers in well under a second; a cold disk is slower
)

// findVersitygw returns the path of the versitygw binary, or "" when there is none.
func findVersitygw() string {
	if p := os.Getenv("FLIGHT_SINK_VERSITYGW"); p != "" {
		return p
	}
	if p, err := exec.LookPath("versitygw"); err == nil {
		return p
	}
	var dirs []string
	gopath := os.Getenv("GOPATH")
	if gopath == "" {
		if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
			gopath = strings.TrimSpace(string(out))
		}
	}
	for _, d := range filepath.SplitList(gopath) {
		dirs = append(dirs, filepath.Join(d, "bin"))
	}
	if home, err := os.UserHomeDir(); err == nil {
		dirs = append(dirs, filepath.Join(home, "go", "bin"))
	}
	for _, d := range dirs {
		p := filepath.Join(d, "versitygw")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	return ""
}

// startGateway starts versitygw on a free loopback port over a fresh temp directory, waits until
// it answers and creates the test bucket. On failure it removes what it made and returns an
// error that carries the server's log.
func startGateway(bin string) (*gateway, error) {
	sweepStale()
	dir, err := os.MkdirTemp("", tempPattern)
	if err != nil {
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	data := filepath.Join(dir, "data")
	if err := os.Mkdir(data, 0o755); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("versitygw: %w", err)
	}
	args := []string{"--quiet", "posix"}
	// The posix backend keeps object metadata in user xattrs; where the file system has none
	// (tmpfs on older kernels, some overlay setups) it needs a sidecar directory instead.
	if !userXattrs(data) {
		sidecar := filepath.Join(dir, "sidecar")
		if err := os.Mkdir(sidecar, 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("versitygw: %w", err)
		}
		args = append(args, "--sidecar", sidecar)
	}
	args = append(args, data)

	g := &gateway{
		dir:       dir,
		region:    "us-east-1",
		accessKey: "flightsink",
		secretKey: strings.ReplaceAll(uuid.NewString(), "-", ""),
	}
	var lastErr error
	for range startAttempts {
		if lastErr = g.start(bin, args); lastErr == nil {
			break
		}
	}
	if lastErr != nil {
		log, _ := os.ReadFile(g.logPath())
		os.RemoveAll(dir)
		return nil, fmt.Errorf("versitygw (%s) did not start: %w\n--- server log ---\n%s", bin, lastErr, log)
	}
	if err := g.createBucket(Bucket); err != nil {
		log, _ := os.ReadFile(g.logPath())
		g.stop()
		return nil, fmt.Errorf("versitygw: create bucket %s: %w\n--- server log ---\n%s", Bucket, err, log)
	}
	return g, nil
}

func (g *gateway) logPath() string { return filepath.Join(g.dir, "versitygw.log") }

// start runs one attempt: pick a port, launch the process, wait until it answers HTTP.
func (g *gateway) start(bin string, args []string) error {
	addr, err := freeLoopbackAddr()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(g.logPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "=== %s --port %s %s\n", bin, addr, strings.Join(args, " "))

	cmd := exec.Command(bin, append([]string{"--port", addr}, args...)...)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+g.accessKey, "ROOT_SECRET_KEY="+g.secretKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	g.cmd, g.exited, g.endpoint = cmd, exited, "http://"+addr

	if err := waitReady(g.endpoint, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		return err
	}
	return nil
}

// freeLoopbackAddr returns a loopback address with a port that was free a moment ago.
func freeLoopbackAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// waitReady polls the endpoint until it answers any HTTP response (an anonymous request gets
// 403, which is fine), the process exits, or readyTimeout passes.
func waitReady(endpoint string, exited <-chan struct{}) error {
	client := &http.Client{Timeout: 200 * time.Millisecond}
	deadline := time.Now().Add(readyTimeout)
	for {
		resp, err := client.Get(endpoint + "/")
		if err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-exited:
			return errors.New("process exited")
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no answer on %s after %v: %w", endpoint, readyTimeout, err)
		}
	}
}

func (g *gateway) createBucket(name string) error {
	client := s3.New(s3.Options{
		Region:       g.region,
		BaseEndpoint: aws.String(g.endpoint),
		UsePathStyle: true,
		Credentials:  credentials.NewStaticCredentialsProvider(g.accessKey, g.secretKey, ""),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := client.CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)})
	return err
}

// sweepStale removes gateway directories whose test binary died without cleaning up (a test that
// panics or times out exits at once). Directories of live binaries — go test runs packages in
// parallel, each with its own gateway — are left alone.
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPattern+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, ownerFile))
		if err != nil {
			continue // not ours, or still being set up
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && !processAlive(pid) {
			os.RemoveAll(d)
		}
	}
}

// stop kills the server and removes its directory.
func (g *gateway) stop() {
	if g.cmd != nil {
		_ = g.cmd.Process.Kill()
		<-g.exited
	}
	os.RemoveAll(g.dir)
}
