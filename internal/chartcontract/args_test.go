package chartcontract

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// TestEtcdArgsReadsFlagsAsEtcdDoes: one dash or two name the same flag, the last of a repeated
// flag wins, a bare flag is a boolean set to true, and the command counts before the
// arguments.
func TestEtcdArgsReadsFlagsAsEtcdDoes(t *testing.T) {
	a := ParseEtcdArgs([]string{"etcd", "--name=$(POD_NAME)"}, []string{
		"--client-cert-auth=true", "-client-cert-auth=false", "-force-new-cluster",
		"--listen-peer-urls=https://0.0.0.0:2380,http://0.0.0.0:2382", "--", "-", "positional",
	})
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{"name", "$(POD_NAME)", true},
		{"client-cert-auth", "false", true},
		{"force-new-cluster", "true", true},
		{"initial-cluster", "", false},
		{"positional", "", false},
	} {
		if got, ok := a.Get(tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("Get(%s) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if urls := a.URLs("listen-peer-urls"); len(urls) != 2 || urls[1] != "http://0.0.0.0:2382" {
		t.Errorf("URLs = %v", urls)
	}
	if a.URLs("advertise-client-urls") != nil || !a.Has("force-new-cluster") || a.Has("data-dir") {
		t.Error("absent flags read as present, or present ones as absent")
	}
	ps := &corev1.PodSpec{Containers: []corev1.Container{
		{Name: "sidecar", Args: []string{"--data-dir=/elsewhere"}},
		{Name: "etcd", Args: []string{"--data-dir=/var/lib/etcd"}},
	}}
	if got, ok := EtcdContainerArgs(ps); !ok || !got.Has("data-dir") {
		t.Fatal("the etcd container's flags were not read")
	} else if v, _ := got.Get("data-dir"); v != "/var/lib/etcd" {
		t.Fatalf("a sidecar's flag was read as etcd's: %s", v)
	}
	if _, ok := EtcdContainerArgs(&corev1.PodSpec{}); ok {
		t.Fatal("a pod spec without an etcd container has flags")
	}
}

// TestContractRefusesASingleDashForceNewCluster: etcd reads -force-new-cluster as
// --force-new-cluster, so the contract does too.
func TestContractRefusesASingleDashForceNewCluster(t *testing.T) {
	etcd := map[string]any{"args": []any{"--name=$(POD_NAME)", "--data-dir=" + DataDir, "--listen-peer-urls=x", "--initial-advertise-peer-urls=x", "--advertise-client-urls=x", "-force-new-cluster"}}
	var got []string
	checkEtcdContainer(etcd, Contract{MembershipConfigMap: "m"}, "StatefulSet x", func(f string, args ...any) { got = append(got, fmt.Sprintf(f, args...)) })
	found := false
	for _, g := range got {
		if strings.HasPrefix(g, "StatefulSet x: the etcd container may not set --force-new-cluster (args[5]): ") {
			found = true
		}
	}
	if !found {
		t.Fatalf("-force-new-cluster passed the contract: %v", got)
	}
}
