package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
)

// restoreReport is what restore-prepare leaves in its termination message.
type restoreReport struct {
	backup.Prepared
	Error string `json:"error,omitempty"`
}

// runRestorePrepare fetches a snapshot onto a member's volume for etcdutl snapshot restore
// (see backup.Prepare): from S3 (--s3-*) or from a file on a mounted claim (--file).
func runRestorePrepare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore-prepare", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("volume", "/var/lib/etcd", "root of the member's volume (etcd's data directory is <volume>/data)")
	id := fs.String("id", "", "the restore's ID")
	file := fs.String("file", "", "the snapshot file (on a mounted claim)")
	endpoint := fs.String("s3-endpoint", "", "S3 endpoint URL")
	bucket := fs.String("s3-bucket", "", "S3 bucket")
	key := fs.String("s3-key", "", "object key in the bucket")
	region := fs.String("s3-region", "us-east-1", "bucket region")
	sha := fs.String("sha256", "", "expected sha256 of the snapshot object (hex)")
	report := fs.String("report", "/dev/termination-log", "file the JSON report is written to (empty: stdout only)")
	timeout := fs.Duration("timeout", time.Hour, "time limit of the fetch")
	var out egress.Flags // the operator passes its own
	out.Bind(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	policy, err := out.Policy()
	if err != nil {
		return err
	}
	if *id == "" || (*file == "") == (*key == "") {
		fs.Usage()
		return errors.New("--id and exactly one of --file and --s3-key are required")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	p, err := prepareRestore(ctx, *root, *id, *file, objstore.S3Config{
		Endpoint: *endpoint, Bucket: *bucket, Region: *region,
		AccessKeyID: os.Getenv(backup.EnvS3AccessKeyID), SecretAccessKey: os.Getenv(backup.EnvS3SecretAccessKey),
		SessionToken: os.Getenv(backup.EnvS3SessionToken), CABundle: []byte(os.Getenv(backup.EnvS3CABundle)),
		Egress: policy,
	}, *key, *sha)
	rep := restoreReport{Prepared: p}
	if err != nil {
		rep.Error = err.Error()
	}
	return writeReport(stdout, *report, rep, err)
}

func prepareRestore(ctx context.Context, root, id, file string, cfg objstore.S3Config, key, sha string) (backup.Prepared, error) {
	var src io.ReadCloser
	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return backup.Prepared{}, fmt.Errorf("failed to open the snapshot: %w", err)
		}
		src = f
	} else {
		st, err := objstore.NewS3(cfg)
		if err != nil {
			return backup.Prepared{}, fmt.Errorf("failed to open the S3 source: %w", err)
		}
		if src, err = st.Open(ctx, key); err != nil {
			return backup.Prepared{}, fmt.Errorf("failed to read the snapshot object: %w", err)
		}
	}
	defer src.Close()
	return backup.Prepare(ctx, root, id, src, sha)
}

// runRestoreFinish checks etcdutl's output and deletes the staging folder (see backup.Finish).
func runRestoreFinish(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("restore-finish", flag.ContinueOnError)
	fs.SetOutput(stderr)
	root := fs.String("volume", "/var/lib/etcd", "root of the member's volume")
	id := fs.String("id", "", "the restore's ID")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *id == "" {
		return errors.New("--id is required")
	}
	if err := backup.Finish(*root, *id); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s\n", filepath.Join(*root, backup.DataDirName))
	return nil
}
