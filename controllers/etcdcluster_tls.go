package controllers

import (
	"context"
	"crypto/tls"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/certs"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/observe"
	"github.com/etcd-pilot/etcd-pilot/internal/plan/certificates"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/status"
)

// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch;create;update;patch

// userSecretRecheck is how often Secrets the user provides are read again while they are
// missing or invalid (they carry no label, so the operator does not watch them).
const userSecretRecheck = 10 * time.Second

// reconcileTLS makes sure the certificates of spec.tls exist (issuing or renewing those the
// operator keeps, asking cert-manager for those of source CertManager), records their expiry
// in status, and returns the TLS configuration the operator dials the members' client port
// with (nil when the client port is plain).
func (r *EtcdClusterReconciler) reconcileTLS(ctx context.Context, c *v1alpha1.EtcdCluster, m memory.Memory, t render.Topology) (*tls.Config, error) {
	spec := c.Spec.TLS
	if spec == nil || (spec.Peer == nil && spec.Client == nil) {
		c.Status.Certificates = nil
		return nil, nil
	}
	now := time.Now()
	// Source CertManager first: it also deletes the Certificates of a side that moved to the
	// Operator source, before that source looks at their Secrets. Its Secrets are checked
	// like the user's; a TLSError there waits until the Operator source has had its pass.
	cmMaterial, cmExp, cmErr := r.reconcileCertManager(ctx, c, t, now)
	if cmErr != nil && !render.IsTLSError(cmErr) {
		return nil, cmErr
	}
	var expiries []certificates.Expiry
	var operatorMaterial map[string]certificates.Material
	if want, ok := render.OperatorCertificates(c, t); ok {
		want.RotationRequest = c.Annotations[v1alpha1.AnnotationRotateCA]
		// A formed cluster's members run with this CA's certificates once any of them (or the
		// pod template) mounts a TLS Secret; before that (TLS turned on on a live plain
		// cluster) the CA is created like for a new cluster.
		if m.Formed() {
			var err error
			if want.Formed, err = observe.MembersMountTLS(ctx, r.cached(ctx), c, t); err != nil {
				return nil, err
			}
		}
		// Plan from the cache; before writing anything, read the Secrets again past it and
		// plan again, so no step acts on a Secret the cache has not caught up with (a CA
		// just rotated, or one the cache does not show).
		var observed map[string]certificates.Material
		var steps []certificates.Step
		var exp []certificates.Expiry
		for pass, rd := range []client.Reader{r.Client, r.apiReader()} {
			var err error
			if observed, err = observe.ReadAll(ctx, rd, c.Namespace, want); err != nil {
				return nil, err
			}
			want.MembersOnGeneration = -1
			want.ServedByCurrentCA = false
			want.Revoked = nil
			if crl, err := observe.ReadCRL(ctx, rd, c); err == nil {
				// A list that cannot be read is reported by the revocations below.
				want.Revoked = map[string]bool{}
				for _, e := range crl.Entries {
					want.Revoked[e.Serial] = true
				}
			}
			if certificates.Rotating(observed[want.CASecret]) {
				g, err := observe.MembersGeneration(ctx, r.cached(ctx), c, t)
				if err != nil {
					return nil, err
				}
				want.MembersOnGeneration = g
				if certificates.AsksServedByCurrentCA(want, observed[want.CASecret]) {
					// The handshakes, read only when the plan needs them.
					want.ServedByCurrentCA = observe.ServedByCurrentCA(ctx, c, t, observed)
				}
			}
			var problem *certificates.Problem
			steps, exp, problem = certificates.Plan(want, observed, now)
			if problem == nil && len(steps) == 0 {
				break
			}
			if pass == 1 && problem != nil {
				return nil, &render.TLSError{Msg: problem.Error()}
			}
		}
		for _, s := range steps {
			if err := r.exec.Issue(ctx, c, want, s, observed, now); err != nil {
				return nil, err
			}
		}
		if len(steps) > 0 {
			// What was written, for the expiry in status.
			_, exp, _ = certificates.Plan(want, observed, now)
		}
		operatorMaterial = observed
		expiries = exp
		ca := observed[want.CASecret]
		c.Status.TrustGeneration = ca.Generation
		c.Status.CARotation = certificates.Rotation(observed, want.CASecret)
		kept := map[string]bool{}
		for _, l := range want.Leaves {
			if leaf, err := certs.Parse(observed[l.Secret].Cert); err == nil && l.Application == "" {
				kept[certs.Serial(leaf)] = true
			}
		}
		listed, err := r.reconcileRevocations(ctx, c, certs.KeyPair{Cert: ca.Cert, Key: ca.Key}, kept, now)
		if err != nil {
			return nil, err
		}
		c.Status.ClientRevocationList = listed
	}
	if cmErr != nil {
		return nil, cmErr
	}
	if len(cmMaterial) > 0 {
		if operatorMaterial == nil {
			operatorMaterial = map[string]certificates.Material{}
		}
		for k, m := range cmMaterial {
			operatorMaterial[k] = m
		}
		expiries = append(expiries, cmExp...)
	}
	if spec.Client == nil {
		c.Status.Certificates = status.Certificates(expiries)
		return nil, nil
	}
	cfg, exp, err := observe.ClientTLSConfig(ctx, r.Client, r.apiReader(), c, now, operatorMaterial)
	if err != nil {
		return nil, err
	}
	expiries = append(expiries, exp...)
	c.Status.Certificates = status.Certificates(expiries)
	return cfg, nil
}

// reconcileRevocations revokes the application client certificates the spec no longer lists
// (their serial numbers into the revocation list, then their Secrets emptied) and keeps the
// list, signed by ca, once the spec has listed any. kept are the serial numbers of the
// members' and the operator's certificates, which are never revoked. It reports whether the
// list exists. It plans from the cache, and before writing reads past it and plans again.
func (r *EtcdClusterReconciler) reconcileRevocations(ctx context.Context, c *v1alpha1.EtcdCluster, ca certs.KeyPair, kept map[string]bool, now time.Time) (bool, error) {
	want := render.Revocations(c)
	want.Kept = kept
	for pass, rd := range []client.Reader{r.Client, r.apiReader()} {
		crl, err := observe.ReadCRL(ctx, rd, c)
		if err != nil {
			return false, err
		}
		secrets, err := observe.ReadClientSecrets(ctx, rd, c, now)
		if err != nil {
			return false, err
		}
		steps := certificates.PlanRevocations(want, crl.Entries, crl.Exists(), secrets, now)
		if len(steps) == 0 {
			return crl.Exists(), nil
		}
		if pass == 0 {
			continue
		}
		for _, s := range steps {
			if err := r.exec.Revoke(ctx, c, ca, crl, s, now); err != nil {
				return false, err
			}
		}
		return certificates.KeepsList(want, crl.Exists(), secrets), nil
	}
	return false, nil
}
