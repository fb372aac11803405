package status

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
)

// Certificates turns expiries into status.certificates.
func Certificates(exp []certificates.Expiry) []v1alpha1.CertificateStatus {
	var out []v1alpha1.CertificateStatus
	for _, e := range exp {
		s := v1alpha1.CertificateStatus{Secret: e.Secret, NotAfter: metav1.NewTime(e.NotAfter.UTC().Truncate(time.Second))}
		if !e.RenewAt.IsZero() {
			s.RenewAt = ptr.To(metav1.NewTime(e.RenewAt.UTC().Truncate(time.Second)))
		}
		out = append(out, s)
	}
	return out
}
