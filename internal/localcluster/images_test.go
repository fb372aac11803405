package localcluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func TestEtcdImages(t *testing.T) {
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
	resolve := EtcdImages(root)
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
		{image: "busybox:1.36", wantErr: "only etcd release images"},
		{image: "mirror.example/etcd-operator:v3.6.16", wantErr: "only etcd release images"},
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
