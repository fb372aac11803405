// Package execute is the executor: the only code that writes for a cluster. It deletes pods
// and claims, creates restore and backup pods, issues certificates, writes the intent, the
// member record and the claim stamps, and calls etcd's membership, maintenance and auth APIs.
// It records before it acts, so a crash between any two steps converges on the next pass, and
// every step it carries out goes through one path (event, metric, AfterStep).
package execute

import (
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/metrics"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
	"github.com/etcd-pilot/etcd-pilot/internal/plan"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Executor carries out the steps the gate let through. One is built per reconciler; it keeps
// no state of its own between passes.
type Executor struct {
	// Client writes to the API server (and reads from the manager's cache).
	Client client.Client
	// APIReader reads past the cache, for the few reads an irreversible write must not take
	// from a cache that may lag.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder
	// Dial opens etcd clients.
	Dial etcd.Dialer
	// EtcdTimeout bounds each etcd call that is not a long-running one.
	EtcdTimeout time.Duration
	// AgentImage is the operator's own image, run by the restore and backup pods.
	AgentImage string
	// Operator is where the operator runs.
	Operator values.Operator
	// OpenS3 opens S3 backup destinations; objstore.NewS3 when nil.
	OpenS3 func(cfg objstore.S3Config) (objstore.Store, error)
	// Egress is the outbound policy S3 endpoints are held to, here and in the restore pods
	// (egress.Default when nil).
	Egress *egress.Policy
	// AfterStep, when set, is called after every step carried out, with the step's kind.
	// Tests of crash safety use it to stop the operator between two steps.
	AfterStep func(kind string)
}

// Done is the one path every step carried out ends on: it counts the step (and its failure)
// and, when it succeeded, calls AfterStep.
func (x *Executor) Done(c *v1alpha1.EtcdCluster, kind plan.Kind, err error) {
	metrics.CountStep(c, kind, err)
	if err == nil && x.AfterStep != nil {
		x.AfterStep(string(kind))
	}
}
