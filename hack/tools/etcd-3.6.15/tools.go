//go:build tools

// Package tools pins the etcd 3.6.16 commands built by hack/build-etcd.sh.
package tools

import (
	_ "go.etcd.io/etcd/etcdctl/v3"
	_ "go.etcd.io/etcd/etcdutl/v3"
	_ "go.etcd.io/etcd/server/v3"
)
