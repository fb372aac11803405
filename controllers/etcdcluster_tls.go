package controllers

import (
	"context"
	"crypto/tls"
	"fmt"
	"maps"
	"slices"
	"strings"
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
	if len(render.OperatorCertificates(c, t, render.SeparatePeerCA)) > 0 {
		// Plan from the cache; before writing anything, read the Secrets again past it and
		// plan again, so no step acts on a Secret the cache has not caught up with (a CA
		// just rotated, or one the cache does not show). The layout of the CAs is decided
		// from the same reading as the plan.
		var wants []certificates.Want
		var observed map[string]certificates.Material
		var steps [][]certificates.Step
		for pass, rd := range []client.Reader{r.Client, r.apiReader()} {
			var err error
			if wants, err = r.operatorCertificates(ctx, rd, c, m, t); err != nil {
				return nil, err
			}
			var problem *certificates.Problem
			if observed, steps, problem, err = r.planCertificates(ctx, rd, c, t, wants, now); err != nil {
				return nil, err
			}
			if problem == nil && len(slices.Concat(steps...)) == 0 {
				break
			}
			if pass == 1 && problem != nil {
				return nil, &render.TLSError{Msg: problem.Error()}
			}
		}
		for i, ss := range steps {
			for _, s := range ss {
				if err := r.exec.Issue(ctx, c, wants[i], s, observed, now); err != nil {
					return nil, err
				}
			}
		}
		// The expiries of what was read, or written.
		var rotations []string
		kept := map[string]bool{}
		var clientCA *certificates.Material
		for _, w := range wants {
			_, exp, _ := certificates.Plan(w, observed, now)
			expiries = append(expiries, exp...)
			ca := observed[w.CASecret]
			// The members' pod template carries each CA's generation.
			if w.CASecret == v1alpha1.PeerCASecretName(c.Name) {
				c.Status.PeerTrustGeneration = ca.Generation
			} else {
				c.Status.TrustGeneration = ca.Generation
			}
			if r := certificates.Rotation(observed, w.CASecret); r != "" {
				if len(wants) > 1 {
					r = fmt.Sprintf("Secret %s: %s", w.CASecret, r)
				}
				rotations = append(rotations, r)
			}
			if w.CASecret == v1alpha1.CASecretName(c.Name) {
				clientCA = &ca
			}
			for _, l := range w.Leaves {
				if leaf, err := certs.Parse(observed[l.Secret].Cert); err == nil && l.Application == "" {
					kept[certs.Serial(leaf)] = true
				}
			}
		}
		operatorMaterial = observed
		c.Status.CARotation = strings.Join(rotations, "; ")
		// A CA no side uses now (a side left source Operator) keeps its generation while its
		// Secret exists: dropping it from the pod template would restart every member for
		// nothing. Only the peer side's certificates may be the operator's now: the
		// revocation list, if there is one, stays signed by the client side's CA.
		for _, name := range []string{v1alpha1.CASecretName(c.Name), v1alpha1.PeerCASecretName(c.Name)} {
			if slices.ContainsFunc(wants, func(w certificates.Want) bool { return w.CASecret == name }) {
				continue
			}
			ca, ok, err := observe.ReadTLSSecret(ctx, r.Client, c.Namespace, name)
			if err != nil {
				return nil, err
			}
			switch {
			case name == v1alpha1.PeerCASecretName(c.Name):
				c.Status.PeerTrustGeneration = 0
				if ok {
					c.Status.PeerTrustGeneration = ca.Generation
				}
			default:
				c.Status.TrustGeneration = 0
				if ok {
					c.Status.TrustGeneration, clientCA = ca.Generation, &ca
				}
			}
		}
		if clientCA != nil {
			listed, err := r.reconcileRevocations(ctx, c, certs.KeyPair{Cert: clientCA.Cert, Key: clientCA.Key}, kept, now)
			if err != nil {
				return nil, err
			}
			c.Status.ClientRevocationList = listed
		}
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
		want.Stale = crl.Stale(ca.Cert, now)
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

// operatorCertificates is what the Operator source asks for, one Want per CA (see
// render.OperatorCertificates), in the layout the cluster's members run with, decided from
// the CA and peer Secrets as rd shows them (see render.CALayoutOf), each marked Formed when
// the members run with its certificates.
func (r *EtcdClusterReconciler) operatorCertificates(ctx context.Context, rd client.Reader, c *v1alpha1.EtcdCluster, m memory.Memory, t render.Topology) ([]certificates.Want, error) {
	kc := r.cached(ctx)
	layout := render.SeparatePeerCA
	if p := c.Spec.TLS.Peer; p != nil && render.SourceOf(p.Source) == v1alpha1.TLSSourceOperator {
		_, peerCA, err := observe.ReadTLSSecret(ctx, rd, c.Namespace, v1alpha1.PeerCASecretName(c.Name))
		if err != nil {
			return nil, err
		}
		issuer, signs := "", ""
		if !peerCA {
			leaf, ok, err := observe.ReadTLSSecret(ctx, rd, c.Namespace, v1alpha1.PeerTLSSecretName(c.Name))
			if err != nil {
				return nil, err
			}
			if cert, err := certs.Parse(leaf.Cert); ok && err == nil {
				issuer = cert.Issuer.CommonName
			}
			ca, _, err := observe.ReadTLSSecret(ctx, rd, c.Namespace, v1alpha1.CASecretName(c.Name))
			if err != nil {
				return nil, err
			}
			signs = ca.Signs
		}
		mounted := false
		if !peerCA && issuer == "" && signs == "" {
			if mounted, err = observe.MembersMount(ctx, kc, c, t, observe.PeerTLSVolume); err != nil {
				return nil, err
			}
		}
		layout = render.CALayoutOf(c, peerCA, issuer, signs, mounted)
	}
	wants := render.OperatorCertificates(c, t, layout)
	for i := range wants {
		wants[i].RotationRequest = c.Annotations[v1alpha1.AnnotationRotateCA]
		// A formed cluster's members run with a CA's certificates once any of them (or the
		// pod template) mounts a Secret of its leaves; before that (TLS turned on on a live
		// plain cluster) the CA is created like for a new cluster.
		if !m.Formed() {
			continue
		}
		var volumes []string
		for _, l := range wants[i].Leaves {
			switch l.Secret {
			case v1alpha1.PeerTLSSecretName(c.Name):
				volumes = append(volumes, observe.PeerTLSVolume)
			case v1alpha1.ServerTLSSecretName(c.Name):
				volumes = append(volumes, observe.ClientTLSVolume)
			}
		}
		var err error
		if wants[i].Formed, err = observe.MembersMount(ctx, kc, c, t, volumes...); err != nil {
			return nil, err
		}
	}
	return wants, nil
}

// planCertificates reads the Secrets of wants through rd and plans each CA's steps (see
// certificates.Plan), holding back a CA's drop while another rotates (HoldDrops). It fills
// in what each plan reads of the members: the trust generation they run with, and, only
// when a plan needs it, the certificates they serve.
func (r *EtcdClusterReconciler) planCertificates(ctx context.Context, rd client.Reader, c *v1alpha1.EtcdCluster, t render.Topology, wants []certificates.Want, now time.Time) (map[string]certificates.Material, [][]certificates.Step, *certificates.Problem, error) {
	observed := map[string]certificates.Material{}
	for _, w := range wants {
		o, err := observe.ReadAll(ctx, rd, c.Namespace, w)
		if err != nil {
			return nil, nil, nil, err
		}
		maps.Copy(observed, o)
	}
	// The operator's certificate keeps the name it has: only the authentication planner
	// moves it (after etcd reported the new user as root), by issuing it.
	current := ""
	if leaf, err := certs.Parse(observed[v1alpha1.OperatorTLSSecretName(c.Name)].Cert); err == nil {
		current = leaf.Subject.CommonName
	}
	for i := range wants {
		render.KeepOperatorCommonName(c, wants[i].Leaves, current, observed[v1alpha1.CASecretName(c.Name)].OperatorUser)
	}
	var revoked map[string]bool
	if crl, err := observe.ReadCRL(ctx, rd, c); err == nil {
		// A list that cannot be read is reported by the revocations.
		revoked = map[string]bool{}
		for _, e := range crl.Entries {
			revoked[e.Serial] = true
		}
	}
	rotating := false
	cas := make([]certificates.Material, len(wants))
	for i, w := range wants {
		cas[i] = observed[w.CASecret]
		rotating = rotating || certificates.Rotating(cas[i])
	}
	var members observe.Generations
	agree := false
	if rotating {
		var err error
		if members, agree, err = observe.MembersGeneration(ctx, r.cached(ctx), c, t); err != nil {
			return nil, nil, nil, err
		}
	}
	steps := make([][]certificates.Step, len(wants))
	var problem *certificates.Problem
	for i := range wants {
		w := &wants[i]
		w.Revoked = revoked
		// The generation of this CA every member runs with, -1 when they differ.
		w.MembersOnGeneration = -1
		if agree {
			w.MembersOnGeneration = members[w.CASecret]
		}
		w.ServedByCurrentCA = false
		if certificates.AsksServedByCurrentCA(*w, cas[i]) {
			// The handshakes, read only when the plan needs them.
			w.ServedByCurrentCA = observe.ServedByCurrentCA(ctx, c, t, *w, observed)
		}
		var p *certificates.Problem
		steps[i], _, p = certificates.Plan(*w, observed, now)
		if problem == nil {
			problem = p
		}
	}
	return observed, certificates.HoldDrops(steps, cas), problem, nil
}
