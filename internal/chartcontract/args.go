package chartcontract

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// EtcdArgs are the flags of a rendered etcd container as etcd reads them: the one parse of
// the rendered command line that every reader of it (the contract, the topology, the TLS and
// peer switches, the restore) shares.
//
// etcd reads its flags with Go's flag package: "-name" and "--name" are the same flag, a
// value follows "=" (a bare flag is a boolean set to true), and when a flag is given twice
// the last one wins. So does this parse.
type EtcdArgs struct {
	values map[string]string
	// names are the flags given, in order, repeats included.
	names []string
}

// ParseEtcdArgs parses a container's command and arguments (the command first, as the
// container runtime joins them). Words that are not flags (the binary's name) are skipped.
func ParseEtcdArgs(words ...[]string) EtcdArgs {
	a := EtcdArgs{values: map[string]string{}}
	for _, ws := range words {
		for _, w := range ws {
			name, value, ok := flagOf(w)
			if !ok {
				continue
			}
			a.values[name] = value
			a.names = append(a.names, name)
		}
	}
	return a
}

// flagOf reads one word of a command line as etcd's flag package does: "-name=value" and
// "--name=value" set flag name to value, a bare "-name" or "--name" is a boolean set to
// true. ok is false for a word that is not a flag (the binary's name, "-", "--").
func flagOf(w string) (name, value string, ok bool) {
	if !strings.HasPrefix(w, "-") || w == "-" || w == "--" {
		return "", "", false
	}
	name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(w, "-"), "-"), "=")
	if !hasValue {
		value = "true"
	}
	return name, value, true
}

// EtcdContainerArgs parses the etcd container of a pod spec; ok is false when it has none.
func EtcdContainerArgs(ps *corev1.PodSpec) (EtcdArgs, bool) {
	for _, ctr := range ps.Containers {
		if ctr.Name == "etcd" {
			return ParseEtcdArgs(ctr.Command, ctr.Args), true
		}
	}
	return EtcdArgs{values: map[string]string{}}, false
}

// Get is the value etcd takes for flag name (without dashes): the last one given.
func (a EtcdArgs) Get(name string) (string, bool) {
	v, ok := a.values[name]
	return v, ok
}

// URLs is a URL-list flag split at commas (nil when absent).
func (a EtcdArgs) URLs(name string) []string {
	v, ok := a.values[name]
	if !ok {
		return nil
	}
	return strings.Split(v, ",")
}

// Has reports whether flag name (without dashes) is given.
func (a EtcdArgs) Has(name string) bool {
	_, ok := a.values[name]
	return ok
}
