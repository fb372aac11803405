package apply

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestHashLeavesOutAStatefulSetsReplicas: a scale changes no render, so it changes no hash
// (the controller reads "the StatefulSet is the one last applied" from it); anything else
// does, and so do other kinds' replicas.
func TestHashLeavesOutAStatefulSetsReplicas(t *testing.T) {
	obj := func(kind string, replicas int64, image string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": kind,
			"metadata": map[string]any{"name": "etcd", "namespace": "ns"},
			"spec":     map[string]any{"template": map[string]any{"spec": map[string]any{"image": image}}}}}
		if replicas >= 0 {
			u.Object["spec"].(map[string]any)["replicas"] = replicas
		}
		return u
	}
	hash := func(u *unstructured.Unstructured) string {
		h, err := Hash(u)
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	if a, b, c := hash(obj("StatefulSet", -1, "etcd:v3.6")), hash(obj("StatefulSet", 3, "etcd:v3.6")), hash(obj("StatefulSet", 5, "etcd:v3.6")); a != b || b != c {
		t.Fatalf("a StatefulSet's hash changes with its replicas: %s %s %s", a, b, c)
	}
	if hash(obj("StatefulSet", 3, "etcd:v3.6")) == hash(obj("StatefulSet", 3, "etcd:v3.7")) {
		t.Fatal("a StatefulSet's hash does not change with its template")
	}
	if hash(obj("Deployment", 1, "etcd:v3.6")) == hash(obj("Deployment", 2, "etcd:v3.6")) {
		t.Fatal("a Deployment's hash does not change with its replicas")
	}
	u := obj("StatefulSet", 3, "etcd:v3.6")
	hash(u)
	if _, ok, _ := unstructured.NestedInt64(u.Object, "spec", "replicas"); !ok {
		t.Fatal("Hash changed the object it hashed")
	}
}
