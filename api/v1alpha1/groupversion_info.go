// Package v1alpha1 holds the etcdpilot.io/v1alpha1 API: the EtcdCluster kind, its validation
// markers (schema and CEL), and the condition types and reasons the controllers report.
//
// +kubebuilder:object:generate=true
// +groupName=etcdpilot.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of every kind in this package.
	GroupVersion = schema.GroupVersion{Group: "etcdpilot.io", Version: "v1alpha1"}

	// SchemeBuilder registers the kinds of this package with a runtime.Scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the kinds of this package to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &EtcdCluster{}, &EtcdClusterList{}, &EtcdBackup{}, &EtcdBackupList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
