package render

import "github.com/etcd-pilot/etcd-pilot/internal/chartcontract"

// withTLSOf returns k asking of the etcd container's flags the TLS the chart values ask for,
// as the embedded chart reads them (tls.client.enabled, clientCertAuth unless false,
// acceptPlain, crlSecretName; tls.peer.enabled, the transition listener's scheme, pinPeers). The values, not the
// spec, decide: during a switch between plain and TLS (values.Phase) they say what this pass
// renders. A custom chart or a patch that renders less than they ask is refused.
func withTLSOf(k chartcontract.Contract, vals map[string]any) chartcontract.Contract {
	tls, _ := vals["tls"].(map[string]any)
	client, _ := tls["client"].(map[string]any)
	peer, _ := tls["peer"].(map[string]any)
	if truthy(client["enabled"]) {
		k.ClientCertAuth = client["clientCertAuth"] != false
		k.ClientTLSOnly = !truthy(client["acceptPlain"])
		k.ClientCRL = truthy(client["crlSecretName"])
	}
	transition, _ := peer["transition"].(string)
	k.PeerCertAuth = truthy(peer["enabled"]) || transition == "https"
	k.PeerTLSOnly = truthy(peer["enabled"]) && transition == ""
	k.PeersPinned = k.PeerCertAuth && truthy(peer["pinPeers"])
	return k
}

// truthy is a chart value as a template's if reads it, for the booleans of the tls block.
func truthy(v any) bool {
	switch v := v.(type) {
	case bool:
		return v
	case string:
		return v != ""
	}
	return v != nil
}
