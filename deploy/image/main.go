// Command image builds flight-sink's container image without a container daemon: it compiles a
// static linux binary of ./cmd/flight-sink and writes an OCI image layout as one tar file, which
// `docker load`, `podman load`, `skopeo copy oci-archive:...` and `crane push` take.
//
//	go run ./deploy/image -o bin/flight-sink-image.tar [-arch amd64] [-version v1.2.3]
//
// The image is one layer on an empty base: the binary at /usr/local/bin/flight-sink, a passwd
// entry for the non-root user it runs as (65532, "nonroot"), and an empty /data owned by it. Its
// entrypoint is `flight-sink serve` with FLIGHT_SINK_ROOT=/data, the gRPC and HTTP endpoints on
// every interface (ports 8815 and 8816); a non-loopback gRPC address still needs
// FLIGHT_SINK_AUTH_TOKEN. Timestamps are fixed, so the same binary gives the same image digest.
package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Fixed paths and identity of the image.
const (
	binaryPath = "usr/local/bin/flight-sink"
	uid        = 65532
)

// epoch is every file's and the image's timestamp: a reproducible build has no clock in it.
var epoch = time.Unix(0, 0).UTC()

func main() {
	out := flag.String("o", "bin/flight-sink-image.tar", "image tar (OCI layout) to write")
	arch := flag.String("arch", "amd64", "GOARCH of the image")
	version := flag.String("version", "devel", "version the binary reports (main.version)")
	flag.Parse()
	if err := build(*out, *arch, *version); err != nil {
		fmt.Fprintf(os.Stderr, "image: %v\n", err)
		os.Exit(1)
	}
}

// build compiles the binary and writes the image to out.
func build(out, arch, version string) error {
	dir, err := os.MkdirTemp("", "flight-sink-image")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "flight-sink")
	gomod, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return fmt.Errorf("go env GOMOD: %w", err)
	}
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", bin, "./cmd/flight-sink")
	cmd.Dir = filepath.Dir(string(bytes.TrimSpace(gomod)))
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	binary, err := os.ReadFile(bin)
	if err != nil {
		return err
	}
	img, err := imageLayout(binary, arch, version)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(out, img, 0o644)
}

// blob is one content-addressed file of the layout.
type blob struct {
	mediaType string
	data      []byte
}

func (b blob) digest() string {
	sum := sha256.Sum256(b.data)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func (b blob) descriptor() map[string]any {
	return map[string]any{"mediaType": b.mediaType, "digest": b.digest(), "size": len(b.data)}
}

// imageLayout returns the tar of an OCI image layout holding one image with binary.
func imageLayout(binary []byte, arch, version string) ([]byte, error) {
	layerTar, err := rootfs(binary)
	if err != nil {
		return nil, err
	}
	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.ModTime = epoch
	if _, err := zw.Write(layerTar); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	layer := blob{"application/vnd.oci.image.layer.v1.tar+gzip", gz.Bytes()}
	diffID := sha256.Sum256(layerTar)
	config, err := json.Marshal(map[string]any{
		"architecture": arch,
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config": map[string]any{
			"User":         fmt.Sprintf("%d:%d", uid, uid),
			"Entrypoint":   []string{"/" + binaryPath},
			"Cmd":          []string{"serve"},
			"WorkingDir":   "/data",
			"Env":          []string{"FLIGHT_SINK_ROOT=/data", "FLIGHT_SINK_LISTEN=0.0.0.0:8815", "FLIGHT_SINK_HTTP_LISTEN=0.0.0.0:8816", "FLIGHT_SINK_LOG_FORMAT=json"},
			"ExposedPorts": map[string]any{"8815/tcp": map[string]any{}, "8816/tcp": map[string]any{}},
			"Volumes":      map[string]any{"/data": map[string]any{}},
			"Labels": map[string]string{
				"org.opencontainers.image.title":   "flight-sink",
				"org.opencontainers.image.version": version,
				"org.opencontainers.image.source":  "https://github.com/flight-sink/flight-sink",
			},
		},
		"rootfs":  map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(diffID[:])}},
		"history": []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "go run ./deploy/image"}},
	})
	if err != nil {
		return nil, err
	}
	cfg := blob{"application/vnd.oci.image.config.v1+json", config}
	manifestJSON, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        cfg.descriptor(),
		"layers":        []any{layer.descriptor()},
	})
	if err != nil {
		return nil, err
	}
	manifest := blob{"application/vnd.oci.image.manifest.v1+json", manifestJSON}
	desc := manifest.descriptor()
	desc["annotations"] = map[string]string{"org.opencontainers.image.ref.name": version}
	desc["platform"] = map[string]string{"architecture": arch, "os": "linux"}
	index, err := json.Marshal(map[string]any{"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": []any{desc}})
	if err != nil {
		return nil, err
	}
	// docker load reads manifest.json; OCI tools read index.json. Both point at the same blobs.
	dockerManifest, err := json.Marshal([]map[string]any{{
		"Config":   "blobs/sha256/" + cfg.digest()[len("sha256:"):],
		"RepoTags": []string{"flight-sink:" + version},
		"Layers":   []string{"blobs/sha256/" + layer.digest()[len("sha256:"):]},
	}})
	if err != nil {
		return nil, err
	}
	files := []tarFile{
		{name: "oci-layout", data: []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{name: "index.json", data: index},
		{name: "manifest.json", data: dockerManifest},
		{name: "blobs/", dir: true},
		{name: "blobs/sha256/", dir: true},
	}
	for _, b := range []blob{layer, cfg, manifest} {
		files = append(files, tarFile{name: "blobs/sha256/" + b.digest()[len("sha256:"):], data: b.data})
	}
	return writeTar(files)
}

// rootfs returns the uncompressed tar of the image's one layer.
func rootfs(binary []byte) ([]byte, error) {
	return writeTar([]tarFile{
		{name: "etc/", dir: true},
		{name: "etc/passwd", data: []byte(fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/data:/sbin/nologin\n", uid, uid))},
		{name: "etc/group", data: []byte(fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid))},
		{name: "tmp/", dir: true, mode: 0o1777},
		{name: "data/", dir: true, owner: uid},
		{name: "usr/", dir: true},
		{name: "usr/local/", dir: true},
		{name: "usr/local/bin/", dir: true},
		{name: binaryPath, data: binary, mode: 0o755},
	})
}

// tarFile is one entry of writeTar.
type tarFile struct {
	name  string
	data  []byte
	dir   bool
	mode  int64
	owner int
}

// writeTar returns a tar of files, in order, with fixed timestamps.
func writeTar(files []tarFile) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, ModTime: epoch, Uid: f.owner, Gid: f.owner, Format: tar.FormatPAX}
		switch {
		case f.dir:
			h.Typeflag, h.Mode = tar.TypeDir, 0o755
		default:
			h.Typeflag, h.Mode, h.Size = tar.TypeReg, 0o644, int64(len(f.data))
		}
		if f.mode != 0 {
			h.Mode = f.mode
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
