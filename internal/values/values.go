// Package values computes the etcd-cluster chart's values from an EtcdCluster. It is pure: no
// I/O, the same object always gives the same values.
package values

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/versions"
)

// DefaultReplicas and DefaultStorageSize mirror the CRD's defaults, for objects that did not
// pass through the API server (etcd-pilot render -f).
const (
	DefaultReplicas    = 3
	DefaultStorageSize = "1Gi"
)

// VersionError is a spec.version the running cluster cannot move to.
type VersionError struct{ Err error }

func (e *VersionError) Error() string { return e.Err.Error() }
func (e *VersionError) Unwrap() error { return e.Err }

// Operator is what a render needs to know of the operator: where it runs, so that a
// cluster's NetworkPolicy lets its pods reach the members (the operator fills it from its own
// environment; it reaches the values only when spec.networkPolicy is enabled), and the Pod
// Security level the cluster admin holds every render to (never the values: a tenant cannot
// change it).
type Operator struct {
	// Namespace the operator's pods run in. Empty: the policy names no operator pods (an
	// operator that runs outside the cluster, whose traffic no pod selector matches).
	Namespace string
	// PodLabels select the operator's pods in Namespace; empty selects every pod there.
	PodLabels map[string]string
	// PodSecurity is the level every pod of a render, after its patches, and every pod the
	// operator creates must meet (--pod-security-level); empty is restricted.
	PodSecurity podsecurity.Level
	// DefaultExtraSANs are further DNS names or IP addresses the member certificates of
	// every cluster under secure defaults carry besides spec.tls.extraSANs (see Effective),
	// for example 127.0.0.1 where members reach each other through the loopback address.
	// The admin sets them (--default-extra-sans).
	DefaultExtraSANs []string
	// AllowClusterIssuers lets spec.tls name cluster-scoped cert-manager issuers
	// (--allow-cluster-issuers): the admin's choice, since such an issuer signs for every
	// namespace.
	AllowClusterIssuers bool
}

// DefaultOperatorNamespace and DefaultOperatorPodLabels are where config/default deploys the
// operator (config/manager/manager.yaml; a test keeps them in step).
const (
	DefaultOperatorNamespace = "etcd-pilot-system"
	DefaultOperatorPodLabels = "app.kubernetes.io/name=etcd-pilot"
)

// DefaultOperator is the operator as config/default deploys it: what `etcd-pilot render`
// assumes unless told otherwise, and what the golden tests use.
func DefaultOperator() Operator {
	return Operator{Namespace: DefaultOperatorNamespace, PodLabels: map[string]string{"app.kubernetes.io/name": "etcd-pilot"}}
}

// LabelComponent is the app.kubernetes.io/component label.
const LabelComponent = "app.kubernetes.io/component"

// BackupPodLabels are labels of the pods the operator runs in the cluster's namespace that
// connect to the members' client port (backups onto a volume claim). The NetworkPolicy admits
// pods that carry them, so every such pod must.
func BackupPodLabels(cluster string) map[string]string {
	return map[string]string{v1alpha1.LabelCluster: cluster, LabelComponent: "backup"}
}

// Typed returns the values the spec determines, before spec.chart.values is merged; the etcd
// version is the next step towards spec.version from the versions in status (see
// internal/versions), and op is where the operator runs (used by the NetworkPolicy only). It
// fails for a spec the API server would refuse today but may have stored before a rule existed
// (an owned or unknown etcd flag), and with a *VersionError for a version below the cluster
// version etcd reports.
//
// Typed takes the memory the object's status records (memory.Of): for a caller outside a pass
// (etcd-pilot render, tests). A pass loads its memory once and calls TypedAt.
func Typed(c *v1alpha1.EtcdCluster, op Operator) (charts.Values, error) {
	return TypedAt(c, op, memory.Of(c), Phase{})
}

// Phase is what a pass renders where a switch between plain and TLS is under way, instead of
// what the spec asks (internal/plan/tlsswitch decides it from the pods and etcd). The zero
// Phase renders the spec.
type Phase struct {
	// Client is what the client port serves; "" is the spec's target (ClientTarget).
	Client v1alpha1.ClientTLSMode
	// LiveClient is the client side's Secret and clientCertAuth as the live pod template has
	// them, for a phase that still serves TLS after tls.client was removed from the spec.
	LiveClient *charts.TLSSideValues
	// Peer is what the peer listeners serve (internal/plan/peerswitch); nil is the spec's
	// target.
	Peer *PeerPhase
}

// PeerPhase is the peer side's phase during a switch between plain and TLS.
type PeerPhase struct {
	// Main and Transition are the schemes ("http", "https") of the peer port and of the
	// transition port ("" for no transition listener).
	Main, Transition string
	// AdvertiseTransition makes members started now advertise the transition listener.
	AdvertiseTransition bool
	// LiveSecret is the peer Secret the live pod template mounts, for a phase that still
	// serves TLS after tls.peer was removed from the spec.
	LiveSecret string
}

// ClientTarget is what the spec asks the client port to serve.
func ClientTarget(c *v1alpha1.EtcdCluster) v1alpha1.ClientTLSMode {
	switch {
	case c.Spec.TLS == nil || c.Spec.TLS.Client == nil:
		return v1alpha1.ClientTLSPlain
	case c.Spec.TLS.Client.AcceptPlain:
		return v1alpha1.ClientTLSBoth
	}
	return v1alpha1.ClientTLSOnly
}

// TypedAt is Typed with what the pass remembers (m: the versions etcd reported, the trust
// bundle's generation) given, rendering the phase p. It reads nothing of c.Status.
func TypedAt(c *v1alpha1.EtcdCluster, op Operator, m memory.Memory, p Phase) (charts.Values, error) {
	s := c.Spec
	v := charts.Values{
		Replicas:          DefaultReplicas,
		ManagedBy:         v1alpha1.ManagedByValue,
		CommonLabels:      map[string]string{v1alpha1.LabelCluster: c.Name},
		Resources:         s.Resources,
		NodeSelector:      s.NodeSelector,
		Tolerations:       s.Tolerations,
		Affinity:          s.Affinity,
		PriorityClassName: s.PriorityClassName,
		PodLabels:         s.PodLabels,
		PodAnnotations:    s.PodAnnotations,

		TopologySpreadConstraints: s.TopologySpreadConstraints,
	}
	if s.Replicas != nil {
		v.Replicas = *s.Replicas
	}
	v.Operator.MembershipConfigMap = MembershipConfigMapName(c.Name)
	v.Image.Repository = s.Image
	target := s.Version
	if target == "" {
		target = v1alpha1.DefaultVersion
	}
	// The members run the next step towards the target: the target itself, or an intermediate
	// release when it is more than one minor ahead of what etcd reported (memory).
	running := m.Running
	if err := versions.Check(target, running); err != nil {
		return charts.Values{}, &VersionError{Err: err}
	}
	v.Etcd.Version, _ = versions.Step(target, running)
	// The token is unique to this object, so a volume left over from an earlier cluster of the
	// same name can never join this one.
	if c.UID != "" {
		v.Etcd.ClusterToken = ClusterToken(c)
	}

	v.Storage.Size = DefaultStorageSize
	// The claims carry the cluster label the operator finds them by; nothing that can change
	// later (see the chart's storage.claimLabels).
	v.Storage.ClaimLabels = map[string]string{v1alpha1.LabelCluster: c.Name}
	if s.Storage.Size != nil {
		v.Storage.Size = s.Storage.Size.String()
	}
	if s.Storage.StorageClassName != nil {
		v.Storage.StorageClassName = *s.Storage.StorageClassName
	}
	v.Storage.Ephemeral = s.Storage.Ephemeral != nil && *s.Storage.Ephemeral

	e := s.Etcd
	if e.QuotaBackendBytes != nil {
		v.Etcd.QuotaBackendBytes = e.QuotaBackendBytes.Value()
	}
	if e.AutoCompactionRetention != "" {
		v.Etcd.AutoCompactionRetention = e.AutoCompactionRetention
		v.Etcd.AutoCompactionMode = string(e.AutoCompactionMode)
		if v.Etcd.AutoCompactionMode == "" {
			v.Etcd.AutoCompactionMode = string(v1alpha1.AutoCompactionPeriodic)
		}
	}
	if e.HeartbeatIntervalMillis != nil {
		v.Etcd.HeartbeatInterval = *e.HeartbeatIntervalMillis
	}
	if e.ElectionTimeoutMillis != nil {
		v.Etcd.ElectionTimeout = *e.ElectionTimeoutMillis
	}
	if e.SnapshotCount != nil {
		v.Etcd.SnapshotCount = *e.SnapshotCount
	}
	if err := checkSpec(s); err != nil {
		return charts.Values{}, err
	}
	if err := checkExtraArgs(e.ExtraArgs); err != nil {
		return charts.Values{}, err
	}
	if len(e.ExtraArgs) > 0 {
		v.Etcd.ExtraArgs = make(map[string]string, len(e.ExtraArgs))
		for k, val := range e.ExtraArgs {
			v.Etcd.ExtraArgs[k] = string(val)
		}
	}
	tv, err := tlsValues(c, p, m)
	if err != nil {
		return charts.Values{}, err
	}
	v.TLS = tv
	v.NetworkPolicy = networkPolicyValues(c, op)
	if (m.TrustGeneration > 0 || m.PeerTrustGeneration > 0) && v.TLS != nil {
		// The members read the CA bundles at start only: a new bundle generation changes the
		// pod template, so the rollout restarts them onto it one at a time. Each CA has its
		// own annotation (a sum could stand still while one rises and the other falls).
		ann := make(map[string]string, len(v.PodAnnotations)+2)
		for k, val := range v.PodAnnotations {
			ann[k] = val
		}
		if g := m.TrustGeneration; g > 0 {
			ann[v1alpha1.AnnotationTrustGeneration] = fmt.Sprint(g)
		}
		if g := m.PeerTrustGeneration; g > 0 {
			ann[v1alpha1.AnnotationPeerTrustGeneration] = fmt.Sprint(g)
		}
		v.PodAnnotations = ann
	}
	return v, nil
}

// tlsValues turns spec.tls into the chart's tls block: the Secrets mounted into the members
// are those named after the cluster (the operator writes them for the Operator source,
// cert-manager for CertManager) or the user's (Secret source). The client side serves what
// phase p says.
func tlsValues(c *v1alpha1.EtcdCluster, p Phase, m memory.Memory) (*charts.TLSValues, error) {
	t := c.Spec.TLS
	out := &charts.TLSValues{}
	if t != nil && t.Peer != nil {
		out.Peer.Enabled = true
		out.Peer.SecretName = v1alpha1.PeerTLSSecretName(c.Name)
		if t.Peer.Source == v1alpha1.TLSSourceSecret {
			out.Peer.SecretName = t.Peer.SecretName
		}
	}
	if pp := p.Peer; pp != nil {
		out.Peer.Enabled = pp.Main == "https"
		out.Peer.Transition, out.Peer.AdvertiseTransition = pp.Transition, pp.AdvertiseTransition && pp.Transition != ""
		if pp.Main == "https" || pp.Transition == "https" {
			switch {
			case out.Peer.SecretName != "":
			case pp.LiveSecret != "":
				out.Peer.SecretName = pp.LiveSecret
			default:
				return nil, fmt.Errorf("the members still serve TLS on the peer side, and neither spec.tls.peer nor the pod template names its Secret: put tls.peer back until the switch to plain has passed its first restart round")
			}
		} else {
			out.Peer.SecretName = ""
		}
	}
	if out.Peer.Enabled && t != nil && t.Peer != nil {
		out.Peer.PinPeers = PinPeers(c, m)
	}
	mode := p.Client
	if mode == "" {
		mode = ClientTarget(c)
	}
	if mode != v1alpha1.ClientTLSPlain {
		switch {
		case t != nil && t.Client != nil:
			cl := t.Client
			out.Client.SecretName = v1alpha1.ServerTLSSecretName(c.Name)
			if cl.Source == v1alpha1.TLSSourceSecret {
				out.Client.SecretName = cl.SecretName
			}
			auth := cl.ClientCertAuth == nil || *cl.ClientCertAuth
			out.Client.ClientCertAuth = &auth
			operator := cl.Source == "" || cl.Source == v1alpha1.TLSSourceOperator
			if operator && (len(cl.Certificates) > 0 || m.ClientRevocationList) {
				// Application certificates the operator keeps can be revoked: the members
				// read the list from the first one on, and keep reading it (its Secret is
				// written before the StatefulSet in the same pass).
				out.Client.CRLSecretName = v1alpha1.ClientCRLSecretName(c.Name)
			}
		case p.LiveClient != nil && p.LiveClient.SecretName != "":
			out.Client.SecretName, out.Client.ClientCertAuth = p.LiveClient.SecretName, p.LiveClient.ClientCertAuth
		default:
			return nil, fmt.Errorf("the members still serve TLS on the client port, and neither spec.tls.client nor the pod template names its Secret: put tls.client back with acceptPlain: true")
		}
		out.Client.Enabled = true
		out.Client.AcceptPlain = mode == v1alpha1.ClientTLSBoth
	}
	if !out.Peer.Enabled && !out.Client.Enabled && out.Peer.Transition == "" {
		return nil, nil
	}
	return out, nil
}

// PinPeers reports whether the peer port takes only certificates valid for the members' own
// names (spec.tls.peer.pinPeers). Unset, it does where the peer certificates are the
// operator's or cert-manager's (they name every member) and either the cluster was created
// under secure defaults, or the operator issues application certificates from the cluster's
// CA (spec.tls.client.certificates, or a revocation list kept from them, m): those must not
// speak raft, and the revocation list guards the client port only. Other clusters created
// before secure defaults keep their flags (no restart) unless they ask.
func PinPeers(c *v1alpha1.EtcdCluster, m memory.Memory) bool {
	t := c.Spec.TLS
	if t == nil || t.Peer == nil {
		return false
	}
	if p := t.Peer.PinPeers; p != nil {
		return *p
	}
	if t.Peer.Source == v1alpha1.TLSSourceSecret {
		return false
	}
	apps := (t.Client != nil && len(t.Client.Certificates) > 0) || m.ClientRevocationList
	return SecureDefaults(c) || apps
}

// networkPolicyValues turns spec.networkPolicy into the chart's networkPolicy block, with the
// operator's pods and its backup pods added; nil (the chart's default: no policy) unless it is
// enabled.
func networkPolicyValues(c *v1alpha1.EtcdCluster, op Operator) *charts.NetworkPolicyValues {
	np := c.Spec.NetworkPolicy
	if np == nil || np.Enabled == nil || !*np.Enabled {
		return nil
	}
	return &charts.NetworkPolicyValues{
		Enabled:               true,
		AllowedClients:        peers(np.AllowedClients),
		AllowedMetricsClients: peers(np.AllowedMetricsClients),
		RestrictEgress:        np.RestrictEgress,
		Operator: &charts.NetworkPolicyOperatorValues{
			Namespace: op.Namespace, PodLabels: op.PodLabels, AgentPodLabels: BackupPodLabels(c.Name),
		},
	}
}

func peers(in []v1alpha1.NetworkPolicyPeer) []networkingv1.NetworkPolicyPeer {
	var out []networkingv1.NetworkPolicyPeer
	for _, p := range in {
		q := networkingv1.NetworkPolicyPeer{NamespaceSelector: selector(p.NamespaceSelector), PodSelector: selector(p.PodSelector)}
		if b := p.IPBlock; b != nil {
			q.IPBlock = &networkingv1.IPBlock{CIDR: b.CIDR, Except: b.Except}
		}
		out = append(out, q)
	}
	return out
}

func selector(in *v1alpha1.LabelSelector) *metav1.LabelSelector {
	if in == nil {
		return nil
	}
	out := &metav1.LabelSelector{MatchLabels: in.MatchLabels}
	for _, r := range in.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, metav1.LabelSelectorRequirement{
			Key: r.Key, Operator: metav1.LabelSelectorOperator(r.Operator), Values: r.Values})
	}
	return out
}

// ClusterToken is the --initial-cluster-token of c's members, from its UID (which c must
// have): unique to this object, so a volume of an earlier cluster of the name never joins.
func ClusterToken(c *v1alpha1.EtcdCluster) string { return fmt.Sprintf("%s-%s", c.Name, c.UID) }

// MembershipConfigMapName is the ConfigMap through which the operator tells joining members
// the initial cluster and its state.
func MembershipConfigMapName(cluster string) string { return cluster + "-membership" }

// Compute returns the chart values for c and an operator running as op: Typed, with spec.chart.values merged over it (maps
// merge key by key, anything else replaces, null deletes, as in Helm). It fails when
// spec.chart.values sets a key of v1alpha1.GuardedChartValues, as admission does, for objects
// stored before the rule existed. The inventory label and the managed-by value are put back
// after the merge: pruning depends on them.
//
// Compute takes the memory the object's status records, like Typed.
func Compute(c *v1alpha1.EtcdCluster, op Operator) (map[string]any, error) {
	return ComputeAt(c, op, memory.Of(c), Phase{})
}

// ComputeAt is Compute with the pass's memory m, rendering the phase p.
func ComputeAt(c *v1alpha1.EtcdCluster, op Operator, m memory.Memory, p Phase) (map[string]any, error) {
	t, err := TypedAt(c, op, m, p)
	if err != nil {
		return nil, err
	}
	out, err := toMap(t)
	if err != nil {
		return nil, err
	}
	if v := c.Spec.Chart.Values; v != nil && len(v.Raw) > 0 {
		var overrides map[string]any
		if err := json.Unmarshal(v.Raw, &overrides); err != nil {
			return nil, fmt.Errorf("spec.chart.values must be an object of chart values: %w", err)
		}
		if err := checkGuarded(overrides); err != nil {
			return nil, err
		}
		if err := checkChartValueStrings(overrides); err != nil {
			return nil, err
		}
		out = Merge(out, overrides)
	}
	labels, _ := out["commonLabels"].(map[string]any)
	if labels == nil {
		labels = map[string]any{}
	}
	labels[v1alpha1.LabelCluster] = c.Name
	out["commonLabels"] = labels
	if st, ok := out["storage"].(map[string]any); ok {
		claim, _ := st["claimLabels"].(map[string]any)
		if claim == nil {
			claim = map[string]any{}
		}
		claim[v1alpha1.LabelCluster] = c.Name
		st["claimLabels"] = claim
	}
	out["managedBy"] = v1alpha1.ManagedByValue
	return out, nil
}

// Merge returns base with over merged into it: nested maps merge, other values replace, and a
// nil value in over deletes the key. Neither argument is changed.
func Merge(base, over map[string]any) map[string]any {
	out := make(map[string]any, len(base)+len(over))
	for k, v := range base {
		out[k] = v
	}
	for k, v := range over {
		if v == nil {
			delete(out, k)
			continue
		}
		bm, bok := out[k].(map[string]any)
		om, ook := v.(map[string]any)
		if bok && ook {
			out[k] = Merge(bm, om)
			continue
		}
		out[k] = v
	}
	return out
}

func toMap(v charts.Values) (map[string]any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("failed to encode chart values: %w", err)
	}
	out := map[string]any{}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, fmt.Errorf("failed to decode chart values: %w", err)
	}
	return out, nil
}

var (
	imageWithTag     = regexp.MustCompile(`^.*(@|:[^/]*$)`)
	imageRepository  = regexp.MustCompile(v1alpha1.ImageRepositoryPattern)
	dnsSubdomain     = regexp.MustCompile(v1alpha1.DNSSubdomainPattern)
	etcdFlagValue    = regexp.MustCompile(v1alpha1.EtcdFlagValuePattern)
	releaseVersion   = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)
	supportedMinor   = regexp.MustCompile(`^3\.(5|6|7)\.`)
	revisionCount    = regexp.MustCompile(`^[0-9]+$`)
	periodicInterval = regexp.MustCompile(`^([0-9]+|([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+)$`)
	// checkedPatterns are the patterns of v1alpha1.CheckedChartValues, by path.
	checkedPatterns = func() map[string]*regexp.Regexp {
		out := map[string]*regexp.Regexp{}
		for _, c := range v1alpha1.CheckedChartValues {
			out[c.Path] = regexp.MustCompile(c.Pattern)
		}
		return out
	}()
)

// checkSpec refuses what the CRD's CEL rules on the spec's typed fields refuse (with their
// messages), for objects stored before a rule existed; api/v1alpha1's parity test keeps the
// two in step. Rules on parts the render does not read (TLS Secrets, backups, bootstrap,
// auth) are checked where those parts are used.
// clientCertificateName is the pattern of spec.tls.client.certificates[].name.
var clientCertificateName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

func checkSpec(s v1alpha1.EtcdClusterSpec) error {
	var msgs []string
	if imageWithTag.MatchString(s.Image) {
		msgs = append(msgs, "image is a repository without a tag or digest (for example registry.example/etcd); the tag comes from spec.version")
	}
	if s.Image != "" && !imageRepository.MatchString(s.Image) {
		msgs = append(msgs, v1alpha1.ImageRepositoryMessage)
	}
	if c := s.Storage.StorageClassName; c != nil && *c != "" && !dnsSubdomain.MatchString(*c) {
		msgs = append(msgs, v1alpha1.StorageClassNameMessage)
	}
	if s.PriorityClassName != "" && !dnsSubdomain.MatchString(s.PriorityClassName) {
		msgs = append(msgs, v1alpha1.PriorityClassNameMessage)
	}
	if releaseVersion.MatchString(s.Version) && !supportedMinor.MatchString(s.Version) {
		msgs = append(msgs, "etcd-pilot runs etcd 3.5, 3.6 and 3.7; pick a version of one of those minors (for example 3.6.16)")
	}
	if t := s.TLS; t != nil && t.Client != nil && len(t.Client.Certificates) > 0 {
		if t.Client.Source != "" && t.Client.Source != v1alpha1.TLSSourceOperator {
			msgs = append(msgs, "tls.client.certificates needs source Operator (the operator keeps the CA and the revocation list): with source CertManager ask your issuer for your clients' certificates (a Certificate naming it), with source Secret issue them yourself")
		}
		for _, a := range t.Client.Certificates {
			switch {
			case !clientCertificateName.MatchString(a.Name):
				msgs = append(msgs, fmt.Sprintf("tls.client.certificates[].name %q must be a DNS label of at most 40 characters (lowercase letters, digits and '-')", a.Name))
			case strings.HasPrefix(a.Name, "etcd-pilot"):
				msgs = append(msgs, "tls.client.certificates[].name may not start with etcd-pilot: that is the operator's own identity")
			}
		}
	}
	e := s.Etcd
	election, heartbeat := int64(1000), int64(100)
	if e.ElectionTimeoutMillis != nil {
		election = int64(*e.ElectionTimeoutMillis)
	}
	if e.HeartbeatIntervalMillis != nil {
		heartbeat = int64(*e.HeartbeatIntervalMillis)
	}
	if election < 5*heartbeat {
		msgs = append(msgs, "etcd.electionTimeoutMillis must be at least 5 times etcd.heartbeatIntervalMillis (etcd's defaults are 1000 and 100)")
	}
	if r := e.AutoCompactionRetention; r != "" {
		ok := periodicInterval.MatchString(r)
		if e.AutoCompactionMode == v1alpha1.AutoCompactionRevision {
			ok = revisionCount.MatchString(r)
		}
		if !ok {
			msgs = append(msgs, "etcd.autoCompactionRetention must be a revision count (for example 10000) with mode revision, or a duration (for example 30m or 1h) or a number of hours with mode periodic")
		}
	}
	if s.Storage.Ephemeral != nil && *s.Storage.Ephemeral && s.Storage.StorageClassName != nil {
		msgs = append(msgs, "storage.storageClassName has no effect with storage.ephemeral: true; remove one of them")
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// checkExtraArgs refuses what admission refuses, for objects stored before a rule existed:
// flags owned by etcd-pilot, flags with typed fields, unknown flags, and values that are not
// printable ASCII or too long (a line break in a value started a second flag).
func checkExtraArgs(args map[string]v1alpha1.EtcdFlagValue) error {
	var owned, typed, unknown, badValues []string
	for k, v := range args {
		switch {
		case len(v) > v1alpha1.EtcdFlagValueMaxLength:
			badValues = append(badValues, fmt.Sprintf("spec.etcd.extraArgs[%s]: may not be longer than %d characters", k, v1alpha1.EtcdFlagValueMaxLength))
		case !etcdFlagValue.MatchString(string(v)):
			badValues = append(badValues, fmt.Sprintf("spec.etcd.extraArgs[%s]: %s", k, v1alpha1.EtcdFlagValueMessage))
		}
		switch {
		case slices.Contains(v1alpha1.OwnedEtcdFlags, k):
			owned = append(owned, k)
		case slices.Contains(v1alpha1.TypedEtcdFlags, k):
			typed = append(typed, k)
		case !slices.Contains(v1alpha1.AllowedEtcdFlags, k):
			unknown = append(unknown, k)
		}
	}
	var msgs []string
	if len(owned) > 0 {
		sort.Strings(owned)
		msgs = append(msgs, "flags owned by etcd-pilot: "+strings.Join(owned, ", "))
	}
	if len(typed) > 0 {
		sort.Strings(typed)
		msgs = append(msgs, "flags with typed fields in spec.etcd: "+strings.Join(typed, ", "))
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		msgs = append(msgs, "unknown etcd flags: "+strings.Join(unknown, ", "))
	}
	sort.Strings(badValues)
	switch {
	case len(msgs) == 0 && len(badValues) == 0:
		return nil
	case len(msgs) == 0:
		return errors.New(strings.Join(badValues, "; "))
	}
	return fmt.Errorf("spec.etcd.extraArgs sets %s; remove them%s", strings.Join(msgs, "; "), strings.Join(append([]string{""}, badValues...), "; "))
}

// checkChartValueStrings holds the keys of v1alpha1.CheckedChartValues in overrides to their
// patterns, as admission does, for objects stored before the rules existed. A null is not
// checked: it deletes the key, and the chart's default applies.
func checkChartValueStrings(overrides map[string]any) error {
	var msgs []string
	for _, c := range v1alpha1.CheckedChartValues {
		v, ok := lookupPath(overrides, c.Path)
		if !ok || v == nil {
			continue
		}
		s, isString := v.(string)
		if !isString || len(s) > c.MaxLength || !checkedPatterns[c.Path].MatchString(s) {
			msgs = append(msgs, c.Message())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// lookupPath returns the value at a dotted path of nested maps.
func lookupPath(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, p := range strings.Split(path, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = mm[p]; !ok {
			return nil, false
		}
	}
	return cur, true
}

// checkGuarded refuses the keys of v1alpha1.GuardedChartValues in overrides, whatever their
// value: a null would delete the computed value. A parent of a guarded key (etcd, image,
// storage) that is not an object is refused too, since it would replace or delete every value
// below it; the API server drops a null parent and refuses any other non-object.
func checkGuarded(overrides map[string]any) error {
	var msgs []string
	badParent := map[string]bool{}
	for _, g := range v1alpha1.GuardedChartValues {
		parts := strings.Split(g.Path, ".")
		level := overrides
		for i, p := range parts[:len(parts)-1] {
			v, ok := level[p]
			if !ok {
				level = nil
				break
			}
			m, ok := v.(map[string]any)
			if !ok {
				path := strings.Join(parts[:i+1], ".")
				if !badParent[path] {
					badParent[path] = true
					verb := "replace"
					if v == nil {
						verb = "delete"
					}
					msgs = append(msgs, fmt.Sprintf("spec.chart.values.%s: must be an object: a %s would %s the values etcd-pilot computes there", path, jsonKind(v), verb))
				}
				level = nil
				break
			}
			level = m
		}
		if level == nil {
			continue
		}
		if _, ok := level[parts[len(parts)-1]]; ok {
			msgs = append(msgs, g.Message())
		}
	}
	if len(msgs) == 0 {
		return nil
	}
	return errors.New(strings.Join(msgs, "; "))
}

// jsonKind names the JSON type of a decoded value.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "boolean"
	case []any:
		return "list"
	}
	return "value"
}
