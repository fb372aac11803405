package controllers

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
)

// PodAddresses resolves the name of a member pod under its headless Service
// (<pod>.<service>.<namespace>.svc, with or without the cluster domain after it) to the pod's
// IP, read from r (the manager's cache, which holds the pods labeled as etcd-pilot's). A name of another form, a pod not
// found, of another subdomain or without an IP yet is left to the usual resolution.
//
// The operator dials members by name (TLS verifies the name), but the name's resolution lags
// a new pod: DNS caches answers (also "no such name") for seconds, and the local cluster's
// hosts file is read again by Go at most every 5 s. The pod's IP is in its status as soon as
// it has one, so a member started or re-created on a new address is seen at the next pass.
func PodAddresses(r client.Reader) etcd.Resolver {
	return func(ctx context.Context, host string) (string, bool) {
		parts := strings.Split(strings.TrimSuffix(host, "."), ".")
		if len(parts) < 4 || parts[3] != "svc" {
			return "", false
		}
		pod := &corev1.Pod{}
		if err := r.Get(ctx, types.NamespacedName{Namespace: parts[2], Name: parts[0]}, pod); err != nil {
			return "", false
		}
		if pod.Spec.Subdomain != parts[1] || pod.Status.PodIP == "" {
			return "", false
		}
		return pod.Status.PodIP, true
	}
}
