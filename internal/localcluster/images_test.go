package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func TestImages(t *testing.T) {
	root := t.TempDir()
	built := filepath.Join(root, "v3.6.16")
	if err := os.MkdirAll(built, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(built, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	// A folder without an etcd binary is not a build.
	if err := os.MkdirAll(filepath.Join(root, "v3.5.1"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The operator's image folder, as `etcd-pilot-local up` installs it from the operator binary.
	exe := filepath.Join(t.TempDir(), "bin", "etcd-pilot")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	operator, err := InstallOperatorImage(filepath.Join(root, "cluster"), exe)
	if err != nil {
		t.Fatal(err)
	}
	resolve := Images(root, operator)
	for _, tc := range []struct {
		image   string
		want    string
		wantErr string
	}{
		{image: v1alpha1.DefaultImageRepository + ":v3.6.16", want: built},
		{image: "mirror.example/etcd-development/etcd:v3.6.16", want: built},
		{image: "localhost:5000/etcd:3.6.16", want: built},
		{image: "mirror.example/etcd:3.6.16-0", want: built},
		{image: "mirror.example/etcd:v3.6.16@sha256:0123", want: built},
		{image: v1alpha1.DefaultImageRepository + ":v3.5.1", wantErr: "run hack/build-etcd.sh 3.5.1"},
		{image: v1alpha1.DefaultImageRepository + ":v3.7.0", wantErr: "run hack/build-etcd.sh 3.7.0"},
		{image: v1alpha1.DefaultImageRepository + ":latest", wantErr: "not an etcd release"},
		{image: v1alpha1.DefaultImageRepository, wantErr: "not an etcd release"},
		{image: "etcd-pilot:latest", want: operator},
		{image: "etcd-pilot", want: operator},
		{image: "mirror.example/x/etcd-pilot:v1.2.3", want: operator},
		{image: "localhost:5000/etcd-pilot@sha256:0123", want: operator},
		{image: "localhost:5000/etcd-pilot:dev@sha256:0123", want: operator},
		{image: "busybox:1.36", wantErr: "only etcd release images (a repository named etcd) and the operator's image (a repository named etcd-pilot)"},
		{image: "mirror.example/etcd-operator:v3.6.16", wantErr: "only etcd release images"},
		{image: "mirror.example/etcd-pilot-extras:v1.2.3", wantErr: "only etcd release images"},
		{image: "mirror.example/etcd-pilot/etcd:v1.2.3", wantErr: "not built"},
	} {
		got, err := resolve(tc.image)
		switch {
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: got %q, %v; want an error containing %q", tc.image, got, err, tc.wantErr)
		case tc.wantErr == "" && (err != nil || got != tc.want):
			t.Errorf("%s: got %q, %v; want %q", tc.image, got, err, tc.want)
		}
	}
}

func TestImagesWithoutOperatorBinary(t *testing.T) {
	for _, dir := range []string{"", t.TempDir()} {
		if got, err := Images(t.TempDir(), dir)("etcd-pilot:latest"); err == nil || !strings.Contains(err.Error(), "no operator binary") {
			t.Errorf("operator folder %q: got %q, %v; want an error saying the binary is missing", dir, got, err)
		}
	}
}

func TestInstallOperatorImage(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "built")
	if err := os.WriteFile(exe, []byte("first"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The executable may be reached through a symbolic link; the image holds the file itself.
	link := filepath.Join(dir, "link")
	if err := os.Symlink("built", link); err != nil {
		t.Fatal(err)
	}
	cluster := filepath.Join(dir, "cluster")
	folder, err := InstallOperatorImage(cluster, link)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(cluster, "images", "etcd-pilot"); folder != want {
		t.Errorf("folder %s, want %s", folder, want)
	}
	checkOnly := func(content string) {
		t.Helper()
		entries, err := os.ReadDir(folder)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 1 || entries[0].Name() != "etcd-pilot" {
			t.Fatalf("the operator image folder holds %v, want only etcd-pilot", entries)
		}
		fi, err := os.Lstat(filepath.Join(folder, "etcd-pilot"))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			t.Errorf("etcd-pilot is %v, want an executable regular file", fi.Mode())
		}
		if b, _ := os.ReadFile(filepath.Join(folder, "etcd-pilot")); string(b) != content {
			t.Errorf("etcd-pilot holds %q, want %q", b, content)
		}
	}
	checkOnly("first")

	// A later run replaces the folder of an earlier one, leftovers and all.
	if err := os.WriteFile(filepath.Join(folder, "leftover"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(exe); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("second"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := InstallOperatorImage(cluster, exe); err != nil {
		t.Fatal(err)
	}
	checkOnly("second")

	if _, err := InstallOperatorImage(cluster, filepath.Join(dir, "missing")); err == nil {
		t.Error("installing a missing executable succeeded")
	}
}

func TestCheckOperatorBinary(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "etcd-pilot")
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink("etcd-pilot", link); err != nil {
		t.Fatal(err)
	}
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path    string
		wantErr string
	}{
		{path: exe},
		{path: link},
		{path: "", wantErr: "no operator binary"},
		{path: filepath.Join(dir, "missing"), wantErr: "is missing"},
		{path: dir, wantErr: "not an executable file"},
		{path: plain, wantErr: "not an executable file"},
	} {
		err := CheckOperatorBinary(tc.path)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("CheckOperatorBinary(%q) = %v, want %q", tc.path, err, tc.wantErr)
		}
	}
}

func TestImageOverrides(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, ImageOverridesFile)
	broken := filepath.Join(root, "broken")
	if err := os.MkdirAll(broken, 0o755); err != nil {
		t.Fatal(err)
	}
	resolve := WithOverrides(path, func(image string) (string, error) { return "/default/" + image, nil })
	img := v1alpha1.DefaultImageRepository + ":v3.6.16"
	if got, err := resolve(img); err != nil || got != "/default/"+img {
		t.Fatalf("without overrides: %q, %v", got, err)
	}
	if err := SetImageOverride(path, img, broken); err != nil {
		t.Fatal(err)
	}
	if err := SetImageOverride(path, "other/etcd:v3.5.35", broken); err != nil {
		t.Fatal(err)
	}
	if got, err := resolve(img); err != nil || got != broken {
		t.Fatalf("mapped: %q, %v; want %s", got, err, broken)
	}
	if err := SetImageOverride(path, img, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := resolve(img); got != "/default/"+img {
		t.Fatalf("unmapped: %q", got)
	}
	if got, _ := resolve("other/etcd:v3.5.35"); got != broken {
		t.Fatalf("the other mapping was lost: %q", got)
	}
	if err := SetImageOverride(path, img, filepath.Join(root, "missing")); err == nil || !strings.Contains(err.Error(), "not a folder") {
		t.Fatalf("mapping to a missing folder: %v", err)
	}
}
