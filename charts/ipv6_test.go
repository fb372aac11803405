package charts_test

import (
	"net"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/testutil/etcdproc"
)

// TestIPv6ListenerURLs: with etcd.ipFamily IPv6 the listener URLs put the pod address in
// brackets, and a real etcd listens on such URLs (on the IPv6 loopback).
func TestIPv6ListenerURLs(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	for family, want := range map[string]string{"IPv4": "http://$(POD_IP):", "IPv6": "http://[$(POD_IP)]:"} {
		objs, err := r.Render(charts.Release{Name: "v6", Namespace: "ns"}, map[string]any{"etcd": map[string]any{"ipFamily": family}})
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		for _, o := range objs {
			if o.GetKind() != "StatefulSet" {
				continue
			}
			sts := &appsv1.StatefulSet{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, sts); err != nil {
				t.Fatal(err)
			}
			for _, a := range sts.Spec.Template.Spec.Containers[0].Args {
				if strings.HasPrefix(a, "--listen-") {
					found++
					if !strings.Contains(a, "="+want) {
						t.Errorf("%s: %s, want a URL starting %s", family, a, want)
					}
				}
			}
		}
		if found != 3 {
			t.Errorf("%s: %d listener flags, want 3", family, found)
		}
	}
	// etcd itself accepts the bracketed form: the three listeners on the IPv6 loopback.
	l, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("this machine has no IPv6 loopback to run etcd on: %v", err)
	}
	l.Close()
	etcdproc.Start(t, "[::1]")
}
