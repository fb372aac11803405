package localcluster

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// etcdTag matches the tags of etcd release images: v3.6.16, 3.6.16, and the 3.6.16-0 form of
// some mirrors; the submatch is the version.
var etcdTag = regexp.MustCompile(`^v?(\d+\.\d+\.\d+)(?:-\d+)?$`)

// Repository names (the last path element of an image's repository) the process nodes know.
const (
	etcdRepoName     = "etcd"
	operatorRepoName = "etcd-pilot"
	// operatorCommand is the file name of the operator's binary in its image folder; the
	// image runs it as /usr/local/bin/etcd-pilot.
	operatorCommand = "etcd-pilot"
)

// OperatorImageDir is the folder, under the local cluster's folder, that plays the operator's
// image: it holds only the operator's binary, named etcd-pilot. See InstallOperatorImage.
const OperatorImageDir = "images/etcd-pilot"

// Images returns the image resolver of the process nodes.
//
// An image whose repository's last path element is "etcd" (the official repository or any
// mirror) and whose tag names an etcd release maps to etcdRoot/v<version>, the folder
// hack/build-etcd.sh builds, when that folder holds an etcd binary.
//
// An image whose repository's last path element is "etcd-pilot", with any tag or digest (or
// none), is the operator's own image and maps to operatorDir, which must hold the operator's
// binary named etcd-pilot (InstallOperatorImage makes it). The local cluster runs one build
// of the operator, so the tag is not checked.
//
// Every other image is an error that says what to do.
func Images(etcdRoot, operatorDir string) func(image string) (string, error) {
	return func(image string) (string, error) {
		repo, tag := splitImage(image)
		switch repo[strings.LastIndexByte(repo, '/')+1:] {
		case etcdRepoName:
			return etcdImage(etcdRoot, image, tag)
		case operatorRepoName:
			if fi, err := os.Stat(filepath.Join(operatorDir, operatorCommand)); operatorDir == "" || err != nil || fi.IsDir() {
				return "", fmt.Errorf("image %s is the operator's image, but this local cluster has no operator binary in %q: `etcd-pilot-local up` installs it from --operator-binary", image, operatorDir)
			}
			return operatorDir, nil
		}
		return "", fmt.Errorf("image %s cannot run on the local cluster: only etcd release images (a repository named %s) and the operator's image (a repository named %s) map to local builds", image, etcdRepoName, operatorRepoName)
	}
}

// splitImage returns an image reference's repository and tag ("" when it has none). A
// digest is dropped: it cannot be checked here, the tag decides.
func splitImage(image string) (repo, tag string) {
	ref := image
	if i := strings.IndexByte(ref, '@'); i >= 0 {
		ref = ref[:i]
	}
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[:i], ref[i+1:]
	}
	return ref, ""
}

// etcdImage resolves an etcd release image with the given tag to its build under etcdRoot.
func etcdImage(etcdRoot, image, tag string) (string, error) {
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

// CheckOperatorBinary fails unless path names an executable regular file (after symbolic
// links): the operator binary the local cluster runs and installs as the operator's image.
func CheckOperatorBinary(path string) error {
	if path == "" {
		return errors.New("no operator binary given")
	}
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("the operator binary %s is missing", path)
	}
	if err != nil {
		return fmt.Errorf("failed to check the operator binary: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("the operator binary %s is not an executable file", path)
	}
	return nil
}

// InstallOperatorImage makes dir/OperatorImageDir the operator's image folder: a fresh folder
// holding only executable, named etcd-pilot, as a hard link (a copy when the link is refused,
// for example across file systems). A folder from an earlier run is replaced, so the image
// runs the binary of this run. It returns the folder.
func InstallOperatorImage(dir, executable string) (string, error) {
	if executable == "" {
		return "", errors.New("no operator executable to install as the operator's image")
	}
	src, err := filepath.EvalSymlinks(executable) // link(2) would link a symbolic link itself
	if err != nil {
		return "", fmt.Errorf("failed to resolve the operator executable %s: %w", executable, err)
	}
	folder := filepath.Join(dir, OperatorImageDir)
	if err := os.RemoveAll(folder); err != nil {
		return "", fmt.Errorf("failed to delete the operator image folder of an earlier run: %w", err)
	}
	if err := os.MkdirAll(folder, 0o755); err != nil {
		return "", fmt.Errorf("failed to create the operator image folder: %w", err)
	}
	dst := filepath.Join(folder, operatorCommand)
	if err := os.Link(src, dst); err == nil {
		return folder, nil
	}
	if err := copyFile(src, dst, 0o755); err != nil {
		return "", fmt.Errorf("failed to install the operator executable as the operator's image: %w", err)
	}
	return folder, nil
}

// copyFile copies src to a new file dst with the given mode.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// ImageOverridesFile is the file in the local cluster's folder that maps images to folders
// ahead of Images: one "IMAGE FOLDER" line each. Tests use it to break an image (map it to
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
