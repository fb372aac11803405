package objstore

import (
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/minio/minio-go/v7"

	"github.com/etcd-pilot/etcd-pilot/internal/egress"
	testminio "github.com/etcd-pilot/etcd-pilot/internal/testutil/minio"
)

// localEgress is the outbound policy of the tests' servers: MinIO and httptest listen on
// 127.0.0.1, MinIO over plain HTTP, both of which the default policy refuses. The tests allow
// them explicitly, as an administrator would with --allowed-endpoints=127.0.0.0/8
// --allow-insecure-endpoints.
var localEgress = func() *egress.Policy {
	p, err := egress.New(egress.Config{Allowed: []string{"127.0.0.0/8"}, AllowInsecure: true})
	if err != nil {
		panic(err)
	}
	return p
}()

// newS3 returns a store over srv's bucket with the minimum part size, so a few MiB make a
// multipart upload of several parts.
func newS3(t testing.TB, srv *testminio.Server, prefix string) Store {
	t.Helper()
	s, err := NewS3(S3Config{
		Endpoint:        srv.Endpoint,
		Bucket:          srv.Bucket,
		Prefix:          prefix,
		AccessKeyID:     srv.AccessKey,
		SecretAccessKey: srv.SecretKey,
		PartSize:        MinPartSize,
		Egress:          localEgress,
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// incompleteUploads lists the multipart uploads of the object named key under prefix that
// were started and neither completed nor aborted. MinIO lists the uploads of one object name,
// so the name must be exact.
func incompleteUploads(t *testing.T, srv *testminio.Server, prefix, key string) []string {
	t.Helper()
	name := key
	if prefix != "" {
		name = prefix + "/" + key
	}
	var out []string
	for u := range srv.Client(t).ListIncompleteUploads(t.Context(), srv.Bucket, name, true) {
		if u.Err != nil {
			t.Fatalf("failed to list incomplete uploads of %s: %v", name, u.Err)
		}
		out = append(out, fmt.Sprintf("upload %s of %s", u.UploadID, u.Key))
	}
	return out
}

func TestS3(t *testing.T) {
	srv := testminio.Start(t)
	// Each subtest gets a prefix of its own, so each starts with an empty store.
	nonWord := regexp.MustCompile(`[^A-Za-z0-9]+`)
	testStore(t, func(t *testing.T) harness {
		prefix := "test/" + nonWord.ReplaceAllString(t.Name(), "-")
		return harness{
			store: newS3(t, srv, prefix),
			leftovers: func(t *testing.T, key string) []string {
				return incompleteUploads(t, srv, prefix, key)
			},
		}
	})
}

// The leftover check of TestS3 would pass vacuously if the server did not list incomplete
// uploads as it is asked: show that it sees one.
func TestS3IncompleteUploadsAreSeen(t *testing.T) {
	srv := testminio.Start(t)
	core := &minio.Core{Client: srv.Client(t)}
	id, err := core.NewMultipartUpload(t.Context(), srv.Bucket, "p/half", minio.PutObjectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := incompleteUploads(t, srv, "p", "half"); len(got) != 1 || !strings.Contains(got[0], id) {
		t.Fatalf("incomplete uploads = %q, want upload %s", got, id)
	}
}

func TestS3Prefix(t *testing.T) {
	srv := testminio.Start(t)
	ctx := t.Context()
	stores := map[string]Store{
		"/team/prod/": newS3(t, srv, "/team/prod/"),
		"team/prod-2": newS3(t, srv, "team/prod-2"),
		"":            newS3(t, srv, ""),
	}
	for p, s := range stores {
		if _, err := s.Put(ctx, "snap/1.db", strings.NewReader(p)); err != nil {
			t.Fatal(err)
		}
	}
	var raw []string
	for o := range srv.Client(t).ListObjects(ctx, srv.Bucket, minio.ListObjectsOptions{Recursive: true}) {
		if o.Err != nil {
			t.Fatal(o.Err)
		}
		raw = append(raw, o.Key)
	}
	if want := []string{"snap/1.db", "team/prod-2/snap/1.db", "team/prod/snap/1.db"}; fmt.Sprint(raw) != fmt.Sprint(want) {
		t.Errorf("bucket holds %q, want %q", raw, want)
	}
	// A store sees only its prefix's keys, relative to it: not "team/prod-2"'s beside it.
	for p, want := range map[string][]string{
		"/team/prod/": {"snap/1.db"},
		"team/prod-2": {"snap/1.db"},
		"":            {"snap/1.db", "team/prod-2/snap/1.db", "team/prod/snap/1.db"},
	} {
		var got []string
		for _, o := range list(t, stores[p], "") {
			got = append(got, o.Key)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("prefix %q: List = %q, want %q", p, got, want)
		}
		if got := read(t, stores[p], "snap/1.db"); string(got) != p {
			t.Errorf("prefix %q: Open = %q, want %q", p, got, p)
		}
	}
	for p, want := range map[string]string{
		"/team/prod/": "s3://backups/team/prod/snap/1.db",
		"":            "s3://backups/snap/1.db",
	} {
		if got := stores[p].Location("snap/1.db"); got != want {
			t.Errorf("prefix %q: Location = %q, want %q", p, got, want)
		}
	}
}

// every calls each of s's methods that talks to the server, and returns their errors by name.
func every(t *testing.T, s Store) map[string]error {
	ctx := t.Context()
	_, put := s.Put(ctx, "k", strings.NewReader("x"))
	_, open := s.Open(ctx, "k")
	_, lst := s.List(ctx, "")
	return map[string]error{"put": put, "open": open, "list": lst, "delete": s.Delete(ctx, "k")}
}

func TestS3WrongCredentials(t *testing.T) {
	srv := testminio.Start(t)
	for _, tc := range []struct{ name, key, secret, region string }{
		{name: "WrongSecret", key: srv.AccessKey, secret: "not-the-secret"},
		{name: "UnknownKey", key: "nobody", secret: "not-the-secret"},
		{name: "WrongSecretWithRegion", key: srv.AccessKey, secret: "not-the-secret", region: "us-east-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewS3(S3Config{Endpoint: srv.Endpoint, Bucket: srv.Bucket, Region: tc.region, AccessKeyID: tc.key, SecretAccessKey: tc.secret, Egress: localEgress})
			if err != nil {
				t.Fatal(err)
			}
			for verb, err := range every(t, s) {
				if !errors.Is(err, ErrAccessDenied) {
					t.Errorf("%s: %v, want an error matching ErrAccessDenied", verb, err)
					continue
				}
				if msg := err.Error(); !strings.HasPrefix(msg, "failed to "+verb+" s3://backups/") || !strings.Contains(msg, "access denied by "+srv.Endpoint) {
					t.Errorf("%s: %q does not say what failed and why", verb, msg)
				}
			}
			t.Logf("for example: %v", every(t, s)["put"])
		})
	}
}

func TestS3MissingBucket(t *testing.T) {
	srv := testminio.Start(t)
	for _, region := range []string{"", "us-east-1"} {
		t.Run("region="+region, func(t *testing.T) {
			s, err := NewS3(S3Config{Endpoint: srv.Endpoint, Bucket: "no-such-bucket", Region: region, AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey, Egress: localEgress})
			if err != nil {
				t.Fatal(err)
			}
			for verb, err := range every(t, s) {
				if !errors.Is(err, ErrBucketNotFound) {
					t.Errorf("%s: %v, want an error matching ErrBucketNotFound", verb, err)
					continue
				}
				want := fmt.Sprintf(`bucket "no-such-bucket" does not exist at %s`, srv.Endpoint)
				if msg := err.Error(); !strings.HasPrefix(msg, "failed to "+verb+" s3://no-such-bucket/") || !strings.Contains(msg, want) {
					t.Errorf("%s: %q does not say what failed and why", verb, msg)
				}
				if errors.Is(err, fs.ErrNotExist) {
					t.Errorf("%s: a missing bucket reads as a missing object: %v", verb, err)
				}
			}
			t.Logf("for example: %v", every(t, s)["put"])
		})
	}
}

func TestNewS3RefusesBadConfig(t *testing.T) {
	good := S3Config{Endpoint: "http://127.0.0.1:9000", Bucket: "bkt", AccessKeyID: "a", SecretAccessKey: "s", Egress: localEgress}
	for _, tc := range []struct {
		name string
		edit func(*S3Config)
		want string
	}{
		{"NoEndpoint", func(c *S3Config) { c.Endpoint = "" }, "invalid endpoint"},
		{"FTP", func(c *S3Config) { c.Endpoint = "ftp://h" }, "scheme must be http or https"},
		{"Path", func(c *S3Config) { c.Endpoint = "https://h/bucket" }, "no path"},
		{"PathWithoutScheme", func(c *S3Config) { c.Endpoint = "h:9000/x" }, "want host[:port]"},
		{"InsecureHTTPS", func(c *S3Config) { c.Endpoint, c.Insecure = "https://h", true }, "Insecure is set with an https URL"},
		{"NoBucket", func(c *S3Config) { c.Bucket = "" }, "invalid bucket"},
		{"BadBucket", func(c *S3Config) { c.Bucket = "bad..bucket" }, "invalid bucket"},
		{"BadPrefix", func(c *S3Config) { c.Prefix = "a/../b" }, "invalid prefix"},
		{"SmallPart", func(c *S3Config) { c.PartSize = 1 << 20 }, "invalid part size"},
		{"HugePart", func(c *S3Config) { c.PartSize = 6 << 30 }, "invalid part size"},
		{"KeyWithoutSecret", func(c *S3Config) { c.SecretAccessKey = "" }, "invalid credentials"},
		{"TokenAlone", func(c *S3Config) { c.AccessKeyID, c.SecretAccessKey, c.SessionToken = "", "", "t" }, "invalid credentials"},
		{"CAForHTTP", func(c *S3Config) { c.CABundle = []byte("x") }, "plain HTTP"},
		{"CANotPEM", func(c *S3Config) { c.Endpoint, c.CABundle = "https://h", []byte("not pem") }, "invalid CA bundle"},
		{"UserInURL", func(c *S3Config) { c.Endpoint = "https://u:p@h" }, "no user name or password"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.edit(&c)
			if _, err := NewS3(c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("NewS3: %v, want an error containing %q", err, tc.want)
			}
		})
	}
	for _, tc := range []struct {
		endpoint string
		insecure bool
		want     string
	}{
		{"h:9000", false, "s3://bkt/k"},
		{"h:9000", true, "s3://bkt/k"},
		{"https://h", false, "s3://bkt/k"},
		{"http://h:9000/", false, "s3://bkt/k"},
	} {
		c := good
		c.Endpoint, c.Insecure = tc.endpoint, tc.insecure
		s, err := NewS3(c)
		if err != nil {
			t.Errorf("NewS3 with endpoint %q (insecure %v): %v", tc.endpoint, tc.insecure, err)
		} else if got := s.Location("k"); got != tc.want {
			t.Errorf("Location = %q, want %q", got, tc.want)
		}
	}
}

// The CA bundle is what lets the client trust a server whose certificate a private CA signed.
func TestS3CABundle(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message><BucketName>bkt</BucketName></Error>`)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused below
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := S3Config{Endpoint: srv.URL, Bucket: "bkt", Region: "us-east-1", AccessKeyID: "a", SecretAccessKey: "s", Egress: localEgress}

	s, err := NewS3(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.List(t.Context(), ""); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA bundle: %v, want a certificate error", err)
	} else {
		t.Logf("without the CA bundle: %v", err)
	}

	cfg.CABundle = ca
	if s, err = NewS3(cfg); err != nil {
		t.Fatal(err)
	}
	// The server answers every request with NoSuchBucket: getting that far means TLS worked.
	if _, err := s.List(t.Context(), ""); !errors.Is(err, ErrBucketNotFound) {
		t.Errorf("with the CA bundle: %v, want the server's NoSuchBucket", err)
	}
}
