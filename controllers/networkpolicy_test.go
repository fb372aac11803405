package controllers_test

import (
	"context"
	"fmt"
	"k8s.io/utils/ptr"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/controllers"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// TestNetworkPolicyAppliedAndPruned: spec.networkPolicy makes the operator apply a
// NetworkPolicy that the API server accepts (it validates the kind), owned by the cluster,
// admitting the operator and the cluster's backup pods; a pass over an unchanged cluster does
// not rewrite it; a changed client list reaches it; disabling deletes it, and only it.
// envtest runs no network plugin: nothing here enforces the policy, it is checked as an
// object.
func TestNetworkPolicyAppliedAndPruned(t *testing.T) {
	ns := env.Namespace(t)
	apps := v1alpha1.NetworkPolicyPeer{NamespaceSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "apps"}}}
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.NetworkPolicy = &v1alpha1.NetworkPolicySpec{
			Enabled:        ptr.To(true),
			RestrictEgress: true,
			AllowedClients: []v1alpha1.NetworkPolicyPeer{apps, {IPBlock: &v1alpha1.IPBlock{CIDR: "192.0.2.0/24", Except: []string{"192.0.2.0/28"}}}},
			AllowedMetricsClients: []v1alpha1.NetworkPolicyPeer{{
				NamespaceSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "monitoring"}},
				PodSelector:       &v1alpha1.LabelSelector{MatchExpressions: []v1alpha1.LabelSelectorRequirement{{Key: "app", Operator: "Exists"}}},
			}},
		}
	})
	sts := waitStatefulSet(t, ns)

	np := &networkingv1.NetworkPolicy{}
	eventually(t, timeout, "NetworkPolicy", func() error { return getObject(ns, "etcd", np) })
	if ref := metav1.GetControllerOf(np); ref == nil || ref.Kind != "EtcdCluster" || ref.Name != "etcd" {
		t.Errorf("the NetworkPolicy's controller is %+v, want the EtcdCluster", ref)
	}
	if !reflect.DeepEqual(np.Spec.PodSelector.MatchLabels, sts.Spec.Selector.MatchLabels) {
		t.Errorf("the policy selects %v, the StatefulSet %v", np.Spec.PodSelector.MatchLabels, sts.Spec.Selector.MatchLabels)
	}
	if len(np.Spec.Ingress) != 3 || len(np.Spec.Egress) != 2 {
		t.Fatalf("ingress %+v, egress %+v: want peer, client and metrics rules, and peer and DNS egress", np.Spec.Ingress, np.Spec.Egress)
	}

	// The client rule admits the operator (as the manager was told it runs) and this
	// cluster's backup pods, whose labels come from the backup controller itself.
	op := values.DefaultOperator()
	client := np.Spec.Ingress[1]
	if client.Ports[0].Port.IntValue() != 2379 {
		t.Fatalf("second rule is for port %v, want the client port", client.Ports[0].Port)
	}
	var operator, backups bool
	for _, p := range client.From {
		if p.NamespaceSelector != nil && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == op.Namespace &&
			p.PodSelector != nil && reflect.DeepEqual(p.PodSelector.MatchLabels, op.PodLabels) {
			operator = true
		}
		if p.NamespaceSelector == nil && p.IPBlock == nil && p.PodSelector != nil &&
			labels.SelectorFromSet(p.PodSelector.MatchLabels).Matches(labels.Set(controllers.BackupPodLabels("etcd", "b1"))) &&
			!labels.SelectorFromSet(p.PodSelector.MatchLabels).Matches(labels.Set(controllers.BackupPodLabels("other", "b1"))) {
			backups = true
		}
	}
	if !operator || !backups {
		t.Errorf("client port from %+v: operator admitted %v, this cluster's backup pods (only) admitted %v", client.From, operator, backups)
	}

	// A pass over the unchanged cluster leaves the policy alone (what the API server
	// defaulted does not look like drift).
	rv := np.ResourceVersion
	r := reconciles(t)
	touch(t, ns, "np")
	waitReconciles(t, r+1)
	if err := getObject(ns, "etcd", np); err != nil {
		t.Fatal(err)
	}
	if np.ResourceVersion != rv {
		t.Errorf("an unchanged cluster rewrote its NetworkPolicy (resourceVersion %s, was %s)", np.ResourceVersion, rv)
	}

	// Another client namespace reaches the policy.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.NetworkPolicy.AllowedClients = append(c.Spec.NetworkPolicy.AllowedClients, v1alpha1.NetworkPolicyPeer{
			NamespaceSelector: &v1alpha1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "batch"}}})
	})
	eventually(t, timeout, "the new client namespace in the policy", func() error {
		if err := getObject(ns, "etcd", np); err != nil {
			return err
		}
		for _, p := range np.Spec.Ingress[1].From {
			if p.NamespaceSelector != nil && p.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "batch" {
				return nil
			}
		}
		return fmt.Errorf("client port from %+v", np.Spec.Ingress[1].From)
	})

	// A NetworkPolicy with the inventory labels that the cluster does not control stays.
	foreign := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns,
		Labels: map[string]string{v1alpha1.LabelCluster: "etcd", v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue}}}
	if err := env.Client.Create(context.Background(), foreign); err != nil {
		t.Fatal(err)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.NetworkPolicy.Enabled = ptr.To(false) })
	eventually(t, timeout, "NetworkPolicy pruned", func() error {
		err := getObject(ns, "etcd", &networkingv1.NetworkPolicy{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("NetworkPolicy still there (err %v)", err)
	})
	if err := getObject(ns, "foreign", &networkingv1.NetworkPolicy{}); err != nil {
		t.Fatalf("a NetworkPolicy the cluster does not control was deleted: %v", err)
	}
	// The rest of the cluster stays.
	if err := getObject(ns, sts.Name, sts); err != nil {
		t.Fatalf("StatefulSet gone with the policy: %v", err)
	}

	// And on again: re-created.
	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.NetworkPolicy.Enabled = ptr.To(true) })
	eventually(t, timeout, "NetworkPolicy re-created", func() error { return getObject(ns, "etcd", &networkingv1.NetworkPolicy{}) })
}
