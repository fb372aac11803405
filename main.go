// Command etcd-pilot is a Kubernetes operator for production etcd clusters. See README.md.
package main

import (
	"os"

	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/etcd-pilot/etcd-pilot/internal/cli"
)

func main() {
	os.Exit(cli.Run(ctrl.SetupSignalHandler(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
