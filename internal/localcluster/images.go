package localcluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// etcdTag matches the tags of etcd release images: v3.6.16, 3.6.16, and the 3.6.16-0 form of
// some mirrors; the submatch is the version.
var etcdTag = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(?:-\d+)?$`)

// EtcdImages returns the image resolver of the process nodes: an image whose repository's
// last path element is "etcd" (the official repository or any mirror) and whose tag names an
// etcd release maps to etcdRoot/v<version>, the folder hack/build-etcd.sh builds, when that
// folder holds an etcd binary. Every other image is an error that says what to do.
func EtcdImages(etcdRoot string) func(image string) (string, error) {
	return func(image string) (string, error) {
		ref := image
		if i := strings.IndexByte(ref, '@'); i >= 0 { // a digest cannot be checked here; the tag decides
			ref = ref[:i]
		}
		repo, tag := ref, ""
		if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
			repo, tag = ref[:i], ref[i+1:]
		}
		if repo[strings.LastIndexByte(repo, '/')+1:] != "etcd" {
			return "", fmt.Errorf("image %s cannot run on the local cluster: only etcd release images (a repository named etcd) map to local builds", image)
		}
		m := etcdTag.FindStringSubmatch(tag)
		if m == nil {
			return "", fmt.Errorf("image %s cannot run on the local cluster: its tag is not an etcd release like v3.6.16", image)
		}
		version := m[1]
		dir := filepath.Join(etcdRoot, "v"+version)
		if fi, err := os.Stat(filepath.Join(dir, "etcd")); err != nil || fi.IsDir() {
			return "", fmt.Errorf("image %s needs etcd %s, which is not built: run hack/build-etcd.sh %s", image, version, version)
		}
		return dir, nil
	}
}

// ImageOverridesFile is the file in the local cluster's folder that maps images to folders
// ahead of EtcdImages: one "IMAGE FOLDER" line each. Tests use it to break an image (map it to
// a folder without a working etcd) and to repair it; `local image map|unmap` edit it.
const ImageOverridesFile = "image-overrides"

// WithOverrides resolves an image listed in the overrides file at path (read at every
// resolution, so a change takes effect at the next container start) to its folder, and every
// other image through next.
func WithOverrides(path string, next func(image string) (string, error)) func(image string) (string, error) {
	return func(image string) (string, error) {
		m, err := readOverrides(path)
		if err != nil {
			return "", err
		}
		if dir, ok := m[image]; ok {
			return dir, nil
		}
		return next(image)
	}
}

func readOverrides(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read image overrides: %w", err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			m[f[0]] = f[1]
		}
	}
	return m, nil
}

// SetImageOverride maps image to folder in the overrides file at path, or removes its mapping
// when folder is empty. The file is replaced atomically.
func SetImageOverride(path, image, folder string) error {
	if strings.ContainsAny(image, " \t\n") || strings.ContainsAny(folder, " \t\n") {
		return fmt.Errorf("image and folder must not contain white space")
	}
	m, err := readOverrides(path)
	if err != nil {
		return err
	}
	if m == nil {
		m = map[string]string{}
	}
	if folder == "" {
		delete(m, image)
	} else {
		abs, err := filepath.Abs(folder)
		if err != nil {
			return err
		}
		if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
			return fmt.Errorf("%s is not a folder", folder)
		}
		m[image] = abs
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s %s\n", k, m[k])
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
