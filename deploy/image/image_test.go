package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// readTar returns the regular files of a tar by name.
func readTar(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// verified returns the blob of digest from the layout, failing unless its content has it.
func verified(t *testing.T, layout map[string][]byte, digest string) []byte {
	t.Helper()
	hexd, ok := strings.CutPrefix(digest, "sha256:")
	b, found := layout["blobs/sha256/"+hexd]
	if !ok || !found {
		t.Fatalf("blob %s is not in the layout", digest)
	}
	if sum := sha256.Sum256(b); hex.EncodeToString(sum[:]) != hexd {
		t.Fatalf("blob %s has another digest", digest)
	}
	return b
}

// TestImageRunsItsBinary builds the image as CI does, follows the OCI layout from index.json to
// the one layer (every digest checked), unpacks the layer, and runs the binary from the image's
// own filesystem: it reports the version it was built with. The entrypoint names that binary and
// the user it runs as is in the image's passwd.
//
// It compiles a static binary from scratch (minutes on a cold build cache), so it runs under
// `make image-check` (FLIGHT_SINK_IMAGE_TEST=1), which CI runs, and skips in a plain go test.
func TestImageRunsItsBinary(t *testing.T) {
	if os.Getenv("FLIGHT_SINK_IMAGE_TEST") != "1" {
		t.Skip("builds the image from scratch: run make image-check (FLIGHT_SINK_IMAGE_TEST=1)")
	}
	out := filepath.Join(t.TempDir(), "image.tar")
	if err := build(out, runtime.GOARCH, "v0.0.0-imagetest"); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	layout := readTar(t, f)
	var index struct {
		Manifests []struct{ Digest string }
	}
	if err := json.Unmarshal(layout["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, layout["index.json"])
	}
	var manifest struct {
		Config struct{ Digest string }
		Layers []struct{ Digest string }
	}
	if err := json.Unmarshal(verified(t, layout, index.Manifests[0].Digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v %+v", err, manifest)
	}
	var config struct {
		Architecture string
		Config       struct {
			User       string
			Entrypoint []string
			Cmd        []string
		}
		Rootfs struct {
			DiffIDs []string `json:"diff_ids"`
		}
	}
	if err := json.Unmarshal(verified(t, layout, manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(verified(t, layout, manifest.Layers[0].Digest)))
	if err != nil {
		t.Fatal(err)
	}
	layerTar, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(layerTar); len(config.Rootfs.DiffIDs) != 1 || config.Rootfs.DiffIDs[0] != "sha256:"+hex.EncodeToString(sum[:]) {
		t.Errorf("diff_ids %v do not name the layer", config.Rootfs.DiffIDs)
	}
	if config.Architecture != runtime.GOARCH || len(config.Config.Entrypoint) != 1 || strings.Join(config.Config.Cmd, " ") != "serve" {
		t.Errorf("config: %+v", config)
	}
	rootfs := t.TempDir()
	for name, b := range readTar(t, bytes.NewReader(layerTar)) {
		p := filepath.Join(rootfs, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	passwd, _ := os.ReadFile(filepath.Join(rootfs, "etc", "passwd"))
	if uid, _, _ := strings.Cut(config.Config.User, ":"); !strings.Contains(string(passwd), ":x:"+uid+":") {
		t.Errorf("user %s is not in the image's /etc/passwd:\n%s", config.Config.User, passwd)
	}
	bin := filepath.Join(rootfs, filepath.FromSlash(strings.TrimPrefix(config.Config.Entrypoint[0], "/")))
	got, err := exec.Command(bin, "--version").CombinedOutput()
	if err != nil {
		t.Fatalf("%s --version: %v\n%s", config.Config.Entrypoint[0], err, got)
	}
	if !strings.HasPrefix(string(got), "flight-sink v0.0.0-imagetest (") {
		t.Errorf("the image's binary says %q, want flight-sink v0.0.0-imagetest", got)
	}
}
