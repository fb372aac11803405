package v1alpha1_test

import (
	"testing"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func fromObject(etcdVersion string) *v1alpha1.BootstrapSpec {
	return &v1alpha1.BootstrapSpec{FromObject: &v1alpha1.SnapshotObject{
		S3:  *s3Dest().S3,
		Key: "prod/etcd/main-20261123-0300.db", EtcdVersion: etcdVersion,
	}}
}

func TestBootstrapSpec(t *testing.T) {
	pair := []string{"cannot be restored into etcd", "same minor version or the next one"}
	runCreateCases(t, []createCase{
		{name: "from a backup accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Bootstrap = &v1alpha1.BootstrapSpec{FromBackup: &v1alpha1.BackupReference{Name: "main-20261123-0300"}}
		}},
		{name: "from an object of the same minor accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Version, s.Bootstrap = "3.6.16", fromObject("3.6.15")
		}},
		{name: "from an object of the minor before accepted", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Version, s.Bootstrap = "3.6.16", fromObject("3.5.35")
		}},
		{name: "default version and a 3.6 object accepted", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Bootstrap = fromObject("3.6.16") }},
		{name: "two minors ahead refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Version, s.Bootstrap = "3.7.3", fromObject("3.5.35")
		}, wantErr: append([]string{"a snapshot of etcd 3.5.35 cannot be restored into etcd 3.7.3"}, pair...)},
		{name: "a newer snapshot refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Version, s.Bootstrap = "3.5.35", fromObject("3.6.16")
		}, wantErr: pair},
		{name: "unknown etcd version refused", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Bootstrap = fromObject("3.4.30") },
			wantErr: []string{"etcdVersion must be the etcd release that took the snapshot"}},
		{name: "neither source refused", spec: func(s *v1alpha1.EtcdClusterSpec) { s.Bootstrap = &v1alpha1.BootstrapSpec{} },
			wantErr: []string{"exactly one of fromBackup"}},
		{name: "both sources refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Bootstrap = fromObject("3.6.16")
			s.Bootstrap.FromBackup = &v1alpha1.BackupReference{Name: "b"}
		}, wantErr: []string{"exactly one of fromBackup"}},
		{name: "bad sha256 refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Bootstrap = fromObject("3.6.16")
			s.Bootstrap.FromObject.SHA256 = "xyz"
		}, wantErr: []string{"spec.bootstrap.fromObject.sha256"}},
		{name: "ephemeral storage refused", spec: func(s *v1alpha1.EtcdClusterSpec) {
			s.Bootstrap = fromObject("3.6.16")
			s.Storage.Ephemeral = ptr.To(true)
		}, wantErr: []string{"bootstrap needs volume claims"}},
		{name: "unknown disaster recovery policy refused", spec: func(s *v1alpha1.EtcdClusterSpec) { s.DisasterRecovery.Policy = "Always" },
			wantErr: []string{"spec.disasterRecovery.policy", "Manual", "FromLatestBackup"}},
	})
}

func TestBootstrapIsSetOnlyAtCreation(t *testing.T) {
	ns := env.Namespace(t)
	plain := newCluster(ns, "plain", nil)
	if err := env.Client.Create(reqCtx(t), plain); err != nil {
		t.Fatal(err)
	}
	if got := plain.Spec.DisasterRecovery; got.Policy != v1alpha1.DisasterRecoveryManual || got.After == nil || got.After.Duration.String() != "1m0s" {
		t.Errorf("spec.disasterRecovery = %+v, want the defaults Manual, 1m", got)
	}
	plain.Spec.Bootstrap = fromObject("3.6.16")
	checkAdmission(t, env.Client.Update(reqCtx(t), plain), []string{"bootstrap can only be set when the cluster is created"})

	restored := newCluster(ns, "restored", func(s *v1alpha1.EtcdClusterSpec) { s.Bootstrap = fromObject("3.6.16") })
	if err := env.Client.Create(reqCtx(t), restored); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Get(reqCtx(t), client.ObjectKeyFromObject(restored), restored); err != nil {
		t.Fatal(err)
	}
	restored.Spec.Bootstrap = nil
	checkAdmission(t, env.Client.Update(reqCtx(t), restored), []string{"bootstrap can only be set when the cluster is created"})
}

func TestBootstrapCannotChange(t *testing.T) {
	ns := env.Namespace(t)
	ec := newCluster(ns, "restored", func(s *v1alpha1.EtcdClusterSpec) { s.Bootstrap = fromObject("3.6.16") })
	if err := env.Client.Create(reqCtx(t), ec); err != nil {
		t.Fatal(err)
	}
	ec.Spec.Bootstrap.FromObject.Key = "another.db"
	checkAdmission(t, env.Client.Update(reqCtx(t), ec), []string{"bootstrap cannot change after creation"})
}
