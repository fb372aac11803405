// Package promrules tests the monitoring files that ship with etcd-pilot against Prometheus's
// own libraries: the alert rules (charts/etcd-pilot/files/alerts.yaml) parse as a rule file
// and fire on the series they are meant for, and no others; each alert has a runbook section
// (docs/runbooks.md); the dashboards' queries (docs/dashboards/*.json) parse as PromQL.
// Every query may name only metrics the operator registers (the "etcdpilot_..." string
// literals of internal/metrics/metrics.go, read as text), or the etcd and controller-runtime
// metrics listed in knownExternal.
//
// It is a module of its own, so that the operator's go.mod does not carry Prometheus's
// dependencies: `go list ./...` at the repository's root does not reach it, and `make test`
// runs it with `cd test/promrules && go test ./...`.
package promrules
