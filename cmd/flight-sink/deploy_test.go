package main

// The recipes in deploy/ (the Helm chart, the systemd unit, the alert rules and the dashboard)
// checked against this server: the chart's and the unit's arguments parse as serve flags, the
// ports and probes they declare are the ones those flags make the server serve, and every series
// the rules and the dashboard read is one the server exports.

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alecthomas/kong"
	"gopkg.in/yaml.v3"
)

const deployDir = "../../deploy"

// deployTool returns the path of a tool the deploy checks run (helm, promtool): on PATH or in
// GOBIN. Without it the test skips, except in CI, where .ci/run installs it (make deploy-tools).
func deployTool(t *testing.T, name string) string {
	t.Helper()
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	out, _ := exec.Command("go", "env", "GOBIN", "GOPATH").Output()
	f := strings.Fields(string(out))
	dirs := []string{}
	if len(f) == 2 {
		dirs = append(dirs, f[0], filepath.Join(strings.Split(f[1], ":")[0], "bin"))
	} else if len(f) == 1 {
		dirs = append(dirs, filepath.Join(strings.Split(f[0], ":")[0], "bin"))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, name); fileExists(p) {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found: make deploy-tools installs it", name)
	}
	t.Skipf("%s not found (make deploy-tools installs it)", name)
	return ""
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// parseServe parses args as the command line of flight-sink, with env as its environment
// (FLIGHT_SINK_* variables set with t.Setenv), and returns the serve command it selects.
func parseServe(t *testing.T, args []string, env map[string]string) *ServeCmd {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FLIGHT_SINK_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var cli CLI
	parser, err := kong.New(&cli, kong.Name("flight-sink"), kong.Writers(io.Discard, io.Discard),
		kong.Exit(func(int) { t.Fatalf("flight-sink %q exits", args) }))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := parser.Parse(args)
	if err != nil {
		t.Fatalf("flight-sink %q: %v", args, err)
	}
	if kctx.Command() != "serve" {
		t.Fatalf("flight-sink %q runs %q, want serve", args, kctx.Command())
	}
	return &cli.Serve
}

// portOf returns the port of a listen address.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatalf("listen address %q: %v", addr, err)
	}
	return n
}

// k8sObject is the part of a rendered Kubernetes object the checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Replicas        int    `yaml:"replicas"`
		SessionAffinity string `yaml:"sessionAffinity"`
		Ports           []struct {
			Name        string `yaml:"name"`
			Port        int    `yaml:"port"`
			TargetPort  string `yaml:"targetPort"`
			AppProtocol string `yaml:"appProtocol"`
		} `yaml:"ports"`
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				Containers                    []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						Name          string `yaml:"name"`
						ContainerPort int    `yaml:"containerPort"`
					} `yaml:"ports"`
					Env []struct {
						Name      string `yaml:"name"`
						ValueFrom struct {
							SecretKeyRef struct {
								Name, Key string
							} `yaml:"secretKeyRef"`
						} `yaml:"valueFrom"`
					} `yaml:"env"`
					EnvFrom []struct {
						SecretRef struct {
							Name string `yaml:"name"`
						} `yaml:"secretRef"`
					} `yaml:"envFrom"`
					LivenessProbe  probe `yaml:"livenessProbe"`
					ReadinessProbe probe `yaml:"readinessProbe"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// TestHelmChart renders the chart with helm template and checks it against the serve flags:
// its arguments parse, the container ports are the ports the server listens on, the probes
// ask /healthz (liveness) and /readyz (readiness) on the HTTP port, Prometheus scrapes /metrics
// there, the S3 credentials and the token come from secrets, and the pod's grace period covers
// the shutdown delay and grace.
func TestHelmChart(t *testing.T) {
	helm := deployTool(t, "helm")
	out, err := exec.Command(helm, "template", "fs", filepath.Join(deployDir, "helm", "flight-sink"),
		"--set", "replicaCount=3", "--set", "ports.grpc=9815", "--set", "ports.http=9816").CombinedOutput()
	if err != nil {
		t.Fatalf("helm template: %v\n%s", err, out)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var o k8sObject
		if err := dec.Decode(&o); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("helm template output: %v\n%s", err, out)
		}
		if o.Kind != "" {
			objs[o.Kind] = o
		}
	}
	dep, ok := objs["Deployment"]
	if !ok || len(dep.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("no Deployment with one container in:\n%s", out)
	}
	if dep.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3", dep.Spec.Replicas)
	}
	c := dep.Spec.Template.Spec.Containers[0]
	serve := parseServe(t, c.Args, nil)
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if got := portOf(t, serve.Listen); got != ports["grpc"] || got != 9815 {
		t.Errorf("--listen %s, container port grpc %d: want both 9815", serve.Listen, ports["grpc"])
	}
	if got := portOf(t, serve.HTTPListen); got != ports["http"] || got != 9816 {
		t.Errorf("--http-listen %s, container port http %d: want both 9816", serve.HTTPListen, ports["http"])
	}
	if p := c.LivenessProbe.HTTPGet; p.Path != "/healthz" || p.Port != "http" {
		t.Errorf("liveness probe %+v, want /healthz on http", p)
	}
	if p := c.ReadinessProbe.HTTPGet; p.Path != "/readyz" || p.Port != "http" {
		t.Errorf("readiness probe %+v, want /readyz on http", p)
	}
	ann := dep.Spec.Template.Metadata.Annotations
	if ann["prometheus.io/scrape"] != "true" || ann["prometheus.io/port"] != "9816" || ann["prometheus.io/path"] != "/metrics" {
		t.Errorf("scrape annotations %v, want /metrics on 9816", ann)
	}
	grace := time.Duration(dep.Spec.Template.Spec.TerminationGracePeriodSeconds) * time.Second
	if grace <= serve.ShutdownDelay+serve.ShutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %v does not cover --shutdown-delay %v + --shutdown-grace %v", grace, serve.ShutdownDelay, serve.ShutdownGrace)
	}
	token := false
	for _, e := range c.Env {
		token = token || (e.Name == "FLIGHT_SINK_AUTH_TOKEN" && e.ValueFrom.SecretKeyRef.Name != "")
	}
	if !token {
		t.Error("FLIGHT_SINK_AUTH_TOKEN does not come from a secret")
	}
	if len(c.EnvFrom) != 1 || c.EnvFrom[0].SecretRef.Name == "" {
		t.Errorf("S3 credentials: envFrom %+v, want one secretRef", c.EnvFrom)
	}
	svc := objs["Service"]
	grpcSvc := false
	for _, p := range svc.Spec.Ports {
		grpcSvc = grpcSvc || (p.Name == "grpc" && p.Port == 9815 && p.TargetPort == "grpc" && p.AppProtocol == "grpc")
	}
	if !grpcSvc {
		t.Errorf("Service ports %+v lack grpc 9815 -> grpc (appProtocol grpc)", svc.Spec.Ports)
	}
	if svc.Spec.SessionAffinity != "ClientIP" {
		t.Errorf("Service sessionAffinity %q, want ClientIP: MemWAL read tickets go back to their server", svc.Spec.SessionAffinity)
	}
}

// TestSystemdUnit: the unit's ExecStart with its Environment= settings parses as serve, and
// TimeoutStopSec covers the shutdown delay and grace.
func TestSystemdUnit(t *testing.T) {
	f, err := os.Open(filepath.Join(deployDir, "systemd", "flight-sink.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	env := map[string]string{}
	var exec []string
	var stop time.Duration
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok || strings.HasPrefix(k, "#") {
			continue
		}
		switch k {
		case "Environment":
			ek, ev, _ := strings.Cut(v, "=")
			env[ek] = ev
		case "ExecStart":
			exec = strings.Fields(v)
		case "TimeoutStopSec":
			n, err := strconv.Atoi(v)
			if err != nil {
				t.Fatalf("TimeoutStopSec=%s", v)
			}
			stop = time.Duration(n) * time.Second
		}
	}
	if len(exec) < 2 || filepath.Base(exec[0]) != "flight-sink" {
		t.Fatalf("ExecStart %q does not run flight-sink", exec)
	}
	serve := parseServe(t, exec[1:], env)
	if serve.Root != "/var/lib/flight-sink/tables" || serve.LogFormat != "json" || serve.ShutdownDelay != 5*time.Second {
		t.Errorf("serve from the unit: root %q, log format %q, shutdown delay %v", serve.Root, serve.LogFormat, serve.ShutdownDelay)
	}
	if stop <= serve.ShutdownDelay+serve.ShutdownGrace {
		t.Errorf("TimeoutStopSec %v does not cover --shutdown-delay %v + --shutdown-grace %v", stop, serve.ShutdownDelay, serve.ShutdownGrace)
	}
}

// seriesName matches the flight-sink series an expression reads.
var seriesName = regexp.MustCompile(`\bflight_sink_[a-z_]+`)

// TestDeploySeriesAreExported: every flight_sink_* series the alert rules and the dashboard read
// is in docs/operations.md's metrics table (which the httpcheck tests hold to the server), a
// histogram by its base name.
func TestDeploySeriesAreExported(t *testing.T) {
	doc, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	documented := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `(flight_sink_[a-z_]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented[m[1]] = true
	}
	for _, file := range []string{"prometheus/alerts.yml", "grafana/flight-sink.json"} {
		b, err := os.ReadFile(filepath.Join(deployDir, file))
		if err != nil {
			t.Fatal(err)
		}
		names := seriesName.FindAllString(string(b), -1)
		if len(names) == 0 {
			t.Fatalf("%s reads no flight_sink series", file)
		}
		for _, n := range names {
			base := n
			for _, suffix := range []string{"_bucket", "_count", "_sum"} {
				base = strings.TrimSuffix(base, suffix)
			}
			if !documented[n] && !documented[base] {
				t.Errorf("%s reads %s, which docs/operations.md's metrics table does not list", file, n)
			}
		}
	}
}

// TestAlertRules runs promtool on the alert rules: they are valid, and alerts_test.yml's cases
// (which alert fires on which series, with which labels) hold.
func TestAlertRules(t *testing.T) {
	promtool := deployTool(t, "promtool")
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}
