// Package repo finds the etcd-pilot repository on disk: the folder whose go.mod declares the
// module (the hack/tools modules have go.mod files of their own). The local cluster and the
// envtest harness both need it for hack/, bin/ and config/.
package repo

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// ModulePath is the module whose go.mod marks the repository root.
const ModulePath = "github.com/etcd-pilot/etcd-pilot"

// FindRoot returns the repository root: the first folder holding the module's go.mod, walking
// up from each of dirs in turn (callers pass the working directory and the executable's).
func FindRoot(dirs ...string) (string, error) {
	for _, start := range dirs {
		if start == "" {
			continue
		}
		for dir := start; ; {
			if declaresModule(filepath.Join(dir, "go.mod")) {
				return dir, nil
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return "", fmt.Errorf("failed to find the etcd-pilot repository (a go.mod of module %s) above %s; run etcd-pilot from a clone", ModulePath, strings.Join(dirs, " or "))
}

func declaresModule(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) == 2 && fields[0] == "module" {
			return strings.Trim(fields[1], `"`) == ModulePath
		}
	}
	return false
}
