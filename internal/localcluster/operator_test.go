package localcluster

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestWithOperatorArgs: the args are added to the manager's, after config/'s own, and every
// other object is kept.
func TestWithOperatorArgs(t *testing.T) {
	in, err := os.ReadFile(filepath.Join("..", "..", "config", "manager", "manager.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	extra := []string{"--allowed-endpoints=127.0.0.0/8", "--allow-insecure-endpoints"}
	out, err := withOperatorArgs(in, extra)
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	var kinds []string
	for {
		var obj struct {
			Kind string `json:"kind"`
		}
		if err := dec.Decode(&obj); err != nil {
			break
		}
		kinds = append(kinds, obj.Kind)
	}
	if !slices.Equal(kinds, []string{"Namespace", "Deployment"}) {
		t.Fatalf("objects %v, want the Namespace and the Deployment", kinds)
	}
	var d *appsv1.Deployment
	dec = utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		obj := &appsv1.Deployment{}
		if err := dec.Decode(obj); err != nil {
			break
		}
		if obj.Kind == "Deployment" {
			d = obj
		}
	}
	args := operatorContainer(d).Args
	if len(args) < 3 || args[0] != "manager" || !slices.Equal(args[len(args)-2:], extra) {
		t.Fatalf("manager args %q, want config's with %q after them", args, extra)
	}
	if _, err := withOperatorArgs([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n"), extra); err == nil {
		t.Fatal("a manifest without the Deployment: no error")
	}
}
