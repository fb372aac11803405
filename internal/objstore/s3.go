package objstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"regexp"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
	"github.com/minio/minio-go/v7/pkg/s3utils"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
)

const (
	// DefaultPartSize is the S3 part size when S3Config.PartSize is 0. Put holds one part in
	// memory at a time; with S3's limit of 10,000 parts it stores objects up to 78 GiB.
	DefaultPartSize = 8 << 20
	// MinPartSize and MaxPartSize are S3's limits on a part (except the last).
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
)

// S3Config says where and how to reach an S3-compatible bucket.
type S3Config struct {
	// Endpoint is the server: a URL with an http or https scheme and no path
	// ("https://s3.example.com", "http://10.0.0.5:9000"), or a host[:port] reached over HTTPS
	// unless Insecure is set.
	Endpoint string
	// Insecure makes a scheme-less Endpoint plain HTTP. It may not be set with an https URL.
	Insecure bool
	// Bucket must exist; NewS3 does not create it.
	Bucket string
	// Prefix is prepended to every key ("backups/prod" stores key "a" as "backups/prod/a").
	// Leading and trailing slashes are ignored; empty means the bucket's root.
	Prefix string
	// Region is the bucket's region; empty asks the server (one extra request per bucket).
	Region string
	// AccessKeyID and SecretAccessKey sign requests, with SessionToken for temporary
	// credentials. Both empty sends anonymous requests.
	AccessKeyID     string
	SecretAccessKey string
	SessionToken    string
	// CABundle is PEM-encoded certificates trusted in addition to the system's, for an HTTPS
	// endpoint with a private CA.
	CABundle []byte
	// PartSize is the size of each part of a multipart upload, in bytes: Put's memory use and a
	// 10,000th of the largest object it can store. 0 means DefaultPartSize; otherwise it must
	// lie within [MinPartSize, MaxPartSize].
	PartSize int64
	// Egress is the outbound policy the endpoint is held to, before any request and at every
	// dial (egress.Default when nil: https only, no loopback, link-local or metadata address).
	Egress *egress.Policy
}

// s3Store is a Store over one bucket and prefix.
type s3Store struct {
	client   *minio.Client
	endpoint string // scheme://host, for messages
	bucket   string
	prefix   string // without slashes at either end; "" for the bucket's root
	partSize uint64
}

// NewS3 returns a Store over cfg's bucket. It checks cfg, and the endpoint against
// cfg.Egress (a refused endpoint is an error that egress.IsRefused matches), but makes no
// request: a missing bucket or wrong credentials show in the first call's error
// (ErrBucketNotFound, ErrAccessDenied). Errors of calls name the class of a connection's
// failure, never what the server sent beyond an S3 error code.
func NewS3(cfg S3Config) (Store, error) {
	host, secure, err := parseEndpoint(cfg.Endpoint, cfg.Insecure)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if secure {
		scheme = "https"
	}
	if err := cfg.Egress.CheckURL(&url.URL{Scheme: scheme, Host: host}); err != nil {
		return nil, err
	}
	if err := s3utils.CheckValidBucketName(cfg.Bucket); err != nil {
		return nil, fmt.Errorf("invalid bucket %q: %w", cfg.Bucket, err)
	}
	prefix := strings.Trim(cfg.Prefix, "/")
	if prefix != "" {
		if err := validateKey(prefix); err != nil {
			return nil, fmt.Errorf("invalid prefix %q: %w", cfg.Prefix, err)
		}
	}
	partSize := cfg.PartSize
	if partSize == 0 {
		partSize = DefaultPartSize
	}
	if partSize < MinPartSize || partSize > MaxPartSize {
		return nil, fmt.Errorf("invalid part size %d: must lie within [%d, %d] bytes", partSize, MinPartSize, MaxPartSize)
	}
	if (cfg.AccessKeyID == "") != (cfg.SecretAccessKey == "") {
		return nil, errors.New("invalid credentials: set both the access key ID and the secret access key, or neither")
	}
	if cfg.SessionToken != "" && cfg.AccessKeyID == "" {
		return nil, errors.New("invalid credentials: a session token needs an access key ID and a secret access key")
	}

	tr, err := minio.DefaultTransport(secure)
	if err != nil {
		return nil, fmt.Errorf("failed to create the HTTP transport: %w", err)
	}
	if len(cfg.CABundle) > 0 {
		if !secure {
			return nil, fmt.Errorf("a CA bundle is given but endpoint %q is plain HTTP", cfg.Endpoint)
		}
		if tr.TLSClientConfig == nil {
			tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		pool := tr.TLSClientConfig.RootCAs // set when SSL_CERT_FILE is
		if pool == nil {
			if pool, err = x509.SystemCertPool(); err != nil {
				pool = x509.NewCertPool()
			}
		}
		if !pool.AppendCertsFromPEM(cfg.CABundle) {
			return nil, errors.New("invalid CA bundle: no PEM certificate found")
		}
		tr.TLSClientConfig.RootCAs = pool
	}

	creds := credentials.NewStaticV4(cfg.AccessKeyID, cfg.SecretAccessKey, cfg.SessionToken)
	client, err := minio.New(host, &minio.Options{
		Creds:     creds,
		Secure:    secure,
		Transport: cfg.Egress.Transport(tr),
		Region:    cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to create the S3 client for %s: %w", cfg.Endpoint, err)
	}
	return &s3Store{
		client:   client,
		endpoint: scheme + "://" + host,
		bucket:   cfg.Bucket,
		prefix:   prefix,
		partSize: uint64(partSize),
	}, nil
}

// parseEndpoint splits an S3Config endpoint into the host[:port] and whether it is HTTPS.
func parseEndpoint(endpoint string, insecure bool) (host string, secure bool, err error) {
	if endpoint == "" {
		return "", false, errors.New("invalid endpoint: empty")
	}
	if !strings.Contains(endpoint, "://") {
		if strings.ContainsAny(endpoint, "/?#@") {
			return "", false, fmt.Errorf("invalid endpoint %q: want host[:port] or a URL with an http or https scheme and no path", endpoint)
		}
		return endpoint, !insecure, nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return "", false, fmt.Errorf("invalid endpoint %q: %w", endpoint, err)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return "", false, fmt.Errorf("invalid endpoint %q: scheme must be http or https", endpoint)
	case u.Host == "":
		return "", false, fmt.Errorf("invalid endpoint %q: no host", endpoint)
	case u.User != nil:
		return "", false, fmt.Errorf("invalid endpoint %q: no user name or password in the URL (credentials come from the credentials Secret)", u.Redacted())
	case u.Path != "" && u.Path != "/", u.RawQuery != "", u.Fragment != "":
		return "", false, fmt.Errorf("invalid endpoint %q: want only a scheme and host[:port], no path, query or user", endpoint)
	case insecure && u.Scheme == "https":
		return "", false, fmt.Errorf("invalid endpoint %q: Insecure is set with an https URL", endpoint)
	}
	return u.Host, u.Scheme == "https", nil
}

func (s *s3Store) fullKey(key string) string {
	if s.prefix == "" {
		return key
	}
	return s.prefix + "/" + key
}

// Location implements Store.
func (s *s3Store) Location(key string) string {
	return "s3://" + s.bucket + "/" + s.fullKey(key)
}

// Put implements Store. It is always a multipart upload of PartSize parts sent one at a time,
// so memory stays at about one part whatever the object's size; on any error minio-go aborts
// the upload, which discards the parts already sent.
func (s *s3Store) Put(ctx context.Context, key string, r io.Reader) (int64, error) {
	if err := validateKey(key); err != nil {
		return 0, fmt.Errorf("failed to put %s: %w", s.Location(key), err)
	}
	ctx, stop := egress.FailFast(ctx)
	defer stop()
	info, err := s.client.PutObject(ctx, s.bucket, s.fullKey(key), ctxReader{ctx, r}, -1, minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		// With an unknown size minio-go would otherwise size parts for a 5 TiB object
		// (over 500 MiB each, held in memory); one thread keeps one part in memory.
		PartSize:   s.partSize,
		NumThreads: 1,
	})
	if err != nil {
		return 0, s.wrap(ctx, "put", key, err)
	}
	return info.Size, nil
}

// Open implements Store. Reads from the returned object use ctx: they fail once it ends.
func (s *s3Store) Open(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := validateKey(key); err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", s.Location(key), err)
	}
	ctx, stop := egress.FailFast(ctx)
	obj, err := s.client.GetObject(ctx, s.bucket, s.fullKey(key), minio.GetObjectOptions{})
	if err != nil {
		stop()
		return nil, s.wrap(ctx, "open", key, err)
	}
	// GetObject is lazy: Stat sends the request, so a missing object or bucket shows here
	// rather than in the caller's first Read.
	if _, err := obj.Stat(); err != nil {
		_ = obj.Close()
		stop()
		return nil, s.wrap(ctx, "open", key, err)
	}
	return &s3Object{Object: obj, stop: stop}, nil
}

// s3Object is an object being read; closing it ends its context.
type s3Object struct {
	*minio.Object
	stop func()
}

func (o *s3Object) Close() error {
	err := o.Object.Close()
	o.stop()
	return err
}

// List implements Store. Keys ending in "/" (the empty "folder" objects some consoles create)
// are not objects this package writes, and are left out.
func (s *s3Store) List(ctx context.Context, prefix string) ([]Object, error) {
	if err := validatePrefix(prefix); err != nil {
		return nil, fmt.Errorf("failed to list %s*: %w", s.Location(prefix), err)
	}
	ctx, stop := egress.FailFast(ctx) // also stops minio-go's lister if we return early
	defer stop()
	base := ""
	if s.prefix != "" {
		base = s.prefix + "/"
	}
	var out []Object
	for info := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: base + prefix, Recursive: true}) {
		if info.Err != nil {
			return nil, s.wrap(ctx, "list", prefix+"*", info.Err)
		}
		if strings.HasSuffix(info.Key, "/") || !strings.HasPrefix(info.Key, base) {
			continue
		}
		out = append(out, Object{Key: strings.TrimPrefix(info.Key, base), Size: info.Size, LastModified: info.LastModified})
	}
	// S3 lists in UTF-8 byte order already; other servers need not.
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete implements Store.
func (s *s3Store) Delete(ctx context.Context, key string) error {
	if err := validateKey(key); err != nil {
		return fmt.Errorf("failed to delete %s: %w", s.Location(key), err)
	}
	ctx, stop := egress.FailFast(ctx)
	defer stop()
	err := s.client.RemoveObject(ctx, s.bucket, s.fullKey(key), minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code != "NoSuchKey" { // S3 says 204 anyway
		return s.wrap(ctx, "delete", key, err)
	}
	return nil
}

// wrap turns a minio-go error into "failed to <verb> s3://...: ...", naming the cause when it
// is the configuration's (bucket, credentials) or a missing object. The endpoint is a host the
// tenant chose: the message carries the server's S3 error code and HTTP status at most, never
// its message or body, and a connection's failure only as its class (egress.Describe). ctx is
// the call's egress.FailFast context: a refusal that ended it is the error.
func (s *s3Store) wrap(ctx context.Context, verb, key string, err error) error {
	if r := egress.Refusal(ctx); r != nil {
		err = r
	}
	resp := minio.ToErrorResponse(err)
	e := &s3Error{cause: err}
	switch resp.Code {
	case "NoSuchBucket":
		e.kind, e.msg = ErrBucketNotFound, fmt.Sprintf("bucket %q does not exist at %s", s.bucket, s.endpoint)
	case "NoSuchKey":
		e.kind, e.msg = fs.ErrNotExist, "no such object"
	case "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "ExpiredToken", "InvalidToken",
		"TokenRefreshRequired", "InvalidClientTokenId", "AllAccessDisabled":
		e.kind, e.msg = ErrAccessDenied, fmt.Sprintf(
			"access denied by %s (%s): check the access key ID, secret access key and session token, and that they may use bucket %q",
			s.endpoint, resp.Code, s.bucket)
	default:
		e.msg = describeS3(resp, err)
	}
	return fmt.Errorf("failed to %s %s: %w", verb, s.Location(key), e)
}

// s3Code is what an S3 error code looks like; anything else a server sent as one is withheld.
var s3Code = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9.]{0,63}$`)

// describeS3 says what went wrong with a request, in words of our own: the server's answer by
// HTTP status and S3 code, or the connection's failure by class.
func describeS3(resp minio.ErrorResponse, err error) string {
	code := resp.Code
	if !s3Code.MatchString(code) {
		code = ""
	}
	switch {
	case egress.IsRefused(err):
		return egress.Describe(err)
	case resp.StatusCode != 0 && code != "":
		return fmt.Sprintf("the server answered HTTP %d with S3 error %s", resp.StatusCode, code)
	case resp.StatusCode != 0:
		return fmt.Sprintf("the server answered HTTP %d", resp.StatusCode)
	case code != "":
		// minio-go's own checks (an invalid argument, an object too large): local, not the
		// server's.
		return "S3 client error " + code
	case strings.Contains(err.Error(), "Connection closed by foreign host"):
		// minio-go's replacement for an EOF from the server.
		return "the server closed the connection"
	}
	return egress.Describe(err)
}

// s3Error is an S3 error with a message of our own, classified as one of the package's kinds
// (ErrBucketNotFound, ErrAccessDenied, fs.ErrNotExist) or none; errors.As still finds
// minio-go's ErrorResponse, and errors.Is a context's error, in cause.
type s3Error struct {
	kind  error // nil when none
	msg   string
	cause error
}

func (e *s3Error) Error() string { return e.msg }
func (e *s3Error) Unwrap() []error {
	if e.kind == nil {
		return []error{e.cause}
	}
	return []error{e.kind, e.cause}
}
