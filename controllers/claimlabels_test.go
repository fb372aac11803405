package controllers_test

import (
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

// TestLabelsAddedLaterNeverBreakTheStatefulSet: labels a user adds to every object after
// creation reach the StatefulSet and its pods, and claim labels changed after creation are
// kept as the StatefulSet was created with: its volumeClaimTemplates cannot change, so
// applying either into them would make every later apply of the StatefulSet fail.
func TestLabelsAddedLaterNeverBreakTheStatefulSet(t *testing.T) {
	ns := env.Namespace(t)
	newCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"commonLabels":{"team":"storage"},"storage":{"claimLabels":{"backup":"daily"}}}`)}
	})
	sts := waitStatefulSet(t, ns)
	created := claimLabels(t, sts)
	want := map[string]string{"app.kubernetes.io/name": "etcd", "app.kubernetes.io/instance": "etcd", v1alpha1.LabelCluster: "etcd", "backup": "daily"}
	if fmt.Sprint(created) != fmt.Sprint(want) {
		t.Fatalf("claim labels at creation %v, want %v (commonLabels never go into the claims)", created, want)
	}

	updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) {
		c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(`{"commonLabels":{"team":"storage","cost-center":"42"},"storage":{"claimLabels":{"backup":"hourly"}}}`)}
	})
	eventually(t, timeout, "the new label applied to the StatefulSet and its pod template", func() error {
		got := &appsv1.StatefulSet{}
		if err := getObject(ns, "etcd", got); err != nil {
			return err
		}
		if got.Labels["cost-center"] != "42" || got.Spec.Template.Labels["cost-center"] != "42" {
			return fmt.Errorf("StatefulSet labels %v, pod template labels %v", got.Labels, got.Spec.Template.Labels)
		}
		if now := claimLabels(t, got); fmt.Sprint(now) != fmt.Sprint(created) {
			return fmt.Errorf("claim labels changed to %v", now)
		}
		return nil
	})
}

func claimLabels(t *testing.T, sts *appsv1.StatefulSet) map[string]string {
	t.Helper()
	for _, c := range sts.Spec.VolumeClaimTemplates {
		if c.Name == "data" {
			return c.Labels
		}
	}
	t.Fatalf("StatefulSet %s has no data claim template", sts.Name)
	return nil
}
