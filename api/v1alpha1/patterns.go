package v1alpha1

import "strings"

// The spec's strings that reach the members' command line or an object's name are held to
// these patterns twice: at admission, by CEL rules written into the markers (which cannot
// refer to Go constants, so api/v1alpha1's tests compare each rule with its constant here),
// and again by internal/values, for objects stored before a rule existed. Both refuse with the
// same message. The patterns are RE2 (CEL's matches and Go's regexp agree on them) and hold no
// backslash, so they read the same in a marker, in the CRD and here.

// EtcdFlagValuePattern is what one value of spec.etcd.extraArgs may hold: printable ASCII,
// spaces included (JSON for log-rotation-config-json), and nothing else: no line break, tab,
// NUL or other control character. A line break was enough to turn one value into a second
// flag of the members' command line.
const EtcdFlagValuePattern = `^[ -~]*$`

// EtcdFlagValueMaxLength is the longest value of one spec.etcd.extraArgs flag.
const EtcdFlagValueMaxLength = 4096

// EtcdFlagValueMessage is the refusal of a value that does not match EtcdFlagValuePattern.
const EtcdFlagValueMessage = "an extraArgs value may hold printable ASCII characters only (letters, digits, spaces and punctuation; no line breaks, tabs, NULs or other control characters): etcd gets each entry as one --name=value argument"

// EtcdFlagValue is the value of one etcd flag of spec.etcd.extraArgs.
// +kubebuilder:validation:MaxLength=4096
// +kubebuilder:validation:XValidation:rule="self.matches('^[ -~]*$')",message="an extraArgs value may hold printable ASCII characters only (letters, digits, spaces and punctuation; no line breaks, tabs, NULs or other control characters): etcd gets each entry as one --name=value argument"
type EtcdFlagValue string

// DNSSubdomainPattern is a DNS subdomain as Kubernetes names most objects (RFC 1123):
// lowercase labels of letters, digits and '-', joined by '.'. Lengths are left to maxLength.
const DNSSubdomainPattern = `^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`

// ImageRepositoryPattern is an image repository without tag or digest: a registry host with
// an optional port, and a path. It keeps out whitespace, control characters, quotes and
// everything else no image reference holds; the rule beside it refuses a tag or digest.
const ImageRepositoryPattern = `^[A-Za-z0-9][A-Za-z0-9._/:-]*$`

// Messages of the rules on the spec's names.
const (
	ImageRepositoryMessage   = "image must be an image repository such as registry.example/etcd or registry.example:5000/mirror/etcd: letters, digits and the characters . _ - / : only"
	StorageClassNameMessage  = "storage.storageClassName must be the name of a StorageClass: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
	PriorityClassNameMessage = "priorityClassName must be the name of a PriorityClass: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"
)

// CheckedChartValue is a key of spec.chart.values that stays open (unlike a
// GuardedChartValue) but whose string reaches the members' command line or an object's
// name: etcd-pilot holds it to Pattern. `make manifests` declares each key in the CRD's
// schema of spec.chart.values with MaxLength and writes one CEL rule per key from this list
// (hack/chartvalues), and internal/values refuses the same values for objects stored before
// the rules existed. Both refuse with Message. An absent key (or, before storing, a null,
// which the API server drops) is not checked: the chart's default applies.
//
// +kubebuilder:object:generate=false
type CheckedChartValue struct {
	// Path is the key's dotted path below spec.chart.values, for example etcd.clusterDomain.
	Path string
	// Pattern is what the string must match (RE2, anchored, without backslashes).
	Pattern string
	// MaxLength is the longest string accepted.
	MaxLength int
	// Reason says what the value must be, and why.
	Reason string
}

// Message is the refusal, the same at admission and in the Degraded condition.
func (c CheckedChartValue) Message() string {
	return "spec.chart.values." + c.Path + ": " + c.Reason
}

// Rule is the CEL rule on spec.chart.values that holds the key to Pattern: has() of each
// parent first, since has() fails on a missing parent.
func (c CheckedChartValue) Rule() string {
	parts := strings.Split(c.Path, ".")
	var terms []string
	for i := range parts {
		terms = append(terms, "!has(self."+strings.Join(parts[:i+1], ".")+")")
	}
	return strings.Join(terms, " || ") + " || self." + c.Path + ".matches('" + c.Pattern + "')"
}

// dnsOrEmpty is DNSSubdomainPattern or the empty string (the chart's "none").
const dnsOrEmpty = `^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`

// CheckedChartValues are the open keys of spec.chart.values that etcd-pilot holds to a
// pattern, in the order refusals are reported.
var CheckedChartValues = []CheckedChartValue{
	{Path: "etcd.clusterDomain", Pattern: dnsOrEmpty, MaxLength: 253,
		Reason: "must be a DNS domain such as cluster.local (lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit), or empty: it becomes part of the members' DNS names in etcd's advertised URLs"},
	{Path: "serviceAccount.name", Pattern: dnsOrEmpty, MaxLength: 253,
		Reason: "must be the name of a ServiceAccount (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit), or empty for the chart's default"},
}
