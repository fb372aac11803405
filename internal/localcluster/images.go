package localcluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
