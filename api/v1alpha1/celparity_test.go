package v1alpha1_test

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/charts"
	"github.com/etcd-pilot/etcd-pilot/internal/memory"
	"github.com/etcd-pilot/etcd-pilot/internal/render"
	"github.com/etcd-pilot/etcd-pilot/internal/values"
)

// Admission and the controller must never disagree: an object the API server refuses today
// may have been stored before its rule existed (or with the CRD of an older release), and the
// controller must then refuse it too, with a condition, instead of acting on it. The Go side
// is render.Desired, the one function every pass turns a spec into objects with.

// parityRow is one CEL rule of the EtcdCluster CRD and an object that breaks it.
type parityRow struct {
	// path is where the rule sits in the CRD (as ruleSites spells it) and message a part of
	// its message that tells it from the other rules there.
	path, message string
	// spec is the object's spec as JSON; for a transition rule, old is the spec stored first
	// and spec the update.
	spec, old string
	// noGo says why the controller's Go validation does not refuse the object; empty means
	// it must.
	noGo string
}

const (
	whyTransition = "a transition rule: the controller renders the current spec only and has no old object to compare with; an object stored past it is simply the new spec, which the rule's own create-time twin (if any) covers"
	whyTLS        = "checked where the TLS material is read (controllers/etcdcluster_tls.go): a missing Secret name or issuer fails there with TLSNotReady, not in the render"
	whyBackup     = "checked where backups run (controllers/etcdcluster_backup.go): a bad destination or schedule fails the backup with its own condition; the members are not affected"
	whyBootstrap  = "checked where the restore runs (controllers/etcdcluster_restore.go), which refuses to restore what it cannot and reports it; the render does not read spec.bootstrap"
	whyNetpol     = "the NetworkPolicy is rendered as given: the API server refuses an invalid NetworkPolicy when it is applied, and the apply error is reported"
	whyDefrag     = "the defragmentation schedule is parsed by the maintenance planner, which reports a schedule it cannot read"
	whyChartSrc   = "the chart source is read by controllers/etcdcluster_chartsource.go, which takes configMap first; Desired is handed the renderer it chose"
	whyEndpoint   = "; where the endpoint is used, egress.Policy.CheckEndpoint (execute.OpenS3, observe.Restore, objstore.NewS3) refuses a user name, control characters and a host that is no DNS name or address, before any connection"
)

// parityRows is one row per CEL rule of the EtcdCluster CRD (TestParityRowsCoverEveryRule
// keeps it so).
func parityRows() []parityRow {
	rows := []parityRow{
		{path: "spec", message: "bootstrap can only be set when the cluster is created", old: `{}`, spec: `{"bootstrap":{"fromBackup":{"name":"b"}}}`, noGo: whyTransition},
		{path: "spec", message: "bootstrap needs volume claims", spec: `{"storage":{"ephemeral":true},"bootstrap":{"fromBackup":{"name":"b"}}}`, noGo: whyBootstrap},
		{path: "spec", message: "cannot be restored into etcd", spec: `{"version":"3.7.3","bootstrap":{"fromObject":{"s3":{"endpoint":"https://s3.example","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"3.5.35"}}}`, noGo: whyBootstrap},
		{path: "spec", message: "tls.client can be removed only from acceptPlain: true", old: `{"tls":{"client":{}}}`, spec: `{}`, noGo: whyTransition},
		{path: "spec", message: "tls.client.acceptPlain cannot be set while auth is enabled", spec: `{"auth":{"enabled":true},"tls":{"client":{"acceptPlain":true}}}`, noGo: "auth is turned on by the auth planner (internal/plan/auth), which waits for a client side without acceptPlain; the render does not read spec.auth"},
		{path: "spec", message: "auth.enabled needs client TLS with clientCertAuth", spec: `{"insecure":true,"auth":{"enabled":true}}`, noGo: "the auth planner (internal/plan/auth) does not enable auth without a client certificate to authenticate with; the render does not read spec.auth"},
		{path: "spec", message: "tls.client.source and tls.client.operatorSecretName cannot change while auth is enabled", old: `{"auth":{"enabled":true},"tls":{"client":{}}}`, spec: `{"auth":{"enabled":true},"tls":{"client":{"source":"Secret","secretName":"s","operatorSecretName":"o"}}}`, noGo: whyTransition},
		{path: "spec.backup.destination", message: "destination needs exactly one of s3 and persistentVolumeClaim", spec: `{"backup":{"schedule":"0 3 * * *","destination":{}}}`, noGo: whyBackup},
		{path: "spec.backup.destination.persistentVolumeClaim.path", message: "path must be relative to the claim's root", spec: `{"backup":{"schedule":"0 3 * * *","destination":{"persistentVolumeClaim":{"claimName":"c","path":"../x"}}}}`, noGo: whyBackup},
		{path: "spec.backup.destination.s3.endpoint", message: "endpoint must be an http:// or https:// URL", spec: `{"backup":{"schedule":"0 3 * * *","destination":{"s3":{"endpoint":"s3.example","bucket":"b","credentialsSecret":{"name":"c"}}}}}`, noGo: whyBackup},
		{path: "spec.backup.destination.s3.endpoint", message: "endpoint must not carry a user name or password", spec: `{"backup":{"schedule":"0 3 * * *","destination":{"s3":{"endpoint":"https://k:s@s3.example","bucket":"b","credentialsSecret":{"name":"c"}}}}}`, noGo: whyBackup + whyEndpoint},
		{path: "spec.backup.destination.s3.endpoint", message: "endpoint must not contain control characters or spaces", spec: `{"backup":{"schedule":"0 3 * * *","destination":{"s3":{"endpoint":"https://s3.exa\u0007mple","bucket":"b","credentialsSecret":{"name":"c"}}}}}`, noGo: whyBackup + whyEndpoint},
		{path: "spec.backup.destination.s3.endpoint", message: "endpoint's host must be a DNS name or an IP address", spec: `{"backup":{"schedule":"0 3 * * *","destination":{"s3":{"endpoint":"https://s3!example","bucket":"b","credentialsSecret":{"name":"c"}}}}}`, noGo: whyBackup + whyEndpoint},
		{path: "spec.backup.schedule", message: "schedule must not carry a time zone", spec: `{"backup":{"schedule":"CRON_TZ=UTC 0 3 * * *","destination":{"persistentVolumeClaim":{"claimName":"c"}}}}`, noGo: whyBackup},
		{path: "spec.backup.schedule", message: "schedule must be five cron fields", spec: `{"backup":{"schedule":"0 3 * *","destination":{"persistentVolumeClaim":{"claimName":"c"}}}}`, noGo: whyBackup},
		{path: "spec.bootstrap", message: "bootstrap cannot change after creation", old: `{"bootstrap":{"fromBackup":{"name":"a"}}}`, spec: `{"bootstrap":{"fromBackup":{"name":"b"}}}`, noGo: whyTransition},
		{path: "spec.bootstrap", message: "bootstrap needs exactly one of fromBackup", spec: `{"bootstrap":{}}`, noGo: whyBootstrap},
		{path: "spec.bootstrap.fromObject.etcdVersion", message: "etcdVersion must be the etcd release that took", spec: `{"bootstrap":{"fromObject":{"s3":{"endpoint":"https://s3.example","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"v3.6"}}}`, noGo: whyBootstrap},
		{path: "spec.bootstrap.fromObject.s3.endpoint", message: "endpoint must be an http:// or https:// URL", spec: `{"bootstrap":{"fromObject":{"s3":{"endpoint":"ftp://x","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"3.6.16"}}}`, noGo: whyBootstrap},
		{path: "spec.bootstrap.fromObject.s3.endpoint", message: "endpoint must not carry a user name or password", spec: `{"bootstrap":{"fromObject":{"s3":{"endpoint":"https://k@s3.example","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"3.6.16"}}}`, noGo: whyBootstrap + whyEndpoint},
		{path: "spec.bootstrap.fromObject.s3.endpoint", message: "endpoint must not contain control characters or spaces", spec: `{"bootstrap":{"fromObject":{"s3":{"endpoint":"https://s3 example","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"3.6.16"}}}`, noGo: whyBootstrap + whyEndpoint},
		{path: "spec.bootstrap.fromObject.s3.endpoint", message: "endpoint's host must be a DNS name or an IP address", spec: `{"bootstrap":{"fromObject":{"s3":{"endpoint":"https://s3.example:port","bucket":"b","credentialsSecret":{"name":"c"}},"key":"k","etcdVersion":"3.6.16"}}}`, noGo: whyBootstrap + whyEndpoint},
		{path: "spec.chart.patches[]", message: "a chart patch needs exactly one of strategicMerge and json", spec: `{"chart":{"patches":[{"target":{"kind":"Service"},"strategicMerge":{"metadata":{"labels":{"a":"b"}}},"json":[{"op":"remove","path":"/metadata/labels"}]}]}}`},
		{path: "spec.chart.patches[].json[]", message: "move and copy need from", spec: `{"chart":{"patches":[{"target":{"kind":"Service"},"json":[{"op":"move","path":"/metadata/labels/x"}]}]}}`},
		{path: "spec.chart.source", message: "chart.source needs exactly one of configMap and oci", spec: `{"chart":{"source":{"configMap":{"name":"c"},"oci":{"repository":"oci://r.example/c","version":"1.0.0"}}}}`, noGo: whyChartSrc},
		{path: "spec.chart.source.oci.repository", message: "repository must not contain control characters or spaces", spec: `{"chart":{"source":{"oci":{"repository":"oci://r.example/c\u0007","version":"1.0.0"}}}}`,
			noGo: whyChartSrc + "; charts.PullOCI refuses control characters and spaces before any request"},
		{path: "spec.etcd", message: "etcd.electionTimeoutMillis must be at least 5 times", spec: `{"etcd":{"heartbeatIntervalMillis":300}}`},
		{path: "spec.etcd", message: "etcd.autoCompactionRetention must be a revision count", spec: `{"etcd":{"autoCompactionMode":"revision","autoCompactionRetention":"1h"}}`},
		{path: "spec.etcd.extraArgs", message: "extraArgs sets flags that etcd-pilot owns", spec: `{"etcd":{"extraArgs":{"force-new-cluster":"true"}}}`},
		{path: "spec.etcd.extraArgs", message: "extraArgs sets flags that have typed fields", spec: `{"etcd":{"extraArgs":{"snapshot-count":"5"}}}`},
		{path: "spec.etcd.extraArgs", message: "extraArgs has unknown etcd flags", spec: `{"etcd":{"extraArgs":{"--log-level":"debug"}}}`},
		{path: "spec.etcd.extraArgs{}", message: "an extraArgs value may hold printable ASCII characters only", spec: `{"etcd":{"extraArgs":{"log-level":"info\n            - --client-cert-auth=false"}}}`},
		{path: "spec.image", message: "image is a repository without a tag or digest", spec: `{"image":"registry.example/etcd:v3.6.16"}`},
		{path: "spec.image", message: "image must be an image repository such as", spec: `{"image":"registry.example/etcd\n        command: [sh]"}`},
		{path: "spec.priorityClassName", message: "priorityClassName must be the name of a PriorityClass", spec: `{"priorityClassName":"high\n      hostNetwork: true"}`},
		{path: "spec.storage.storageClassName", message: "storage.storageClassName must be the name of a StorageClass", spec: `{"storage":{"storageClassName":"Fast SSD"}}`},
		{path: "spec.maintenance.defragmentation.schedule", message: "schedule must not carry a time zone", spec: `{"maintenance":{"defragmentation":{"schedule":"TZ=UTC 0 4 * * *"}}}`, noGo: whyDefrag},
		{path: "spec.maintenance.defragmentation.schedule", message: "schedule must be five cron fields", spec: `{"maintenance":{"defragmentation":{"schedule":"daily"}}}`, noGo: whyDefrag},
		{path: "spec.storage", message: "storage.storageClassName cannot be changed after creation", old: `{"storage":{"storageClassName":"a"}}`, spec: `{"storage":{"storageClassName":"b"}}`, noGo: whyTransition},
		{path: "spec.storage", message: "storage.ephemeral cannot be changed after creation", old: `{}`, spec: `{"storage":{"ephemeral":true}}`, noGo: whyTransition},
		{path: "spec.storage", message: "storage.size cannot shrink", old: `{"storage":{"size":"2Gi"}}`, spec: `{"storage":{"size":"1Gi"}}`, noGo: whyTransition},
		{path: "spec.storage", message: "storage.size cannot change with storage.ephemeral: true", old: `{"storage":{"ephemeral":true,"size":"1Gi"}}`, spec: `{"storage":{"ephemeral":true,"size":"2Gi"}}`, noGo: whyTransition},
		{path: "spec.storage", message: "storage.storageClassName has no effect with storage.ephemeral: true", spec: `{"storage":{"ephemeral":true,"storageClassName":"fast"}}`},
		{path: "spec.tls", message: "tls.peer.secretName is required with source Secret", spec: `{"tls":{"peer":{"source":"Secret"}}}`},
		{path: "spec.tls", message: "tls.client.certificates needs source Operator", spec: `{"tls":{"client":{"source":"CertManager","issuerRef":{"name":"ca"},"certificates":[{"name":"app"}]}}}`},
		{path: "spec.tls.client.certificates[].name", message: "may not start with etcd-pilot", spec: `{"tls":{"client":{"certificates":[{"name":"etcd-pilot-x"}]}}}`},
		{path: "spec.tls", message: "are required with source Secret", spec: `{"tls":{"client":{"source":"Secret","secretName":"s"}}}`, noGo: whyTLS},
		{path: "spec.tls", message: "tls.renewBefore must be shorter than tls.certificateDuration", spec: `{"tls":{"peer":{},"renewBefore":"3000h"}}`, noGo: whyTLS},
		{path: "spec.tls", message: "tls.peer.issuerRef goes with source CertManager", spec: `{"tls":{"peer":{"source":"CertManager"}}}`, noGo: whyTLS},
		{path: "spec.tls", message: "tls.client.issuerRef goes with source CertManager", spec: `{"tls":{"client":{"issuerRef":{"name":"i"}}}}`, noGo: whyTLS},
		{path: "spec.tls", message: "with source CertManager, tls.certificateDuration must be at least 1h", spec: `{"tls":{"peer":{"source":"CertManager","issuerRef":{"name":"i"}},"certificateDuration":"30m"}}`, noGo: whyTLS},
		{path: "spec.tls.certificateDuration", message: "tls.certificateDuration must be at least 10m", spec: `{"tls":{"peer":{},"certificateDuration":"5m"}}`, noGo: whyTLS},
		{path: "spec.version", message: "version must be an etcd release such as", spec: `{"version":"v3.6.16"}`},
		{path: "spec.version", message: "etcd-pilot runs etcd 3.5, 3.6 and 3.7", spec: `{"version":"3.8.0"}`},
		{path: "spec.version", message: "version cannot go from", old: `{"version":"3.5.10"}`, spec: `{"version":"3.6.16"}`, noGo: whyTransition},
	}
	for _, g := range v1alpha1.GuardedChartValues {
		v, _ := json.Marshal(map[string]any{"chart": map[string]any{"values": nested(g.Path, guardedSample(g.Type))}})
		rows = append(rows, parityRow{path: "spec.chart.values", message: g.Message(), spec: string(v)})
	}
	for _, c := range v1alpha1.CheckedChartValues {
		v, _ := json.Marshal(map[string]any{"chart": map[string]any{"values": nested(c.Path, "x\n            - --unsafe-no-fsync=true")}})
		rows = append(rows, parityRow{path: "spec.chart.values", message: c.Message(), spec: string(v)})
	}
	for _, field := range []string{"allowedClients", "allowedMetricsClients"} {
		p := "spec.networkPolicy." + field + "[]"
		np := func(peer string) string { return `{"networkPolicy":{"enabled":true,"` + field + `":[` + peer + `]}}` }
		rows = append(rows,
			parityRow{path: p, message: "each entry needs namespaceSelector, podSelector or ipBlock", spec: np(`{}`), noGo: whyNetpol},
			parityRow{path: p, message: "ipBlock cannot be combined with namespaceSelector or podSelector", spec: np(`{"podSelector":{},"ipBlock":{"cidr":"10.0.0.0/8"}}`), noGo: whyNetpol},
			parityRow{path: p + ".ipBlock", message: "ipBlock.except: each entry must be a CIDR strictly inside", spec: np(`{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.1.0.0/24"]}}`), noGo: whyNetpol},
			parityRow{path: p + ".ipBlock.cidr", message: "ipBlock.cidr must be a CIDR", spec: np(`{"ipBlock":{"cidr":"10.0.0.0"}}`), noGo: whyNetpol},
			parityRow{path: p + ".ipBlock.cidr", message: "ipBlock.cidr must be in canonical form", spec: np(`{"ipBlock":{"cidr":"10.200.0.1/24"}}`), noGo: whyNetpol},
			parityRow{path: p + ".ipBlock", message: "ipBlock.except: each entry must be in canonical form", spec: np(`{"ipBlock":{"cidr":"10.0.0.0/16","except":["10.0.1.7/24"]}}`), noGo: whyNetpol},
			parityRow{path: p + ".namespaceSelector.matchExpressions[]", message: "matchExpressions: operators In and NotIn need values", spec: np(`{"namespaceSelector":{"matchExpressions":[{"key":"k","operator":"In"}]}}`), noGo: whyNetpol},
			parityRow{path: p + ".podSelector.matchExpressions[]", message: "matchExpressions: operators In and NotIn need values", spec: np(`{"podSelector":{"matchExpressions":[{"key":"k","operator":"Exists","values":["v"]}]}}`), noGo: whyNetpol},
		)
	}
	return rows
}

// ruleSite is one CEL rule of the CRD: where it sits and its message (the literal parts of a
// messageExpression).
type ruleSite struct{ path, message, rule string }

// ruleSites lists every x-kubernetes-validations rule under spec of the generated CRD of
// the given plural (etcdclusters, etcdbackups).
func ruleSites(t *testing.T, plural string) []ruleSite {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", "etcdpilot.io_"+plural+".yaml"))
	if err != nil {
		t.Fatal(err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.Unmarshal(b, crd); err != nil {
		t.Fatal(err)
	}
	var out []ruleSite
	var walkRules func(path string, p apiextensionsv1.JSONSchemaProps)
	walkRules = func(path string, p apiextensionsv1.JSONSchemaProps) {
		for _, r := range p.XValidations {
			out = append(out, ruleSite{path: path, message: ruleMessage(r), rule: r.Rule})
		}
		for n, c := range p.Properties {
			walkRules(path+"."+n, c)
		}
		if p.Items != nil && p.Items.Schema != nil {
			walkRules(path+"[]", *p.Items.Schema)
		}
		if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
			walkRules(path+"{}", *p.AdditionalProperties.Schema)
		}
	}
	walkRules("spec", crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"])
	return out
}

// TestParityRowsCoverEveryRule fails when the CRD has a CEL rule no parity row breaks (a new
// rule needs a row: an object that breaks it, and the Go validation that refuses it too or why
// none does), or a row names a rule that is gone.
func TestParityRowsCoverEveryRule(t *testing.T) {
	sites := ruleSites(t, "etcdclusters")
	rows := parityRows()
	used := make([]bool, len(rows))
	for _, s := range sites {
		n := 0
		for i, r := range rows {
			if r.path == s.path && strings.Contains(s.message, r.message) {
				used[i] = true
				n++
			}
		}
		if n != 1 {
			t.Errorf("CEL rule at %s (%q, rule %s) has %d parity rows, want 1: add one to parityRows", s.path, s.message, s.rule, n)
		}
	}
	for i, u := range used {
		if !u {
			t.Errorf("parity row %s %q matches no CEL rule of the CRD", rows[i].path, rows[i].message)
		}
	}
	if len(sites) < 80 {
		t.Errorf("found only %d CEL rules in the CRD; the walk misses some", len(sites))
	}
	for _, s := range ruleSites(t, "etcdbackups") {
		n := 0
		for _, r := range backupParityRows() {
			if r.path == s.path && strings.Contains(s.message, r.message) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("CEL rule of EtcdBackup at %s (%q) has %d parity rows, want 1: add one to backupParityRows", s.path, s.message, n)
		}
	}
}

// backupParityRows is one row per CEL rule of the EtcdBackup CRD; spec is the EtcdBackup's
// spec. None has Go validation in the render path; noGo says where each is handled.
func backupParityRows() []parityRow {
	const dest = "the EtcdBackup controller opens the destination it is given (controllers/backup_store.go) and reports a failure to open or write it as the backup's Failed condition; no member is touched"
	return []parityRow{
		{path: "spec", message: "an EtcdBackup's spec cannot change", old: `{"clusterName":"prod"}`, spec: `{"clusterName":"other"}`, noGo: whyTransition},
		{path: "spec.destination", message: "destination needs exactly one of s3 and persistentVolumeClaim", spec: `{"clusterName":"prod","destination":{}}`, noGo: dest},
		{path: "spec.destination.persistentVolumeClaim.path", message: "path must be relative to the claim's root", spec: `{"clusterName":"prod","destination":{"persistentVolumeClaim":{"claimName":"c","path":"a/../../b"}}}`,
			noGo: "not refused in Go: claimPath (controllers/backup_store.go) cleans the path as rooted, so an object stored before this rule still writes and restores inside the claim's root (TestClaimPathStaysUnderTheRoot)"},
		{path: "spec.destination.s3.endpoint", message: "endpoint must be an http:// or https:// URL", spec: `{"clusterName":"prod","destination":{"s3":{"endpoint":"https://s3.example/path","bucket":"b","credentialsSecret":{"name":"c"}}}}`, noGo: dest},
		{path: "spec.destination.s3.endpoint", message: "endpoint must not carry a user name or password", spec: `{"clusterName":"prod","destination":{"s3":{"endpoint":"https://k:s@s3.example","bucket":"b","credentialsSecret":{"name":"c"}}}}`, noGo: dest + whyEndpoint},
		{path: "spec.destination.s3.endpoint", message: "endpoint must not contain control characters or spaces", spec: `{"clusterName":"prod","destination":{"s3":{"endpoint":"https://s3.example\r","bucket":"b","credentialsSecret":{"name":"c"}}}}`, noGo: dest + whyEndpoint},
		{path: "spec.destination.s3.endpoint", message: "endpoint's host must be a DNS name or an IP address", spec: `{"clusterName":"prod","destination":{"s3":{"endpoint":"https://s3.example,evil","bucket":"b","credentialsSecret":{"name":"c"}}}}`, noGo: dest + whyEndpoint},
	}
}

// TestBackupAdmissionRefusesEachRule sends each EtcdBackup row's object to the API server,
// which must refuse it with the rule's message.
func TestBackupAdmissionRefusesEachRule(t *testing.T) {
	ns := env.Namespace(t)
	for i, row := range backupParityRows() {
		t.Run(row.path+"/"+row.message, func(t *testing.T) {
			obj := &v1alpha1.EtcdBackup{}
			obj.Namespace, obj.Name = ns, objectName(i)
			decode := func(s string) v1alpha1.EtcdBackupSpec {
				var spec v1alpha1.EtcdBackupSpec
				if err := json.Unmarshal([]byte(s), &spec); err != nil {
					t.Fatalf("spec %s: %v", s, err)
				}
				return spec
			}
			var err error
			if row.old != "" {
				obj.Spec = decode(row.old)
				if err := env.Client.Create(reqCtx(t), obj); err != nil {
					t.Fatalf("the old object was refused: %v", err)
				}
				obj.Spec = decode(row.spec)
				err = env.Client.Update(reqCtx(t), obj, client.DryRunAll)
			} else {
				obj.Spec = decode(row.spec)
				err = env.Client.Create(reqCtx(t), obj, client.DryRunAll)
			}
			checkAdmission(t, err, []string{row.message})
		})
	}
}

var (
	parityRendererOnce sync.Once
	parityRenderer     *charts.Renderer
	parityRendererErr  error
)

// goValidate is the controller's verdict on spec: the error render.Desired returns for
// an object with it (named and given a UID as the API server would).
func goValidate(t *testing.T, spec v1alpha1.EtcdClusterSpec) error {
	t.Helper()
	parityRendererOnce.Do(func() { parityRenderer, parityRendererErr = charts.Embedded() })
	if parityRendererErr != nil {
		t.Fatal(parityRendererErr)
	}
	c := newCluster("ns", "parity", func(s *v1alpha1.EtcdClusterSpec) { *s = *spec.DeepCopy() })
	c.UID = "4e2d6f6a-0000-4000-8000-000000000001"
	_, err := render.Desired(parityRenderer, c, values.DefaultOperator(), memory.Of(c))
	return err
}

func decodeSpec(t *testing.T, s string) v1alpha1.EtcdClusterSpec {
	t.Helper()
	var spec v1alpha1.EtcdClusterSpec
	if err := json.Unmarshal([]byte(s), &spec); err != nil {
		t.Fatalf("spec %s: %v", s, err)
	}
	return spec
}

// TestAdmissionAndControllerRefuseAlike sends each row's object to the API server (a dry-run
// create, or a create of the old object and a dry-run update for a transition rule), which
// must refuse it with the rule's message, and hands the same spec to the controller's Go
// validation, which must refuse it too unless the row says why it does not.
func TestAdmissionAndControllerRefuseAlike(t *testing.T) {
	ns := env.Namespace(t)
	for i, row := range parityRows() {
		t.Run(fmt.Sprintf("%s/%s", row.path, row.message), func(t *testing.T) {
			spec := decodeSpec(t, row.spec)
			obj := newCluster(ns, objectName(i), nil)
			var err error
			if row.old != "" {
				obj.Spec = decodeSpec(t, row.old)
				if err := env.Client.Create(reqCtx(t), obj); err != nil {
					t.Fatalf("the old object was refused: %v", err)
				}
				obj.Spec = spec
				err = env.Client.Update(reqCtx(t), obj, client.DryRunAll)
			} else {
				obj.Spec = spec
				err = env.Client.Create(reqCtx(t), obj, client.DryRunAll)
			}
			checkAdmission(t, err, []string{row.message})
			if row.noGo != "" {
				return
			}
			gerr := goValidate(t, spec)
			if gerr == nil {
				t.Fatalf("the API server refuses %s (%s), the controller's Go validation accepts it", row.spec, row.message)
			}
			t.Logf("controller refuses: %v", gerr)
		})
	}
}

// randomSpec builds a spec from parts the controller's Go validation covers. Each part is
// left out, or set to a value admission accepts, or (about one time in eight) to a value one
// of its rules refuses; so a spec breaks no rule, one, or several.
func randomSpec(r *rand.Rand) map[string]any {
	pick := func(xs ...any) any { return xs[r.Intn(len(xs))] }
	part := func(valid, invalid []any) any {
		if r.Intn(8) == 0 {
			return invalid[r.Intn(len(invalid))]
		}
		return valid[r.Intn(len(valid))]
	}
	spec := map[string]any{}
	set := func(m map[string]any, k string, v any) {
		if v != nil {
			m[k] = v
		}
	}
	set(spec, "version", part([]any{nil, "3.5.35", "3.6.16", "3.7.3"}, []any{"3.8.0", "2.3.4", "v3.6.16", "3.6", "latest"}))
	set(spec, "image", part([]any{nil, "registry.example/etcd", "registry.example:5000/etcd"}, []any{"etcd:v3.6.16", "registry.example:5000/etcd:3", "etcd@sha256:0123", "registry.example/etcd\n        command: [sh]"}))
	set(spec, "priorityClassName", part([]any{nil, "", "high-priority"}, []any{"High Priority"}))
	set(spec, "replicas", pick(nil, 1, 3, 5))
	etcd := map[string]any{}
	if r.Intn(2) == 0 {
		hb := part([]any{50, 100, 150, 200}, []any{300, 400}).(int)
		etcd["heartbeatIntervalMillis"] = hb
		if r.Intn(2) == 0 {
			etcd["electionTimeoutMillis"] = part([]any{5 * hb, 10 * hb, 5*hb + 1}, []any{5*hb - 1, hb})
		}
	}
	if r.Intn(3) == 0 {
		if r.Intn(2) == 0 {
			etcd["autoCompactionMode"] = "revision"
			etcd["autoCompactionRetention"] = part([]any{"1000", "0"}, []any{"1h", "-1", "10k"})
		} else {
			if r.Intn(2) == 0 {
				etcd["autoCompactionMode"] = "periodic"
			}
			etcd["autoCompactionRetention"] = part([]any{"1", "1h", "30m", "1.5h", "1h30m"}, []any{"h", "1d", "1.h"})
		}
	}
	if r.Intn(2) == 0 {
		args := map[string]any{}
		for range 1 + r.Intn(2) {
			args[part([]any{"log-level", "logger", "auth-token", "experimental-initial-corrupt-check"},
				[]any{"force-new-cluster", "data-dir", "initial-cluster", "snapshot-count", "heartbeat-interval", "--log-level", "no-such-flag"}).(string)] =
				part([]any{"x", "info", `{"maxsize": 100}`}, []any{"info\n            - --client-cert-auth=false", "x\x00", "x\ty"})
		}
		etcd["extraArgs"] = args
	}
	if len(etcd) > 0 {
		spec["etcd"] = etcd
	}
	if r.Intn(3) == 0 {
		st := map[string]any{}
		switch part([]any{0, 1, 2, 3}, []any{4, 5}).(int) {
		case 1:
			st["ephemeral"] = true
		case 2:
			st["ephemeral"] = false
			st["storageClassName"] = "fast"
		case 3:
			st["storageClassName"] = "fast"
		case 4:
			st["ephemeral"], st["storageClassName"] = true, "fast"
		case 5:
			st["storageClassName"] = "Fast SSD"
		}
		spec["storage"] = st
	}
	chart := map[string]any{}
	if r.Intn(3) == 0 {
		vals := map[string]any{}
		for range 1 + r.Intn(2) {
			switch part([]any{1, 2, 3, 4}, []any{0, 5}).(int) {
			case 0:
				g := v1alpha1.GuardedChartValues[r.Intn(len(v1alpha1.GuardedChartValues))]
				vals = values.Merge(vals, nested(g.Path, guardedSample(g.Type)))
			case 4:
				c := v1alpha1.CheckedChartValues[r.Intn(len(v1alpha1.CheckedChartValues))]
				vals = values.Merge(vals, nested(c.Path, pick("", "k8s.example").(string)))
			case 5:
				c := v1alpha1.CheckedChartValues[r.Intn(len(v1alpha1.CheckedChartValues))]
				vals = values.Merge(vals, nested(c.Path, pick("x\n            - --unsafe-no-fsync=true", "Upper.Case", "x\x00").(string)))
			case 1:
				vals["commonAnnotations"] = map[string]any{"team": "a"}
			case 2:
				vals["service"] = map[string]any{"annotations": map[string]any{"a": "b"}}
			default:
				vals["terminationGracePeriodSeconds"] = 60
			}
		}
		chart["values"] = vals
	}
	if r.Intn(3) == 0 {
		p := map[string]any{"target": map[string]any{"kind": "Service"}}
		sm := map[string]any{"metadata": map[string]any{"annotations": map[string]any{"a": "b"}}}
		add := []any{map[string]any{"op": "add", "path": "/metadata/labels/x", "value": "y"}}
		switch part([]any{0, 1, 2}, []any{3, 4}).(int) {
		case 0:
			p["strategicMerge"] = sm
		case 1:
			p["json"] = add
		case 2:
			p["json"] = []any{map[string]any{"op": "copy", "from": "/metadata/name", "path": "/metadata/labels/n"}}
		case 3:
			p["strategicMerge"], p["json"] = sm, add
		default:
			p["json"] = []any{map[string]any{"op": "copy", "path": "/metadata/labels/n"}}
		}
		chart["patches"] = []any{p}
	}
	if len(chart) > 0 {
		spec["chart"] = chart
	}
	return spec
}

// TestAdmissionAndControllerAgreeOnRandomSpecs sends a few hundred random specs (seeded: a
// failure names its seed and spec) to the API server as dry-run creates; the controller's Go
// validation must give the same verdict. An accepted spec is judged as the API server would
// store it (defaults applied); a refused one as it was sent, as if stored before its rule.
func TestAdmissionAndControllerAgreeOnRandomSpecs(t *testing.T) {
	ns := env.Namespace(t)
	seed := time.Now().UnixNano()
	if s := os.Getenv("PARITY_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (PARITY_SEED=%d repeats this run)", seed, seed)
	r := rand.New(rand.NewSource(seed))
	const n = 300
	var refused, disagree int
	for i := range n {
		raw, err := json.Marshal(randomSpec(r))
		if err != nil {
			t.Fatal(err)
		}
		spec := decodeSpec(t, string(raw))
		obj := newCluster(ns, fmt.Sprintf("r%d", i), nil)
		obj.Spec = spec
		apiErr := env.Client.Create(reqCtx(t), obj, client.DryRunAll)
		if apiErr != nil && !apierrors.IsInvalid(apiErr) {
			t.Fatalf("spec %s: dry-run create failed: %v", raw, apiErr)
		}
		judged := spec
		if apiErr == nil {
			judged = obj.Spec
		} else {
			refused++
		}
		goErr := goValidate(t, judged)
		if (apiErr == nil) != (goErr == nil) {
			disagree++
			t.Errorf("spec %s:\n  API server: %v\n  controller: %v", raw, apiErr, goErr)
		}
	}
	t.Logf("%d specs, %d refused by admission, %d disagreements", n, refused, disagree)
	if refused < n/5 || refused > n*4/5 {
		t.Errorf("%d of %d specs refused: the generator no longer mixes accepted and refused specs", refused, n)
	}
}
