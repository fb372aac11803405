package localcluster

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestServiceEntries(t *testing.T) {
	sel := map[string]string{"app": "etcd"}
	svc := func(name, clusterIP string, selector map[string]string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Spec: corev1.ServiceSpec{ClusterIP: clusterIP, Selector: selector}}
	}
	pod := func(ns, name, ip string, ready bool, labels map[string]string) *corev1.Pod {
		status := corev1.ConditionFalse
		if ready {
			status = corev1.ConditionTrue
		}
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
			Status:     corev1.PodStatus{PodIP: ip, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}},
		}
	}
	deleting := pod("ns", "d", "127.20.0.1", true, sel)
	deleting.DeletionTimestamp = &metav1.Time{Time: time.Now()}

	services := []*corev1.Service{
		svc("client", "10.96.0.10", sel),
		svc("peers", corev1.ClusterIPNone, sel),                  // headless: pods publish their own names
		svc("none", "10.96.0.11", map[string]string{"app": "x"}), // no pod
		svc("manual", "10.96.0.12", nil),                         // no selector
		svc("sticky", "10.96.0.13", sel),                         // keeps its current pod while ready
	}
	pods := []*corev1.Pod{
		pod("ns", "a", "127.20.0.10", true, sel),
		pod("ns", "b", "127.20.0.9", true, sel), // lowest ready IP, numerically
		pod("ns", "c", "127.20.0.2", false, sel),
		pod("ns", "e", "", true, sel),
		pod("other", "f", "127.20.0.3", true, sel),
		deleting,
	}
	current := map[string]string{"svc/ns/sticky": "127.20.0.10", "svc/ns/client": "127.20.0.2"}
	got := serviceEntries(services, pods, current)
	want := map[string]serviceEntry{
		"svc/ns/client": {ip: "127.20.0.9", names: []string{"client.ns.svc", "client.ns.svc.cluster.local"}},
		"svc/ns/sticky": {ip: "127.20.0.10", names: []string{"sticky.ns.svc", "sticky.ns.svc.cluster.local"}},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("serviceEntries:\n got %v\nwant %v", got, want)
	}
}
