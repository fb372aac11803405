package execute

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/etcd-pilot/etcd-pilot/api/v1alpha1"
	"github.com/etcd-pilot/etcd-pilot/internal/backup"
	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	"github.com/etcd-pilot/etcd-pilot/internal/objstore"
)

// CredentialsError is a destination whose credentials cannot be read: the user must fix the
// Secret, so it is reported, not retried hot.
type CredentialsError struct{ Msg string }

func (e *CredentialsError) Error() string { return e.Msg }

// StoreOpener opens the object store of an S3 destination with the credentials given.
// objstore.NewS3 in production.
type StoreOpener func(cfg objstore.S3Config) (objstore.Store, error)

// OpenS3 reads the destination's credentials Secret (only that Secret, by name, in the
// cluster's namespace, from the API server: the operator keeps no Secret cache) and opens the
// store, held to the outbound policy p (a refused endpoint is an error egress.IsRefused
// matches). The EtcdBackup controller uploads there, retention deletes there.
func OpenS3(ctx context.Context, reader client.Reader, open StoreOpener, p *egress.Policy, ns, cluster string, d *v1alpha1.S3Destination) (objstore.Store, error) {
	// The endpoint first: a refused one costs no read of the Secret.
	if err := p.CheckEndpoint(d.Endpoint); err != nil {
		return nil, fmt.Errorf("failed to open the S3 destination %s: %w", d.Endpoint, err)
	}
	sec := &corev1.Secret{}
	name := d.CredentialsSecret.Name
	if err := reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, sec); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &CredentialsError{fmt.Sprintf("the credentials Secret %s/%s does not exist: create it with the keys %s and %s",
				ns, name, backup.SecretKeyAccessKeyID, backup.SecretKeySecretAccessKey)}
		}
		return nil, fmt.Errorf("failed to get the credentials Secret %s/%s: %w", ns, name, err)
	}
	var missing []string
	for _, k := range []string{backup.SecretKeyAccessKeyID, backup.SecretKeySecretAccessKey} {
		if len(sec.Data[k]) == 0 {
			missing = append(missing, k)
		}
	}
	if len(missing) > 0 {
		return nil, &CredentialsError{fmt.Sprintf("the credentials Secret %s/%s lacks the keys %s", ns, name, strings.Join(missing, ", "))}
	}
	cfg := objstore.S3Config{
		Endpoint: d.Endpoint, Bucket: d.Bucket, Prefix: backup.S3Prefix(ns, cluster, d), Region: d.Region,
		AccessKeyID: string(sec.Data[backup.SecretKeyAccessKeyID]), SecretAccessKey: string(sec.Data[backup.SecretKeySecretAccessKey]),
		SessionToken: string(sec.Data[backup.SecretKeySessionToken]), CABundle: []byte(d.CABundle),
		Egress: p,
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if open == nil {
		open = objstore.NewS3
	}
	st, err := open(cfg)
	if err != nil {
		return nil, fmt.Errorf("failed to open the S3 destination %s/%s: %w", d.Endpoint, d.Bucket, err)
	}
	return st, nil
}
