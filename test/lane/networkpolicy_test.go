package lane

import (
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	v1alpha1 "github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/localcluster/realnode"
)

// laneHostAllowed is a cluster's NetworkPolicy that also admits the lane's own network (the
// tests run there, as a client outside the pods would), besides the operator and the members
// the policy admits anyway.
func laneHostAllowed() *v1alpha1.NetworkPolicySpec {
	return &v1alpha1.NetworkPolicySpec{AllowedClients: []v1alpha1.NetworkPolicyPeer{
		{IPBlock: &v1alpha1.IPBlock{CIDR: realnode.BridgeIP + "/24"}},
	}}
}

// TestNetworkPolicyIsEnforced: the lane's nodes enforce NetworkPolicy (kube-network-policies),
// which the process nodes cannot. A cluster under the secure default policy forms and is
// managed (the operator's pods and the members are admitted) while a client outside the
// cluster's pods gets no answer from any member; once spec.networkPolicy.allowedClients names
// its network, it reaches them.
func TestNetworkPolicyIsEnforced(t *testing.T) {
	const ns, name = "policy", "etcd"
	restrictedNamespace(t, ns)
	c := &v1alpha1.EtcdCluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       v1alpha1.EtcdClusterSpec{Replicas: ptrTo[int32](3), Version: "3.6.16"},
	}
	if err := k8s.Create(tctx(t), c); err != nil {
		t.Fatal(err)
	}
	waitAvailable(t, ns, name, 3, "3.6.16", 5*time.Minute)
	var addrs []string
	for i := range 3 {
		host := fmt.Sprintf("%s-%d.%s.%s.svc.cluster.local", name, i, name, ns)
		addrs = append(addrs, host+":2379", host+":2380")
	}
	// Blocked: no handshake at all, not a refused certificate. Give the agents a moment to
	// have the policy in place (it is there before the members are, but the lookups are not).
	for _, a := range addrs {
		if s, err := servedSerial(a); err == nil {
			t.Fatalf("%s answered a client the NetworkPolicy does not admit (certificate %s)", a, s)
		} else if !strings.Contains(err.Error(), "timeout") {
			t.Fatalf("%s: want a timeout (dropped by the policy), got %v", a, err)
		}
	}
	start := time.Now()
	patch := client.MergeFrom(getCluster(t, ns, name).DeepCopy())
	open := getCluster(t, ns, name)
	open.Spec.NetworkPolicy = laneHostAllowed()
	if err := k8s.Patch(tctx(t), open, patch); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, time.Second, "client ports reachable once allowedClients names the lane's network", func() error {
		for _, a := range addrs {
			if !strings.HasSuffix(a, ":2379") {
				continue
			}
			if _, err := servedSerial(a); err != nil {
				return err
			}
		}
		return nil
	})
	// The peer port stays the members' own.
	for _, a := range addrs {
		if strings.HasSuffix(a, ":2380") {
			if _, err := servedSerial(a); err == nil {
				t.Fatalf("peer port %s answered a client outside the cluster", a)
			}
		}
	}
	t.Logf("the secure default policy dropped the lane host's connections to all 6 ports; allowedClients opened the 3 client ports in %.1fs, the peer ports stayed closed", time.Since(start).Seconds())
}
