package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/etcd"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
)

// DefaultAgentImage is the image the manager runs backup pods from unless --agent-image says
// otherwise: the image config/manager deploys.
const DefaultAgentImage = "etcd-pilot:latest"

// runSnapshot streams one member's snapshot through the integrity check into a file under a
// folder (a mounted claim), and leaves a backup.Report as JSON in --report (the pod's
// termination message) and on stdout. It exits non-zero, with the report's failure set, when
// the snapshot is not stored and verified; nothing unverified stays under the key.
func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	endpoint := fs.String("endpoint", "", "client URL of the member to take the snapshot from")
	member := fs.String("member", "", "name of that member, for the report")
	memberID := fs.String("member-id", "", "etcd member ID (hexadecimal) the member at --endpoint must answer as; empty: any")
	applied := fs.Uint64("applied-index", 0, "raft index the member must have applied before its snapshot is taken")
	dir := fs.String("dir", "", "folder to store the snapshot in (a mounted volume claim)")
	key := fs.String("key", "", "path of the snapshot file under --dir")
	report := fs.String("report", "/dev/termination-log", "file the JSON report is written to (empty: stdout only)")
	timeout := fs.Duration("timeout", time.Hour, "time limit of the whole snapshot")
	tlsDir := fs.String("tls-dir", "", "folder with the client certificate to present (tls.crt, tls.key) and the CA to trust (ca.crt), for an https endpoint")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *endpoint == "" || *dir == "" || *key == "" {
		fs.Usage()
		return errors.New("--endpoint, --dir and --key are required")
	}
	want := backup.Expect{AppliedIndex: *applied}
	if *memberID != "" {
		id, err := etcd.ParseID(*memberID)
		if err != nil {
			return fmt.Errorf("--member-id %q: %w", *memberID, err)
		}
		want.MemberID = id
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	var tlsCfg *tls.Config
	if *tlsDir != "" {
		var err error
		if tlsCfg, err = loadTLSDir(*tlsDir); err != nil {
			return writeReport(stdout, *report, backup.Report{Failure: backup.FailedSnapshot, Error: err.Error()}, err)
		}
	}
	rep, err := takeSnapshot(ctx, *endpoint, *member, want, *dir, *key, tlsCfg)
	return writeReport(stdout, *report, rep, err)
}

// loadTLSDir reads a client certificate (tls.crt, tls.key) and the CA to trust (ca.crt) from
// a mounted kubernetes.io/tls Secret.
func loadTLSDir(dir string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		return nil, fmt.Errorf("failed to load the client certificate from %s: %w", dir, err)
	}
	ca, err := os.ReadFile(filepath.Join(dir, "ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("failed to read the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("%s holds no certificate", filepath.Join(dir, "ca.crt"))
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

func takeSnapshot(ctx context.Context, endpoint, member string, want backup.Expect, dir, key string, tlsCfg *tls.Config) (backup.Report, error) {
	cl, err := etcd.Dial(ctx, []string{endpoint}, tlsCfg)
	if err != nil {
		return backup.Report{Failure: backup.FailedSnapshot, Error: err.Error()}, err
	}
	defer cl.Close()
	taken, failure, err := backup.Take(ctx, cl, endpoint, want, objstore.NewDir(dir), key)
	if err != nil {
		return backup.Report{Failure: failure, Error: err.Error()}, err
	}
	return taken.Report(member), nil
}

// writeReport prints the JSON report rep on stdout and writes it to path (a pod's termination
// message; skipped when empty). It returns err, or the write's failure when err is nil.
func writeReport(stdout io.Writer, path string, rep any, err error) error {
	out, _ := json.Marshal(rep)
	fmt.Fprintln(stdout, string(out))
	if path != "" {
		if werr := os.WriteFile(path, out, 0o644); werr != nil && err == nil {
			err = fmt.Errorf("failed to write the report to %s: %w", path, werr)
		}
	}
	return err
}
