package charts_test

import (
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// The operator's outbound policy is the administrator's: the chart passes its flags only
// when set (the defaults keep config/manager's args, which TestOperatorChartDeploymentIsConfigs
// holds it to).
func TestOperatorChartOutboundPolicy(t *testing.T) {
	args := managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"outbound": map[string]any{
		"allowedEndpoints": []any{"10.0.0.0/8", "*.s3.example.com"}, "allowInsecureEndpoints": true,
	}}).objects, "pilot")).Args
	for _, want := range []string{"--allowed-endpoints=10.0.0.0/8,*.s3.example.com", "--allow-insecure-endpoints"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	for _, a := range managerContainer(t, typedDeployment(t, mustRenderOperatorChart(t, "pilot", "ops", nil).objects, "pilot")).Args {
		if strings.HasPrefix(a, "--allowed-endpoints") || strings.HasPrefix(a, "--allow-insecure-endpoints") {
			t.Errorf("the defaults pass %s", a)
		}
	}
}

// TestOperatorChartNetworkPolicy: off by default; on, it selects the operator's pods and lets
// them reach DNS, the API server's addresses, the members' ports (in the release's namespace
// only, namespaced) and the administrator's extra rules, nothing else.
func TestOperatorChartNetworkPolicy(t *testing.T) {
	for _, o := range mustRenderOperatorChart(t, "pilot", "ops", nil).objects {
		if o.GetKind() == "NetworkPolicy" {
			t.Fatalf("the defaults render NetworkPolicy %s", o.GetName())
		}
	}
	c := loadOperatorChart(t)
	if _, err := renderOperatorChart(c, "pilot", "ops", map[string]any{"networkPolicy": map[string]any{"enabled": true}}); err == nil || !strings.Contains(err.Error(), "networkPolicy.apiServer.cidrs") {
		t.Errorf("enabled without the API server's addresses: %v, want an error naming networkPolicy.apiServer.cidrs", err)
	}
	extra := map[string]any{"to": []any{map[string]any{"ipBlock": map[string]any{"cidr": "10.20.0.0/16"}}}, "ports": []any{map[string]any{"port": 9000}}}
	for _, namespaced := range []bool{false, true} {
		objs := mustRenderOperatorChart(t, "pilot", "ops", map[string]any{"namespaced": namespaced, "networkPolicy": map[string]any{
			"enabled": true, "apiServer": map[string]any{"cidrs": []any{"172.18.0.2/32"}, "ports": []any{6443}}, "extraEgress": []any{extra},
		}}).objects
		np := &networkingv1.NetworkPolicy{}
		toTyped(t, find(t, objs, "NetworkPolicy", "pilot"), np)
		d := typedDeployment(t, objs, "pilot")
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			t.Fatalf("the NetworkPolicy selects %v, the operator's pods have %v", np.Spec.PodSelector, d.Spec.Template.Labels)
		}
		if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(np.Spec.Egress) != 4 {
			t.Fatalf("policy types %v, %d egress rules, want Egress and 4: %+v", np.Spec.PolicyTypes, len(np.Spec.Egress), np.Spec.Egress)
		}
		dns, api, members, admin := np.Spec.Egress[0], np.Spec.Egress[1], np.Spec.Egress[2], np.Spec.Egress[3]
		if len(dns.Ports) != 2 || dns.Ports[0].Port.IntValue() != 53 || dns.To[0].PodSelector.MatchLabels["k8s-app"] != "kube-dns" {
			t.Errorf("DNS rule %+v", dns)
		}
		if len(api.To) != 1 || api.To[0].IPBlock == nil || api.To[0].IPBlock.CIDR != "172.18.0.2/32" || len(api.Ports) != 1 || api.Ports[0].Port.IntValue() != 6443 {
			t.Errorf("API server rule %+v", api)
		}
		var ports []int
		for _, p := range members.Ports {
			ports = append(ports, p.Port.IntValue())
		}
		ns := members.To[0].NamespaceSelector
		if !slices.Equal(ports, []int{2379, 2380, 2382}) || members.To[0].PodSelector.MatchLabels["app.kubernetes.io/managed-by"] != "etcd-pilot" || ns == nil ||
			(namespaced && ns.MatchLabels["kubernetes.io/metadata.name"] != "ops") || (!namespaced && (len(ns.MatchLabels) > 0 || len(ns.MatchExpressions) > 0)) {
			t.Errorf("namespaced=%v: members rule %+v (namespaces %+v)", namespaced, members, ns)
		}
		if admin.To[0].IPBlock == nil || admin.To[0].IPBlock.CIDR != "10.20.0.0/16" || admin.Ports[0].Port.IntValue() != 9000 {
			t.Errorf("extra rule %+v", admin)
		}
	}
	for name, vals := range map[string]map[string]any{
		"an allowed endpoint with a comma": {"outbound": map[string]any{"allowedEndpoints": []any{"a,b"}}},
		"an API server address, no range":  {"networkPolicy": map[string]any{"apiServer": map[string]any{"cidrs": []any{"10.0.0.1"}}}},
		"a misspelled key":                 {"networkPolicy": map[string]any{"enable": true}},
	} {
		if _, err := renderOperatorChart(c, "pilot", "ops", vals); err == nil {
			t.Errorf("%s: values %v render", name, vals)
		}
	}
}
