package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
)

// TestResizeDuringFormationKeepsTheFounders (path 4 of issue 9): spec.replicas changes while
// the founders start (etcd has not formed; nothing answers). The founding list, recorded on
// the membership ConfigMap before the StatefulSet, stays; the StatefulSet keeps the founders.
// A rewritten list could let later pods form a second cluster, or leave the founders short of
// a quorum.
func TestResizeDuringFormationKeepsTheFounders(t *testing.T) {
	for _, to := range []int32{5, 1} {
		t.Run(fmt.Sprintf("3 to %d", to), func(t *testing.T) {
			ns := env.Namespace(t)
			newCluster(t, ns, nil)
			founders := ""
			eventually(t, timeout, "the founders recorded and started", func() error {
				cm := &corev1.ConfigMap{}
				if err := getObject(ns, "etcd-membership", cm); err != nil {
					return err
				}
				sts := &appsv1.StatefulSet{}
				if err := getObject(ns, "etcd", sts); err != nil {
					return err
				}
				founders = cm.Annotations[observe.FoundersAnnotation]
				if strings.Count(founders, "=") != 3 || cm.Data["ETCD_INITIAL_CLUSTER"] != founders || cm.Data["ETCD_INITIAL_CLUSTER_STATE"] != "new" ||
					sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
					return fmt.Errorf("founders %q, data %v, replicas %v", founders, cm.Data, sts.Spec.Replicas)
				}
				return nil
			})
			updateCluster(t, ns, func(c *v1alpha1.EtcdCluster) { c.Spec.Replicas = &to })
			// Well past several passes, nothing moved.
			end := time.Now().Add(5 * time.Second)
			for time.Now().Before(end) {
				cm := &corev1.ConfigMap{}
				sts := &appsv1.StatefulSet{}
				if err := getObject(ns, "etcd-membership", cm); err != nil {
					t.Fatal(err)
				}
				if err := getObject(ns, "etcd", sts); err != nil {
					t.Fatal(err)
				}
				if cm.Data["ETCD_INITIAL_CLUSTER"] != founders || cm.Annotations[observe.FoundersAnnotation] != founders {
					t.Fatalf("the founding list changed during formation: %v", cm.Data)
				}
				if *sts.Spec.Replicas != 3 {
					t.Fatalf("the StatefulSet left the founders during formation: %d replicas", *sts.Spec.Replicas)
				}
				time.Sleep(200 * time.Millisecond)
			}
		})
	}
}
