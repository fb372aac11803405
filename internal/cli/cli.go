// Package cli implements etcd-pilot's subcommands. main only dispatches to Run. The local
// cluster is a binary of its own (cmd/etcd-pilot-local, internal/localcli): this package and
// the operator's binary must not depend on internal/localcluster.
package cli

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/yaml"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/execute"
	"github.com/etcd-pilot/etcd-pilot/internal/manager"
	"github.com/etcd-pilot/etcd-pilot/internal/podsecurity"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Version is set at build time with -ldflags "-X github.com/etcd-pilot/etcd-pilot/internal/cli.Version=...".
var Version = "dev"

const usage = `etcd-pilot runs production etcd clusters on Kubernetes.

Usage:
  etcd-pilot manager [flags]              run the controllers
  etcd-pilot render -f cluster.yaml       print the manifests the operator would apply
  etcd-pilot render --live -n NS --name N print what the operator applies for a live cluster
                                          (with -f: for that file applied over it)
  etcd-pilot values -f cluster.yaml       print the chart values computed for a cluster
  etcd-pilot snapshot --endpoint URL --dir D --key K
                                          stream a verified etcd snapshot into a folder
                                          (what backup pods run on a volume claim)
  etcd-pilot restore-prepare --id ID (--file F | --s3-key K ...)
                                          fetch and check a snapshot onto a member's volume,
                                          setting its earlier data aside (restore pods)
  etcd-pilot restore-finish --id ID       check etcdutl's output, delete the staging folder
  etcd-pilot version                      print the version

Run "etcd-pilot COMMAND -h" for a command's flags.
`

// Run runs the subcommand named by args[0] and returns the process exit code.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	var err error
	switch args[0] {
	case charts.SandboxArg:
		// Not in the usage: the operator starts it to render a tenant's chart within a budget.
		return charts.RunSandbox(args[1:], stdin, stdout, stderr)
	case "manager":
		err = runManager(ctx, args[1:], stderr)
	case "render":
		err = runRender(args[1:], stdin, stdout, stderr)
	case "values":
		err = runValues(args[1:], stdin, stdout, stderr)
	case "snapshot":
		err = runSnapshot(ctx, args[1:], stdout, stderr)
	case "restore-prepare":
		err = runRestorePrepare(ctx, args[1:], stdout, stderr)
	case "restore-finish":
		err = runRestoreFinish(args[1:], stdout, stderr)
	case "version":
		_, name, chartVersion := embeddedChart()
		fmt.Fprintf(stdout, "etcd-pilot %s (chart %s %s, default etcd %s)\n", Version, name, chartVersion, v1alpha1.DefaultVersion)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "etcd-pilot %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

func embeddedChart() (*charts.Renderer, string, string) {
	r, err := charts.Embedded()
	if err != nil {
		return nil, "etcd-cluster", "unknown"
	}
	n, v := r.Chart()
	return r, n, v
}

func runManager(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var o manager.Options
	fs.StringVar(&o.MetricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (\"0\" disables it)")
	fs.BoolVar(&o.MetricsSecure, "metrics-secure", true, "serve metrics over HTTPS, only to clients the API server authenticates and authorizes for get on /metrics (false: plain HTTP to anyone who reaches the address)")
	fs.StringVar(&o.ProbeAddr, "health-probe-bind-address", ":8081", "address of the /healthz and /readyz endpoints (\"0\" disables them)")
	fs.BoolVar(&o.LeaderElect, "leader-elect", false, "elect a leader among the operator's replicas, so only one acts")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election lease (default: the operator's own)")
	fs.StringVar(&o.WatchNamespace, "watch-namespace", "", "manage EtcdClusters in this namespace only (default: all namespaces)")
	fs.StringVar(&o.ChartDir, "chart", "", "render this chart folder instead of the embedded chart")
	fs.DurationVar(&o.EtcdTimeout, "etcd-timeout", 3*time.Second, "timeout of each etcd call")
	fs.StringVar(&o.AgentImage, "agent-image", DefaultAgentImage, "the operator's own image, run by the pods that write backups to volume claims (keep it in step with the Deployment's image)")
	fs.DurationVar(&o.BackupTimeout, "backup-timeout", time.Hour, "time limit of one backup attempt")
	fs.StringVar(&o.PprofAddr, "pprof-bind-address", "0", "address of net/http/pprof's endpoints, for heap and CPU profiles (\"0\" disables them)")
	qps := fs.Float64("kube-api-qps", 50, "requests per second the operator may send to the API server (client-side limit; a new cluster costs about nine)")
	fs.IntVar(&o.Burst, "kube-api-burst", 100, "requests the operator may send at once above --kube-api-qps")
	chartMemory := quantityFlag{resource.NewQuantity(charts.DefaultRenderMemory, resource.BinarySI)}
	fs.Var(chartMemory, "chart-render-memory", "memory a chart of spec.chart.source may take to render (a child process of the operator; in its container's memory, --chart-render-parallel times): a render that needs more is refused (ChartTooExpensive)")
	fs.DurationVar(&o.ChartBudget.Time, "chart-render-timeout", charts.DefaultRenderTime, "time a render of a chart of spec.chart.source may take: one that takes longer is stopped and refused (ChartTooExpensive)")
	chartArchive := quantityFlag{resource.NewQuantity(charts.DefaultArchiveBytes, resource.BinarySI)}
	fs.Var(chartArchive, "chart-archive-size", "size of the packaged chart of spec.chart.source (a ConfigMap's key, a registry's layer): a larger one is refused before it is read (ChartTooExpensive)")
	fs.IntVar(&o.ChartBudget.Parallel, "chart-render-parallel", 1, "renders of charts of spec.chart.source run at once (each in a child process that may take --chart-render-memory)")
	fs.DurationVar(&o.StuckPassAfter, "stuck-pass-timeout", manager.DefaultStuckPassAfter, "/healthz fails when a pass has run this long (an EtcdBackup's pass: --backup-timeout longer), so that the kubelet restarts an operator whose workers are stuck (negative: never)")
	memLimit := fs.Int64("memory-limit", envInt64("MEMORY_LIMIT"), "the container's memory limit in bytes (default $MEMORY_LIMIT, which the Deployment sets from limits.memory): the Go runtime keeps its memory to 60 % of it, collecting garbage sooner as the heap nears it (GOMEMLIMIT, when set, wins; 0: no limit)")
	var op operatorFlags
	op.bind(fs, os.Getenv("POD_NAMESPACE"), "$POD_NAMESPACE")
	var out egress.Flags
	out.Bind(fs)
	op.bindPodSecurity(fs)
	zo := zap.Options{}
	zo.BindFlags(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zo)))
	o.QPS = float32(*qps)
	o.ChartBudget.Memory, o.ChartBudget.Archive = chartMemory.Value(), chartArchive.Value()
	if l := setMemoryLimit(*memLimit); l > 0 {
		ctrl.Log.Info("keeping the Go runtime's memory below 60 % of the container's limit", "limitBytes", *memLimit, "softLimitBytes", l)
	}
	operator, err := op.operator()
	if err != nil {
		return err
	}
	o.Operator = operator
	if o.Egress, err = out.Policy(); err != nil {
		return err
	}
	ctrl.Log.Info("outbound policy for the endpoints tenants write", "policy", o.Egress.String())
	if operator.PodSecurity != podsecurity.Restricted {
		// Insecure is a visible choice: say it once, at start.
		ctrl.Log.Info("renders and the operator's own pods are held to a Pod Security level below restricted (--pod-security-level)", "level", operator.PodSecurity)
	}
	if o.Operator.Namespace == "" {
		ctrl.Log.Info("the operator's namespace is not known (set POD_NAMESPACE or --operator-namespace): the NetworkPolicy of a cluster with spec.networkPolicy will not admit the operator's pods")
	}
	if kind := os.Getenv(execute.FaultAfterEnv); kind != "" {
		// Crash-safety tests only: exit right after the first step of this kind.
		o.AfterStep = func(k string) {
			if k == kind {
				ctrl.Log.Info("exiting at a fault point", "after", k)
				os.Exit(3)
			}
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("failed to load kubeconfig: %w", err)
	}
	// A permission the role lacks stops the operator here, named, instead of leaving a watch
	// that never syncs.
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	err = manager.CheckPermissions(cctx, cfg, o.WatchNamespace)
	cancel()
	if err != nil {
		return err
	}
	mgr, err := manager.New(cfg, o)
	if err != nil {
		return err
	}
	ctrl.Log.Info("starting etcd-pilot", "version", Version, "watchNamespace", o.WatchNamespace)
	return mgr.Start(ctx)
}

// operatorFlags say where the operator runs, for the NetworkPolicy, and the Pod Security
// level renders are held to (values.Operator).
type operatorFlags struct {
	namespace   string
	podLabels   string
	podSecurity string
	extraSANs   string
	// clusterIssuers lets spec.tls name cluster-scoped cert-manager issuers.
	clusterIssuers bool
}

// bindPodSecurity binds --pod-security-level (manager and render; values renders no pods).
func (f *operatorFlags) bindPodSecurity(fs *flag.FlagSet) {
	fs.StringVar(&f.podSecurity, "pod-security-level", string(podsecurity.Restricted),
		"the Pod Security Standards level every pod of a render (after spec.chart.patches, whatever the chart) and every backup and restore pod must meet: restricted, baseline or privileged (no check). "+
			"A render that does not is refused (Degraded/"+v1alpha1.ReasonPodSecurityViolation+") and nothing of it is applied. restricted and baseline also refuse a service-account token and a ServiceAccount other than the render's own or the namespace's default")
}

func (f *operatorFlags) bind(fs *flag.FlagSet, defaultNamespace, namespaceDoc string) {
	fs.StringVar(&f.namespace, "operator-namespace", defaultNamespace, "namespace of the operator's pods, which a cluster's NetworkPolicy admits to the members (default "+namespaceDoc+")")
	fs.StringVar(&f.podLabels, "operator-pod-labels", values.DefaultOperatorPodLabels, "labels of the operator's pods, as k=v,k2=v2 (config/manager/manager.yaml's), which a cluster's NetworkPolicy admits to the members")
	fs.BoolVar(&f.clusterIssuers, "allow-cluster-issuers", false, "let spec.tls name cluster-scoped cert-manager issuers (ClusterIssuer): such an issuer signs for every namespace that names it, so one tenant could get certificates another tenant's cluster trusts; refused by default (TLSNotReady, and no Certificate is written)")
	fs.StringVar(&f.extraSANs, "default-extra-sans", "", "comma-separated DNS names or IP addresses the member certificates of every cluster created under secure defaults (without spec.insecure) carry besides spec.tls.extraSANs, for example 127.0.0.1 where members dial each other through the loopback address")
}

func (f *operatorFlags) operator() (values.Operator, error) {
	level, err := podsecurity.ParseLevel(f.podSecurity)
	if err != nil {
		return values.Operator{}, fmt.Errorf("failed to parse --pod-security-level: %w", err)
	}
	op := values.Operator{Namespace: f.namespace, PodSecurity: level, AllowClusterIssuers: f.clusterIssuers}
	if f.podLabels != "" {
		l, err := labels.ConvertSelectorToLabelsMap(f.podLabels)
		if err != nil {
			return values.Operator{}, fmt.Errorf("failed to parse --operator-pod-labels %q: %w", f.podLabels, err)
		}
		op.PodLabels = l
	}
	for _, san := range strings.Split(f.extraSANs, ",") {
		if san = strings.TrimSpace(san); san != "" {
			op.DefaultExtraSANs = append(op.DefaultExtraSANs, san)
		}
	}
	return op, nil
}

// quantityFlag is a size in bytes, given as a Kubernetes quantity (64Mi, 1048576).
type quantityFlag struct{ *resource.Quantity }

func (q quantityFlag) Set(v string) error {
	p, err := resource.ParseQuantity(v)
	if err != nil {
		return fmt.Errorf("failed to parse quantity %q: %w", v, err)
	}
	if p.Sign() <= 0 {
		return fmt.Errorf("%q is not a positive size", v)
	}
	*q.Quantity = p
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

// inputFlags are the flags render and values share.
type inputFlags struct {
	file      string
	chartDir  string
	valueFile stringList
	set       stringList
	operator  operatorFlags
}

func (in *inputFlags) bind(fs *flag.FlagSet) {
	in.operator.bind(fs, values.DefaultOperatorNamespace, values.DefaultOperatorNamespace+", where config/default deploys it")
	fs.StringVar(&in.file, "f", "", "EtcdCluster manifest to read (\"-\" for standard input)")
	fs.StringVar(&in.file, "filename", "", "same as -f")
	fs.StringVar(&in.chartDir, "chart", "", "render this chart folder instead of the embedded chart")
	fs.Var(&in.valueFile, "values", "YAML file of chart values merged last, like spec.chart.values (repeatable)")
	fs.Var(&in.set, "set", "chart value merged last, in Helm's --set syntax a.b=c (repeatable)")
}

// load reads the EtcdCluster and computes its values with the extra values merged last.
func (in *inputFlags) load(stdin io.Reader) (*v1alpha1.EtcdCluster, map[string]any, error) {
	if in.file == "" {
		return nil, nil, errors.New("missing -f: name the EtcdCluster manifest to read (or - for standard input)")
	}
	c, err := ReadCluster(in.file, stdin)
	if err != nil {
		return nil, nil, err
	}
	op, err := in.operator.operator()
	if err != nil {
		return nil, nil, err
	}
	// What the operator acts on: the secure defaults filled in.
	c = values.Effective(c, op)
	vals, err := in.values(c)
	return c, vals, err
}

// values computes c's chart values with the extra values merged last. c is the effective
// spec (values.Effective).
func (in *inputFlags) values(c *v1alpha1.EtcdCluster) (map[string]any, error) {
	op, err := in.operator.operator()
	if err != nil {
		return nil, err
	}
	vals, err := values.Compute(c, op)
	if err != nil {
		return nil, err
	}
	for _, f := range in.valueFile {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("failed to read values file: %w", err)
		}
		over := map[string]any{}
		if err := sigsyaml.Unmarshal(b, &over); err != nil {
			return nil, fmt.Errorf("failed to parse values file %s: %w", f, err)
		}
		vals = values.Merge(vals, over)
	}
	for _, s := range in.set {
		over := map[string]any{}
		if err := charts.ParseSet(s, over); err != nil {
			return nil, err
		}
		vals = values.Merge(vals, over)
	}
	return vals, nil
}

// ReadCluster reads one EtcdCluster from path ("-" for r), refusing unknown fields so a typo
// does not silently vanish. An empty namespace becomes "default", as in kubectl and Helm.
func ReadCluster(path string, r io.Reader) (*v1alpha1.EtcdCluster, error) {
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(r)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return nil, fmt.Errorf("failed to read EtcdCluster manifest: %w", err)
	}
	js, err := yaml.ToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", path, err)
	}
	c := &v1alpha1.EtcdCluster{}
	if err := sigsyaml.UnmarshalStrict(js, c); err != nil {
		return nil, fmt.Errorf("failed to parse %s as an EtcdCluster: %w", path, err)
	}
	if c.Kind != "EtcdCluster" || c.APIVersion != v1alpha1.GroupVersion.String() {
		return nil, fmt.Errorf("%s holds a %s %s; want kind EtcdCluster, apiVersion %s", path, c.APIVersion, c.Kind, v1alpha1.GroupVersion)
	}
	if c.Name == "" {
		return nil, fmt.Errorf("%s: metadata.name is required", path)
	}
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.UID == "" {
		// Not read from a cluster: a new object, which the operator creates under secure
		// defaults (values.Effective).
		values.MarkSecureDefaults(c)
	}
	return c, nil
}

func runRender(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var in inputFlags
	in.bind(fs)
	in.operator.bindPodSecurity(fs)
	var live liveFlags
	live.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	op, err := in.operator.operator()
	if err != nil {
		return err
	}
	var r *charts.Renderer
	if in.chartDir != "" {
		r, err = charts.FromDir(in.chartDir)
	} else {
		r, err = charts.Embedded()
	}
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	if live.on {
		objs, err = live.render(context.Background(), &in, r, stdin, in.chartDir != "", op.PodSecurity)
	} else {
		var c *v1alpha1.EtcdCluster
		var vals map[string]any
		if c, vals, err = in.load(stdin); err == nil {
			objs, err = render.DesiredFromValues(r, c, vals, op.PodSecurity)
		}
	}
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := sigsyaml.Marshal(o.Object)
		if err != nil {
			return fmt.Errorf("failed to print %s %s: %w", o.GetKind(), o.GetName(), err)
		}
		buf.WriteString("---\n")
		buf.Write(b)
	}
	_, err = stdout.Write(buf.Bytes())
	return err
}

func runValues(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("values", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var in inputFlags
	in.bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	_, vals, err := in.load(stdin)
	if err != nil {
		return err
	}
	b, err := sigsyaml.Marshal(vals)
	if err != nil {
		return fmt.Errorf("failed to print values: %w", err)
	}
	_, err = stdout.Write(b)
	return err
}

// envInt64 is the integer in the environment variable name, 0 when unset or not a number.
func envInt64(name string) int64 {
	v, _ := strconv.ParseInt(os.Getenv(name), 10, 64)
	return v
}

// setMemoryLimit sets the Go runtime's soft memory limit to 60 % of limit and returns it. The
// rest is for what the runtime does not count, above all the operator's own executable (about
// 45 MiB of its resident memory, file pages the container's memory is charged for), and for
// a burst past the soft limit, which the runtime allows rather than fail: at 90 % the runtime
// alone could take the container to its limit. The soft limit only makes the collector work
// sooner as the heap nears it; in a settled operator the heap stays below it (at a thousand
// clusters about 70 MiB live). It does nothing and returns 0 when limit is not positive or
// GOMEMLIMIT is set (the runtime honours that itself). Without it the heap grows to twice the
// live heap (GOGC=100) before a collection, whatever the container's limit.
func setMemoryLimit(limit int64) int64 {
	if limit <= 0 || os.Getenv("GOMEMLIMIT") != "" {
		return 0
	}
	soft := limit / 5 * 3
	debug.SetMemoryLimit(soft)
	return soft
}
