package certificates

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Application client certificates (spec.tls.client.certificates) are leaves like the
// members' (see Plan). What Plan does not do is take one back: a certificate removed from the
// spec is revoked (source Operator: its serial numbers go into the revocation list the members
// read on every TLS connection, --client-crl-file) and only then is its Secret deleted, so a
// copy of it stops working as soon as the kubelet has refreshed the members' Secret volume.

// Revoked is a certificate in the revocation list.
type Revoked struct {
	// Serial is the certificate's serial number in hexadecimal.
	Serial string `json:"serial"`
	// NotAfter is when it expires: past it, the list need not carry it.
	NotAfter time.Time `json:"notAfter"`
	// Name is the spec entry it was issued for, for humans.
	Name string `json:"name,omitempty"`
}

// ClientSecret is the Secret of an application client certificate the operator keeps, as
// observed, with every certificate issued into it that has not expired: the current one and
// those renewals replaced.
type ClientSecret struct {
	Secret string
	Name   string
	Issued []Revoked
}

// RevocationWant is what the spec asks of the revocation list.
type RevocationWant struct {
	// CRLSecret holds the list.
	CRLSecret string
	// Asked is true when the spec lists certificates (the members then read the list).
	Asked bool
	// Wanted are the Secrets of the certificates the spec lists.
	Wanted map[string]bool
	// Kept are the serial numbers of the certificates the members and the operator use now:
	// never revoked, whatever a Secret labelled as an application's holds (a copy of the
	// operator's certificate in one would otherwise lock the operator out).
	Kept map[string]bool
	// Stale is true when the list that exists must be signed again though its entries stand:
	// its next update is near, or the CA that signs now did not sign it (a CA rotation).
	// etcd reads only the serial numbers; other readers check both.
	Stale bool
}

// RevocationKind is a kind of revocation step.
type RevocationKind string

const (
	// WriteCRL writes the revocation list with Entries (creating it when missing).
	WriteCRL RevocationKind = "WriteRevocationList"
	// RetireClientSecret empties the Secret of a certificate the spec no longer lists, once
	// the list carries its serial numbers: its key and certificate go, and so does its label,
	// so it is no application's any more. The operator may not delete Secrets (its role has
	// no delete on them); the Secret goes with the cluster, or when you delete it.
	RetireClientSecret RevocationKind = "RetireClientCertificate"
)

// RevocationStep is one write of the revocation plan.
type RevocationStep struct {
	Kind    RevocationKind
	Secret  string
	Entries []Revoked
	// Reason says why, for the event.
	Reason string
}

// KeepsList reports whether the operator keeps a revocation list: the spec lists
// certificates, a list exists, or a certificate is left to revoke. (The planner runs where the
// operator keeps the CA: a certificate it issued is revoked even when the client side has
// left source Operator or TLS since, so that it is refused if the CA is trusted again.)
func KeepsList(w RevocationWant, listExists bool, secrets []ClientSecret) bool {
	if w.Asked || listExists {
		return true
	}
	for _, s := range secrets {
		if !w.Wanted[s.Secret] {
			return true
		}
	}
	return false
}

// PlanRevocations returns the writes, in order: the list first (created, or with the serials
// of removed certificates added and expired ones dropped), then the Secrets of removed
// certificates are emptied. list is the list's entries (listExists false when its Secret is missing).
func PlanRevocations(w RevocationWant, list []Revoked, listExists bool, secrets []ClientSecret, now time.Time) []RevocationStep {
	keeps := KeepsList(w, listExists, secrets)
	entries := make([]Revoked, 0, len(list))
	have := map[string]bool{}
	changed := keeps && !listExists
	reason := "created"
	if keeps && listExists && w.Stale {
		changed, reason = true, "signed again (its next update is near, or another CA signs now)"
	}
	for _, e := range list {
		if !e.NotAfter.After(now) {
			changed, reason = true, "expired certificates dropped"
			continue
		}
		entries = append(entries, e)
		have[e.Serial] = true
	}
	var deletes []RevocationStep
	sorted := append([]ClientSecret(nil), secrets...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Secret < sorted[j].Secret })
	for _, s := range sorted {
		if w.Wanted[s.Secret] {
			continue
		}
		for _, c := range s.Issued {
			if have[c.Serial] || !c.NotAfter.After(now) || w.Kept[c.Serial] {
				continue
			}
			entries = append(entries, Revoked{Serial: c.Serial, NotAfter: c.NotAfter, Name: s.Name})
			have[c.Serial] = true
			changed, reason = true, "certificate "+s.Name+" revoked"
		}
		deletes = append(deletes, RevocationStep{Kind: RetireClientSecret, Secret: s.Secret,
			Reason: "removed from spec.tls.client.certificates; its serial numbers are in the revocation list"})
	}
	var steps []RevocationStep
	if changed {
		sort.Slice(entries, func(i, j int) bool { return entries[i].Serial < entries[j].Serial })
		steps = append(steps, RevocationStep{Kind: WriteCRL, Secret: w.CRLSecret, Entries: entries, Reason: reason})
	}
	return append(steps, deletes...)
}

// ParseIssued reads an application certificate Secret's list of earlier certificates (see
// Material.Issued); entries it cannot read are skipped.
func ParseIssued(s string) []Revoked {
	var out []Revoked
	for _, part := range strings.Split(s, ",") {
		serial, exp, ok := strings.Cut(strings.TrimSpace(part), "/")
		if !ok || serial == "" {
			continue
		}
		unix, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			continue
		}
		out = append(out, Revoked{Serial: serial, NotAfter: time.Unix(unix, 0).UTC()})
	}
	return out
}

// FormatIssued writes the list ParseIssued reads, without the entries expired at now.
func FormatIssued(issued []Revoked, now time.Time) string {
	var parts []string
	for _, r := range issued {
		if r.NotAfter.After(now) {
			parts = append(parts, fmt.Sprintf("%s/%d", r.Serial, r.NotAfter.Unix()))
		}
	}
	return strings.Join(parts, ",")
}
