package manager

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Permission is one verb on one resource the operator needs.
type Permission struct {
	Group, Resource, Verb string
	// ClusterScoped resources (nodes, reviews) are checked cluster-wide; the others in the
	// watched namespace, or in all namespaces when none is watched.
	ClusterScoped bool
}

func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// CheckPermissions asks the API server (SelfSubjectAccessReview) for every permission in
// Required, as the identity of cfg, in namespace (all namespaces when empty). It fails with
// the list of what is missing: without it a watch the role does not allow never syncs, and the
// operator would hang instead of saying why.
func CheckPermissions(ctx context.Context, cfg *rest.Config, namespace string) error {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("failed to create a client: %w", err)
	}
	var missing []string
	for _, p := range Required {
		ns := namespace
		if p.ClusterScoped {
			ns = ""
		}
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: p.Verb, Group: p.Group, Resource: p.Resource}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("failed to check the operator's permissions: %w", err)
		}
		if !r.Status.Allowed {
			where := "in every namespace"
			switch {
			case p.ClusterScoped:
				where = "cluster-wide"
			case namespace != "":
				where = "in namespace " + namespace
			}
			missing = append(missing, p.String()+" "+where)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("the operator's role lacks %d permissions it needs: %s. Apply config/default (all namespaces) or config/namespaced (--watch-namespace), or grant them", len(missing), strings.Join(missing, "; "))
	}
	return nil
}
