package execute

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// TestRestorePodsAreRestricted: the restore pods the executor builds, from an S3 object or a
// claim, on the embedded chart's render (the defaults, and a platform's security settings it
// takes the pod securityContext from), pass the restricted level with no service-account
// token.
func TestRestorePodsAreRestricted(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]observe.SnapshotSource{
		"s3": {Key: "etcd/snap.db", S3: &v1alpha1.S3Destination{Endpoint: "https://s3.example.com", Bucket: "b",
			CredentialsSecret: v1alpha1.SecretReference{Name: "s3"}, CABundle: "pem"}},
		"claim": {Key: "etcd/snap.db", Claim: "backups"},
	}
	for _, chartValues := range []string{"", `{"podSecurityContext":{"runAsUser":1000680000,"seLinuxOptions":{"level":"s0:c26,c15"}}}`} {
		c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Name: "etcd", Namespace: "ns", UID: "uid-1"}}
		if chartValues != "" {
			c.Spec.Chart.Values = &runtime.RawExtension{Raw: []byte(chartValues)}
		}
		desired, err := render.Desired(r, c, values.DefaultOperator(), memory.Of(c))
		if err != nil {
			t.Fatal(err)
		}
		sts, _, err := claimTemplate(desired)
		if err != nil {
			t.Fatal(err)
		}
		x := &Executor{AgentImage: "etcd-pilot:dev"}
		for name, src := range sources {
			c.Status.Restore = &v1alpha1.RestoreStatus{ID: "r1", Location: name, SHA256: "abc"}
			pod, err := x.restorePod(c, render.TopologyOf(c, desired), c.Status.Restore, "etcd-0", src, sts, []string{"etcd-0=http://etcd-0.etcd.ns.svc:2380"})
			if err != nil {
				t.Fatal(err)
			}
			if err := podsecurity.CheckPod(pod, podsecurity.Restricted); err != nil {
				t.Errorf("values %s, source %s: %v", chartValues, name, err)
			}
		}
	}
}

// TestCreateBackupPodRefusesAPodOutsideTheLevel: the executor does not create a pod outside
// the operator's level, whoever built it; the client is never reached (it is nil here).
func TestCreateBackupPodRefusesAPodOutsideTheLevel(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "backup-1"}, Spec: corev1.PodSpec{
		AutomountServiceAccountToken: ptr.To(true),
		Containers:                   []corev1.Container{{Name: "snapshot", SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)}}},
	}}
	var pe *podsecurity.Error
	for _, level := range []podsecurity.Level{"", podsecurity.Baseline} {
		x := &Executor{Operator: values.Operator{PodSecurity: level}}
		if err := x.CreateBackupPod(context.Background(), pod); !errors.As(err, &pe) {
			t.Fatalf("level %q: %v, want a *podsecurity.Error", level, err)
		}
	}
}
