package chartcontract

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// The etcd container's final command line (after the chart, spec.chart.values and
// spec.chart.patches) is held here to what the operator's safety and the spec's security rest
// on, whatever field a flag came from: admission and internal/values check the spec's own
// fields, but a custom chart or a patch writes the arguments directly.

// unsafeFlags are etcd flags a render may not set at all, with why: each one loses data,
// drops the cluster's membership or its security, or takes the flags out of the operator's
// hands. --enable-pprof is not among them: it serves profiles to the clients the client port
// admits anyway, who can already read and write every key.
var unsafeFlags = map[string]string{
	"force-new-cluster":        "it restarts the member as a cluster of one, dropping every other member; the operator forms the cluster and adds members through the membership ConfigMap",
	"unsafe-no-fsync":          "etcd would acknowledge writes before they are on disk, so a crash or a power loss loses committed data",
	"auto-tls":                 "etcd would serve clients a self-signed certificate instead of the cluster's, and clients could not verify it",
	"peer-auto-tls":            "members would use and accept self-signed peer certificates, so anyone who reaches the peer port could speak raft with them",
	"config-file":              "etcd would read its configuration from that file and ignore every flag of the render, the operator's included",
	"enable-v2":                "the v2 API is not covered by etcd's v3 authentication (and is gone in etcd 3.6)",
	"experimental-enable-v2v3": "the v2 API is not covered by etcd's v3 authentication (and is gone in etcd 3.6)",
}

// falseIsUnsafe are boolean flags a render may not turn off, with why.
var falseIsUnsafe = map[string]string{
	"strict-reconfig-check": "etcd would accept membership changes that cost the cluster its quorum",
}

// flagName is how etcd's flags are spelled: lowercase words joined by '-'. Go's flag package
// is case-sensitive, so --Client-Cert-Auth is no flag of etcd's.
var flagName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)

// checkEtcdFlags checks every word of the etcd container's command and args: no control
// character or line break, flags spelled as etcd spells them, no flag twice (etcd takes the
// last, in either dash form, so a second one overrides the first silently), no unsafe flag;
// then the flags' values as etcd reads them against the TLS the contract asks for.
func checkEtcdFlags(cmd, args []string, c Contract, where string, add func(string, ...any)) {
	// The command is etcd itself, then flags (which are checked with the args): without one
	// the image's entrypoint runs, and a shell (sh -c "etcd ...") would run whatever its
	// string says, which no flag check sees.
	if len(cmd) == 0 || path.Base(cmd[0]) != "etcd" || slices.ContainsFunc(cmd[1:], func(w string) bool { return !strings.HasPrefix(w, "-") }) {
		add("%s: the etcd container's command must be the etcd binary (for example [/usr/local/bin/etcd]), followed by flags only; it is %q: anything else (a shell, or the image's entrypoint when it is absent) would run what no check of the flags sees", where, cmd)
	}
	first := map[string]string{}
	for _, part := range []struct {
		field string
		words []string
	}{{"command", cmd}, {"args", args}} {
		for i, w := range part.words {
			at := fmt.Sprintf("%s[%d]", part.field, i)
			if r, bad := controlRune(w); bad {
				add("%s: the etcd container's %s holds a control character or line break (%q in %q): each argument must be one flag on one line, and a line break in a value is how it smuggles in another flag", where, at, r, w)
				continue
			}
			if ref := unknownVarRef(w); ref != "" {
				add("%s: the etcd container's %s %q refers to %s: the kubelet replaces $(NAME) with an environment variable before etcd reads it, so a flag could come from there unseen; only $(POD_NAME), $(POD_IP) and $(POD_NAMESPACE) may be referred to", where, at, w, ref)
				continue
			}
			name, value, ok := flagOf(w)
			if !ok {
				continue
			}
			if !flagName.MatchString(name) {
				add("%s: the etcd container's %s %q is not an etcd flag: etcd's flags are lowercase words joined by '-', given as --name=value", where, at, w)
				continue
			}
			if prev, dup := first[name]; dup {
				add("%s: the etcd container sets --%s twice (%s and %s): etcd takes the last one, so the second overrides the first unseen; give each flag once", where, name, prev, at)
			} else {
				first[name] = at
			}
			if why, bad := unsafeFlags[name]; bad {
				add("%s: the etcd container may not set --%s (%s): %s", where, name, at, why)
			}
			if why, bad := falseIsUnsafe[name]; bad && isFalse(value) {
				add("%s: the etcd container may not set --%s=%s (%s): %s", where, name, value, at, why)
			}
		}
	}
	flags := ParseEtcdArgs(cmd, args)
	if c.ClientCertAuth {
		requireTrue(flags, "client-cert-auth", where, "the values ask the client port for client certificates (spec.tls.client with clientCertAuth), and etcd would accept clients without one", add)
	}
	if c.PeerCertAuth {
		requireTrue(flags, "peer-client-cert-auth", where, "the values ask for TLS between the members (spec.tls.peer), and etcd would accept peers without a certificate", add)
	}
	if c.ClientTLSOnly {
		for _, f := range []string{"listen-client-urls", "listen-client-http-urls"} {
			requireTLS(flags, f, where, "the values ask for a client port that serves TLS only (spec.tls.client without acceptPlain)", add)
		}
	}
	if c.PeerTLSOnly {
		requireTLS(flags, "listen-peer-urls", where, "the values ask for TLS between the members (spec.tls.peer) and no switch between plain and TLS runs", add)
	}
	if c.ClientCRL && flags.values["client-crl-file"] == "" {
		add("%s: the etcd container must set --client-crl-file: the values ask the members to refuse revoked client certificates (spec.tls.client.certificates), and without it every revoked certificate would be taken", where)
	}
	if c.PeersPinned && flags.values["peer-cert-allowed-hostname"] == "" && flags.values["peer-cert-allowed-cn"] == "" {
		add("%s: the etcd container must set --peer-cert-allowed-hostname: the values pin the peer port to the members' names (spec.tls.peer.pinPeers), and without it a client certificate of the same CA could speak raft", where)
	}
}

// controlRune returns the first control character or line break of w (YAML takes U+2028 and
// U+2029 as line breaks too).
func controlRune(w string) (rune, bool) {
	for _, r := range w {
		if unicode.IsControl(r) || r == '\u2028' || r == '\u2029' {
			return r, true
		}
	}
	return 0, false
}

// isFalse reports whether etcd reads a boolean flag's value as false; a value it cannot read
// as a boolean fails etcd's start, and counts as false here.
func isFalse(v string) bool {
	b, err := strconv.ParseBool(v)
	return err != nil || !b
}

// requireTrue adds a refusal unless the boolean flag name is set to true.
func requireTrue(flags EtcdArgs, name, where, why string, add func(string, ...any)) {
	v, ok := flags.Get(name)
	switch {
	case !ok:
		add("%s: the etcd container must set --%s=true (it does not set it): %s", where, name, why)
	case isFalse(v):
		add("%s: the etcd container must set --%s=true (it sets %q): %s", where, name, v, why)
	}
}

// requireTLS adds a refusal for each URL of the listener flag name that does not serve TLS.
func requireTLS(flags EtcdArgs, name, where, why string, add func(string, ...any)) {
	for _, raw := range flags.URLs(name) {
		// The scheme only: hosts such as $(POD_IP) or [$(POD_IP)] are no URL hosts to a parser.
		scheme, _, _ := strings.Cut(strings.TrimSpace(raw), "://")
		if scheme == "https" || scheme == "unixs" {
			continue
		}
		add("%s: the etcd container's --%s listens on %q without TLS: %s", where, name, raw, why)
	}
}

// varRef is a reference the kubelet expands in a container's command and args.
var varRef = regexp.MustCompile(`\$\(([^)]*)\)`)

// unknownVarRef returns the first $(NAME) in w other than the pod's own name, address and
// namespace (which the chart puts in flags' values), "" when there is none. $$(NAME) is a
// literal the kubelet leaves alone.
func unknownVarRef(w string) string {
	for _, m := range varRef.FindAllStringSubmatchIndex(w, -1) {
		if m[0] > 0 && w[m[0]-1] == '$' {
			continue
		}
		switch name := w[m[2]:m[3]]; name {
		case "POD_NAME", "POD_IP", "POD_NAMESPACE":
		default:
			return w[m[0]:m[1]]
		}
	}
	return ""
}
