// Package certificates plans the certificates the operator keeps for a cluster whose TLS
// source is Operator: a CA in a Secret, and leaf certificates signed by it in Secrets the
// members mount (and one the operator presents). It is pure: the observed Secrets' contents
// and the time in, the Secrets to write out.
//
// Its steps write Secrets and nothing else. A member picks a renewed leaf up at its next TLS
// handshake (etcd reads the files each time); anything that restarts a member goes through
// the rollout planner and the safety gate.
package certificates

import (
	"crypto/x509"
	"fmt"
	"sort"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/certs"
)

// Reasons a step is taken, or a Secret cannot be used.
const (
	ReasonMissing       = "Missing"
	ReasonUnreadable    = "Unreadable"
	ReasonNotFromCA     = "NotSignedByCA"
	ReasonNamesChanged  = "NamesChanged"
	ReasonDue           = "DueForRenewal"
	ReasonBundleChanged = "TrustBundleChanged"
	ReasonRevoked       = "Revoked"
	ReasonUnmarked      = "SidesNotRecorded"
)

// Material is what a Secret holds, by key: tls.crt, tls.key and ca.crt. The CA Secret also
// holds, during a CA rotation, the next CA (next.crt, next.key), and in annotations the trust
// generation (raised each time the trust bundle changes in a way members must restart for)
// and the rotation request it last started.
type Material struct {
	Cert, Key, CA     []byte
	NextCert, NextKey []byte
	Generation        int64
	RotationRequest   string
	// Signs is which side a CA signs for when it signs for one only ("client" or "peer",
	// AnnotationCASigns); "" for a CA of both sides.
	Signs string
	// OperatorUser (on the client side's CA Secret) is the common name the operator's
	// certificate took when the operator moved to the cluster's own etcd user: kept when that
	// certificate's Secret is lost.
	OperatorUser string
	// Issued (an application certificate's Secret) lists the certificates issued into it
	// before the current one that have not expired, as "serial/unix expiry" joined by
	// commas.
	Issued string
	// ResourceVersion is the Secret's, for an optimistic write.
	ResourceVersion string
}

// Leaf is a leaf certificate the cluster needs, in the Secret named Secret.
type Leaf struct {
	Secret  string
	Request certs.Request
	// Application is the spec.tls.client.certificates entry the leaf is issued for ("" for
	// the members' and the operator's). Its Secret carries the entry's name in a label, and
	// the serial numbers renewals replaced (see ClientSecret), so that all can be revoked.
	Application string
}

// Want is what the cluster's spec asks for.
type Want struct {
	// CASecret holds the CA (tls.crt, tls.key) and the trust bundle (ca.crt).
	CASecret string
	// CACommonName names a new CA.
	CACommonName string
	// CAValidity is a new CA's lifetime.
	CAValidity time.Duration
	// CASigns is recorded on a new CA (Material.Signs).
	CASigns string
	Leaves  []Leaf
	// RenewBefore renews a leaf this long before it expires; 0 renews at two thirds of its
	// lifetime.
	RenewBefore time.Duration
	// RotationRequest asks for a CA rotation when it differs from the one the CA Secret
	// last started ("" asks for none). A CA two thirds through its lifetime is rotated too.
	RotationRequest string
	// MembersOnGeneration is the trust generation every member runs with (each was started
	// after its pod template carried it, and is ready), or -1 when they differ or one is not
	// ready.
	MembersOnGeneration int64
	// Formed is true once the cluster has formed with these certificates: a missing CA is
	// then never created anew, since the members trust the one they started with.
	Formed bool
	// Revoked are the serial numbers the revocation list carries: an application leaf whose
	// certificate is among them (its entry removed, then listed again before its Secret was
	// emptied) is issued again.
	Revoked map[string]bool
	// ServedByCurrentCA is whether every member serves, on its client and peer ports, a
	// certificate signed by the current CA (read in a handshake). The observer reads it only
	// when AsksServedByCurrentCA says the plan needs it (before the old CA is dropped); false
	// otherwise.
	ServedByCurrentCA bool
}

// AsksServedByCurrentCA reports whether Plan, given w and the CA Secret's material m, needs
// ServedByCurrentCA: a rotation has switched to the new CA and every member runs with the
// current trust generation, so only the handshake keeps the old CA in the bundle.
func AsksServedByCurrentCA(w Want, m Material) bool {
	return len(m.NextCert) == 0 && bundleSize(m.CA) > 1 && w.MembersOnGeneration == m.Generation
}

// Kind of a step.
type Kind string

const (
	// CreateCA: create the CA Secret (it is missing).
	CreateCA Kind = "CreateCA"
	// MarkCA: record on the CA Secret which side it signs for (Want.CASigns), on a CA created
	// before CAs recorded it: a lost peer CA is then reported, never replaced by this one.
	MarkCA Kind = "MarkCA"
	// IssueLeaf: sign Leaf with the CA and write it, with the CA's trust bundle, to its Secret.
	IssueLeaf Kind = "IssueLeaf"
	// StartCARotation: create the next CA and trust both (bundle old + new, generation + 1);
	// the members restart onto the new bundle, one at a time, through the rollout.
	StartCARotation Kind = "StartCARotation"
	// SwitchCA: sign with the next CA from now on (every member trusts it); the leaves are
	// issued again from it and picked up without restarts.
	SwitchCA Kind = "SwitchCA"
	// DropOldCA: trust the current CA only (generation + 1); the members restart again.
	DropOldCA Kind = "DropOldCA"
)

// Rotation phases, for status.
const (
	ReasonRotationRequested = "RotationRequested"
	ReasonCADue             = "CADueForRenewal"
	ReasonMembersTrustNext  = "MembersTrustTheNextCA"
	ReasonLeavesFromNext    = "EveryMemberServesTheNewCA"
)

// Step is one Secret to write.
type Step struct {
	Kind   Kind
	Secret string
	// Leaf is the certificate to issue (IssueLeaf).
	Leaf Leaf
	// Reason says why (one of the Reason constants).
	Reason string
}

// Problem is a Secret the planner cannot fix by itself.
type Problem struct {
	Secret string
	Reason string
	Detail string
}

func (p Problem) Error() string {
	return fmt.Sprintf("Secret %s: %s: %s", p.Secret, p.Reason, p.Detail)
}

// Expiry is when a certificate in a Secret expires, for status and metrics.
type Expiry struct {
	Secret   string
	NotAfter time.Time
	// RenewAt is when the operator renews it (the zero time for the CA, which is not renewed
	// automatically).
	RenewAt time.Time
}

// Plan returns the Secrets to write now, in order (the CA first), the expiry of every
// certificate that needs nothing, and a problem that blocks issuing (a CA Secret that exists
// but cannot be read: it is never replaced silently, since members trust it).
// observed holds the Secrets that exist, by name.
func Plan(w Want, observed map[string]Material, now time.Time) ([]Step, []Expiry, *Problem) {
	caMat, ok := observed[w.CASecret]
	if !ok && w.Formed {
		return nil, nil, &Problem{Secret: w.CASecret, Reason: ReasonMissing, Detail: "the members run with certificates this CA signed, and a new CA would make them refuse each other. Restore the Secret (from a backup of the namespace's Secrets); the operator does not create a new CA for a cluster that has formed"}
	}
	if !ok {
		// A new CA invalidates every leaf: issue them all after it.
		steps := []Step{{Kind: CreateCA, Secret: w.CASecret, Reason: ReasonMissing}}
		for _, l := range w.Leaves {
			steps = append(steps, Step{Kind: IssueLeaf, Secret: l.Secret, Leaf: l, Reason: ReasonMissing})
		}
		return steps, nil, nil
	}
	ca, err := certs.Parse(caMat.Cert)
	if err != nil || !ca.IsCA || len(caMat.Key) == 0 {
		detail := "it holds no CA certificate and key"
		if err != nil {
			detail = err.Error()
		}
		return nil, nil, &Problem{Secret: w.CASecret, Reason: ReasonUnreadable, Detail: detail + "; the members trust the CA it held, so the operator does not replace it: restore the Secret (from a backup of the namespace's Secrets)"}
	}
	bundle := caMat.CA
	if len(bundle) == 0 {
		bundle = caMat.Cert
	}
	expiries := []Expiry{{Secret: w.CASecret, NotAfter: ca.NotAfter}}
	var steps []Step
	if w.CASigns != "" && caMat.Signs == "" {
		steps = append(steps, Step{Kind: MarkCA, Secret: w.CASecret, Reason: ReasonUnmarked})
	}
	for _, l := range w.Leaves {
		reason, leaf := leafState(l, observed, caMat.Cert, bundle, w.RenewBefore, now)
		if reason == "" && l.Application != "" && w.Revoked[certs.Serial(leaf)] {
			reason = ReasonRevoked
		}
		if reason != "" {
			steps = append(steps, Step{Kind: IssueLeaf, Secret: l.Secret, Leaf: l, Reason: reason})
			continue
		}
		expiries = append(expiries, Expiry{Secret: l.Secret, NotAfter: leaf.NotAfter, RenewAt: RenewAt(leaf, w.RenewBefore)})
	}
	sort.Slice(expiries, func(i, j int) bool { return expiries[i].Secret < expiries[j].Secret })
	if len(steps) > 0 {
		// Leaves first: a rotation moves on only once every leaf matches the CA Secret.
		return steps, expiries, nil
	}
	if s, ok := rotationStep(w, caMat, ca, now); ok {
		return []Step{s}, expiries, nil
	}
	return nil, expiries, nil
}

// Rotation says where a CA rotation stands, for status: "" when none runs.
func Rotation(observed map[string]Material, caSecret string) string {
	m, ok := observed[caSecret]
	if !ok {
		return ""
	}
	switch n := bundleSize(m.CA); {
	case len(m.NextCert) > 0:
		return "the next CA is trusted next to the current one; members restart onto the new trust bundle, then the new CA signs"
	case n > 1:
		return "the new CA signs; once every member serves its certificates, the old CA is dropped and members restart once more"
	}
	return ""
}

func bundleSize(b []byte) int {
	all, err := certs.ParseAll(b)
	if err != nil {
		return 0
	}
	return len(all)
}

// rotationStep is the next step of a CA rotation, if one is due.
func rotationStep(w Want, m Material, ca *x509.Certificate, now time.Time) (Step, bool) {
	switch {
	case len(m.NextCert) > 0:
		if w.MembersOnGeneration == m.Generation {
			return Step{Kind: SwitchCA, Secret: w.CASecret, Reason: ReasonMembersTrustNext}, true
		}
	case bundleSize(m.CA) > 1:
		if AsksServedByCurrentCA(w, m) && w.ServedByCurrentCA {
			return Step{Kind: DropOldCA, Secret: w.CASecret, Reason: ReasonLeavesFromNext}, true
		}
	case w.RotationRequest != "" && w.RotationRequest != m.RotationRequest:
		return Step{Kind: StartCARotation, Secret: w.CASecret, Reason: ReasonRotationRequested}, true
	case certs.DueForRenewal(ca, now, 0):
		return Step{Kind: StartCARotation, Secret: w.CASecret, Reason: ReasonCADue}, true
	}
	return Step{}, false
}

// leafState returns why the leaf needs issuing ("" when it does not) and the parsed leaf.
func leafState(l Leaf, observed map[string]Material, signer, bundle []byte, renewBefore time.Duration, now time.Time) (string, *x509.Certificate) {
	m, ok := observed[l.Secret]
	if !ok {
		return ReasonMissing, nil
	}
	leaf, err := certs.Parse(m.Cert)
	if err != nil || len(m.Key) == 0 {
		return ReasonUnreadable, nil
	}
	// Signed by the CA that signs now: after a switch, leaves of the old CA are issued again.
	if err := certs.Verify(certs.KeyPair{Cert: m.Cert, Key: m.Key}, signer, l.Request.Server, l.Request.Client, now); err != nil {
		return ReasonNotFromCA, leaf
	}
	if !certs.Covers(leaf, l.Request) {
		return ReasonNamesChanged, leaf
	}
	if certs.DueForRenewal(leaf, now, renewBefore) {
		return ReasonDue, leaf
	}
	if !certs.SameBundle(m.CA, bundle) {
		return ReasonBundleChanged, leaf
	}
	return "", leaf
}

// RenewAt is when a leaf is due for renewal (see certs.DueForRenewal).
func RenewAt(c *x509.Certificate, renewBefore time.Duration) time.Time {
	if renewBefore > 0 {
		return c.NotAfter.Add(-renewBefore)
	}
	return c.NotBefore.Add(c.NotAfter.Sub(c.NotBefore) * 2 / 3)
}

// Rotating reports whether a CA rotation is under way in the CA Secret's material.
func Rotating(m Material) bool {
	if len(m.NextCert) > 0 {
		return true
	}
	all, err := certs.ParseAll(m.CA)
	return err == nil && len(all) > 1
}

// HoldDrops keeps the CAs of one cluster rotating in step, so that their rotations cost the
// members as few restart rounds as they can: steps[i] are the steps Plan returned for the CA
// whose Secret's material is cas[i]. A CA's DropOldCA (a new trust generation, which the
// members restart for) is held while another CA rotates and drops nothing in the same pass:
// both drop together once both can, in one restart round. Starting a rotation is never held
// (an expiring CA must not wait), and switching costs no restart.
func HoldDrops(steps [][]Step, cas []Material) [][]Step {
	drops := make([]bool, len(steps))
	for i, ss := range steps {
		for _, s := range ss {
			drops[i] = drops[i] || s.Kind == DropOldCA
		}
	}
	out := make([][]Step, len(steps))
	for i, ss := range steps {
		held := false
		for j := range steps {
			held = held || (drops[i] && j != i && Rotating(cas[j]) && !drops[j])
		}
		if !held {
			out[i] = ss
		}
	}
	return out
}
