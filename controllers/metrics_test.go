package controllers

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
)

func TestCertificateExpiryMetric(t *testing.T) {
	at := time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC)
	c := &v1alpha1.EtcdCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "m", Name: "e"}}
	c.Status.Certificates = []v1alpha1.CertificateStatus{{Secret: "e-peer-tls", NotAfter: metav1.NewTime(at)}, {Secret: "e-ca", NotAfter: metav1.NewTime(at.Add(time.Hour))}}
	recordMetrics(c)
	if got := testutil.ToFloat64(metricCertificateExpiry.WithLabelValues("m", "e", "e-peer-tls")); got != float64(at.Unix()) {
		t.Fatalf("expiry of e-peer-tls: %v", got)
	}
	// A certificate no longer in status (TLS turned off, a Secret renamed) loses its series.
	c.Status.Certificates = c.Status.Certificates[1:]
	recordMetrics(c)
	if metricCertificateExpiry.DeleteLabelValues("m", "e", "e-peer-tls") {
		t.Fatal("the series of a certificate that left status is still there")
	}
	forgetMetrics(c)
	if metricCertificateExpiry.DeleteLabelValues("m", "e", "e-ca") {
		t.Fatal("a deleted cluster's certificate series is still there")
	}
}
