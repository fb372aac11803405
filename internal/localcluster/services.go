package localcluster

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// NameView is where the local cluster publishes names: the hosts file of its mount namespace.
// It is the node package's NameView.
type NameView interface {
	Set(owner, ip string, names ...string) error
	Remove(owner string) error
}

// serviceEntry is the hosts entry of one Service: its names resolve to one ready endpoint.
type serviceEntry struct {
	ip    string
	names []string
}

// serviceOwner is the owner of a Service's hosts entry.
func serviceOwner(namespace, name string) string { return "svc/" + namespace + "/" + name }

// serviceEntries computes the hosts entries of the Services that need one: every Service with
// a cluster IP and a selector (headless Services need none: their pods publish their own
// names) and at least one ready pod. Pods are read directly rather than through
// EndpointSlices: the API server refuses loopback addresses in EndpointSlices, and pod IPs
// here are loopback addresses. There is no proxy to balance connections, so a Service's names
// resolve to one pod: the one they resolved to before (current, by owner) while it stays
// ready, else the ready pod with the lowest IP, so the choice is stable and deterministic.
func serviceEntries(services []*corev1.Service, pods []*corev1.Pod, current map[string]string) map[string]serviceEntry {
	out := map[string]serviceEntry{}
	for _, svc := range services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || svc.Spec.Type == corev1.ServiceTypeExternalName || len(svc.Spec.Selector) == 0 {
			continue
		}
		sel := labels.SelectorFromSet(svc.Spec.Selector)
		ready := map[string]bool{}
		for _, p := range pods {
			if p.Namespace == svc.Namespace && sel.Matches(labels.Set(p.Labels)) && podReady(p) {
				ready[p.Status.PodIP] = true
			}
		}
		if len(ready) == 0 {
			continue
		}
		owner := serviceOwner(svc.Namespace, svc.Name)
		ip := current[owner]
		if !ready[ip] {
			ip = slices.SortedFunc(maps.Keys(ready), compareIPs)[0]
		}
		base := svc.Name + "." + svc.Namespace + ".svc"
		out[owner] = serviceEntry{ip: ip, names: []string{base, base + ".cluster.local"}}
	}
	return out
}

// podReady reports whether a pod serves: it has an IP, is not being deleted, and is Ready.
func podReady(p *corev1.Pod) bool {
	if p.Status.PodIP == "" || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// compareIPs orders IP addresses numerically (127.20.0.9 before 127.20.0.10).
func compareIPs(a, b string) int {
	x, errX := netip.ParseAddr(a)
	y, errY := netip.ParseAddr(b)
	if errX != nil || errY != nil {
		return strings.Compare(a, b)
	}
	return x.Compare(y)
}

// publishServices keeps a hosts entry for each Service with ready pods (see
// serviceEntries) until ctx ends, then removes the entries it made.
func publishServices(ctx context.Context, client kubernetes.Interface, names NameView, log logr.Logger) error {
	factory := informers.NewSharedInformerFactory(client, 10*time.Minute)
	svcInformer := factory.Core().V1().Services()
	podInformer := factory.Core().V1().Pods()
	changed := make(chan struct{}, 1)
	notify := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { poke(changed) },
		UpdateFunc: func(any, any) { poke(changed) },
		DeleteFunc: func(any) { poke(changed) },
	}
	for _, inf := range []cache.SharedIndexInformer{svcInformer.Informer(), podInformer.Informer()} {
		if _, err := inf.AddEventHandler(notify); err != nil {
			return fmt.Errorf("failed to watch Services: %w", err)
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), svcInformer.Informer().HasSynced, podInformer.Informer().HasSynced) {
		return ctx.Err()
	}

	current := map[string]string{} // owner -> ip
	defer func() {
		for owner := range current {
			_ = names.Remove(owner)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		}
		svcs, err := svcInformer.Lister().List(labels.Everything())
		if err != nil {
			return fmt.Errorf("failed to list Services: %w", err)
		}
		pods, err := podInformer.Lister().List(labels.Everything())
		if err != nil {
			return fmt.Errorf("failed to list pods: %w", err)
		}
		want := serviceEntries(svcs, pods, current)
		for owner := range current {
			if _, ok := want[owner]; !ok {
				if err := names.Remove(owner); err != nil {
					log.Error(err, "failed to remove a Service's names", "owner", owner)
					continue
				}
				delete(current, owner)
			}
		}
		for owner, e := range want {
			if current[owner] == e.ip {
				continue
			}
			if err := names.Set(owner, e.ip, e.names...); err != nil {
				log.Error(err, "failed to publish a Service's names", "owner", owner)
				continue
			}
			log.Info("published Service", "names", e.names, "ip", e.ip)
			current[owner] = e.ip
		}
	}
}

// poke signals ch without blocking; one pending signal stands for any number of changes.
func poke(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
