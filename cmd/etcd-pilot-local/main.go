// Command etcd-pilot-local runs a Kubernetes cluster on this machine with pods as local
// processes, and the etcd-pilot operator on it: the embedded default of `make demo` and the
// end-to-end harness. It is a binary of its own so that the operator binary and image do not
// link the local cluster. See README.md.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcd-pilot/etcd-pilot/internal/localcli"
)

func main() {
	os.Exit(localcli.Run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
