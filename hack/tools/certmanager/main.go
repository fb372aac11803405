// Command certmanager-controllers runs cert-manager's own controllers, from the published
// github.com/cert-manager/cert-manager module, against a kubeconfig, in one process: the
// Issuer and ClusterIssuer controllers (CA and self-signed issuers), the CertificateRequest
// approver and signers (CA, self-signed) and the Certificate controllers (trigger,
// keymanager, requestmanager, issuing, readiness, revisionmanager).
//
// cert-manager's controller binary lives in a nested module (cmd/controller) that is not
// published; this is the part of its wiring (cmd/controller/app) that builds one
// controller.ContextFactory, constructs the registered controllers from it and starts the
// shared informers, without leader election, metrics server, ACME, Vault, Venafi, the
// certificate shims or CertificateSigningRequests. The end-to-end tests run it next to the
// local cluster; it is not part of the operator.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/klog/v2"

	"github.com/cert-manager/cert-manager/pkg/controller"
	logf "github.com/cert-manager/cert-manager/pkg/logs"

	// Each controller package registers itself with controller.Register.
	"github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	crca "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	crselfsigned "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	"github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	"github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	"github.com/cert-manager/cert-manager/pkg/controller/issuers"

	// The issuer implementations the Issuer and ClusterIssuer controllers set up.
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// controllers are the controllers this binary runs, by their registered names.
var controllers = []string{
	issuers.ControllerName,
	clusterissuers.ControllerName,
	approver.ControllerName,
	crca.CRControllerName,
	crselfsigned.CRControllerName,
	trigger.ControllerName,
	keymanager.ControllerName,
	requestmanager.ControllerName,
	issuing.ControllerName,
	readiness.ControllerName,
	revisionmanager.ControllerName,
}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the cluster to run against")
	clusterResourceNamespace := flag.String("cluster-resource-namespace", "kube-system", "namespace of the Secrets ClusterIssuers refer to (a CA ClusterIssuer's CA)")
	workers := flag.Int("workers", 5, "workers per controller")
	ownerRef := flag.Bool("enable-certificate-owner-ref", false, "make each Certificate the owner of the Secret it writes, so the Secret goes with it")
	klog.InitFlags(nil)
	flag.Parse()
	logf.InitLogs()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx = logf.NewContext(ctx, logf.Log, "certmanager-controllers")
	opts := controller.ContextOptions{
		Kubeconfig: *kubeconfig,
		// cert-manager's defaults (internal/apis/config/controller/v1alpha1).
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: *clusterResourceNamespace},
		CertificateOptions: controller.CertificateOptions{
			EnableOwnerRef:                           *ownerRef,
			CertificateRequestMinimumBackoffDuration: time.Hour,
			CertificateRequestMaximumBackoffDuration: 32 * time.Hour,
		},
	}
	if err := run(ctx, opts, *workers); err != nil {
		fmt.Fprintln(os.Stderr, "certmanager-controllers:", err)
		logf.FlushLogs()
		os.Exit(1)
	}
	logf.FlushLogs()
}

// run builds the controllers, starts them and the shared informers, and returns when ctx ends
// or a controller fails.
func run(ctx context.Context, opts controller.ContextOptions, workers int) error {
	factory, err := controller.NewContextFactory(ctx, opts)
	if err != nil {
		return fmt.Errorf("failed to build the controller context: %w", err)
	}
	base, err := factory.Build()
	if err != nil {
		return fmt.Errorf("failed to build the controller context: %w", err)
	}
	known := controller.Known()
	var ifaces []controller.Interface
	for _, name := range controllers {
		fn, ok := known[name]
		if !ok {
			names := make([]string, 0, len(known))
			for n := range known {
				names = append(names, n)
			}
			slices.Sort(names)
			return fmt.Errorf("controller %q is not registered (registered: %s)", name, strings.Join(names, ", "))
		}
		// Constructors ask the shared informer factories for their informers; those start
		// below, once every controller has asked.
		iface, err := fn(factory)
		if err != nil {
			return fmt.Errorf("failed to build controller %s: %w", name, err)
		}
		ifaces = append(ifaces, iface)
	}
	g, gctx := errgroup.WithContext(ctx)
	for i, iface := range ifaces {
		name := controllers[i]
		g.Go(func() error {
			klog.InfoS("starting controller", "controller", name)
			if err := iface.Run(workers, gctx); err != nil {
				return fmt.Errorf("controller %s: %w", name, err)
			}
			return nil
		})
	}
	base.SharedInformerFactory.Start(gctx.Done())
	base.KubeSharedInformerFactory.Start(gctx.Done())
	err = g.Wait()
	base.KubeSharedInformerFactory.Shutdown()
	base.SharedInformerFactory.Shutdown()
	return err
}
