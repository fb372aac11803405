package testutil

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"testing"
)

// PackageChart packs the chart folder dir as `helm package` does (every file under
// "<name>/" in a gzipped tar), with extra files laid over it by path relative to dir; a nil
// content drops that file.
func PackageChart(t testing.TB, dir, name string, extra map[string][]byte) []byte {
	t.Helper()
	files := map[string][]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		b, err := os.ReadFile(p)
		files[filepath.ToSlash(rel)] = b
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for p, b := range extra {
		if b == nil {
			delete(files, p)
		} else {
			files[p] = b
		}
	}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, p := range paths {
		if err := tw.WriteHeader(&tar.Header{Name: name + "/" + p, Mode: 0o644, Size: int64(len(files[p]))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(files[p]); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// EndlessLoopTemplate is a chart template whose render runs for hours (10^9 iterations of
// nested `until` loops) while allocating little: each inner list is 8 KB. A loop over large
// lists (`until 100000` nested twice) allocates 800 KB per inner pass and, on a busy machine,
// can outrun the collector into the sandbox's memory limit before its time limit.
const EndlessLoopTemplate = `{{ range until 1000 }}{{ range until 1000 }}{{ range until 1000 }}{{ end }}{{ end }}{{ end }}`
