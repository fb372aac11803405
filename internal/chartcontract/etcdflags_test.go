package chartcontract

import (
	"fmt"
	"strings"
	"testing"
)

// baseArgs are the arguments the embedded chart renders for a TLS cluster.
var baseArgs = []string{
	"--name=$(POD_NAME)", "--data-dir=" + DataDir,
	"--listen-peer-urls=https://$(POD_IP):2380", "--listen-client-urls=https://$(POD_IP):2379",
	"--listen-metrics-urls=http://$(POD_IP):2381",
	"--advertise-client-urls=https://$(POD_NAME).etcd.ns.svc.cluster.local:2379",
	"--initial-advertise-peer-urls=https://$(POD_NAME).etcd.ns.svc.cluster.local:2380",
	"--peer-cert-file=/etc/etcd/tls/peer/tls.crt", "--peer-key-file=/etc/etcd/tls/peer/tls.key",
	"--peer-trusted-ca-file=/etc/etcd/tls/peer/ca.crt", "--peer-client-cert-auth=true",
	"--cert-file=/etc/etcd/tls/client/tls.crt", "--key-file=/etc/etcd/tls/client/tls.key",
	"--trusted-ca-file=/etc/etcd/tls/client/ca.crt", "--client-cert-auth=true",
	"--initial-cluster-token=etcd-uid",
}

// tlsAsked is a contract that asks for TLS on both sides with client certificates.
var tlsAsked = Contract{ClientCertAuth: true, ClientTLSOnly: true, PeerCertAuth: true, PeerTLSOnly: true}

func flagRefusals(cmd, args []string, c Contract) []string {
	var got []string
	checkEtcdFlags(cmd, args, c, "StatefulSet etcd", func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
	return got
}

func with(extra ...string) []string { return append(append([]string{}, baseArgs...), extra...) }

// replaced is baseArgs with the argument that starts with prefix replaced by arg.
func replaced(prefix, arg string) []string {
	out := with()
	for i, a := range out {
		if strings.HasPrefix(a, prefix) {
			out[i] = arg
		}
	}
	return out
}

func TestEtcdFlagChecks(t *testing.T) {
	n := len(baseArgs)
	at := func(i int) string { return fmt.Sprintf("args[%d]", i) }
	for _, tc := range []struct {
		name     string
		cmd      []string // nil: /usr/local/bin/etcd
		args     []string
		contract Contract
		want     []string // each must be in one refusal; none: accepted
	}{
		{name: "the chart's own TLS arguments", args: with(), contract: tlsAsked},
		{name: "extra flags etcd-pilot allows", args: with("--log-level=debug", "--enable-pprof", `--log-rotation-config-json={"maxsize": 100}`, "--strict-reconfig-check=true"), contract: tlsAsked},
		{name: "a newline in a value", args: with("--log-level=info\n            - --client-cert-auth=false"), contract: tlsAsked,
			want: []string{at(n) + " holds a control character or line break ('\\n'"}},
		{name: "a NUL", args: with("--log-level=info\x00"), want: []string{at(n) + " holds a control character"}},
		{name: "a YAML line separator", args: with("--log-level=info\u2028--unsafe-no-fsync"), want: []string{at(n) + " holds a control character or line break ('\\u2028'"}},
		{name: "a control character in the command", cmd: []string{"/usr/local/bin/etcd\r"}, args: with(), want: []string{"command[0] holds a control character"}},
		{name: "etcd by its name alone", cmd: []string{"etcd"}, args: with()},
		{name: "flags in the command too", cmd: []string{"/usr/local/bin/etcd", "--log-level=info"}, args: with()},
		{name: "a word that is no flag after etcd", cmd: []string{"/usr/local/bin/etcd", "x"}, args: with(), want: []string{"command must be the etcd binary"}},
		{name: "a shell as the command", cmd: []string{"/bin/sh", "-c", "etcd --force-new-cluster"}, args: with(), want: []string{"command must be the etcd binary"}},
		{name: "no command: the image's entrypoint", cmd: []string{}, args: with(), want: []string{"command must be the etcd binary"}},
		{name: "another binary named like a path to etcd", cmd: []string{"/usr/local/bin/etcd-wrapper"}, args: with(), want: []string{"command must be the etcd binary"}},
		{name: "single-dash unsafe-no-fsync", args: with("-unsafe-no-fsync"), want: []string{"may not set --unsafe-no-fsync (" + at(n) + "): etcd would acknowledge writes"}},
		{name: "force-new-cluster even when false", args: with("--force-new-cluster=false"), want: []string{"may not set --force-new-cluster"}},
		{name: "auto TLS on both sides", args: with("--auto-tls", "-peer-auto-tls=true"), want: []string{"may not set --auto-tls", "may not set --peer-auto-tls"}},
		{name: "a config file", args: with("--config-file=/etc/etcd/etcd.yaml"), want: []string{"may not set --config-file"}},
		{name: "the v2 API", args: with("--enable-v2=true", "--experimental-enable-v2v3=/v2"), want: []string{"may not set --enable-v2 ", "may not set --experimental-enable-v2v3"}},
		{name: "strict-reconfig-check off", args: with("--strict-reconfig-check=0"), want: []string{"may not set --strict-reconfig-check=0"}},
		{name: "a duplicate in the other dash form", args: with("-client-cert-auth=false"), contract: tlsAsked,
			want: []string{"sets --client-cert-auth twice (" + at(n-2) + " and " + at(n) + ")", "must set --client-cert-auth=true (it sets \"false\")"}},
		{name: "a duplicate of a flag etcd-pilot does not own", args: with("--log-level=info", "--log-level=debug"), want: []string{"sets --log-level twice"}},
		{name: "a flag in capitals", args: with("--Client-Cert-Auth=false"), want: []string{at(n) + ` "--Client-Cert-Auth=false" is not an etcd flag`}},
		{name: "three dashes", args: with("---force-new-cluster"), want: []string{`"---force-new-cluster" is not an etcd flag`}},
		{name: "client-cert-auth off when asked", args: replaced("--client-cert-auth=", "--client-cert-auth=false"), contract: tlsAsked,
			want: []string{"must set --client-cert-auth=true (it sets \"false\"): the values ask the client port for client certificates"}},
		{name: "client-cert-auth unreadable when asked", args: replaced("--client-cert-auth=", "--client-cert-auth=yes"), contract: tlsAsked,
			want: []string{"must set --client-cert-auth=true (it sets \"yes\")"}},
		{name: "client-cert-auth missing when asked", args: replaced("--client-cert-auth=", "--log-level=info"), contract: tlsAsked,
			want: []string{"must set --client-cert-auth=true (it does not set it)"}},
		{name: "client-cert-auth as 1", args: replaced("--client-cert-auth=", "--client-cert-auth=1"), contract: tlsAsked},
		{name: "client-cert-auth off when not asked", args: replaced("--client-cert-auth=", "--client-cert-auth=false"), contract: Contract{PeerCertAuth: true}},
		{name: "peer-client-cert-auth off when peer TLS is asked", args: replaced("--peer-client-cert-auth=", "-peer-client-cert-auth=false"), contract: tlsAsked,
			want: []string{"must set --peer-client-cert-auth=true (it sets \"false\"): the values ask for TLS between the members"}},
		{name: "a plain client listener beside TLS", args: replaced("--listen-client-urls=", "--listen-client-urls=https://$(POD_IP):2379,http://$(POD_IP):2379"), contract: tlsAsked,
			want: []string{`--listen-client-urls listens on "http://$(POD_IP):2379" without TLS`}},
		{name: "a plain client listener beside TLS while plain is accepted", args: replaced("--listen-client-urls=", "--listen-client-urls=https://$(POD_IP):2379,http://$(POD_IP):2379"),
			contract: Contract{ClientCertAuth: true, PeerCertAuth: true, PeerTLSOnly: true}},
		{name: "a plain HTTP listener", args: with("--listen-client-http-urls=http://$(POD_IP):2390"), contract: tlsAsked,
			want: []string{`--listen-client-http-urls listens on "http://$(POD_IP):2390" without TLS`}},
		{name: "a TLS unix socket", args: with("--listen-client-http-urls=unixs://localhost:0"), contract: tlsAsked},
		// The kubelet expands $(NAME) from the container's environment before etcd reads the
		// word: a patch could set X=--force-new-cluster in env and add $(X).
		{name: "a flag from an environment variable", args: with("$(X)"), want: []string{at(n) + ` "$(X)" refers to $(X)`}},
		{name: "a value from an environment variable", args: with("--log-level=$(LEVEL)"), want: []string{"refers to $(LEVEL)"}},
		{name: "an escaped reference is a literal", args: with("--log-level=$$(LEVEL)")},
		{name: "the revocation list asked for and left out", args: with(), contract: Contract{ClientCRL: true},
			want: []string{"must set --client-crl-file"}},
		{name: "the revocation list asked for and set", args: with("--client-crl-file=/etc/etcd/tls/crl/crl.der"), contract: Contract{ClientCRL: true}},
		{name: "pinned peers asked for and left out", args: with(), contract: Contract{PeersPinned: true},
			want: []string{"must set --peer-cert-allowed-hostname"}},
		{name: "pinned peers asked for and set", args: with("--peer-cert-allowed-hostname=etcd-0.etcd.ns.svc"), contract: Contract{PeersPinned: true}},
		{name: "a plain peer listener", args: replaced("--listen-peer-urls=", "--listen-peer-urls=http://$(POD_IP):2380"), contract: tlsAsked,
			want: []string{`--listen-peer-urls listens on "http://$(POD_IP):2380" without TLS`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := tc.cmd
			if cmd == nil {
				cmd = []string{"/usr/local/bin/etcd"}
			}
			got := flagRefusals(cmd, tc.args, tc.contract)
			if len(tc.want) == 0 && len(got) > 0 {
				t.Fatalf("refused: %q", got)
			}
			for _, w := range tc.want {
				found := false
				for _, g := range got {
					if strings.Contains(g, w) {
						found = true
					}
				}
				if !found {
					t.Errorf("no refusal says %q: %q", w, got)
				}
			}
		})
	}
}

// TestMembershipFlagsIncludeDiscovery: with the membership ConfigMap, a render may not form
// the cluster by discovery either.
func TestMembershipFlagsIncludeDiscovery(t *testing.T) {
	etcd := map[string]any{"command": []any{"/usr/local/bin/etcd"}, "args": toAny(with("--discovery-srv=example.com")), "envFrom": []any{map[string]any{"configMapRef": map[string]any{"name": "m"}}}}
	var got []string
	checkEtcdContainer(etcd, Contract{MembershipConfigMap: "m"}, "StatefulSet etcd", func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)) })
	if len(got) != 1 || !strings.Contains(got[0], "may not set --discovery-srv") {
		t.Fatalf("refusals %q, want one for --discovery-srv", got)
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}
