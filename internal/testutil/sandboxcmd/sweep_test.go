package sandboxcmd

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSweepRemovesOnlyFoldersOfEndedProcesses: the sandbox folders of test processes that
// have ended go, those of running ones stay; a folder without a process in its name goes
// only once it is an hour old.
func TestSweepRemovesOnlyFoldersOfEndedProcesses(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	dirs := map[string]bool{ // name -> kept
		fmt.Sprintf("%s%d-1", folderPrefix, os.Getpid()): true,
		folderPrefix + "999999999-2":                     false, // no such process
		folderPrefix + "123456":                          true,  // no process named, fresh
		folderPrefix + "654321":                          false, // no process named, old
		"unrelated-999999999-3":                          true,
	}
	for name := range dirs {
		if err := os.MkdirAll(filepath.Join(tmp, name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(tmp, folderPrefix+"654321"), old, old); err != nil {
		t.Fatal(err)
	}
	sweep()
	for name, kept := range dirs {
		_, err := os.Stat(filepath.Join(tmp, name))
		if (err == nil) != kept {
			t.Errorf("%s: exists %v, want %v", name, err == nil, kept)
		}
	}
}
