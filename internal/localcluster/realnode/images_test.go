package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

const repoRoot = "../../.."

// The lane's operator image is the Dockerfile's: the final stage's base is the distroless
// static image for the nonroot user, which the equivalent files carry with the same id, and
// the binary's path, user, entrypoint and command come from the Dockerfile itself.
func TestOperatorImageAgreesWithTheDockerfile(t *testing.T) {
	d, err := ParseDockerfile(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Base, "distroless/static") || !strings.HasSuffix(d.Base, ":nonroot") {
		t.Fatalf("the Dockerfile's final stage is on %q; the lane's equivalent files are distroless static's (nonroot): make them agree", d.Base)
	}
	if d.User != "65532:65532" {
		t.Fatalf("the Dockerfile runs as %q, the equivalent base's nonroot user is 65532", d.User)
	}
	bin := filepath.Join(t.TempDir(), "etcd-pilot")
	if err := os.WriteFile(bin, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := OperatorImageOf(filepath.Join(repoRoot, "Dockerfile"), bin)
	if err != nil {
		t.Fatal(err)
	}
	if img.Config.User != d.User || !slices.Equal(img.Config.Entrypoint, d.Entrypoint) || !slices.Equal(img.Config.Cmd, d.Cmd) {
		t.Fatalf("image config %+v, Dockerfile %+v", img.Config, d)
	}
	files := map[string]File{}
	for _, f := range img.Files {
		files[f.Path] = f
	}
	if f, ok := files[d.BinaryPath]; !ok || f.Source != bin || f.Mode&0o111 == 0 {
		t.Fatalf("the binary is not at the Dockerfile's %s: %+v", d.BinaryPath, f)
	}
	if d.BinaryPath != "/usr/local/bin/etcd-pilot" {
		t.Fatalf("the Dockerfile copies the binary to %s; the backup pods and the process nodes run /usr/local/bin/etcd-pilot", d.BinaryPath)
	}
	passwd := string(files["/etc/passwd"].Data)
	if !strings.Contains(passwd, "nonroot:x:65532:65532:nonroot:/home/nonroot:") {
		t.Fatalf("no nonroot user 65532 in the equivalent /etc/passwd:\n%s", passwd)
	}
	if h := files["/home/nonroot"]; !h.Dir || h.UID != 65532 {
		t.Fatalf("/home/nonroot is not the nonroot user's: %+v", h)
	}
	if tmp := files["/tmp"]; !tmp.Dir || tmp.Mode&os.ModeSticky == 0 || tmp.Mode.Perm() != 0o777 {
		t.Fatalf("/tmp is not world-writable and sticky: %+v", tmp)
	}
	for _, f := range img.Files {
		if strings.HasSuffix(f.Path, "/sh") || strings.HasSuffix(f.Path, "/bash") {
			t.Fatalf("the image has a shell at %s", f.Path)
		}
	}
}

func TestParseDockerfileNeedsTheFinalStagesUserAndEntrypoint(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "Dockerfile")
	// The first stage's USER does not count for the final one.
	content := "FROM golang AS build\nUSER 1000\nFROM scratch\nCOPY --from=build /out/x /x\nENTRYPOINT [\"/x\"]\n"
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ParseDockerfile(p); err == nil {
		t.Fatal("a final stage without USER was accepted")
	}
	if err := os.WriteFile(p, []byte(content+"USER 2:2\nCMD [\"run\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err := ParseDockerfile(p)
	if err != nil {
		t.Fatal(err)
	}
	if d.Base != "scratch" || d.User != "2:2" || d.BinaryPath != "/x" || !slices.Equal(d.Cmd, []string{"run"}) {
		t.Fatalf("%+v", d)
	}
	if err := os.WriteFile(p, []byte("FROM scratch\nCOPY --from=b /a /a\nUSER 1\nENTRYPOINT /a run\n"), 0o644); err == nil {
		if _, err := ParseDockerfile(p); err == nil {
			t.Fatal("a shell-form ENTRYPOINT was accepted")
		}
	}
}

// WriteArchive's output is an OCI image layout whose index, manifest, config and layer refer
// to each other by the sha256 of their bytes, with the name containerd imports it as.
func TestArchiveIsAnOCILayoutWithMatchingDigests(t *testing.T) {
	src := filepath.Join(t.TempDir(), "etcd")
	if err := os.WriteFile(src, []byte("an etcd binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	img := Image{
		Name:   "example.invalid/etcd:v3.6.16",
		Files:  []File{{Path: "/usr/local/bin/etcd", Mode: 0o755, Source: src}, {Path: "/tmp", Dir: true, Mode: 0o777 | os.ModeSticky}},
		Config: ImageConfig{Cmd: []string{"/usr/local/bin/etcd"}, User: "65532"},
	}
	var buf bytes.Buffer
	digest, err := WriteArchive(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	blobs := map[string][]byte{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		blobs[h.Name] = data
	}
	check := func(d string) []byte {
		t.Helper()
		b, ok := blobs["blobs/sha256/"+strings.TrimPrefix(d, "sha256:")]
		if !ok {
			t.Fatalf("no blob %s", d)
		}
		sum := sha256.Sum256(b)
		if "sha256:"+hex.EncodeToString(sum[:]) != d {
			t.Fatalf("blob %s has another digest", d)
		}
		return b
	}
	var index struct {
		Manifests []struct {
			Digest      string            `json:"digest"`
			Annotations map[string]string `json:"annotations"`
		} `json:"manifests"`
	}
	if err := json.Unmarshal(blobs["index.json"], &index); err != nil || len(index.Manifests) != 1 {
		t.Fatalf("index.json: %v %s", err, blobs["index.json"])
	}
	if index.Manifests[0].Digest != digest || index.Manifests[0].Annotations["io.containerd.image.name"] != img.Name {
		t.Fatalf("index names %+v", index.Manifests[0])
	}
	var manifest struct {
		Config struct{ Digest string }   `json:"config"`
		Layers []struct{ Digest string } `json:"layers"`
	}
	if err := json.Unmarshal(check(digest), &manifest); err != nil || len(manifest.Layers) != 1 {
		t.Fatalf("manifest: %v", err)
	}
	var config struct {
		Config ImageConfig `json:"config"`
		RootFS struct {
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
	}
	if err := json.Unmarshal(check(manifest.Config.Digest), &config); err != nil {
		t.Fatal(err)
	}
	if config.Config.User != "65532" || config.RootFS.DiffIDs[0] != manifest.Layers[0].Digest {
		t.Fatalf("config %+v", config)
	}
	layer := tar.NewReader(bytes.NewReader(check(manifest.Layers[0].Digest)))
	var names []string
	for {
		h, err := layer.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
		if h.Name == "usr/local/bin/etcd" {
			data, _ := io.ReadAll(layer)
			if string(data) != "an etcd binary" || h.Mode != 0o755 {
				t.Fatalf("etcd in the layer: %q mode %o", data, h.Mode)
			}
		}
		if h.Name == "tmp/" && h.Mode != 0o1777 {
			t.Fatalf("/tmp mode %o", h.Mode)
		}
	}
	if want := []string{"tmp/", "usr/", "usr/local/", "usr/local/bin/", "usr/local/bin/etcd"}; !slices.Equal(names, want) {
		t.Fatalf("layer entries %v, want %v", names, want)
	}
	// Same content, same digest: the archive depends on nothing else.
	var again bytes.Buffer
	if d2, _ := WriteArchive(&again, img); d2 != digest {
		t.Fatalf("digest changed between two writes: %s, %s", digest, d2)
	}
}

func TestEtcdImagesCarryTheChartsName(t *testing.T) {
	repo, err := ChartEtcdRepository(filepath.Join(repoRoot, "charts", "etcd-cluster", "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(repo, "/etcd") {
		t.Fatalf("chart's etcd repository %q", repo)
	}
	dir := t.TempDir()
	for _, b := range []string{"etcd", "etcdctl", "etcdutl"} {
		if err := os.WriteFile(filepath.Join(dir, b), []byte(b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	img, err := EtcdImage(repo, "3.6.16", dir)
	if err != nil {
		t.Fatal(err)
	}
	if img.Name != repo+":v3.6.16" {
		t.Fatalf("image name %s", img.Name)
	}
	if _, err := EtcdImage(repo, "3.6.16", t.TempDir()); err == nil {
		t.Fatal("an etcd image without its binaries was made")
	}
}
