package egress

import (
	"flag"
	"strings"
)

// The flags of the policy, on `etcd-pilot manager` and on the commands the operator starts in
// pods (restore-prepare), which it passes the same values (Policy.Args).
const (
	FlagAllowedEndpoints = "allowed-endpoints"
	FlagAllowInsecure    = "allow-insecure-endpoints"
)

// Flags are the policy's flags, bound to a flag set.
type Flags struct {
	allowed  listFlag
	insecure bool
}

// Bind adds --allowed-endpoints and --allow-insecure-endpoints to fs.
func (f *Flags) Bind(fs *flag.FlagSet) {
	fs.Var(&f.allowed, FlagAllowedEndpoints, "where S3 endpoints, OCI chart registries and chart schema URLs that tenants write may be reached: address ranges (10.0.0.0/8), addresses, host names and *.domain, comma-separated or repeated. Empty: any host but loopback, link-local and cloud metadata addresses. A listed range also opens those (127.0.0.0/8 for a local registry); a listed name does not")
	fs.BoolVar(&f.insecure, FlagAllowInsecure, false, "allow plain HTTP to S3 endpoints and OCI registries (http:// endpoints, spec.chart.source.oci.plainHTTP); refused by default")
}

// Policy returns the policy the flags say.
func (f *Flags) Policy() (*Policy, error) {
	return New(Config{Allowed: f.allowed, AllowInsecure: f.insecure})
}

// listFlag is a repeatable, comma-separated list.
type listFlag []string

func (l *listFlag) String() string { return strings.Join(*l, ",") }

func (l *listFlag) Set(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*l = append(*l, s)
		}
	}
	return nil
}
