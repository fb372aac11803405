package realnode

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"time"
)

// File is one entry of an image's single layer.
type File struct {
	// Path is absolute inside the image (/usr/local/bin/etcd).
	Path string
	// Mode holds the permission bits (and setuid, setgid, sticky).
	Mode os.FileMode
	// Dir makes a folder; Link a symbolic link to Link; otherwise a regular file whose content is
	// Data, or the file at Source when Data is nil.
	Dir    bool
	Link   string
	Data   []byte
	Source string
	// UID and GID own the entry.
	UID, GID int
}

// Image is a single-layer image: what containerd imports from an OCI archive made by
// WriteArchive, with no engine and no registry.
type Image struct {
	// Name is the reference the archive names it with (repository:tag).
	Name string
	// Files make its only layer; parent folders are added as root-owned 0755 folders.
	Files []File
	// Config is the runtime part of the image configuration.
	Config ImageConfig
}

// ImageConfig is the "config" object of an OCI image configuration.
type ImageConfig struct {
	User       string   `json:"User,omitempty"`
	Env        []string `json:"Env,omitempty"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	WorkingDir string   `json:"WorkingDir,omitempty"`
}

// epoch is the time of every layer entry, so an archive's digests depend on its content only.
var epoch = time.Unix(0, 0).UTC()

// WriteArchive writes img as an OCI image layout in a tar archive (oci-layout, index.json,
// blobs/sha256/...), whose index names it img.Name, to w. It returns the manifest's digest.
func WriteArchive(w io.Writer, img Image) (string, error) {
	layer, err := layerTar(img.Files)
	if err != nil {
		return "", err
	}
	layerDigest := digestOf(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": "amd64",
		"os":           "linux",
		"created":      epoch.Format(time.RFC3339),
		"config":       img.Config,
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
		"history":      []map[string]any{{"created": epoch.Format(time.RFC3339), "created_by": "etcd-pilot-local (realnode.WriteArchive)"}},
	})
	if err != nil {
		return "", err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer)},
	})
	if err != nil {
		return "", err
	}
	md := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	md["annotations"] = map[string]string{
		// containerd's import names the image after this annotation.
		"io.containerd.image.name":          img.Name,
		"org.opencontainers.image.ref.name": img.Name,
	}
	md["platform"] = map[string]string{"architecture": "amd64", "os": "linux"}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{md},
	})
	if err != nil {
		return "", err
	}
	tw := tar.NewWriter(w)
	add := func(name string, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), ModTime: epoch, Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
		return "", err
	}
	if err := tw.WriteHeader(&tar.Header{Name: "blobs/sha256/", Mode: 0o755, ModTime: epoch, Typeflag: tar.TypeDir}); err != nil {
		return "", err
	}
	for _, blob := range [][]byte{layer, config, manifest} {
		if err := add("blobs/sha256/"+hexDigest(blob), blob); err != nil {
			return "", err
		}
	}
	if err := add("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)); err != nil {
		return "", err
	}
	if err := add("index.json", index); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	return md["digest"].(string), nil
}

// WriteArchiveFile writes img's archive to file (through a temporary file, renamed).
func WriteArchiveFile(file string, img Image) (string, error) {
	tmp := file + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return "", err
	}
	digest, err := WriteArchive(f, img)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, file)
	}
	if err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("failed to write the image archive of %s: %w", img.Name, err)
	}
	return digest, nil
}

func descriptor(mediaType string, blob []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digestOf(blob), "size": len(blob)}
}

func hexDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func digestOf(b []byte) string { return "sha256:" + hexDigest(b) }

// layerTar is the uncompressed layer of files, in path order, with every parent folder.
func layerTar(files []File) ([]byte, error) {
	entries := map[string]File{}
	for _, f := range files {
		p := path.Clean("/" + f.Path)
		f.Path = p
		entries[p] = f
		for d := path.Dir(p); d != "/"; d = path.Dir(d) {
			if _, ok := entries[d]; !ok {
				entries[d] = File{Path: d, Dir: true, Mode: 0o755}
			}
		}
	}
	names := make([]string, 0, len(entries))
	for p := range entries {
		names = append(names, p)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range names {
		f := entries[p]
		h := &tar.Header{Name: p[1:], Mode: int64(f.Mode.Perm()), Uid: f.UID, Gid: f.GID, ModTime: epoch, Format: tar.FormatPAX}
		if f.Mode&os.ModeSticky != 0 {
			h.Mode |= 0o1000
		}
		if f.Mode&os.ModeSetuid != 0 {
			h.Mode |= 0o4000
		}
		switch {
		case f.Dir:
			h.Typeflag, h.Name = tar.TypeDir, h.Name+"/"
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		case f.Link != "":
			h.Typeflag, h.Linkname = tar.TypeSymlink, f.Link
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
		default:
			data := f.Data
			if data == nil && f.Source != "" {
				var err error
				if data, err = os.ReadFile(f.Source); err != nil {
					return nil, err
				}
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
			if err := tw.WriteHeader(h); err != nil {
				return nil, err
			}
			if _, err := tw.Write(data); err != nil {
				return nil, err
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
