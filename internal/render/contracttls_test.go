package render_test

import (
	"testing"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// TestEverySwitchPhaseKeepsTheFlagContract: the chart contract asks of the etcd flags the TLS
// the values of the phase ask for (not the spec's target), so every phase of a switch between
// plain and TLS, on either side, renders through render.DesiredAt.
func TestEverySwitchPhaseKeepsTheFlagContract(t *testing.T) {
	r, err := charts.Embedded()
	if err != nil {
		t.Fatal(err)
	}
	off := true
	no := false
	specs := map[string]*v1alpha1.EtcdCluster{
		"tls":                      tlsCluster(nil),
		"tls without client certs": tlsCluster(func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client.ClientCertAuth = &no }),
		"client accepts plain":     tlsCluster(func(s *v1alpha1.EtcdClusterSpec) { s.TLS.Client.AcceptPlain = off }),
		"plain":                    tlsCluster(func(s *v1alpha1.EtcdClusterSpec) { s.TLS = nil }),
	}
	live := &charts.TLSSideValues{SecretName: "etcd-server-tls", ClientCertAuth: &off}
	for name, c := range specs {
		for _, client := range []v1alpha1.ClientTLSMode{"", v1alpha1.ClientTLSPlain, v1alpha1.ClientTLSBoth, v1alpha1.ClientTLSOnly} {
			for _, peer := range []*values.PeerPhase{nil,
				{Main: "http", Transition: "https", AdvertiseTransition: true, LiveSecret: "etcd-peer-tls"},
				{Main: "https", Transition: "https", LiveSecret: "etcd-peer-tls"},
				{Main: "https", Transition: "http", AdvertiseTransition: true, LiveSecret: "etcd-peer-tls"},
				{Main: "http", Transition: "http", LiveSecret: "etcd-peer-tls"},
			} {
				p := values.Phase{Client: client, LiveClient: live, Peer: peer}
				if _, err := render.DesiredAt(r, c, values.DefaultOperator(), memory.Of(c), p); err != nil {
					t.Errorf("%s, client %q, peer %+v: %v", name, client, peer, err)
				}
			}
		}
	}
}
